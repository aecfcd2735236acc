//! How the index keys jobs and crash groups by project.
//!
//! Job ids are chosen by clients and unique only within a project, so the index stores a job
//! under `<project>/<job id>` (a project name never holds `/`: [`symcluster_proto::project`]),
//! and that key is the job's id inside the cluster: in commands, leases, and the `job_id` a
//! worker sees in its lease's spec. Clients see the project and their own id apart
//! ([`split`]). Crash groups are keyed `<project>/<fingerprint>` the same way, so a project's
//! groups are never merged with another's.
//!
//! Logs written by schema version 1 (before projects) name jobs without a project: [`upgrade`]
//! puts them in `default`.

use prost::Message;
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::project::DEFAULT_PROJECT;
use symcluster_proto::v1;

/// The index key of job `job_id` of `project`.
pub fn job_key(project: &str, job_id: &str) -> String {
    format!("{project}/{job_id}")
}

/// `(project, job id)` of an index key (a key without `/`, from no version that wrote one, is
/// read as a job of `default`).
pub fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or((DEFAULT_PROJECT, key))
}

/// The key of crash group `fingerprint` of `project`.
pub fn group_key(project: &str, fingerprint: &str) -> String {
    format!("{project}/{fingerprint}")
}

/// A command as the current schema reads it (`None`: as it is). Version-1 commands get their
/// job ids in `default`, and a submitted spec gets that key as its `job_id` and `default` as
/// its project, as a version-2 leader stores them (the id a worker completes the job by).
pub fn upgrade(command: &pb::Command) -> Option<pb::Command> {
    use pb::command::Kind;
    if command.version >= 2 {
        return None;
    }
    let mut command = command.clone();
    let id = match command.kind.as_mut()? {
        Kind::Submit(c) => {
            if let Ok(mut spec) = v1::JobSpec::decode(c.spec.as_slice()) {
                spec.job_id = job_key(DEFAULT_PROJECT, &spec.job_id);
                spec.project = DEFAULT_PROJECT.to_owned();
                c.spec = spec.encode_to_vec();
            }
            &mut c.job_id
        }
        Kind::Lease(c) => &mut c.job_id,
        Kind::Requeue(c) => &mut c.job_id,
        Kind::Complete(c) => &mut c.job_id,
        Kind::Fail(c) => &mut c.job_id,
        Kind::Purge(_) | Kind::Resymbolicate(_) | Kind::MembersSeen(_) => return None,
    };
    *id = job_key(DEFAULT_PROJECT, id);
    Some(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_back() {
        let key = job_key("demo", "a/b:c");
        assert_eq!(key, "demo/a/b:c");
        assert_eq!(split(&key), ("demo", "a/b:c"));
        assert_eq!(split("old"), ("default", "old"));
        assert_eq!(group_key("demo", "00ff"), "demo/00ff");
    }
}
