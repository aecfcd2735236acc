//! Upgrade safety of the replicated log.
//!
//! `tests/data/command-log-v<N>.bin` holds the data of Raft log entries as schema version N
//! wrote them: encoded `symcluster.cluster.v1.Command` messages, each prefixed by its length as a
//! protobuf varint (prost's length-delimited encoding). A master of any later version must decode
//! and apply such a log to the same index, or a rolling upgrade would make masters diverge
//! (`UPGRADING.md`: a newer follower applies an older leader's entries as they applied then).
//!
//! The files are committed, never rewritten by a later version: they are what an old master
//! left on disk. Each was made by its `write_v<N>_log` below (ignored; run one only to add a new
//! version's file, under a new name), e.g.
//! `cargo test -p symcluster-master --test command_log -- --ignored write_v4_log`.
//! Version 1 is the first schema; version 4 is the one masters ran when membership changes
//! came (projects, late files and their revisions, attempts that do not count, call trees).

use std::path::PathBuf;
use std::sync::Arc;

use prost::Message;
use symcluster_master::index::apply::Applier;
use symcluster_master::index::{Counts, Index, JobState, command};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

fn data_path(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/command-log-v{version}.bin"))
}

/// Writes the committed log file of schema `version`: `commands`, each length-delimited. Run
/// only by the ignored `write_v*_log` tests, on a master of that version.
fn write_log(version: u32, commands: Vec<pb::Command>) {
    let mut out = Vec::new();
    for cmd in commands {
        assert_eq!(
            cmd.version, version,
            "this writer makes the version-{version} file only"
        );
        cmd.encode_length_delimited(&mut out).unwrap();
    }
    std::fs::write(data_path(version), out).unwrap();
}

/// The entries of a committed log file.
fn read_log(version: u32) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(data_path(version)).expect("the committed log file");
    let mut rest = bytes.as_slice();
    let mut entries = Vec::new();
    while !rest.is_empty() {
        let len = prost::decode_length_delimiter(&mut rest).expect("length prefix");
        let (entry, tail) = rest.split_at(len);
        entries.push(entry.to_vec());
        rest = tail;
    }
    entries
}

/// The index a master of this version builds from the committed log of schema `version`:
/// every entry decoded as the master decodes a committed entry, applied in one transaction,
/// entry `i` (1-based) stored as applied in `term`. Checks that the file holds `expected`
/// entries, each of `version`.
fn replay(version: u32, expected: usize, term: u64) -> (tempfile::TempDir, Index) {
    let entries = read_log(version);
    assert_eq!(entries.len(), expected, "log entries in the file");
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open_file(&dir.path().join("master.redb")).unwrap();
    let db = Arc::clone(index.database());
    let txn = db.begin_write().unwrap();
    {
        let mut applier = Applier::new(&txn, index.bodies()).unwrap();
        for (i, entry) in entries.iter().enumerate() {
            let cmd = command::decode(entry).expect("a committed entry decodes");
            assert_eq!(cmd.version, version);
            applier.apply(&cmd).unwrap();
            applier.set_applied(i as u64 + 1, term).unwrap();
        }
    }
    txn.commit().unwrap();
    assert_eq!(index.applied().unwrap(), (expected as u64, term));
    (dir, index)
}

fn group(fingerprint: &str) -> v1::CrashGroupKey {
    v1::CrashGroupKey {
        fingerprint: fingerprint.into(),
        title: "EXC_BAD_ACCESS in -[CRLCrashNULL crash]".into(),
        key_stack: vec!["-[CRLCrashNULL crash] (CRLCrashNULL.m:37)".into()],
        kind: String::new(),
    }
}

