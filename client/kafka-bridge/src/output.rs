//! What the bridge publishes for each finished job: one JSON message on the output topic, keyed
//! by job id (so a compacted topic keeps the last result of each job, and a consumer can drop
//! the duplicate a redelivered input message makes).
//!
//! ```json
//! {"job_id": "kafka:reports:0:17", "project": "shop", "status": "completed",
//!  "error": "", "crash_group": "3f2a…", "revision": 1, "attempts": 1,
//!  "missing": [{"key": "…", "image": "libfoo.dylib", "arch": "arm64"}],
//!  "source": "reports:0:17", "result": { … }, "result_omitted": null}
//! ```
//!
//! `status` is `completed` or `failed` (then `error` says why, one line). `crash_group` is the
//! crash group's fingerprint (`symctl groups`), null when the job has none. `result` is the
//! engine's result (the `symctl symbolicate --format json` shape for native jobs,
//! `symctl restore-js --format json` for JS), or null with `result_omitted` saying why when the
//! message would be larger than `--max-message-size`.

use serde::Serialize;
use serde_json::value::RawValue;
use symcluster_client::api;

use crate::message::Position;

/// A missing debug file or source map of the job.
#[derive(Debug, Serialize)]
pub struct Missing<'a> {
    /// Debug id (native) or source map key (JS).
    pub key: &'a str,
    /// Image file name (native).
    pub image: &'a str,
    /// Architecture (native).
    pub arch: &'a str,
}

/// The output message's JSON (module docs).
#[derive(Debug, Serialize)]
pub struct ResultMessage<'a> {
    /// The job id.
    pub job_id: &'a str,
    /// Its project.
    pub project: &'a str,
    /// `completed` or `failed`.
    pub status: &'static str,
    /// One line, when failed (or an attempt failed).
    pub error: &'a str,
    /// The crash group's fingerprint.
    pub crash_group: Option<&'a str>,
    /// 1, or more when it was symbolicated again for a file that arrived late.
    pub revision: u32,
    /// Leases it took.
    pub attempts: u32,
    /// Files its result lacked.
    pub missing: Vec<Missing<'a>>,
    /// The input message: `topic:partition:offset`.
    pub source: String,
    /// The engine's result JSON.
    pub result: Option<Box<RawValue>>,
    /// Why `result` is null although the job completed.
    pub result_omitted: Option<String>,
}

/// `completed` or `failed`, by the job's state.
pub fn status(job: &api::Job) -> &'static str {
    if job.state == api::JobState::Completed as i32 {
        "completed"
    } else {
        "failed"
    }
}

/// The output message of finished `job`, read from `source`, as JSON bytes of at most
/// `max_bytes` when it can be: with the result, or, when that is over `max_bytes`, without it
/// (`result_omitted` says why).
pub fn encode(job: &api::Job, source: &Position, max_bytes: usize) -> Vec<u8> {
    let result = if job.result_json.is_empty() {
        Ok(None)
    } else {
        String::from_utf8(job.result_json.clone())
            .map_err(|e| e.to_string())
            .and_then(|s| RawValue::from_string(s).map_err(|e| e.to_string()))
            .map(Some)
    };
    match result {
        Ok(result) => {
            let with = message(job, source, result, None);
            if with.len() <= max_bytes {
                return with;
            }
            message(
                job,
                source,
                None,
                Some(format!(
                    "the result message would be {} bytes, over --max-message-size {max_bytes} bytes: read it with `symctl job {}`",
                    with.len(),
                    job.job_id
                )),
            )
        }
        Err(e) => message(
            job,
            source,
            None,
            Some(format!("the stored result is not JSON: {e}")),
        ),
    }
}

fn message(
    job: &api::Job,
    source: &Position,
    result: Option<Box<RawValue>>,
    result_omitted: Option<String>,
) -> Vec<u8> {
    let message = ResultMessage {
        job_id: &job.job_id,
        project: &job.project,
        status: status(job),
        error: &job.error,
        crash_group: Some(job.fingerprint.as_str()).filter(|f| !f.is_empty()),
        revision: job.revision,
        attempts: job.attempts,
        missing: job
            .missing
            .iter()
            .map(|m| Missing {
                key: &m.key,
                image: &m.image,
                arch: &m.arch,
            })
            .collect(),
        source: source.to_string(),
        result,
        result_omitted,
    };
    serde_json::to_vec(&message).expect("serializing owned JSON values cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(result: &[u8]) -> api::Job {
        api::Job {
            job_id: "kafka:r:0:5".into(),
            project: "shop".into(),
            state: api::JobState::Completed as i32,
            result_json: result.to_vec(),
            fingerprint: "abc".into(),
            revision: 1,
            attempts: 1,
            ..Default::default()
        }
    }

    fn source() -> Position {
        Position {
            topic: "r".into(),
            partition: 0,
            offset: 5,
        }
    }

    #[test]
    fn the_result_is_embedded_as_json() {
        let out: serde_json::Value =
            serde_json::from_slice(&encode(&job(br#"{"frames":[1]}"#), &source(), 1000)).unwrap();
        assert_eq!(
            out,
            serde_json::json!({"job_id": "kafka:r:0:5", "project": "shop", "status": "completed",
                "error": "", "crash_group": "abc", "revision": 1, "attempts": 1, "missing": [],
                "source": "r:0:5", "result": {"frames": [1]}, "result_omitted": null})
        );
    }

    #[test]
    fn a_large_result_is_left_out_with_the_reason() {
        let out: serde_json::Value =
            serde_json::from_slice(&encode(&job(br#"{"frames":[1]}"#), &source(), 5)).unwrap();
        assert_eq!(out["result"], serde_json::Value::Null);
        assert_eq!(
            out["result_omitted"],
            "the result message would be 195 bytes, over --max-message-size 5 bytes: read it with `symctl job kafka:r:0:5`"
        );
    }

    #[test]
    fn a_failed_job_has_its_error() {
        let mut failed = job(b"");
        failed.state = api::JobState::Failed as i32;
        failed.error = "the report is not JSON".into();
        failed.fingerprint.clear();
        let out: serde_json::Value =
            serde_json::from_slice(&encode(&failed, &source(), 1000)).unwrap();
        assert_eq!(
            (
                &out["status"],
                &out["error"],
                &out["crash_group"],
                &out["result"]
            ),
            (
                &serde_json::json!("failed"),
                &serde_json::json!("the report is not JSON"),
                &serde_json::Value::Null,
                &serde_json::Value::Null
            )
        );
    }
}
