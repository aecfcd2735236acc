//! What an input message means: the job it becomes, or why it cannot become one.
//!
//! An input message carries one raw report as its value, as the SDK or an ingestion service
//! produced it, and says what it is in its headers (all optional but for JS jobs' source map):
//!
//! | header | value | default |
//! |---|---|---|
//! | `symcluster-kind` | `native` (an Apple crash report or Sentry event JSON), `js` (a JS stack or Hermes crash JSON) or `jvm` (a Java/Kotlin trace or Sentry event) | `native` |
//! | `symcluster-project` | the project (`a-z 0-9 . _ -`, 1–64 bytes) | `--project`, else the token's |
//! | `symcluster-encoding` | `zstd` when the value is one zstd frame (RFC 8878), as the SDK sends reports | plain |
//! | `symcluster-modules` | native: `referenced` (the result lists the images a frame is in) or `all` (every image of the report, the others `unused`) | `referenced` |
//! | `symcluster-debug-id` | JS: the source map's debug id | — |
//! | `symcluster-release`, `symcluster-dist`, `symcluster-bundle` | JS: the source map by release, dist and bundle file name | — |
//! | `symcluster-mapping-id` | JVM: the ProGuard/R8 mapping file's id (`JvmJob.mapping_id`) | the Sentry event's `debug_meta` |
//!
//! A JS message needs a debug id or a release and bundle; a JVM message whose value is no
//! Sentry event naming its mapping needs a mapping id (else the master refuses it, and it goes
//! to the dead-letter topic). The job id is derived from where the
//! message sits, `kafka:<topic>:<partition>:<offset>` ([`job_id`]), so a message delivered twice
//! (a consumer restarted before committing its offset) is submitted twice under one id and the
//! master keeps one job.

use symcluster_client::{api, report};

/// Header names (lowercase ASCII; matched exactly).
pub mod header {
    /// `native`, `js`, `jvm` or `combined`.
    pub const KIND: &str = "symcluster-kind";
    /// JVM: the mapping file's id.
    pub const MAPPING_ID: &str = "symcluster-mapping-id";
    /// The project.
    pub const PROJECT: &str = "symcluster-project";
    /// `zstd`, or absent for plain bytes.
    pub const ENCODING: &str = "symcluster-encoding";
    /// JS: the source map's debug id.
    pub const DEBUG_ID: &str = "symcluster-debug-id";
    /// JS: the release.
    pub const RELEASE: &str = "symcluster-release";
    /// JS: the dist.
    pub const DIST: &str = "symcluster-dist";
    /// JS: the bundle file name.
    pub const BUNDLE: &str = "symcluster-bundle";
    /// Native, optional: the cache-affinity key (`NativeJob.routing_key`), when the producer
    /// knows it; without it the master reads it from the report.
    pub const ROUTING_KEY: &str = "symcluster-routing-key";
    /// Native, optional: `referenced` or `all`, which images the result lists
    /// (`NativeJob.modules`).
    pub const MODULES: &str = "symcluster-modules";
    /// Dead-letter and output messages: why a message was not submitted.
    pub const REASON: &str = "symcluster-reason";
    /// Dead-letter and output messages: the input message's topic, partition and offset
    /// (`topic:partition:offset`).
    pub const SOURCE: &str = "symcluster-source";
    /// Output messages: `completed` or `failed`.
    pub const STATUS: &str = "symcluster-status";
    /// Output messages: the job id.
    pub const JOB_ID: &str = "symcluster-job-id";
}

/// Where a message sits in Kafka.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Position {
    /// Topic name.
    pub topic: String,
    /// Partition (0-based).
    pub partition: i32,
    /// Offset within the partition (0-based).
    pub offset: i64,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.topic, self.partition, self.offset)
    }
}

/// Longest job id the master accepts, bytes.
pub const MAX_JOB_ID_BYTES: usize = 128;

