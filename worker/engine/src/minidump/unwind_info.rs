//! Unwind information for the stack walker: a debug file's call frame information (CFI) as a
//! `CfiCache` (symbolic-cfi: Breakpad `STACK CFI` records written from `.eh_frame`,
//! `.debug_frame` or Mach-O compact unwind info), parsed for rust-minidump's CFI evaluator.
//!
//! The cache form ([`UnwindInfo::convert`]) is what a worker keeps on disk; [`UnwindInfo::parse`]
//! reads it back.

use std::collections::HashMap;
use std::sync::Arc;

use symbolic_cfi::CfiCache;
use symbolic_common::{ByteView, DebugId};

use crate::symcache::{SymCacheError, convert_with};

/// The `CfiCache` format version [`UnwindInfo::convert`] writes: part of a disk cache key, so
/// that a format change never reads stale files.
pub const CFICACHE_VERSION: u32 = symbolic_cfi::CFICACHE_LATEST_VERSION;

/// One image's unwind rules, parsed and ready for the stack walker.
pub struct UnwindInfo {
    symbols: minidump_unwind::SymbolFile,
    size: usize,
}

impl std::fmt::Debug for UnwindInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnwindInfo")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// The unwind information of a dump's images, by debug id: what [`super::stackwalk`] walks
/// with. An image without an entry is walked by frame pointers and stack scanning.
pub type UnwindTable = HashMap<DebugId, Arc<UnwindInfo>>;

impl UnwindInfo {
    /// The `CfiCache` bytes (a small header, then ASCII `STACK CFI` records) of the object
    /// with `debug_id` in `object_file` (an ELF, a Mach-O, a fat Mach-O or a dSYM's DWARF file).
    /// An object without unwind sections gives a cache with no records.
    ///
    /// Errors: [`SymCacheError::Malformed`] when the file or its unwind sections do not parse
    /// (parser panics included), [`SymCacheError::WrongDebugId`] when no object has that id.
    pub fn convert(object_file: &[u8], debug_id: DebugId) -> Result<Vec<u8>, SymCacheError> {
        convert_with(object_file, debug_id, |object| {
            let cache = CfiCache::from_object(object).map_err(|e| format!("its CFI: {e}"))?;
            let mut bytes = Vec::new();
            cache
                .write_to(&mut bytes)
                .map_err(|e| format!("writing its CFI: {e}"))?;
            Ok(bytes)
        })
    }

    /// Reads the `CfiCache` bytes [`Self::convert`] wrote. Errors (one line): not a
    /// `CfiCache`, another format version than [`CFICACHE_VERSION`], or records that do not
    /// parse.
    pub fn parse(cficache: &[u8]) -> Result<UnwindInfo, String> {
        let size = cficache.len();
        let cache = CfiCache::from_bytes(ByteView::from_slice(cficache))
            .map_err(|e| format!("not a CFI cache: {e}"))?;
        if !cache.is_latest() {
            return Err(format!(
                "CFI cache version {}, expected {CFICACHE_VERSION}",
                cache.version()
            ));
        }
        let symbols = crate::guard::no_panic(|| {
            minidump_unwind::SymbolFile::from_bytes(cache.as_slice())
                .map_err(|e| format!("CFI records: {e}"))
        })?;
        Ok(UnwindInfo { symbols, size })
    }

    /// [`Self::convert`] then [`Self::parse`]: what `symctl` does with a local debug file.
    pub fn from_object_file(object_file: &[u8], debug_id: DebugId) -> Result<Self, SymCacheError> {
        let bytes = Self::convert(object_file, debug_id)?;
        Self::parse(&bytes).map_err(SymCacheError::Malformed)
    }

    /// The size of the cache form, in bytes (the memory cache's weight).
    pub fn size_bytes(&self) -> usize {
        self.size
    }

    pub(crate) fn symbols(&self) -> &minidump_unwind::SymbolFile {
        &self.symbols
    }
}
