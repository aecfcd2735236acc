//! A crash group's facets: its jobs counted by release, dist, OS and device, and per day
//! (`symcluster.v1.GroupFacets`), bounded whatever devices send: each breakdown keeps at most
//! [`FACET_VALUES`] values and counts the rest as `other`, the days reach back [`DAYS_KEPT`]
//! days. Stored apart from the group's record (the `group_facets` table, under the group's
//! key), so that listing groups reads the small records only.
//!
//! A job is counted when it joins its group ([`add`]) and taken out when it leaves it
//! ([`take`]), under the facets and day its record keeps (`JobRecord.facets`,
//! `finished_at_ms`): adding and then taking one job leaves the facets as they were, unless a
//! value left a full breakdown in between (its jobs are `other` then, and so is the one taken)
//! or days aged out. A job whose report names no facet counts in the days only.
//!
//! The bound is the "top-k plus other" of crash consoles (Sentry's tag breakdowns,
//! crash-stats' "other"): a value's count is exact from the job that brought it in (until jobs
//! counted before it left, then came back, leave again: an approximation then); when a new
//! value comes to a full breakdown, the value with the fewest jobs (the earliest in the list
//! among equals) is moved to `other` and the new one takes its place. The order of the list is
//! the order values came in, so every master that applies the same jobs holds the same bytes.

use redb::TableDefinition;
use symcluster_proto::v1;

/// Group key ([`super::keys::group_key`]) → encoded `symcluster.v1.GroupFacets`. Absent for a
/// group none of whose jobs named a facet.
pub(crate) const FACETS: TableDefinition<&str, &[u8]> = TableDefinition::new("group_facets");

/// Values each breakdown keeps (the rest are counted in its `other`).
pub const FACET_VALUES: usize = 16;

/// Days of jobs per day kept, up to the latest day a job of the group finished.
pub const DAYS_KEPT: u64 = 90;

/// Milliseconds in a day: a job's day is `finished_at_ms / DAY_MS` (UTC).
pub const DAY_MS: u64 = 86_400_000;

/// Longest facet value counted, in bytes (the engine's `facets::MAX_VALUE_BYTES`; longer ones
/// are cut).
pub const MAX_VALUE_BYTES: usize = 128;

/// `facets` as a group counts them: each value cut to [`MAX_VALUE_BYTES`] (at a character
/// boundary), whatever a worker sent.
pub fn bounded(facets: v1::ReportFacets) -> v1::ReportFacets {
    let cut = |mut value: String| {
        value.truncate(value.floor_char_boundary(MAX_VALUE_BYTES));
        value
    };
    v1::ReportFacets {
        release: cut(facets.release),
        dist: cut(facets.dist),
        os: cut(facets.os),
        device: cut(facets.device),
    }
}

/// The breakdowns of `facets`, one per facet of a job, paired with the job's value of it.
fn breakdowns<'a>(
    facets: &'a mut v1::GroupFacets,
    job: &'a v1::ReportFacets,
) -> [(&'a mut Option<v1::FacetBreakdown>, &'a str); 4] {
    [
        (&mut facets.releases, job.release.as_str()),
        (&mut facets.dists, job.dist.as_str()),
        (&mut facets.os, job.os.as_str()),
        (&mut facets.devices, job.device.as_str()),
    ]
}

/// Counts a job of facets `job` that finished at `at_ms` into `facets`.
pub fn add(facets: &mut v1::GroupFacets, job: &v1::ReportFacets, at_ms: u64) {
    for (breakdown, value) in breakdowns(facets, job) {
        if value.is_empty() {
            continue;
        }
        let breakdown = breakdown.get_or_insert_with(Default::default);
        if let Some(count) = breakdown.top.iter_mut().find(|c| c.value == value) {
            count.jobs += 1;
            continue;
        }
        if breakdown.top.len() >= FACET_VALUES {
            let fewest = (0..breakdown.top.len())
                .min_by_key(|&i| breakdown.top[i].jobs)
                .expect("a full breakdown has values");
            breakdown.other += breakdown.top.remove(fewest).jobs;
        }
        breakdown.top.push(v1::FacetCount {
            value: value.to_owned(),
            jobs: 1,
        });
    }
    let day = at_ms / DAY_MS;
    match facets.days.binary_search_by_key(&day, |d| d.day) {
        Ok(i) => facets.days[i].jobs += 1,
        Err(i) => facets.days.insert(i, v1::DayCount { day, jobs: 1 }),
    }
    let latest = facets.days.last().map_or(day, |d| d.day);
    let first_kept = latest.saturating_sub(DAYS_KEPT - 1);
    facets.days.retain(|d| d.day >= first_kept);
}

