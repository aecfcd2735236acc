//! Crash groups in the index: one record per project and fingerprint (`groups`, an encoded
//! `symcluster.v1.CrashGroup` without its call tree) and, for hang reports, the group's merged
//! call tree apart (`group_trees`, an encoded `symcluster.cluster.v1.GroupTree` under the same
//! key, bounded by [`tree::MAX_GROUP_TREE_NODES`]). Listing groups reads the small records
//! only; a tree is read when asked for, and written only by the completions of hang jobs.
//!
//! A group's facets (its jobs by release, OS, device and day) are stored apart too
//! (`group_facets`, [`facets`]), read only when asked for.
//!
//! A job joins its group when it completes, leaves it when a later revision moves it, when it
//! fails again, or when it is purged; a group left with no job is deleted, tree, facets and
//! all.

use prost::Message;
use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use super::{GROUPS, IndexError, db, facets, keys, tree};

/// Group key ([`keys::group_key`]) → encoded `symcluster.cluster.v1.GroupTree`: the merged call
/// trees of a group's hang jobs. Absent for a group whose jobs have none.
pub(crate) const TREES: TableDefinition<&str, &[u8]> = TableDefinition::new("group_trees");

/// The `index_meta` key set (to 1) once every group's tree is stored apart from its record
/// (masters before kept it in the record; [`move_trees_apart`] moves them, once).
pub(crate) const TREES_APART_KEY: &str = "group_trees_apart";

/// The group tables, open in one write transaction.
pub struct GroupTables<'t> {
    groups: Table<'t, &'static str, &'static [u8]>,
    trees: Table<'t, &'static str, &'static [u8]>,
    facets: Table<'t, &'static str, &'static [u8]>,
}

/// A job as its group counts it: its key, when it finished and where its report came from.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// The job key (`<project>/<job id>`).
    pub job_key: &'a str,
    /// When it finished (its day in the group's facets), ms since the Unix epoch.
    pub at_ms: u64,
    /// Its report's facets (`JobRecord.facets`); `None` counts nothing.
    pub facets: Option<&'a v1::ReportFacets>,
}

fn decode_group(key: &str, bytes: &[u8]) -> Result<v1::CrashGroup, IndexError> {
    v1::CrashGroup::decode(bytes).map_err(|source| IndexError::Decode {
        what: format!("group {key}"),
        source,
    })
}

/// Decodes the stored facets of group `key`.
pub(crate) fn decode_facets(key: &str, bytes: &[u8]) -> Result<v1::GroupFacets, IndexError> {
    v1::GroupFacets::decode(bytes).map_err(|source| IndexError::Decode {
        what: format!("facets of group {key}"),
        source,
    })
}

/// Decodes the stored tree of group `key` (`None`: it has none).
pub(crate) fn decode_tree(key: &str, bytes: &[u8]) -> Result<pb::GroupTree, IndexError> {
    pb::GroupTree::decode(bytes).map_err(|source| IndexError::Decode {
        what: format!("call tree of group {key}"),
        source,
    })
}

impl<'t> GroupTables<'t> {
    /// Opens (creating) the tables in `txn`.
    pub fn open(txn: &'t WriteTransaction) -> Result<Self, IndexError> {
        Ok(GroupTables {
            groups: txn.open_table(GROUPS).map_err(db)?,
            trees: txn.open_table(TREES).map_err(db)?,
            facets: txn.open_table(facets::FACETS).map_err(db)?,
        })
    }

