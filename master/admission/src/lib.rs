//! What a job is routed by, and what is checked before the master accepts it
//! (`symcluster-admission`).
//!
//! Its own crate, with no I/O and none of the master's server dependencies, so that the fuzz
//! targets (`fuzz/fuzz_targets/job_request.rs`) build it without the master.
//!
//! Native jobs route by the debug id of the image holding most frames of the crashed thread
//! (the app's own binary, whose debug file is the big one to keep cached; read by the engine's
//! `reports::routing`, which skips most of a KSCrash report); JS jobs by their source map key
//! (debug id, or release/dist/bundle); JVM jobs by their mapping id. A native job whose sender gives the key
//! (`NativeJob.routing_key`), or says there is none (`-`), is not decompressed here at all.

#![deny(missing_docs)]

use symcluster_engine::reports::routing::routing_image;
use symcluster_proto::{report, v1};

use symcluster_proto::v1::JobKind;

/// Largest report (decompressed) or stack accepted, in bytes: 16 MiB.
pub const MAX_PAYLOAD_BYTES: usize = report::MAX_REPORT_BYTES;

/// A checked job: kind and routing key, or the reason it cannot run.
pub enum Checked {
    /// Ready to queue.
    Runnable {
        /// Native, JS or JVM.
        kind: JobKind,
        /// The cache-affinity key.
        routing_key: String,
    },
    /// Accepted but failed at once: its payload cannot be read (one-line reason).
    Unreadable {
        /// Native, JS or JVM.
        kind: JobKind,
        /// Why.
        error: String,
    },
}

/// Validates a spec: `Err` for requests to refuse (`INVALID_ARGUMENT`).
pub fn check(spec: &v1::JobSpec) -> Result<Checked, String> {
    if spec.job_id.is_empty() || spec.job_id.len() > 128 {
        return Err("job_id must be 1 to 128 bytes".into());
    }
    if let Some(v1::job_spec::Payload::Native(native)) = &spec.payload
        && v1::Modules::try_from(native.modules).is_err()
    {
        return Err(format!(
            "modules: {} is neither MODULES_REFERENCED (0) nor MODULES_ALL (1)",
            native.modules
        ));
    }
    match &spec.payload {
        None => Err(
            "the job has no payload (a native report, a JS stack, a JVM trace or a combined event)"
                .into(),
        ),
        Some(v1::job_spec::Payload::Native(native)) if !native.routing_key.is_empty() => {
            // The sender named the key: only the frame header is read (size limit and shape);
            // a report that turns out unreadable fails on the worker with the reader's error.
            if native.routing_key.len() > 128 {
                return Err("routing_key must be at most 128 bytes".into());
            }
            report::checked_len(native).map_err(|e| e.to_string())?;
            let key = native.routing_key.trim();
            Ok(Checked::Runnable {
                kind: JobKind::Native,
                // `-`: the sender found no image to route by, so no preferred worker.
                routing_key: if key == report::NO_ROUTING_KEY {
                    String::new()
                } else {
                    key.to_ascii_lowercase()
                },
            })
        }
        Some(v1::job_spec::Payload::Native(native)) => {
            // Decompressed once here, to route; the compressed bytes are what is stored.
            let report = report::report_bytes(native).map_err(|e| e.to_string())?;
            Ok(match routing_image(&report) {
                Ok(image) => Checked::Runnable {
                    kind: JobKind::Native,
                    routing_key: image.map(|id| id.to_string()).unwrap_or_default(),
                },
                Err(e) => Checked::Unreadable {
                    kind: JobKind::Native,
                    error: e.to_string(),
                },
            })
        }
        Some(v1::job_spec::Payload::Js(js)) => {
            if js.stack.len() > MAX_PAYLOAD_BYTES {
                return Err(format!(
                    "the stack is larger than {MAX_PAYLOAD_BYTES} bytes"
                ));
            }
            // Each names one key segment inside the project's prefix, never a path out of it.
            symcluster_proto::missing::check_js_source(js)?;
            Ok(Checked::Runnable {
                kind: JobKind::Js,
                routing_key: js_key(js),
            })
        }
        Some(v1::job_spec::Payload::Jvm(jvm)) => {
            if jvm.trace.len() > MAX_PAYLOAD_BYTES {
                return Err(format!(
                    "the trace is larger than {MAX_PAYLOAD_BYTES} bytes"
                ));
            }
            if !jvm.mapping_id.is_empty() {
                let id = symcluster_proto::missing::mapping_id(&jvm.mapping_id)?;
                return Ok(Checked::Runnable {
                    kind: JobKind::Jvm,
                    routing_key: symcluster_proto::missing::jvm_key(&id),
                });
            }
            // No id: the Sentry event must name its mapping (read here once, to route); a text
            // trace cannot.
            let json = jvm.trace.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
            if !json {
                return Err(NO_MAPPING_ID.into());
            }
            match symcluster_engine::jvm::parse_trace(&jvm.trace) {
                Ok(trace) => match trace.mapping_ids.first() {
                    Some(id) => Ok(Checked::Runnable {
                        kind: JobKind::Jvm,
                        routing_key: symcluster_proto::missing::jvm_key(
                            &symcluster_proto::missing::mapping_id(id)?,
                        ),
                    }),
                    None => Err(NO_MAPPING_ID.into()),
                },
                Err(e) => Ok(Checked::Unreadable {
                    kind: JobKind::Jvm,
                    error: e.to_string(),
                }),
            }
        }
        Some(v1::job_spec::Payload::Combined(combined)) => {
            if combined.event.len() > MAX_PAYLOAD_BYTES {
                return Err(format!(
                    "the event is larger than {MAX_PAYLOAD_BYTES} bytes"
                ));
            }
            if combined.event.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
                return Err("a combined job's event must be a JSON object (a Sentry event)".into());
            }
            // Read once here (on the blocking pool), to route and to fail at once what no
            // worker could read.
            Ok(
                match symcluster_engine::combined::parse_event(&combined.event) {
                    Ok(report) => Checked::Runnable {
                        kind: JobKind::Combined,
                        routing_key: combined_key(&report),
                    },
                    Err(e) => Checked::Unreadable {
                        kind: JobKind::Combined,
                        error: e.to_string(),
                    },
                },
            )
        }
    }
}

