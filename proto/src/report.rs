//! A native job's report as it travels: plain (`NativeJob.report`) or as one zstd frame
//! (`NativeJob.report_zstd`, RFC 8878), and the one size limit every part of the cluster
//! enforces on it.
//!
//! Compression happens where the report is made (the SDK on the device, or the client library
//! in the ingestion service); the masters check the frame's header, decompress it once to route
//! the job, and store, replicate and lease the compressed bytes; the worker decompresses it.

use std::borrow::Cow;

use crate::v1::NativeJob;

/// The largest report accepted, in bytes once decompressed: 16 MiB (16,777,216 bytes). The
/// master refuses a larger one with INVALID_ARGUMENT; the client library and the SDK check it
/// before sending.
pub const MAX_REPORT_BYTES: usize = 16 << 20;

/// `NativeJob.routing_key` from a sender that read the report and found no image to route by
/// (no frame of the crashed thread in an image with a debug id): the master places the job
/// with no worker preference and does not decompress the report to look again.
pub const NO_ROUTING_KEY: &str = "-";

/// zstd level used by [`compress`]: the fastest (a CrashProbe report of ~123 KB of JSON becomes
/// ~20 KB in ~0.2 ms on one core).
pub const REPORT_ZSTD_LEVEL: i32 = 1;

/// Why a report cannot be read from a [`NativeJob`]; each message is one line, fit for an
/// INVALID_ARGUMENT status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Neither or both of `report` and `report_zstd` are set.
    #[error("a native job sets exactly one of `report` and `report_zstd` ({0})")]
    Fields(&'static str),
    /// The report is larger than [`MAX_REPORT_BYTES`] (decompressed size, bytes).
    #[error("the report is {0} bytes; at most {MAX_REPORT_BYTES} are accepted")]
    TooLarge(u64),
    /// `report_zstd` is not exactly one zstd frame recording its content size, or does not
    /// decompress (the one-line reason names the field).
    #[error("{0}")]
    Zstd(String),
}

/// `report` as one zstd frame that records its content size, for `NativeJob.report_zstd`.
/// From memory to memory compression cannot fail.
pub fn compress(report: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(report, REPORT_ZSTD_LEVEL).unwrap_or_default()
}

/// A native job with `report` compressed into `report_zstd` (what the client library sends).
pub fn compressed_job(report: &[u8]) -> NativeJob {
    NativeJob {
        report: Vec::new(),
        report_zstd: compress(report),
        routing_key: String::new(),
        modules: crate::v1::Modules::Referenced.into(),
    }
}

/// The decompressed size of `job`'s report in bytes, read from the zstd frame header without
/// decompressing; checks that exactly one field is set, that `report_zstd` is one whole frame
/// recording its content size, and [`MAX_REPORT_BYTES`].
pub fn checked_len(job: &NativeJob) -> Result<usize, ReportError> {
    let len = match (job.report.is_empty(), job.report_zstd.is_empty()) {
        (true, true) => return Err(ReportError::Fields("neither is")),
        (false, false) => return Err(ReportError::Fields("both are")),
        (false, true) => job.report.len() as u64,
        (true, false) => frame_content_size(&job.report_zstd)?,
    };
    if len > MAX_REPORT_BYTES as u64 {
        return Err(ReportError::TooLarge(len));
    }
    Ok(len as usize)
}

/// The report's bytes: borrowed when plain, decompressed from `report_zstd` otherwise (into
/// exactly the size its header records, so never more than [`MAX_REPORT_BYTES`]).
pub fn report_bytes(job: &NativeJob) -> Result<Cow<'_, [u8]>, ReportError> {
    let len = checked_len(job)?;
    if !job.report.is_empty() {
        return Ok(Cow::Borrowed(&job.report));
    }
    crate::frame::decompress(&job.report_zstd, len, "report_zstd")
        .map(Cow::Owned)
        .map_err(ReportError::Zstd)
}

fn frame_content_size(blob: &[u8]) -> Result<u64, ReportError> {
    crate::frame::content_size(blob, "report_zstd").map_err(ReportError::Zstd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(report: &[u8]) -> NativeJob {
        NativeJob {
            report: report.to_vec(),
            report_zstd: Vec::new(),
            ..Default::default()
        }
    }

    #[test]
    fn a_compressed_report_reads_back_as_sent() {
        let report = br#"{"crash":{"threads":[]}}"#.repeat(1000);
        let job = compressed_job(&report);
        assert!(job.report_zstd.len() < report.len() / 10);
        assert_eq!(checked_len(&job), Ok(report.len()));
        assert_eq!(report_bytes(&job).unwrap().as_ref(), &report[..]);
        assert_eq!(report_bytes(&plain(&report)).unwrap().as_ref(), &report[..]);
    }

    #[test]
    fn bad_frames_and_fields_are_refused_with_their_reason() {
        let report = b"Incident Identifier: 1".repeat(100);
        assert_eq!(
            checked_len(&plain(b"")),
            Err(ReportError::Fields("neither is"))
        );
        let mut both = compressed_job(&report);
        both.report = report.clone();
        assert_eq!(checked_len(&both), Err(ReportError::Fields("both are")));

        let not_zstd = NativeJob {
            report: Vec::new(),
            report_zstd: report.clone(),
            ..Default::default()
        };
        assert_eq!(
            report_bytes(&not_zstd).unwrap_err().to_string(),
            "report_zstd is not a zstd frame"
        );
        let mut cut = compressed_job(&report);
        cut.report_zstd.pop();
        assert!(report_bytes(&cut).is_err());
        let mut two = compressed_job(&report);
        let frame = two.report_zstd.clone();
        two.report_zstd.extend_from_slice(&frame);
        assert_eq!(
            report_bytes(&two).unwrap_err().to_string(),
            format!(
                "report_zstd holds {} bytes after its first frame",
                frame.len()
            )
        );
        // A streaming encoder that never learnt the size leaves it out of the header.
        let mut unsized_frame = Vec::new();
        let mut encoder = zstd::stream::Encoder::new(&mut unsized_frame, 1).unwrap();
        std::io::Write::write_all(&mut encoder, &report).unwrap();
        encoder.finish().unwrap();
        let unsized_job = NativeJob {
            report: Vec::new(),
            report_zstd: unsized_frame,
            ..Default::default()
        };
        assert_eq!(
            checked_len(&unsized_job).unwrap_err().to_string(),
            "report_zstd does not record its content size in the frame header"
        );
    }

    #[test]
    fn the_limit_is_on_the_decompressed_size() {
        // 17 MiB of zeros: a frame of a few hundred bytes claiming more than the limit.
        let big = compressed_job(&vec![0u8; 17 << 20]);
        assert!(big.report_zstd.len() < 4096);
        assert_eq!(
            report_bytes(&big).unwrap_err().to_string(),
            format!(
                "the report is {} bytes; at most 16777216 are accepted",
                17 << 20
            )
        );
        let at_limit = compressed_job(&vec![b' '; MAX_REPORT_BYTES]);
        assert_eq!(checked_len(&at_limit), Ok(MAX_REPORT_BYTES));
    }
}
