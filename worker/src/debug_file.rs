//! A debug file brought to this worker's disk for its conversion, memory-mapped: never whole in
//! the heap. It is streamed into a temporary file of the disk cache's directory
//! ([`DiskCache::temporary_file`], removed once converted), bounded by its size and resumed when
//! cut ([`symcluster_sources::download`]); from a directory source it is copied there too, never
//! mapped in place: a file another program rewrote in place under a map would kill the worker
//! (SIGBUS) when read past its new end.
//!
//! A mapped file's pages count in the process's resident memory as they are read, but the
//! kernel may drop them at any time (they are the file's, not the heap's): a conversion under
//! memory pressure slows down instead of being killed.

use symcluster_sources::{DownloadLimits, FetchError, Source};

use crate::disk_cache::DiskCache;

/// A debug file's bytes, mapped from disk, and the temporary file they live in (when
/// downloaded).
pub struct DebugFileOnDisk {
    /// The file's bytes: a read-only map of a file nobody writes while it is mapped (written
    /// whole before it is mapped, in the worker's own cache directory).
    pub bytes: memmap2::Mmap,
    /// How many times its download was cut and resumed.
    pub resumes: u32,
    /// The downloaded file, removed when this is dropped (the map stays readable until then).
    _temporary: Option<tempfile::NamedTempFile>,
}

impl DebugFileOnDisk {
    /// Lets the pages of the file read so far leave the process's resident memory (`madvise`
    /// `MADV_DONTNEED`): they stay in the page cache and are read back from it, unchanged,
    /// when touched again. What a conversion calls between functions, so that its resident
    /// memory holds the part of the file it is reading, not all it has read. Errors are
    /// ignored: the pages then stay.
    pub fn release_pages(&self) {
        // SAFETY: a read-only shared map of a file that is not written while mapped: dropping
        // its pages loses nothing (UncheckedAdvice::DontNeed's caveat is for private maps
        // written to, whose changes would be lost).
        let _ = unsafe {
            self.bytes
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
    }
}

/// Brings `key` from `source` to disk and maps it: `Ok(None)` when there is no such object.
/// Errors: the download failed ([`Source::download_to`]), or the file could not be created or
/// mapped (the message names the file).
pub async fn bring(
    source: &Source,
    disk: &DiskCache,
    key: &str,
    limits: &DownloadLimits,
) -> Result<Option<DebugFileOnDisk>, FetchError> {
    let fail = |message: String| FetchError {
        key: key.to_owned(),
        message,
    };
    let temporary = disk
        .temporary_file()
        .map_err(|e| fail(format!("creating a file to download into: {e}")))?;
    let file = temporary
        .as_file()
        .try_clone()
        .map_err(|e| fail(format!("opening {}: {e}", temporary.path().display())))?;
    let mut file = tokio::fs::File::from_std(file);
    let downloading = crate::metrics::Downloading::start();
    let progress = |bytes: u64| downloading.received(bytes);
    let Some(downloaded) = source
        .download_to(key, &mut file, limits, &progress)
        .await?
    else {
        return Ok(None);
    };
    drop(downloading);
    drop(file);
    let path = temporary.path().to_owned();
    let bytes = tokio::task::spawn_blocking(move || {
        // SAFETY: the file is this worker's own temporary file, written whole above and never
        // written again (it is removed when `DebugFileOnDisk` drops, and the map stays valid).
        std::fs::File::open(&path).and_then(|file| unsafe { memmap2::Mmap::map(&file) })
    })
    .await
    .map_err(|e| fail(e.to_string()))?
    .map_err(|e| fail(format!("mapping {}: {e}", temporary.path().display())))?;
    Ok(Some(DebugFileOnDisk {
        bytes,
        resumes: downloaded.resumes,
        _temporary: Some(temporary),
    }))
}
