//! A completed job's result as the masters store it and, when asked (`result_zstd: true` in
//! `GetJobRequest` or `SubmitStreamRequest`), send it: the result JSON as one zstd frame
//! (RFC 8878) that records its content size.

/// The largest result accepted, in bytes once decompressed: 64 MiB (67,108,864 bytes).
pub const MAX_RESULT_BYTES: usize = 64 << 20;

/// Checks a compressed result without decompressing it: exactly one zstd frame whose header
/// records a content size of at most [`MAX_RESULT_BYTES`]; that size in bytes. `Err` holds a
/// one-line reason.
pub fn checked_len(blob: &[u8]) -> Result<usize, String> {
    let size = crate::frame::content_size(blob, "result_zstd")?;
    if size > MAX_RESULT_BYTES as u64 {
        return Err(format!(
            "the result is {size} bytes; at most {MAX_RESULT_BYTES} are accepted"
        ));
    }
    Ok(size as usize)
}

/// The JSON of a `Job.result_zstd` frame, decompressed into exactly the size its header
/// records. `Err` (one line) as [`checked_len`], or when it does not decompress to that size.
pub fn decompress(blob: &[u8]) -> Result<Vec<u8>, String> {
    let size = checked_len(blob)?;
    crate::frame::decompress(blob, size, "result_zstd")
}

/// Most nodes a completion's named call tree (`CompleteJobRequest.call_tree`) may have: a hang
/// report samples at most a few hundred stacks of at most a few hundred frames, far fewer once
/// merged per path. A worker sends no tree rather than a bigger one; the master refuses one.
pub const MAX_CALL_TREE_NODES: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_frame_reads_back_and_bad_ones_say_why() {
        let json = br#"{"status":"completed"}"#.repeat(200);
        let frame = zstd::bulk::compress(&json, 1).unwrap();
        assert_eq!(decompress(&frame).unwrap(), json);
        assert_eq!(
            decompress(&json).unwrap_err(),
            "result_zstd is not a zstd frame"
        );
        let big = zstd::bulk::compress(&vec![0u8; MAX_RESULT_BYTES + 1], 1).unwrap();
        assert_eq!(
            decompress(&big).unwrap_err(),
            format!(
                "the result is {} bytes; at most 67108864 are accepted",
                MAX_RESULT_BYTES + 1
            )
        );
    }
}