/// The cache-affinity key of a combined job: its main native image's debug id (the image most
/// of its native frames are in: the costliest file to bring), else its mapping file's key, else
/// its first source map's; empty when it names none of them.
fn combined_key(report: &symcluster_engine::combined::CombinedReport) -> String {
    use symcluster_proto::missing;
    if let Some(id) = report
        .native_report()
        .and_then(|native| symcluster_engine::reports::routing::main_image(&native))
    {
        return id.to_string();
    }
    if let Some(id) = report
        .mapping_ids
        .first()
        .and_then(|id| missing::mapping_id(id).ok())
    {
        return missing::jvm_key(&id);
    }
    report
        .sourcemaps()
        .first()
        .map(|r| {
            missing::js_key(
                r.debug_id.as_deref().unwrap_or(""),
                &report.release,
                &report.dist,
                &r.bundle,
            )
        })
        .unwrap_or_default()
}

/// Why a JVM job with no mapping id is refused.
const NO_MAPPING_ID: &str = "a JVM job needs a mapping_id, or a Sentry event naming its mapping \
                             (debug_meta.images of type proguard)";

/// The source map key of a JS job: `debug-id:<id>` or `release:<release>/<dist>/<bundle>`
/// ([`symcluster_proto::missing::js_job_key`]).
pub fn js_key(js: &v1::JsJob) -> String {
    symcluster_proto::missing::js_job_key(js)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(routing_key: &str, report_zstd: Vec<u8>) -> v1::JobSpec {
        v1::JobSpec {
            job_id: "j".into(),
            payload: Some(v1::job_spec::Payload::Native(v1::NativeJob {
                report: Vec::new(),
                report_zstd,
                routing_key: routing_key.into(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn key(checked: Checked) -> String {
        match checked {
            Checked::Runnable { routing_key, .. } => routing_key,
            Checked::Unreadable { error, .. } => panic!("unreadable: {error}"),
        }
    }

    #[test]
    fn a_sender_key_or_none_is_taken_without_reading_the_report() {
        // A frame whose content is no report at all: only its header is checked.
        let not_a_report = report::compress(b"not a crash report");
        let given = native("54039061-A983-3323-A49D-837A894D667F", not_a_report.clone());
        assert_eq!(
            key(check(&given).unwrap()),
            "54039061-a983-3323-a49d-837a894d667f"
        );
        let none = native(report::NO_ROUTING_KEY, not_a_report.clone());
        assert_eq!(key(check(&none).unwrap()), "");
        // No key: the master reads the report, and this one is unreadable.
        assert!(matches!(
            check(&native("", not_a_report)).unwrap(),
            Checked::Unreadable { .. }
        ));
    }

    #[test]
    fn an_unknown_modules_value_is_refused() {
        let mut spec = native(report::NO_ROUTING_KEY, report::compress(b"{}"));
        let Some(v1::job_spec::Payload::Native(job)) = &mut spec.payload else {
            unreachable!()
        };
        job.modules = v1::Modules::All.into();
        assert!(check(&spec).is_ok());
        let Some(v1::job_spec::Payload::Native(job)) = &mut spec.payload else {
            unreachable!()
        };
        job.modules = 7;
        assert_eq!(
            check(&spec).err().as_deref(),
            Some("modules: 7 is neither MODULES_REFERENCED (0) nor MODULES_ALL (1)")
        );
    }
}