    /// Adds job `job` (with its call tree) to the group `key` names in its project, creating
    /// the group, and counts it in the group's facets. `bounded`: the tree is bounded
    /// ([`tree::merge`]; the entries of version 5 on).
    pub fn join(
        &mut self,
        key: &v1::CrashGroupKey,
        job: Member<'_>,
        call_tree: &[v1::CallTreeNode],
        bounded: bool,
    ) -> Result<(), IndexError> {
        let Member { job_key, at_ms, .. } = job;
        let (project, job_id) = keys::split(job_key);
        let group_key = keys::group_key(project, &key.fingerprint);
        let mut group = match self.get(&group_key)? {
            Some(group) => group,
            None => v1::CrashGroup {
                fingerprint: key.fingerprint.clone(),
                title: key.title.clone(),
                count: 0,
                first_seen_ms: at_ms,
                last_seen_ms: at_ms,
                key_stack: key.key_stack.clone(),
                last_job_id: job_id.to_owned(),
                project: project.to_owned(),
                call_tree: Vec::new(),
                // A worker from before kinds sends none: only its hangs had call trees.
                kind: match key.kind.as_str() {
                    "" if !call_tree.is_empty() => "hang".to_owned(),
                    "" => "crash".to_owned(),
                    kind => kind.to_owned(),
                },
                call_tree_other_hits: 0,
                facets: None,
                first_release: String::new(),
                last_release: String::new(),
            },
        };
        group.count += 1;
        group.first_seen_ms = group.first_seen_ms.min(at_ms);
        group.last_seen_ms = group.last_seen_ms.max(at_ms);
        group.last_job_id = job_id.to_owned();
        if let Some(release) = job.facets.map(|f| &f.release).filter(|r| !r.is_empty()) {
            if group.first_release.is_empty() {
                group.first_release.clone_from(release);
            }
            group.last_release.clone_from(release);
        }
        self.put(&group_key, &group)?;
        self.count(&group_key, job, facets::add)?;
        self.merge_tree(&group_key, &[], call_tree, bounded)
    }

    /// Counts `job` into (`change` [`facets::add`]) or out of ([`facets::take`]) the facets of
    /// group `group_key`; they are deleted when they count nothing.
    fn count(
        &mut self,
        group_key: &str,
        job: Member<'_>,
        change: fn(&mut v1::GroupFacets, &v1::ReportFacets, u64),
    ) -> Result<(), IndexError> {
        let Some(job_facets) = job.facets else {
            return Ok(());
        };
        let mut stored = match self.facets.get(group_key).map_err(db)? {
            Some(bytes) => decode_facets(group_key, bytes.value())?,
            None => v1::GroupFacets::default(),
        };
        change(&mut stored, job_facets, job.at_ms);
        if facets::is_empty(&stored) {
            self.facets.remove(group_key).map_err(db)?;
        } else {
            self.facets
                .insert(group_key, stored.encode_to_vec().as_slice())
                .map_err(db)?;
        }
        Ok(())
    }

    /// Takes job `job` (with its call tree) out of group `fingerprint` of its project, and out
    /// of its facets (nothing for an empty fingerprint or a group that is gone); a group left
    /// with no job is deleted. `bounded` as for [`GroupTables::join`].
    pub fn leave(
        &mut self,
        job: Member<'_>,
        fingerprint: &str,
        call_tree: &[v1::CallTreeNode],
        bounded: bool,
    ) -> Result<(), IndexError> {
        if fingerprint.is_empty() {
            return Ok(());
        }
        let group_key = keys::group_key(keys::split(job.job_key).0, fingerprint);
        let Some(mut group) = self.get(&group_key)? else {
            return Ok(());
        };
        group.count = group.count.saturating_sub(1);
        if group.count == 0 {
            self.groups.remove(group_key.as_str()).map_err(db)?;
            self.trees.remove(group_key.as_str()).map_err(db)?;
            self.facets.remove(group_key.as_str()).map_err(db)?;
            return Ok(());
        }
        self.put(&group_key, &group)?;
        self.count(&group_key, job, facets::take)?;
        self.merge_tree(&group_key, call_tree, &[], bounded)
    }