/// A job's life in every shape the log knows: completed, retried after a lost lease, failed,
/// still queued, purged.
fn v1_commands() -> Vec<pb::Command> {
    let spec = |id: &str| {
        v1::JobSpec {
            job_id: id.into(),
            ..Default::default()
        }
        .encode_to_vec()
    };
    vec![
        command::submit("a", v1::JobKind::Native, spec("a"), "debug-id-1", 1_000),
        command::submit("b", v1::JobKind::Native, spec("b"), "debug-id-1", 1_010),
        command::submit("c", v1::JobKind::Js, spec("c"), "release-1", 1_020),
        command::lease("a", "worker-1", "", 1, 1_100),
        command::complete(
            "a",
            1,
            "worker-1",
            br#"{"status":"completed","job":"a"}"#.to_vec(),
            Some(group("g1")),
            1_200,
        ),
        command::lease("b", "worker-1", "", 1, 1_210),
        command::requeue("b", 1, "lease expired", 1_300),
        command::lease("b", "worker-2", "", 2, 1_310),
        command::complete(
            "b",
            2,
            "worker-2",
            br#"{"status":"completed","job":"b"}"#.to_vec(),
            Some(group("g1")),
            1_500,
        ),
        command::lease("c", "worker-2", "", 1, 1_510),
        command::fail("c", 1, "source map not found", 1_600),
        command::submit("d", v1::JobKind::Native, spec("d"), "debug-id-2", 1_700),
        command::purge(1_250, 2_000, 0),
    ]
}

#[test]
#[ignore = "writes the committed fixture; run only to add a new version's file"]
fn write_v1_log() {
    write_log(1, v1_commands());
}

#[test]
fn a_log_written_by_version_1_replays_to_the_same_index() {
    let (_dir, index) = replay(1, 13, 1);
    // `a` finished at 1,200, before the purge's cut-off (1,250): gone.
    assert!(index.job("default/a", true).unwrap().is_none());

    let b = index.job("default/b", true).unwrap().unwrap();
    assert_eq!(b.state(), JobState::Completed);
    assert_eq!(
        (b.record.attempts, b.record.worker_id.as_str()),
        (2, "worker-2")
    );
    assert_eq!(
        (b.record.submitted_at_ms, b.record.finished_at_ms),
        (1_010, 1_500)
    );
    assert_eq!(b.record.fingerprint, "g1");
    assert_eq!(
        b.result_json.as_deref(),
        Some(&br#"{"status":"completed","job":"b"}"#[..])
    );

    let c = index.job("default/c", false).unwrap().unwrap();
    assert_eq!(c.state(), JobState::Failed);
    assert_eq!(c.record.error, "source map not found");
    assert_eq!(c.record.kind, v1::JobKind::Js as i32);

    let d = index.job("default/d", false).unwrap().unwrap();
    assert_eq!(d.state(), JobState::Queued);
    assert_eq!(d.record.routing_key, "debug-id-2");
    let spec = v1::JobSpec::decode(index.spec("default/d").unwrap().unwrap().as_slice()).unwrap();
    // Version 1 had no projects: its jobs are `default`'s, under their index key, and the spec
    // a worker leases names that key (the id it completes the job by) and the project.
    assert_eq!(
        (spec.job_id.as_str(), spec.project.as_str()),
        ("default/d", "default")
    );
    let open: Vec<String> = index
        .open_jobs()
        .unwrap()
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(open, vec!["default/d".to_owned()]);

    // Purging jobs leaves the crash groups' counts as they were.
    let groups = index.groups(10, None, true, |_| true).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].project, "default");
    assert_eq!((groups[0].fingerprint.as_str(), groups[0].count), ("g1", 2));
    assert_eq!(
        (groups[0].first_seen_ms, groups[0].last_seen_ms),
        (1_200, 1_500)
    );
    assert_eq!(groups[0].last_job_id, "b");

    assert_eq!(
        index.counts().unwrap(),
        Counts {
            queued: 1,
            running: 0,
            completed: 1,
            failed: 1,
        }
    );
}

fn missing(key: &str) -> v1::MissingFile {
    v1::MissingFile {
        key: key.into(),
        image: "DemoApp".into(),
        arch: "arm64".into(),
    }
}

