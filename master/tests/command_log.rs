//! Upgrade safety of the replicated log.
//!
//! `tests/data/command-log-v1.bin` holds the data of Raft log entries as schema version 1 wrote
//! them: encoded `symcluster.cluster.v1.Command` messages, each prefixed by its length as a
//! protobuf varint (prost's length-delimited encoding). A master of any later version must decode
//! and apply such a log to the same index, or a rolling upgrade would make masters diverge.
//!
//! The file is committed, never rewritten by a later version: it is what an old master left on
//! disk. It was made by `write_v1_log` below (ignored; run it only to add a new version's file,
//! under a new name):
//! `cargo test -p symcluster-master --test command_log -- --ignored write_v1_log`.

use std::path::PathBuf;
use std::sync::Arc;

use prost::Message;
use symcluster_master::index::apply::Applier;
use symcluster_master::index::{Counts, Index, JobState, command};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

fn log_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/command-log-v1.bin")
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
        command::lease("a", "worker-1", 1, 1_100),
        command::complete(
            "a",
            1,
            "worker-1",
            br#"{"status":"completed","job":"a"}"#.to_vec(),
            Some(group("g1")),
            1_200,
        ),
        command::lease("b", "worker-1", 1, 1_210),
        command::requeue("b", 1, "lease expired", 1_300),
        command::lease("b", "worker-2", 2, 1_310),
        command::complete(
            "b",
            2,
            "worker-2",
            br#"{"status":"completed","job":"b"}"#.to_vec(),
            Some(group("g1")),
            1_500,
        ),
        command::lease("c", "worker-2", 1, 1_510),
        command::fail("c", 1, "source map not found", 1_600),
        command::submit("d", v1::JobKind::Native, spec("d"), "debug-id-2", 1_700),
        command::purge(1_250, 2_000),
    ]
}

#[test]
#[ignore = "writes the committed fixture; run only to add a new version's file"]
fn write_v1_log() {
    let mut out = Vec::new();
    for cmd in v1_commands() {
        assert_eq!(cmd.version, 1, "this writer makes the version-1 file only");
        cmd.encode_length_delimited(&mut out).unwrap();
    }
    std::fs::write(log_path(), out).unwrap();
}

#[test]
fn a_log_written_by_version_1_replays_to_the_same_index() {
    let bytes = std::fs::read(log_path()).expect("tests/data/command-log-v1.bin");
    let mut rest = bytes.as_slice();
    let mut entries = Vec::new();
    while !rest.is_empty() {
        let len = prost::decode_length_delimiter(&mut rest).expect("length prefix");
        let (entry, tail) = rest.split_at(len);
        entries.push(entry.to_vec());
        rest = tail;
    }
    assert_eq!(entries.len(), 13, "log entries in the file");

    let dir = tempfile::tempdir().unwrap();
    let db = Index::open_database(&dir.path().join("master.redb")).unwrap();
    let index = Index::open(Arc::clone(&db)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut applier = Applier::new(&txn).unwrap();
        for (i, entry) in entries.iter().enumerate() {
            // The decoder the master runs on every committed entry.
            let cmd = command::decode(entry).expect("a version-1 entry decodes");
            assert_eq!(cmd.version, 1);
            applier.apply(&cmd).unwrap();
            applier.set_applied(i as u64 + 1, 1).unwrap();
        }
    }
    txn.commit().unwrap();

    assert_eq!(index.applied().unwrap(), (13, 1));
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
    let groups = index.groups(10, None, |_| true).unwrap();
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