    /// A job of group `key` symbolicated again into the same group: its old tree replaced by
    /// its new one, its old facets and day (`old`) by its new ones (`new`; the same job key),
    /// and the title and key stack as now symbolicated (e.g. system code named once system
    /// symbols arrived). `bounded` as for [`GroupTables::join`].
    pub fn revise(
        &mut self,
        key: &v1::CrashGroupKey,
        (old, new): (Member<'_>, Member<'_>),
        old_tree: &[v1::CallTreeNode],
        new_tree: &[v1::CallTreeNode],
        bounded: bool,
    ) -> Result<(), IndexError> {
        let group_key = keys::group_key(keys::split(new.job_key).0, &key.fingerprint);
        let Some(mut group) = self.get(&group_key)? else {
            return Ok(());
        };
        group.title.clone_from(&key.title);
        group.key_stack.clone_from(&key.key_stack);
        self.put(&group_key, &group)?;
        self.count(&group_key, old, facets::take)?;
        self.count(&group_key, new, facets::add)?;
        if old_tree != new_tree {
            self.merge_tree(&group_key, old_tree, new_tree, bounded)?;
        }
        Ok(())
    }

    fn get(&self, group_key: &str) -> Result<Option<v1::CrashGroup>, IndexError> {
        match self.groups.get(group_key).map_err(db)? {
            Some(bytes) => decode_group(group_key, bytes.value()).map(Some),
            None => Ok(None),
        }
    }

    fn put(&mut self, group_key: &str, group: &v1::CrashGroup) -> Result<(), IndexError> {
        self.groups
            .insert(group_key, group.encode_to_vec().as_slice())
            .map_err(db)?;
        Ok(())
    }

    /// Takes `out` from the tree of group `group_key` and adds `add` ([`tree::merge`]); the
    /// tree is deleted when no node is left of it.
    fn merge_tree(
        &mut self,
        group_key: &str,
        out: &[v1::CallTreeNode],
        add: &[v1::CallTreeNode],
        bounded: bool,
    ) -> Result<(), IndexError> {
        if out.is_empty() && add.is_empty() {
            return Ok(());
        }
        let mut merged = match self.trees.get(group_key).map_err(db)? {
            Some(bytes) => decode_tree(group_key, bytes.value())?,
            None => pb::GroupTree::default(),
        };
        tree::merge(&mut merged, out, -1, bounded);
        tree::merge(&mut merged, add, 1, bounded);
        if merged.nodes.is_empty() {
            self.trees.remove(group_key).map_err(db)?;
        } else {
            self.trees
                .insert(group_key, merged.encode_to_vec().as_slice())
                .map_err(db)?;
        }
        Ok(())
    }

    /// Stores group `group` (a snapshot's record, tree and facets included) under
    /// `group_key`: the record without its tree and facets, and those apart, as they are (never
    /// bounded here: a master that applied the same entries holds the same tree, bounded or
    /// not, by their versions).
    pub fn restore(
        &mut self,
        group_key: &str,
        mut group: v1::CrashGroup,
    ) -> Result<(), IndexError> {
        let tree = pb::GroupTree {
            nodes: std::mem::take(&mut group.call_tree),
            other_hits: std::mem::take(&mut group.call_tree_other_hits),
        };
        if let Some(stored) = group.facets.take().filter(|f| !facets::is_empty(f)) {
            self.facets
                .insert(group_key, stored.encode_to_vec().as_slice())
                .map_err(db)?;
        }
        self.put(group_key, &group)?;
        if !tree.nodes.is_empty() {
            self.trees
                .insert(group_key, tree.encode_to_vec().as_slice())
                .map_err(db)?;
        }
        Ok(())
    }
}

/// Moves every group's call tree out of its record into [`TREES`] (as it is), once: an index
/// stored by a master before trees were kept apart. Sets [`TREES_APART_KEY`]; does nothing
/// when it is set. The number of groups whose tree moved.
pub(crate) fn move_trees_apart(txn: &WriteTransaction) -> Result<u64, IndexError> {
    let mut meta = txn.open_table(super::META).map_err(db)?;
    if meta.get(TREES_APART_KEY).map_err(db)?.is_some() {
        return Ok(0);
    }
    let mut with_trees = Vec::new();
    {
        let groups = txn.open_table(GROUPS).map_err(db)?;
        for entry in groups.iter().map_err(db)? {
            let (key, bytes) = entry.map_err(db)?;
            let group = decode_group(key.value(), bytes.value())?;
            if !group.call_tree.is_empty() {
                with_trees.push((key.value().to_owned(), group));
            }
        }
    }
    let moved = with_trees.len() as u64;
    let mut tables = GroupTables::open(txn)?;
    for (key, group) in with_trees {
        tables.restore(&key, group)?;
    }
    meta.insert(TREES_APART_KEY, 1).map_err(db)?;
    Ok(moved)
}

