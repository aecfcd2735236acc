//! The one zstd frame (RFC 8878) a compressed report or result travels as.

/// The content size that `blob`'s frame header records, in bytes, checking that `blob` is
/// exactly one whole zstd frame. `Err` (one line, naming `field`) when it is not a frame, holds
/// bytes after it, or does not record its size (a streaming encoder that never learnt it).
pub(crate) fn content_size(blob: &[u8], field: &str) -> Result<u64, String> {
    let frame_len = zstd::zstd_safe::find_frame_compressed_size(blob)
        .map_err(|_| format!("{field} is not a zstd frame"))?;
    if frame_len != blob.len() {
        return Err(format!(
            "{field} holds {} bytes after its first frame",
            blob.len() - frame_len
        ));
    }
    match zstd::zstd_safe::get_frame_content_size(blob) {
        Ok(Some(size)) => Ok(size),
        _ => Err(format!(
            "{field} does not record its content size in the frame header"
        )),
    }
}

/// Decompresses `blob` into exactly `size` bytes (from [`content_size`]). `Err` (one line,
/// naming `field`) when it does not decompress to that size.
pub(crate) fn decompress(blob: &[u8], size: usize, field: &str) -> Result<Vec<u8>, String> {
    thread_local! {
        // One decompression context per thread, reused: creating one costs about as much as
        // decompressing a 20 KB frame's first block.
        static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let data = DECOMPRESSOR
        .with_borrow_mut(|slot| {
            let decompressor = match slot {
                Some(decompressor) => decompressor,
                None => slot.insert(zstd::bulk::Decompressor::new()?),
            };
            decompressor.decompress(blob, size)
        })
        .map_err(|e| format!("{field} does not decompress: {e}"))?;
    if data.len() != size {
        return Err(format!(
            "{field} decompresses to {} bytes, but its header says {size}",
            data.len()
        ));
    }
    Ok(data)
}