/// Takes a job of facets `job` that finished at `at_ms` out of `facets` (a value no longer in
/// a breakdown out of its `other`).
pub fn take(facets: &mut v1::GroupFacets, job: &v1::ReportFacets, at_ms: u64) {
    for (slot, value) in breakdowns(facets, job) {
        let Some(breakdown) = slot.as_mut().filter(|_| !value.is_empty()) else {
            continue;
        };
        match breakdown.top.iter().position(|c| c.value == value) {
            Some(i) if breakdown.top[i].jobs > 1 => breakdown.top[i].jobs -= 1,
            Some(i) => {
                breakdown.top.remove(i);
            }
            None => breakdown.other = breakdown.other.saturating_sub(1),
        }
        if breakdown.top.is_empty() && breakdown.other == 0 {
            *slot = None;
        }
    }
    let day = at_ms / DAY_MS;
    if let Ok(i) = facets.days.binary_search_by_key(&day, |d| d.day) {
        facets.days[i].jobs -= 1;
        if facets.days[i].jobs == 0 {
            facets.days.remove(i);
        }
    }
}

/// `facets` as `ListGroups` answers them: each breakdown's values most jobs first (ties by
/// value), as the API documents; stored, they keep the order they came in.
pub fn answered(mut facets: v1::GroupFacets) -> v1::GroupFacets {
    for breakdown in [
        &mut facets.releases,
        &mut facets.dists,
        &mut facets.os,
        &mut facets.devices,
    ]
    .into_iter()
    .flatten()
    {
        breakdown
            .top
            .sort_by(|a, b| b.jobs.cmp(&a.jobs).then_with(|| a.value.cmp(&b.value)));
    }
    facets
}

