//! SymCaches: the compact, address-sorted lookup tables the engine symbolicates with.
//!
//! A debug file's DWARF (or symbol table) is converted once per debug id with
//! `symbolic-symcache`'s `SymCacheConverter`, which also merges in the symbol table so that the
//! outermost function of a frame takes its linkage name. The resulting bytes (format version
//! [`SYMCACHE_VERSION`]) can be kept in memory or on disk and parsed again cheaply; lookups take
//! addresses relative to the image's load address (its `__TEXT` vmaddr for Mach-O).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use symbolic_common::{ByteView, DebugId, Language, SelfCell};
use symbolic_debuginfo::{Archive, FileFormat, Object};
use symbolic_symcache::{SymCache, SymCacheConverter};

use crate::guard::no_panic;

/// The SymCache format version written by this build (`symbolic_symcache::SYMCACHE_VERSION`).
/// Part of every cache key, so a format change never reads a stale file.
pub const SYMCACHE_VERSION: u32 = symbolic_symcache::SYMCACHE_VERSION;

/// This engine's conversion revision: raised whenever [`SymCacheFile::from_object_file`] builds
/// different SymCaches from the same debug file (e.g. what it merges from the symbol table), so
/// that caches keyed by it (the worker's disk and the bucket's shared SymCaches) never serve
/// SymCaches of an older conversion.
pub const CONVERSION_REVISION: u32 = 1;

/// Why a debug file could not be turned into a SymCache. The message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SymCacheError {
    /// The file does not parse as an object file, or its DWARF is corrupt or truncated.
    #[error("malformed debug file: {0}")]
    Malformed(String),
    /// The file parses, but holds no object with the requested debug id.
    #[error("debug file has no object with debug id {0}")]
    WrongDebugId(DebugId),
}

/// An owned, parsed SymCache: its bytes plus the parsed view over them, and the function names
/// demangled so far ([`SymCacheFile::demangled`]).
pub struct SymCacheFile {
    cell: SelfCell<ByteView<'static>, SymCache<'static>>,
    demangled: Demangled,
}

/// Demangled names by their raw name's place in the SymCache bytes: `(address, length,
/// language)`. The bytes are owned by the same [`SymCacheFile`] and never change, so a place
/// names one string for the cache's whole life. Grows with the distinct functions looked up (at
/// most the SymCache's function count).
#[derive(Default)]
struct Demangled(RwLock<HashMap<NameKey, Arc<str>, fnv::FnvBuildHasher>>);

/// A raw name's address and length in the SymCache bytes, and its language.
type NameKey = (usize, usize, u32);

impl std::fmt::Debug for SymCacheFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymCacheFile")
            .field("debug_id", &self.get().debug_id())
            .field("arch", &self.get().arch())
            .field("size_bytes", &self.size_bytes())
            .finish()
    }
}

impl SymCacheFile {
    /// Builds a SymCache for the object with `debug_id` inside `object_file` (a thin or fat
    /// Mach-O, or an ELF file, as bytes).
    ///
    /// Errors: [`SymCacheError::Malformed`] when the container or its DWARF does not parse
    /// (parser panics included), [`SymCacheError::WrongDebugId`] when no slice has that id.
    pub fn from_object_file(object_file: &[u8], debug_id: DebugId) -> Result<Self, SymCacheError> {
        let bytes = convert(object_file, debug_id)?;
        Self::parse(ByteView::from_vec(bytes))
    }

    /// Writes the SymCache of the object with `debug_id` inside `object_file` (as
    /// [`Self::from_object_file`] builds it, byte for byte) to `out`, a file to be mapped with
    /// [`Self::parse`]: the serialized SymCache never sits in the heap beside the converter's
    /// tables (on a 360 MB dSYM it is 170 MB). `release` is called after every
    /// [`RELEASE_EVERY_FUNCTIONS`] functions converted: where a caller whose `object_file` is a
    /// memory map of a file tells the kernel that the pages read so far may leave the process
    /// (they are read back from the page cache when needed again). Errors: as
    /// [`Self::from_object_file`], and [`SymCacheError::Malformed`] when writing fails (its
    /// message).
    pub fn write_object_file(
        object_file: &[u8],
        debug_id: DebugId,
        out: &mut impl std::io::Write,
        mut release: impl FnMut(),
    ) -> Result<(), SymCacheError> {
        convert_with(object_file, debug_id, |object| {
            let mut converter = SymCacheConverter::new();
            if matches!(object.file_format(), FileFormat::Pe | FileFormat::Pdb) {
                // Symbolic's own loop, which also undecorates Windows symbols.
                converter
                    .process_object(object)
                    .map_err(|e| e.to_string())?;
            } else {
                // `SymCacheConverter::process_object`'s loop, with `release` between functions.
                let session = object.debug_session().map_err(|e| e.to_string())?;
                converter.set_arch(object.arch());
                converter.set_debug_id(object.debug_id());
                for (i, function) in session.functions().enumerate() {
                    converter.process_symbolic_function(&function.map_err(|e| e.to_string())?);
                    if (i + 1) % RELEASE_EVERY_FUNCTIONS == 0 {
                        release();
                    }
                }
                for symbol in object.symbols() {
                    converter.process_symbolic_symbol(&symbol);
                }
            }
            converter
                .serialize(out)
                .map_err(|e| format!("writing the SymCache: {e}"))
        })
    }