/// The job id of the message at `position`: `kafka:<topic>:<partition>:<offset>`, or, when that
/// exceeds [`MAX_JOB_ID_BYTES`] (topic names may have 249 bytes), the topic replaced by the
/// 64-bit FNV-1a hash of its name in hex, `kafka:#<hash>:<partition>:<offset>`.
pub fn job_id(position: &Position) -> String {
    let id = format!("kafka:{position}");
    if id.len() <= MAX_JOB_ID_BYTES {
        return id;
    }
    use std::hash::Hasher as _;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(position.topic.as_bytes());
    format!(
        "kafka:#{:016x}:{}:{}",
        hasher.finish(),
        position.partition,
        position.offset
    )
}

/// Why a message is sent to the dead-letter topic instead of being submitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// No value, or an empty one.
    #[error("the message has no report (empty value)")]
    Empty,
    /// `symcluster-kind` is not `native`, `js` or `jvm`.
    #[error("header symcluster-kind: {0:?} is not `native`, `js` or `jvm`")]
    Kind(String),
    /// `symcluster-modules` is not `referenced` or `all`.
    #[error("header symcluster-modules: {0:?} is not `referenced` or `all`")]
    Modules(String),
    /// `symcluster-encoding` is not `zstd`.
    #[error("header symcluster-encoding: {0:?} is not `zstd`")]
    Encoding(String),
    /// A header's value is not UTF-8.
    #[error("header {0}: the value is not UTF-8")]
    HeaderNotUtf8(String),
    /// A JS message names no source map.
    #[error(
        "a JS message needs header symcluster-debug-id or headers symcluster-release and symcluster-bundle"
    )]
    NoSourceMap,
    /// The project name is invalid.
    #[error("header symcluster-project: {0}")]
    Project(String),
    /// The report is over the master's limit, or its zstd frame is not one the client accepts.
    #[error("{0}")]
    Report(String),
}

/// A message's headers, as (name, value) pairs in order.
pub type Headers<'a> = [(&'a str, Option<&'a [u8]>)];

fn header<'a>(headers: &'a Headers<'a>, name: &str) -> Result<Option<&'a str>, Malformed> {
    match headers.iter().rev().find(|(n, _)| *n == name) {
        Some((_, Some(value))) => std::str::from_utf8(value)
            .map(|v| Some(v.trim()).filter(|v| !v.is_empty()))
            .map_err(|_| Malformed::HeaderNotUtf8(name.to_owned())),
        _ => Ok(None),
    }
}

/// The job spec of the message at `position` with `headers` and `value`; `default_project`
/// when the message names none (empty: the token's project). `Err` says why the message goes to
/// the dead-letter topic.
pub fn spec(
    position: &Position,
    headers: &Headers<'_>,
    value: Option<&[u8]>,
    default_project: &str,
) -> Result<api::JobSpec, Malformed> {
    let value = value.filter(|v| !v.is_empty()).ok_or(Malformed::Empty)?;
    let project = header(headers, header::PROJECT)?.unwrap_or(default_project);
    if !project.is_empty() {
        symcluster_client::project::validate(project)
            .map_err(|e| Malformed::Project(e.to_string()))?;
    }
    let zstd = match header(headers, header::ENCODING)? {
        None => false,
        Some("zstd") => true,
        Some(other) => return Err(Malformed::Encoding(other.to_owned())),
    };
    let job_id = job_id(position);
    let payload = match header(headers, header::KIND)?.unwrap_or("native") {
        "native" => {
            let routing_key = header(headers, header::ROUTING_KEY)?
                .unwrap_or("")
                .to_owned();
            let modules = match header(headers, header::MODULES)? {
                None | Some("referenced") => api::Modules::Referenced,
                Some("all") => api::Modules::All,
                Some(other) => return Err(Malformed::Modules(other.to_owned())),
            };
            let native = if zstd {
                api::NativeJob {
                    report: Vec::new(),
                    report_zstd: value.to_vec(),
                    routing_key,
                    modules: modules.into(),
                }
            } else {
                api::NativeJob {
                    report: value.to_vec(),
                    report_zstd: Vec::new(),
                    routing_key,
                    modules: modules.into(),
                }
            };
            report::checked_len(&native).map_err(|e| Malformed::Report(e.to_string()))?;
            api::job_spec::Payload::Native(if zstd {
                native
            } else {
                api::NativeJob {
                    routing_key: native.routing_key,
                    modules: native.modules,
                    ..report::compressed_job(value)
                }
            })
        }
        "js" => {
            let js = api::JsJob {
                stack: plain(value, zstd)?,
                debug_id: header(headers, header::DEBUG_ID)?.unwrap_or("").to_owned(),
                release: header(headers, header::RELEASE)?.unwrap_or("").to_owned(),
                dist: header(headers, header::DIST)?.unwrap_or("").to_owned(),
                bundle: header(headers, header::BUNDLE)?.unwrap_or("").to_owned(),
            };
            if js.debug_id.is_empty() && (js.release.is_empty() || js.bundle.is_empty()) {
                return Err(Malformed::NoSourceMap);
            }
            api::job_spec::Payload::Js(js)
        }
        "jvm" => api::job_spec::Payload::Jvm(api::JvmJob {
            trace: plain(value, zstd)?,
            mapping_id: header(headers, header::MAPPING_ID)?
                .unwrap_or("")
                .to_owned(),
        }),
        "combined" => api::job_spec::Payload::Combined(api::CombinedJob {
            event: plain(value, zstd)?,
        }),
        other => return Err(Malformed::Kind(other.to_owned())),
    };
    Ok(api::JobSpec {
        job_id,
        payload: Some(payload),
        project: project.to_owned(),
    })
}