/// Attaches to each of `groups` its call tree from [`TREES`] (`read`'s view).
pub(crate) fn attach_trees(
    read: &redb::ReadTransaction,
    groups: &mut [v1::CrashGroup],
) -> Result<(), IndexError> {
    let trees = read.open_table(TREES).map_err(db)?;
    for group in groups {
        let key = keys::group_key(&group.project, &group.fingerprint);
        if let Some(bytes) = trees.get(key.as_str()).map_err(db)? {
            let tree = decode_tree(&key, bytes.value())?;
            group.call_tree = tree.nodes;
            group.call_tree_other_hits = tree.other_hits;
        }
    }
    Ok(())
}

/// Attaches to each of `groups` its facets from [`facets::FACETS`] (`read`'s view), as
/// answered ([`facets::answered`]).
pub(crate) fn attach_facets(
    read: &redb::ReadTransaction,
    groups: &mut [v1::CrashGroup],
) -> Result<(), IndexError> {
    let stored = read.open_table(facets::FACETS).map_err(db)?;
    for group in groups {
        let key = keys::group_key(&group.project, &group.fingerprint);
        if let Some(bytes) = stored.get(key.as_str()).map_err(db)? {
            group.facets = Some(facets::answered(decode_facets(&key, bytes.value())?));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use redb::ReadableDatabase;

    use crate::index::{Index, META};

    fn node(name: &str, hits: u64, parent: i64) -> v1::CallTreeNode {
        v1::CallTreeNode {
            name: name.into(),
            hits,
            parent,
        }
    }

    /// An index stored by a master that kept trees in the group records: its trees move apart
    /// when it opens (as they are), the records keep none, and a group from before kinds is
    /// named by what it holds when listed.
    #[test]
    fn trees_stored_in_group_records_move_apart_once() {
        let dir = tempfile::tempdir().unwrap();
        let database = Index::open_database(&dir.path().join("master.redb")).unwrap();
        let bodies = dir.path().join("master.bodies");
        drop(Index::open(Arc::clone(&database), &bodies).unwrap());
        let deep: Vec<v1::CallTreeNode> = (0..tree::MAX_GROUP_TREE_NODES as i64 + 10)
            .map(|i| node(&format!("f{i}"), 1, i - 1))
            .collect();
        let txn = database.begin_write().unwrap();
        {
            let mut groups = txn.open_table(GROUPS).unwrap();
            for (key, call_tree) in [("p/hang", deep.clone()), ("p/crash", Vec::new())] {
                let group = v1::CrashGroup {
                    fingerprint: key[2..].into(),
                    project: "p".into(),
                    count: 1,
                    call_tree,
                    ..Default::default()
                };
                groups
                    .insert(key, group.encode_to_vec().as_slice())
                    .unwrap();
            }
            txn.open_table(META)
                .unwrap()
                .remove(TREES_APART_KEY)
                .unwrap();
        }
        txn.commit().unwrap();

        let index = Index::open(Arc::clone(&database), &bodies).unwrap();
        let listed = index.groups(10, None, false, |_| true).unwrap();
        assert!(listed.iter().all(|g| g.call_tree.is_empty()));
        // Groups from before kinds are named by what they hold, when listed.
        let mut kinds: Vec<(&str, &str)> = listed
            .iter()
            .map(|g| (g.fingerprint.as_str(), g.kind.as_str()))
            .collect();
        kinds.sort_unstable();
        assert_eq!(kinds, [("crash", "crash"), ("hang", "hang")]);
        // Moved as it was: bounding is for the entries of version 5 on.
        let with_trees = index.groups(10, Some("hang"), true, |_| true).unwrap();
        assert_eq!(with_trees[0].call_tree, deep);
        assert_eq!(with_trees[0].call_tree_other_hits, 0);
        // Opened again: nothing moves (the records hold no tree now).
        let read = database.begin_read().unwrap();
        let stored = read.open_table(GROUPS).unwrap();
        let hang = v1::CrashGroup::decode(stored.get("p/hang").unwrap().unwrap().value()).unwrap();
        assert!(hang.call_tree.is_empty());
        assert!(
            hang.kind.is_empty(),
            "the record is not changed but for its tree"
        );
        drop((stored, read));
        let txn = database.begin_write().unwrap();
        assert_eq!(move_trees_apart(&txn).unwrap(), 0);
    }
}

/// The attack the bound is for: hang reports of one fingerprint whose deeper frames are random
/// unsymbolicated addresses (each a name of its own).
#[cfg(test)]
mod bounded {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::index::apply::Applier;
    use crate::index::{Index, command};

    #[test]
    fn a_thousand_hangs_with_random_deep_addresses_keep_their_group_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_file(&dir.path().join("m.redb")).unwrap();
        let database = Arc::clone(index.database());
        let key = v1::CrashGroupKey {
            fingerprint: "hang-1".into(),
            title: "main thread hang".into(),
            kind: "hang".into(),
            ..Default::default()
        };
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut times: Vec<Duration> = Vec::new();
        for i in 0..1_000u64 {
            let job = format!("p/hang-{i}");
            // main -> hang -> 50 random addresses, 5 samples each.
            let mut tree = vec![
                v1::CallTreeNode {
                    name: "main".into(),
                    hits: 5,
                    parent: -1,
                },
                v1::CallTreeNode {
                    name: "hang".into(),
                    hits: 5,
                    parent: 0,
                },
            ];
            for depth in 0..50 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                tree.push(v1::CallTreeNode {
                    name: format!("App + 0x{seed:x}"),
                    hits: 5,
                    parent: depth + 1,
                });
            }
            let commands = [
                command::submit(&job, v1::JobKind::Native, vec![1], "k", i),
                command::lease(&job, "w", "", 1, i),
                command::with_call_tree(
                    command::complete(&job, 1, "w", b"{}".to_vec(), Some(key.clone()), i),
                    tree,
                ),
            ];
            let txn = database.begin_write().unwrap();
            {
                let mut applier = Applier::new(&txn, index.bodies()).unwrap();
                applier.apply(&commands[0]).unwrap();
                applier.apply(&commands[1]).unwrap();
                let started = Instant::now();
                applier.apply(&commands[2]).unwrap();
                times.push(started.elapsed());
            }
            txn.commit().unwrap();
        }
        let mean = |part: &[Duration]| part.iter().sum::<Duration>() / part.len() as u32;
        eprintln!(
            "applying a completion into the group: first 100 {:?} each, last 100 {:?} each",
            mean(&times[..100]),
            mean(&times[900..])
        );
        let groups = index.groups(10, Some("hang"), true, |_| true).unwrap();
        assert_eq!(groups.len(), 1);
        let group = &groups[0];
        assert_eq!(group.count, 1_000);
        assert_eq!(group.call_tree.len(), tree::MAX_GROUP_TREE_NODES);
        assert_eq!(group.call_tree[0].hits, 5_000);
        // Equal hits keep the earlier paths: the first 39 whole (1,950 addresses) and 48 frames
        // of the 40th; its 49th frame and the 960 later paths, from their tops, are other.
        assert_eq!(group.call_tree_other_hits, 5 * (1 + 960));
        // Listing without trees reads none.
        let listed = index.groups(10, None, false, |_| true).unwrap();
        assert!(listed[0].call_tree.is_empty());
    }
}
