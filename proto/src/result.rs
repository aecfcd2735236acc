//! A completed job's result as the masters store it and, when asked (`result_zstd: true` in
//! `GetJobRequest` or `SubmitStreamRequest`), send it: the result JSON as one zstd frame
//! (RFC 8878) that records its content size.

/// The largest result accepted, in bytes once decompressed: 64 MiB (67,108,864 bytes).
pub const MAX_RESULT_BYTES: usize = 64 << 20;

/// The JSON of a `Job.result_zstd` frame, decompressed into exactly the size its header
/// records. `Err` (one line) when it is not one whole zstd frame recording its size, when that
/// size is over [`MAX_RESULT_BYTES`], or when it does not decompress to that size.
pub fn decompress(blob: &[u8]) -> Result<Vec<u8>, String> {
    let frame_len = zstd::zstd_safe::find_frame_compressed_size(blob)
        .map_err(|_| "result_zstd is not a zstd frame".to_owned())?;
    if frame_len != blob.len() {
        return Err(format!(
            "result_zstd holds {} bytes after its first frame",
            blob.len() - frame_len
        ));
    }
    let size = match zstd::zstd_safe::get_frame_content_size(blob) {
        Ok(Some(size)) if size <= MAX_RESULT_BYTES as u64 => size as usize,
        Ok(Some(size)) => {
            return Err(format!(
                "the result is {size} bytes; at most {MAX_RESULT_BYTES} are accepted"
            ));
        }
        _ => return Err("result_zstd's frame does not record its content size".to_owned()),
    };
    let json = zstd::bulk::decompress(blob, size)
        .map_err(|e| format!("result_zstd does not decompress: {e}"))?;
    if json.len() != size {
        return Err(format!(
            "result_zstd decompresses to {} bytes, but its header says {size}",
            json.len()
        ));
    }
    Ok(json)
}

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