    /// Parses SymCache bytes made by [`Self::from_object_file`] (or read back from disk).
    pub fn parse(bytes: ByteView<'static>) -> Result<Self, SymCacheError> {
        let cell = SelfCell::try_new(bytes, |data| {
            // SAFETY: `data` points into the ByteView owned by the cell, which outlives `Inner`.
            SymCache::parse(unsafe { &*data })
        })
        .map_err(|e| SymCacheError::Malformed(format!("symcache: {e}")))?;
        Ok(SymCacheFile {
            cell,
            demangled: Demangled::default(),
        })
    }

    /// The parsed SymCache.
    pub fn get(&self) -> &SymCache<'_> {
        self.cell.get()
    }

    /// `raw` (a function name returned by a lookup in [`Self::get`]) demangled for display
    /// ([`crate::names::demangle`]), computed once per name and shared afterwards: demangling
    /// (Swift's demangler above all) took more time than the lookup itself. A `raw` that does not
    /// point into this SymCache's bytes is demangled without being kept.
    pub fn demangled(&self, raw: &str, language: Language) -> Arc<str> {
        let bytes = self.bytes().as_ptr_range();
        if !bytes.contains(&raw.as_ptr()) {
            return crate::names::demangle(raw, language).into();
        }
        let key = (raw.as_ptr() as usize, raw.len(), language as u32);
        if let Some(name) = self
            .demangled
            .0
            .read()
            .ok()
            .and_then(|m| m.get(&key).cloned())
        {
            return name;
        }
        let name: Arc<str> = crate::names::demangle(raw, language).into();
        if let Ok(mut names) = self.demangled.0.write() {
            names.insert(key, name.clone());
        }
        name
    }

    /// The serialized SymCache bytes (for a disk cache).
    pub fn bytes(&self) -> &[u8] {
        self.cell.owner()
    }

    /// Size of the serialized SymCache, in bytes (a cache weight).
    pub fn size_bytes(&self) -> usize {
        self.cell.owner().len()
    }
}

/// How many functions [`SymCacheFile::write_object_file`] converts between two calls of its
/// `release` (BigApp's 650,000 functions: 32 calls).
pub const RELEASE_EVERY_FUNCTIONS: usize = 20_000;

/// Converts the object with `debug_id` in `object_file` to SymCache bytes.
fn convert(object_file: &[u8], debug_id: DebugId) -> Result<Vec<u8>, SymCacheError> {
    convert_with(object_file, debug_id, |object| {
        let mut converter = SymCacheConverter::new();
        converter
            .process_object(object)
            .map_err(|e| e.to_string())?;
        let mut bytes = Vec::new();
        converter
            .serialize(&mut std::io::Cursor::new(&mut bytes))
            .map_err(|e| e.to_string())?;
        Ok(bytes)
    })
}

/// What `make` makes (SymCache bytes, or a SymCache written) from the object with `debug_id`
/// in `object_file`, under
/// [`no_panic`]. Errors: [`SymCacheError::Malformed`] when the container does not parse or
/// `make` fails (its message), [`SymCacheError::WrongDebugId`] when no object has that id.
pub(crate) fn convert_with<T>(
    object_file: &[u8],
    debug_id: DebugId,
    make: impl FnOnce(&Object<'_>) -> Result<T, String>,
) -> Result<T, SymCacheError> {
    let outcome = no_panic(|| {
        let archive = Archive::parse(object_file).map_err(|e| e.to_string())?;
        for object in archive.objects() {
            let object = object.map_err(|e| e.to_string())?;
            if object.debug_id() == debug_id {
                return make(&object).map(Some);
            }
        }
        Ok(None)
    });
    match outcome {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(SymCacheError::WrongDebugId(debug_id)),
        Err(reason) => Err(SymCacheError::Malformed(reason)),
    }
}