/// A JS stack's, JVM trace's or combined event's bytes: `value`, decompressed when it is one zstd frame, with the
/// same bound as a native report's (one frame recording its size, at most 16 MiB).
fn plain(value: &[u8], zstd: bool) -> Result<Vec<u8>, Malformed> {
    if !zstd {
        return Ok(value.to_vec());
    }
    let frame = api::NativeJob {
        report: Vec::new(),
        report_zstd: value.to_vec(),
        ..Default::default()
    };
    Ok(report::report_bytes(&frame)
        .map_err(|e| Malformed::Report(e.to_string()))?
        .into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64) -> Position {
        Position {
            topic: "reports".into(),
            partition: 3,
            offset,
        }
    }

    #[test]
    fn job_ids_come_from_the_position() {
        assert_eq!(job_id(&at(17)), "kafka:reports:3:17");
        let long = Position {
            topic: "t".repeat(249),
            partition: 0,
            offset: i64::MAX,
        };
        let id = job_id(&long);
        assert!(id.len() <= MAX_JOB_ID_BYTES, "{id}");
        assert!(
            id.starts_with("kafka:#") && id.ends_with(":0:9223372036854775807"),
            "{id}"
        );
        // Stable: the same position, the same id (a redelivery dedups).
        assert_eq!(job_id(&long), id);
        assert_ne!(
            job_id(&Position {
                topic: "u".repeat(249),
                ..long.clone()
            }),
            id
        );
    }

    #[test]
    fn a_native_report_without_headers_is_a_native_job() {
        let spec = spec(&at(1), &[], Some(b"{\"x\":1}"), "").unwrap();
        assert_eq!(spec.job_id, "kafka:reports:3:1");
        assert_eq!(spec.project, "");
        let Some(api::job_spec::Payload::Native(native)) = spec.payload else {
            panic!("not native")
        };
        assert_eq!(
            symcluster_client::report::report_bytes(&native)
                .unwrap()
                .as_ref(),
            b"{\"x\":1}"
        );
    }

    #[test]
    fn the_modules_header_chooses_which_images_a_result_lists() {
        let modules = |headers: &Headers<'_>| {
            let spec = spec(&at(1), headers, Some(b"{\"x\":1}"), "").unwrap();
            let Some(api::job_spec::Payload::Native(native)) = spec.payload else {
                panic!("not native")
            };
            native.modules()
        };
        assert_eq!(modules(&[]), api::Modules::Referenced);
        assert_eq!(
            modules(&[(header::MODULES, Some(b"referenced"))]),
            api::Modules::Referenced
        );
        assert_eq!(
            modules(&[(header::MODULES, Some(b"all"))]),
            api::Modules::All
        );
    }

    #[test]
    fn js_headers_name_the_source_map() {
        let headers = [
            (header::KIND, Some(&b"js"[..])),
            (header::PROJECT, Some(&b"shop"[..])),
            (header::RELEASE, Some(&b"app@1.0"[..])),
            (header::BUNDLE, Some(&b"index.android.bundle"[..])),
        ];
        let spec = spec(&at(2), &headers, Some(b"at f (x.js:1:2)"), "other").unwrap();
        assert_eq!(spec.project, "shop");
        let Some(api::job_spec::Payload::Js(js)) = spec.payload else {
            panic!("not js")
        };
        assert_eq!(
            (js.release.as_str(), js.bundle.as_str(), js.stack.as_slice()),
            ("app@1.0", "index.android.bundle", &b"at f (x.js:1:2)"[..])
        );
    }

    #[test]
    fn jvm_messages_carry_their_mapping_id() {
        let headers = [
            (header::KIND, Some(&b"jvm"[..])),
            (
                header::MAPPING_ID,
                Some(&b"3828bd45-950f-5e77-9737-b6b3a1d80299"[..]),
            ),
            (header::ENCODING, Some(&b"zstd"[..])),
        ];
        let trace = b"a.B: x\n\tat a.c.d(SourceFile:1)\n";
        let value = report::compress(trace);
        let spec = spec(&at(4), &headers, Some(&value), "").unwrap();
        let Some(api::job_spec::Payload::Jvm(jvm)) = spec.payload else {
            panic!("not jvm")
        };
        assert_eq!(
            (jvm.mapping_id.as_str(), jvm.trace.as_slice()),
            ("3828bd45-950f-5e77-9737-b6b3a1d80299", &trace[..])
        );
    }

    #[test]
    fn combined_messages_carry_their_event() {
        let headers = [(header::KIND, Some(&b"combined"[..]))];
        let event = br#"{"exception": {"values": []}}"#;
        let spec = spec(&at(5), &headers, Some(&event[..]), "").unwrap();
        let Some(api::job_spec::Payload::Combined(combined)) = spec.payload else {
            panic!("not combined")
        };
        assert_eq!(combined.event, event);
    }

    #[test]
    fn malformed_messages_say_why() {
        let bad = |headers: &Headers<'_>, value: Option<&[u8]>| {
            spec(&at(0), headers, value, "").unwrap_err()
        };
        assert_eq!(bad(&[], None), Malformed::Empty);
        assert_eq!(bad(&[], Some(b"")), Malformed::Empty);
        assert_eq!(
            bad(&[(header::KIND, Some(b"banana"))], Some(b"x")),
            Malformed::Kind("banana".into())
        );
        assert_eq!(
            bad(&[(header::KIND, Some(b"js"))], Some(b"x")),
            Malformed::NoSourceMap
        );
        assert_eq!(
            bad(&[(header::MODULES, Some(b"every"))], Some(b"x")),
            Malformed::Modules("every".into())
        );
        assert_eq!(
            bad(&[(header::ENCODING, Some(b"gzip"))], Some(b"x")),
            Malformed::Encoding("gzip".into())
        );
        assert_eq!(
            bad(&[(header::PROJECT, Some(b"\xff"))], Some(b"x")),
            Malformed::HeaderNotUtf8(header::PROJECT.into())
        );
        assert!(matches!(
            bad(&[(header::PROJECT, Some(b"Not A Project"))], Some(b"x")),
            Malformed::Project(_)
        ));
        assert!(matches!(
            bad(&[(header::ENCODING, Some(b"zstd"))], Some(b"not zstd")),
            Malformed::Report(_)
        ));
        assert_eq!(
            Malformed::NoSourceMap.to_string(),
            "a JS message needs header symcluster-debug-id or headers symcluster-release and symcluster-bundle"
        );
    }
}