/// What version 4 adds to a job's life: projects, a purge, a report that cannot be read, a
/// lease handed back unstarted, a result that lacked a file and the new revision when it
/// arrives, a failed attempt that lacked a source map, a hang's call tree, members seen.
fn v4_commands() -> Vec<pb::Command> {
    let spec = |id: &str| {
        v1::JobSpec {
            job_id: id.into(),
            project: "demo".into(),
            ..Default::default()
        }
        .encode_to_vec()
    };
    vec![
        command::submit(
            "demo/a",
            v1::JobKind::Native,
            spec("demo/a"),
            "dbg-1",
            1_000,
        ),
        command::submit(
            "demo/b",
            v1::JobKind::Js,
            spec("demo/b"),
            "release-1",
            1_010,
        ),
        command::submit("other/d", v1::JobKind::Native, Vec::new(), "dbg-9", 1_030),
        command::lease("other/d", "worker-2", "", 1, 1_040),
        command::complete(
            "other/d",
            1,
            "worker-2",
            br#"{"status":"completed","job":"other/d"}"#.to_vec(),
            None,
            1_050,
        ),
        command::purge(1_060, 1_065, 0),
        command::submit_unreadable(
            "demo/c",
            v1::JobKind::Native,
            b"not a report".to_vec(),
            "unrecognized report format",
            1_070,
        ),
        command::lease("demo/a", "worker-1", "", 1, 1_100),
        command::requeue_unstarted("demo/a", 1, "worker worker-1 disconnected", 1_110),
        command::lease("demo/a", "worker-2", "", 2, 1_120),
        command::with_missing(
            command::complete(
                "demo/a",
                2,
                "worker-2",
                br#"{"status":"completed","job":"demo/a"}"#.to_vec(),
                Some(group("raw")),
                1_200,
            ),
            vec![missing("dbg-2")],
        ),
        command::lease("demo/b", "worker-1", "", 1, 1_210),
        command::with_missing(
            command::fail("demo/b", 1, "source map not found", 1_300),
            vec![missing("app.bundle.map")],
        ),
        command::resymbolicate("demo/a", "symbolicating again: dbg-2 arrived", 1_400),
        command::lease("demo/a", "worker-1", "", 3, 1_410),
        command::with_call_tree(
            command::complete(
                "demo/a",
                3,
                "worker-1",
                br#"{"status":"completed","job":"demo/a","revision":2}"#.to_vec(),
                Some(group("g1")),
                1_500,
            ),
            vec![v1::CallTreeNode {
                name: "main".into(),
                hits: 3,
                parent: -1,
            }],
        ),
        command::members_seen(vec![2, 3]),
    ]
}

#[test]
#[ignore = "writes the committed fixture; run only to add a new version's file"]
fn write_v4_log() {
    write_log(4, v4_commands());
}