/// Whether `facets` counts nothing (then it is not stored).
pub fn is_empty(facets: &v1::GroupFacets) -> bool {
    facets.releases.is_none()
        && facets.dists.is_none()
        && facets.os.is_none()
        && facets.devices.is_none()
        && facets.days.is_empty()
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn job(release: &str, device: &str) -> v1::ReportFacets {
        v1::ReportFacets {
            release: release.into(),
            dist: String::new(),
            os: "iOS 17.2 (21C62)".into(),
            device: device.into(),
        }
    }

    fn counts(breakdown: &Option<v1::FacetBreakdown>) -> (Vec<(String, u64)>, u64) {
        let b = breakdown.as_ref().expect("a breakdown");
        (
            b.top.iter().map(|c| (c.value.clone(), c.jobs)).collect(),
            b.other,
        )
    }

    #[test]
    fn jobs_are_counted_by_each_facet_and_day_and_taken_out_again() {
        let mut facets = v1::GroupFacets::default();
        let day = 20_000 * DAY_MS;
        add(&mut facets, &job("app@1.0+1", "iPhone13,2"), day + 5);
        add(&mut facets, &job("app@1.0+1", "iPhone15,2"), day + 6);
        add(&mut facets, &job("app@1.1+2", "iPhone13,2"), day + DAY_MS);
        assert_eq!(
            counts(&facets.releases),
            (vec![("app@1.0+1".into(), 2), ("app@1.1+2".into(), 1)], 0)
        );
        assert_eq!(
            counts(&facets.devices),
            (vec![("iPhone13,2".into(), 2), ("iPhone15,2".into(), 1)], 0)
        );
        assert_eq!(
            counts(&facets.os),
            (vec![("iOS 17.2 (21C62)".into(), 3)], 0)
        );
        assert_eq!(facets.dists, None, "no job named a dist");
        assert_eq!(
            facets.days,
            vec![
                v1::DayCount {
                    day: 20_000,
                    jobs: 2
                },
                v1::DayCount {
                    day: 20_001,
                    jobs: 1
                },
            ]
        );
        take(&mut facets, &job("app@1.1+2", "iPhone13,2"), day + DAY_MS);
        take(&mut facets, &job("app@1.0+1", "iPhone15,2"), day + 6);
        take(&mut facets, &job("app@1.0+1", "iPhone13,2"), day + 5);
        assert!(is_empty(&facets), "{facets:?}");
    }

    #[test]
    fn a_group_hit_by_100000_distinct_devices_and_releases_keeps_n_values_and_other() {
        let mut facets = v1::GroupFacets::default();
        // One device and release with many jobs first, then 100,000 distinct ones.
        for i in 0..50u64 {
            add(&mut facets, &job("app@1.0+1", "iPhone13,2"), i * DAY_MS);
        }
        for i in 0..100_000u64 {
            let at = (50 + i / 1_000) * DAY_MS;
            add(
                &mut facets,
                &job(&format!("app@2.{i}"), &format!("Device{i}")),
                at,
            );
        }
        for (breakdown, many) in [
            (&facets.releases, "app@1.0+1"),
            (&facets.devices, "iPhone13,2"),
        ] {
            let (top, other) = counts(breakdown);
            assert_eq!(top.len(), FACET_VALUES);
            assert_eq!(
                top[0],
                (many.to_owned(), 50),
                "the value with many jobs stays"
            );
            let listed: u64 = top.iter().map(|(_, n)| n).sum();
            assert_eq!(listed + other, 100_050, "every job is counted once");
            assert_eq!(other, 100_050 - 50 - (FACET_VALUES as u64 - 1));
        }
        assert_eq!(facets.days.len() as u64, DAYS_KEPT);
        assert_eq!(facets.days.last().unwrap().day, 50 + 99);
        let bytes = facets.encoded_len();
        assert!(bytes < 10 * 1024, "{bytes} bytes");
    }

    #[test]
    fn a_workers_long_values_are_cut_at_a_character_boundary() {
        let sent = v1::ReportFacets {
            release: "é".repeat(100),
            device: "iPhone13,2".into(),
            ..Default::default()
        };
        let kept = bounded(sent);
        assert_eq!(kept.release, "é".repeat(MAX_VALUE_BYTES / 2));
        assert_eq!(kept.device, "iPhone13,2");
    }

    #[test]
    fn a_job_that_names_no_facet_counts_in_the_days_only() {
        let mut facets = v1::GroupFacets::default();
        add(&mut facets, &v1::ReportFacets::default(), 3 * DAY_MS);
        assert_eq!(facets.releases, None);
        assert_eq!(facets.devices, None);
        assert_eq!(facets.days, vec![v1::DayCount { day: 3, jobs: 1 }]);
        take(&mut facets, &v1::ReportFacets::default(), 3 * DAY_MS);
        assert!(is_empty(&facets));
    }

    #[test]
    fn answers_list_the_values_with_most_jobs_first() {
        let mut facets = v1::GroupFacets::default();
        for release in ["a", "b", "b", "c", "c", "c"] {
            add(&mut facets, &job(release, ""), 0);
        }
        assert_eq!(counts(&facets.releases).0[0].0, "a", "stored as they came");
        let answered = answered(facets);
        assert_eq!(
            counts(&answered.releases).0,
            vec![("c".into(), 3), ("b".into(), 2), ("a".into(), 1)]
        );
    }

    #[test]
    fn a_value_moved_to_other_is_taken_out_of_other() {
        let mut facets = v1::GroupFacets::default();
        let names: Vec<String> = (0..=FACET_VALUES).map(|i| format!("r{i}")).collect();
        for name in &names {
            add(&mut facets, &job(name, ""), 0);
        }
        // r0 (one job, the earliest) left for r16.
        let (top, other) = counts(&facets.releases);
        assert_eq!(other, 1);
        assert!(!top.iter().any(|(v, _)| v == "r0"));
        take(&mut facets, &job("r0", ""), 0);
        assert_eq!(counts(&facets.releases).1, 0);
    }
}
