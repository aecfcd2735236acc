//! The master's request checks: any bytes decoded as a `JobSpec` (as gRPC would), and the same
//! bytes as a report compressed the way the SDK sends it; then the checks and routing a submit
//! goes through (zstd frame header, decompression, routing reader).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use symcluster_proto::v1::{JobSpec, job_spec::Payload};

fuzz_target!(|data: &[u8]| {
    if let Ok(spec) = JobSpec::decode(data) {
        let _ = symcluster_admission::check(&spec);
    }
    let compressed = JobSpec {
        job_id: "fuzz".into(),
        payload: Some(Payload::Native(symcluster_proto::report::compressed_job(
            data,
        ))),
        project: String::new(),
    };
    let _ = symcluster_admission::check(&compressed);
});
