//! ProGuard/R8 mapping files, prepared for lookups.
//!
//! A mapping file (`mapping.txt`, written by ProGuard's `-printmapping` and R8) lists each
//! class's original and obfuscated names, its methods with their obfuscated line ranges, and
//! R8's extra information (inlined call chains, outlines, synthesized members,
//! `rewriteFrame` rules) in `# {json}` comments. It is converted once into a
//! [`ProguardCache`] (the `proguard` crate's stable binary format, sorted tables read in
//! place, like a SymCache), which is what the worker keeps on disk and in memory.
//!
//! A mapping file is named by its **mapping id**: by default the UUIDv5 of the file's bytes in
//! the namespace UUIDv5(DNS, `guardsquare.com`), as `sentry-cli upload-proguard` computes it
//! (`proguard::ProguardMapping::uuid`); a build that writes an id of its own into the app (as
//! Sentry's Android Gradle plugin does) uploads the file under that id instead
//! (`symctl upload proguard --mapping-id`), so the id the app reports with its events
//! (`debug_meta.images[].uuid`, type `proguard`) finds the file.

use proguard::{ProguardCache, ProguardMapping};

/// Why a mapping file or a prepared mapping cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// Not a ProGuard/R8 mapping file: no `class -> obfuscated:` line followed by a member
    /// line in its first 50 records (the `proguard` crate's check).
    #[error(
        "not a ProGuard/R8 mapping file (no `original -> obfuscated:` class line with members)"
    )]
    NotAMapping,
    /// A prepared cache that does not read back (a different format version, or damage).
    #[error("the prepared mapping cannot be read: {0}")]
    Cache(String),
    /// The converter failed (an I/O error writing to memory, or a panic inside it).
    #[error("the mapping file cannot be converted: {0}")]
    Conversion(String),
}

/// The mapping id of a mapping file: lowercase UUID with dashes (see the module's docs).
pub fn mapping_id(mapping_file: &[u8]) -> String {
    ProguardMapping::new(mapping_file).uuid().to_string()
}

/// Checks that `mapping_file` looks like a mapping file (its first 50 records: a class line
/// with members), without converting it: what `symctl upload proguard` checks before sending.
///
/// # Errors
/// [`MappingError::NotAMapping`].
pub fn check(mapping_file: &[u8]) -> Result<(), MappingError> {
    if ProguardMapping::new(mapping_file).is_valid() {
        Ok(())
    } else {
        Err(MappingError::NotAMapping)
    }
}

/// A mapping file prepared for lookups: the bytes of its [`ProguardCache`], checked to read.
#[derive(Debug, Clone)]
pub struct JvmMapping {
    cache: Vec<u8>,
}

/// The format version of prepared mappings (`proguard::PRGCACHE_VERSION`): part of the key of
/// a prepared mapping kept on disk, so that a new format never reads an old file.
pub const PREPARED_VERSION: u32 = proguard::PRGCACHE_VERSION;

impl JvmMapping {
    /// Converts a mapping file. Time and memory grow with the file (a 100 MB mapping of a
    /// large app takes seconds and a few hundred MB while converting).
    ///
    /// # Errors
    /// [`MappingError::NotAMapping`] for anything but a mapping file;
    /// [`MappingError::Conversion`] when the converter fails.
    pub fn from_mapping_file(mapping_file: &[u8]) -> Result<Self, MappingError> {
        check(mapping_file)?;
        let mapping = ProguardMapping::new(mapping_file);
        let cache = crate::guard::no_panic(|| {
            let mut cache = Vec::new();
            ProguardCache::write(&mapping, &mut cache).map_err(|e| e.to_string())?;
            Ok(cache)
        })
        .map_err(MappingError::Conversion)?;
        Self::from_prepared(cache)
    }

    /// A prepared mapping as [`JvmMapping::bytes`] gave it (read back from disk).
    ///
    /// # Errors
    /// [`MappingError::Cache`] when the bytes are no [`ProguardCache`] of this version.
    pub fn from_prepared(cache: Vec<u8>) -> Result<Self, MappingError> {
        ProguardCache::parse(&cache).map_err(|e| MappingError::Cache(e.to_string()))?;
        Ok(JvmMapping { cache })
    }

    /// The prepared bytes (to keep on disk).
    pub fn bytes(&self) -> &[u8] {
        &self.cache
    }

    /// Size in bytes (for cache weighing).
    pub fn size_bytes(&self) -> usize {
        self.cache.len()
    }

    /// The cache to look up in; parsing is a header read (the tables are used in place).
    pub fn cache(&self) -> ProguardCache<'_> {
        // Checked when made: the bytes parse.
        ProguardCache::parse(&self.cache).expect("checked in from_prepared")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_and_reads_back() {
        let text = b"com.example.Shop -> a.b:\n    3:4:void run():10:11 -> a\n";
        let mapping = JvmMapping::from_mapping_file(text).unwrap();
        assert_eq!(mapping.cache().remap_class("a.b"), Some("com.example.Shop"));
        let again = JvmMapping::from_prepared(mapping.bytes().to_vec()).unwrap();
        assert_eq!(again.cache().remap_class("a.b"), Some("com.example.Shop"));
        // sentry-cli's id of the same bytes.
        assert_eq!(mapping_id(text).len(), 36);
        assert_eq!(&mapping_id(text)[14..15], "5");
    }

    #[test]
    fn refuses_what_is_no_mapping() {
        assert_eq!(
            JvmMapping::from_mapping_file(b"{\"version\":3}").unwrap_err(),
            MappingError::NotAMapping
        );
        assert!(matches!(
            JvmMapping::from_prepared(b"not a cache".to_vec()),
            Err(MappingError::Cache(_))
        ));
    }
}
