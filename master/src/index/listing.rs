//! Paged reads of the index for the List calls (`ListJobs`, `ListGroups`, `ListMissing`).
//!
//! Each list has a total order, and a page resumes strictly after the last entry of the
//! previous one (a keyset cursor, not an offset):
//!
//! - jobs: newest first, by submission sequence ([`JobCursor`]); a sequence never changes, so
//!   jobs submitted or purged between pages neither repeat nor shift the rest;
//! - crash groups: most jobs first, then most recently seen, then project and fingerprint
//!   ([`GroupCursor`]);
//! - missing files: most affected jobs first, then most recently seen, then project and key
//!   ([`MissingCursor`]).
//!
//! Groups and missing files are ordered by counts that change as jobs finish: one whose count
//! crosses the cursor between two pages is listed twice or not at all (a snapshot of the
//! order would have to be kept per caller). Callers that page through them (symctl) drop
//! repeats; the counts of a later page are as of that page.
//!
//! The service turns cursors into opaque page tokens (`service::page_token`, AIP-158).

use std::cmp::Ordering;

use prost::Message;
use redb::{ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use super::{BY_SEQUENCE, GROUPS, Index, IndexError, JOBS, db, decode_record, group_kind};
use super::{groups, keys, missing};

/// Jobs one [`Index::list_jobs_page`] examines at most, so that a filter that matches few jobs
/// among many costs a bounded read per call; the page then ends early with a cursor.
pub const MAX_JOBS_EXAMINED: usize = 100_000;

/// One page of a list: its entries, and where the next page starts (`None` on the last page).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T, C> {
    /// The page's entries, in the list's order.
    pub items: Vec<T>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<C>,
}

/// Where a page of jobs resumes: below this submission sequence (1-based; the next page lists
/// sequences `< before`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCursor {
    before: u64,
}

/// The last crash group of a page, by the order groups are listed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCursor {
    count: u64,
    last_seen_ms: u64,
    project: String,
    fingerprint: String,
}

impl GroupCursor {
    fn of(group: &v1::CrashGroup) -> Self {
        GroupCursor {
            count: group.count,
            last_seen_ms: group.last_seen_ms,
            project: group.project.clone(),
            fingerprint: group.fingerprint.clone(),
        }
    }

    /// The listing order: most jobs first, then most recent, then project and fingerprint.
    fn order(&self, other: &Self) -> Ordering {
        other
            .count
            .cmp(&self.count)
            .then(other.last_seen_ms.cmp(&self.last_seen_ms))
            .then_with(|| self.project.cmp(&other.project))
            .then_with(|| self.fingerprint.cmp(&other.fingerprint))
    }
}

/// The last missing-file entry of a page, by the order entries are listed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingCursor {
    jobs: u64,
    last_seen_ms: u64,
    project: String,
    key: String,
}

impl MissingCursor {
    fn of(entry: &v1::MissingEntry) -> Self {
        MissingCursor {
            jobs: entry.jobs,
            last_seen_ms: entry.last_seen_ms,
            project: entry.project.clone(),
            key: entry.key.clone(),
        }
    }

    /// The listing order: most jobs first, then most recent, then project and key.
    fn order(&self, other: &Self) -> Ordering {
        other
            .jobs
            .cmp(&self.jobs)
            .then(other.last_seen_ms.cmp(&self.last_seen_ms))
            .then_with(|| self.project.cmp(&other.project))
            .then_with(|| self.key.cmp(&other.key))
    }
}

/// Which crash groups a page lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupFilter<'a> {
    /// Only groups of this kind (`crash`, `hang`, ...; [`group_kind`]).
    pub kind: Option<&'a str>,
    /// Only groups whose fingerprint starts with this.
    pub fingerprint_prefix: &'a str,
    /// With their call trees (read apart from the records, for the listed groups only).
    pub with_trees: bool,
    /// With their facets (`CrashGroup.facets`, read apart, for the listed groups only).
    pub with_facets: bool,
}