#[test]
fn a_log_written_by_version_4_replays_to_the_same_index() {
    let (_dir, index) = replay(4, 17, 2);

    // Revision 2 of `a`: its first lease never started, so only its two real attempts counted
    // in revision 1, and revision 2 starts its budget afresh; its result and group are the
    // second run's; it lacks nothing now.
    let a = index.job("demo/a", true).unwrap().unwrap();
    assert_eq!(a.state(), JobState::Completed);
    assert_eq!(
        (
            a.record.attempts,
            a.record.uncounted_attempts,
            a.record.revision,
            a.record.worker_id.as_str(),
            a.record.fingerprint.as_str()
        ),
        (3, 2, 2, "worker-1", "g1")
    );
    assert_eq!(
        a.result_json.as_deref(),
        Some(&br#"{"status":"completed","job":"demo/a","revision":2}"#[..])
    );
    assert!(a.record.missing.is_empty());
    assert_eq!(a.record.call_tree.len(), 1);
    assert_eq!(a.record.resymbolicated_at_ms, 1_400);

    // `b` failed lacking its source map, and keeps its spec to run again when it arrives.
    let b = index.job("demo/b", false).unwrap().unwrap();
    assert_eq!(
        (b.state(), b.record.error.as_str()),
        (JobState::Failed, "source map not found")
    );
    assert!(index.spec("demo/b").unwrap().is_some());
    assert_eq!(
        index
            .jobs_lacking(Some("demo"), &["app.bundle.map".to_owned()])
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        vec!["demo/b".to_owned()]
    );
    assert!(
        index
            .jobs_lacking(Some("demo"), &["dbg-2".to_owned()])
            .unwrap()
            .is_empty()
    );

    // The unreadable report is failed with its reason, never queued.
    let c = index.job("demo/c", false).unwrap().unwrap();
    assert_eq!(
        (c.state(), c.record.error.as_str()),
        (JobState::Failed, "unrecognized report format")
    );

    // `other/d` finished at 1,050, before the purge's cut-off (1,060): gone; the unreadable
    // report was submitted after it and stays.
    assert!(index.job("other/d", false).unwrap().is_none());
    assert!(index.open_jobs().unwrap().is_empty());

    // `a` left the group "raw" for "g1" when its second revision completed.
    let groups = index.groups(10, None, true, |_| true).unwrap();
    let names: Vec<(&str, &str, u64)> = groups
        .iter()
        .map(|g| (g.project.as_str(), g.fingerprint.as_str(), g.count))
        .collect();
    assert_eq!(names, vec![("demo", "g1", 1)]);
    assert_eq!(
        index.counts().unwrap(),
        Counts {
            queued: 0,
            running: 0,
            completed: 1,
            failed: 2,
        }
    );
}

fn tree(names: &[(&str, u64)]) -> Vec<v1::CallTreeNode> {
    names
        .iter()
        .enumerate()
        .map(|(i, (name, hits))| v1::CallTreeNode {
            name: (*name).into(),
            hits: *hits,
            parent: i as i64 - 1,
        })
        .collect()
}

/// What version 5 adds: a purge takes its jobs out of their crash groups (a crash group and a
/// hang group, one job of each purged; the crash group is left with none).
fn v5_commands() -> Vec<pb::Command> {
    let mut commands = Vec::new();
    let hang = |fingerprint: &str| v1::CrashGroupKey {
        kind: "hang".into(),
        ..group(fingerprint)
    };
    for (id, group, at, call_tree) in [
        (
            "demo/h1",
            hang("hang-1"),
            1_000,
            tree(&[("main", 4), ("spin", 4), ("0x1000", 4)]),
        ),
        ("demo/c", group("crash-1"), 1_050, Vec::new()),
        (
            "demo/h2",
            hang("hang-1"),
            1_300,
            tree(&[("main", 2), ("spin", 2), ("0x2000", 2)]),
        ),
    ] {
        commands.push(command::submit(id, v1::JobKind::Native, vec![1], "k", at));
        commands.push(command::lease(id, "worker-1", "worker", 1, at + 10));
        commands.push(command::with_call_tree(
            command::complete(id, 1, "worker-1", b"{}".to_vec(), Some(group), at + 20),
            call_tree,
        ));
    }
    commands.push(command::purge(1_200, 1_500, 0));
    commands
}

#[test]
#[ignore = "writes the committed fixture; run only to add a new version's file"]
fn write_v5_log() {
    write_log(5, v5_commands());
}

#[test]
fn a_log_written_by_version_5_replays_to_the_same_index() {
    let (_dir, index) = replay(5, 10, 3);
    // The purge (cut-off 1,200) took `h1` and `c` out of their groups: `crash-1` is gone, and
    // `hang-1` holds `h2` alone, its tree `h2`'s.
    assert!(index.job("demo/h1", false).unwrap().is_none());
    assert!(index.job("demo/c", false).unwrap().is_none());
    let groups = index.groups(10, None, true, |_| true).unwrap();
    let names: Vec<(&str, &str, u64)> = groups
        .iter()
        .map(|g| (g.project.as_str(), g.fingerprint.as_str(), g.count))
        .collect();
    assert_eq!(names, vec![("demo", "hang-1", 1)]);
    assert_eq!(
        groups[0].call_tree,
        tree(&[("main", 2), ("spin", 2), ("0x2000", 2)])
    );
    assert_eq!(groups[0].call_tree_other_hits, 0);
    // Listed without trees, the record carries none.
    let listed = index.groups(10, None, false, |_| true).unwrap();
    assert!(listed[0].call_tree.is_empty());
    assert_eq!(
        index.counts().unwrap(),
        Counts {
            queued: 0,
            running: 0,
            completed: 1,
            failed: 0,
        }
    );
}