/// Keeps the `size` first of `items` after `after` by `order`, sorted, and the cursor of the
/// last kept when more follow.
fn page_of<T, C: Clone>(
    items: Vec<T>,
    size: usize,
    after: Option<&C>,
    cursor: impl Fn(&T) -> C,
    order: impl Fn(&C, &C) -> Ordering,
) -> Page<T, C> {
    let mut items: Vec<(C, T)> = items
        .into_iter()
        .map(|item| (cursor(&item), item))
        .filter(|(c, _)| after.is_none_or(|after| order(c, after) == Ordering::Greater))
        .collect();
    let more = items.len() > size;
    if more && size > 0 {
        // Only the page is sorted: selecting it is linear in the candidates.
        items.select_nth_unstable_by(size - 1, |a, b| order(&a.0, &b.0));
    }
    items.truncate(size);
    items.sort_by(|a, b| order(&a.0, &b.0));
    let next = if more {
        items.last().map(|(c, _)| c.clone())
    } else {
        None
    };
    Page {
        items: items.into_iter().map(|(_, item)| item).collect(),
        next,
    }
}

impl Index {
    /// Jobs in `state` (all when `None`) of the projects `sees` accepts, newest first, at most
    /// `size`, without results, starting below `after` (from the newest when `None`). Examines
    /// at most [`MAX_JOBS_EXAMINED`] jobs: a page may then hold fewer than `size` and still
    /// have a next one.
    pub fn list_jobs_page(
        &self,
        state: Option<v1::JobState>,
        size: usize,
        after: Option<JobCursor>,
        sees: impl Fn(&str) -> bool,
    ) -> Result<Page<pb::JobRecord, JobCursor>, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let by_sequence = read.open_table(BY_SEQUENCE).map_err(db)?;
        let jobs = read.open_table(JOBS).map_err(db)?;
        let before = after.map_or(u64::MAX, |c| c.before);
        let mut items = Vec::new();
        for (examined, entry) in by_sequence.range(..before).map_err(db)?.rev().enumerate() {
            let (sequence, id) = entry.map_err(db)?;
            let sequence = sequence.value();
            if items.len() >= size || examined >= MAX_JOBS_EXAMINED {
                // Something is left below: the next page starts at this job.
                return Ok(Page {
                    items,
                    next: Some(JobCursor {
                        before: sequence + 1,
                    }),
                });
            }
            if !sees(keys::split(id.value()).0) {
                continue;
            }
            let Some(bytes) = jobs.get(id.value()).map_err(db)? else {
                continue;
            };
            let record = decode_record(id.value(), bytes.value())?;
            if state.is_none_or(|s| record.state == s as i32) {
                items.push(record);
            }
        }
        Ok(Page { items, next: None })
    }

    /// The first page of [`Index::list_jobs_page`]: the `limit` newest jobs.
    pub fn list_jobs(
        &self,
        state: Option<v1::JobState>,
        limit: usize,
        sees: impl Fn(&str) -> bool,
    ) -> Result<Vec<pb::JobRecord>, IndexError> {
        Ok(self.list_jobs_page(state, limit, None, sees)?.items)
    }

    /// Crash groups of the projects `sees` accepts that `filter` selects, most frequent first
    /// (ties: most recent first, then by project and fingerprint), at most `size`, after
    /// `after`; each with its kind ([`group_kind`]), and with its call tree
    /// (`CrashGroup.call_tree`) when `filter.with_trees`. Reads every group record (not the
    /// trees) once per page.
    pub fn groups_page(
        &self,
        size: usize,
        filter: GroupFilter<'_>,
        after: Option<&GroupCursor>,
        sees: impl Fn(&str) -> bool,
    ) -> Result<Page<v1::CrashGroup, GroupCursor>, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let table = read.open_table(GROUPS).map_err(db)?;
        let trees = read.open_table(groups::TREES).map_err(db)?;
        let mut found = Vec::new();
        for entry in table.iter().map_err(db)? {
            let (k, v) = entry.map_err(db)?;
            if !sees(keys::split(k.value()).0) {
                continue;
            }
            let mut group =
                v1::CrashGroup::decode(v.value()).map_err(|source| IndexError::Decode {
                    what: format!("group {}", k.value()),
                    source,
                })?;
            if !group.fingerprint.starts_with(filter.fingerprint_prefix) {
                continue;
            }
            if group.kind.is_empty() {
                let has_tree = trees.get(k.value()).map_err(db)?.is_some();
                group.kind = group_kind(&group, has_tree).to_owned();
            }
            if filter.kind.is_none_or(|kind| group.kind == kind) {
                found.push(group);
            }
        }
        let mut page = page_of(found, size, after, GroupCursor::of, GroupCursor::order);
        if filter.with_trees {
            groups::attach_trees(&read, &mut page.items)?;
        }
        if filter.with_facets {
            groups::attach_facets(&read, &mut page.items)?;
        }
        Ok(page)
    }

    /// The first page of [`Index::groups_page`]: the `limit` most frequent groups.
    pub fn groups(
        &self,
        limit: usize,
        kind: Option<&str>,
        with_trees: bool,
        sees: impl Fn(&str) -> bool,
    ) -> Result<Vec<v1::CrashGroup>, IndexError> {
        let filter = GroupFilter {
            kind,
            fingerprint_prefix: "",
            with_trees,
            with_facets: false,
        };
        Ok(self.groups_page(limit, filter, None, sees)?.items)
    }

    /// The files finished jobs of the projects `sees` accepts lack, one entry per project and
    /// file with its affected jobs and distinct crash groups ([`missing::files`]), most jobs
    /// first (ties: most recently seen first, then by project and key), at most `size`, after
    /// `after`.
    pub fn missing_files_page(
        &self,
        size: usize,
        after: Option<&MissingCursor>,
        sees: impl Fn(&str) -> bool,
    ) -> Result<Page<v1::MissingEntry, MissingCursor>, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let entries = missing::files(&read, sees)?;
        Ok(page_of(
            entries,
            size,
            after,
            MissingCursor::of,
            MissingCursor::order,
        ))
    }

    /// The first page of [`Index::missing_files_page`]: the `limit` most missed files.
    pub fn missing_files(
        &self,
        limit: usize,
        sees: impl Fn(&str) -> bool,
    ) -> Result<Vec<v1::MissingEntry>, IndexError> {
        Ok(self.missing_files_page(limit, None, sees)?.items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(a: &u32, b: &u32) -> Ordering {
        b.cmp(a)
    }

    /// Pages through `items` by `size`, as a client would.
    fn all_pages(items: &[u32], size: usize) -> Vec<Vec<u32>> {
        let mut pages = Vec::new();
        let mut after = None;
        loop {
            let page = page_of(items.to_vec(), size, after.as_ref(), |i| *i, order);
            pages.push(page.items);
            match page.next {
                Some(next) => after = Some(next),
                None => return pages,
            }
        }
    }

    #[test]
    fn pages_cover_every_entry_once_in_order() {
        let items: Vec<u32> = (0..25).map(|i| (i * 7919) % 101).collect();
        let mut sorted = items.clone();
        sorted.sort_by(order);
        let pages = all_pages(&items, 10);
        assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
        assert_eq!(pages.concat(), sorted);
        // A page size that divides the list: the last full page says there is no more.
        let pages = all_pages(&items, 5);
        assert_eq!(pages.len(), 5);
        assert_eq!(pages.concat(), sorted);
        assert_eq!(all_pages(&[], 5), [Vec::<u32>::new()]);
    }

    #[test]
    fn a_page_resumes_after_its_cursor_when_entries_come_and_go() {
        let first = page_of(vec![5, 9, 1, 7], 2, None, |i| *i, order);
        assert_eq!((first.items.as_slice(), first.next), (&[9, 7][..], Some(7)));
        // 8 arrived before the cursor, 5 left: the next page neither repeats nor skips.
        let second = page_of(vec![8, 9, 1, 7], 2, first.next.as_ref(), |i| *i, order);
        assert_eq!((second.items.as_slice(), second.next), (&[1][..], None));
    }
}
