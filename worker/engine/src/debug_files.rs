//! Finding debug files on disk and matching them to images by debug id.
//!
//! [`DebugFileIndex::scan`] walks the given paths (dSYM bundles, single Mach-O / ELF files, or
//! directories, searched recursively), opens every file whose first bytes are an object file
//! (thin or fat Mach-O, ELF), and records each object (each arch slice of a fat file) under its
//! debug id. Mach-O debug ids are the `LC_UUID`; ELF debug ids come from the GNU build-id note,
//! as `symbolic-debuginfo` computes them. Files are only peeked at here; the DWARF is read when a
//! symcache is built ([`crate::symcache`]).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use symbolic_common::{Arch, ByteView, DebugId};
use symbolic_debuginfo::{Archive, FileFormat, ObjectKind};

/// One object (one arch slice) inside a debug file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugFileEntry {
    /// The file that holds the object.
    pub path: PathBuf,
    /// The object's architecture.
    pub arch: Arch,
    /// Whether the object holds DWARF (a dSYM or unstripped binary) rather than only a symbol
    /// table.
    pub has_debug_info: bool,
}

/// A file that looked like an object file but could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableFile {
    /// The file.
    pub path: PathBuf,
    /// Why it could not be read (one line).
    pub reason: String,
}

impl fmt::Display for UnreadableFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// Debug files found on disk, by debug id.
#[derive(Debug, Default)]
pub struct DebugFileIndex {
    by_id: HashMap<DebugId, Vec<DebugFileEntry>>,
    unreadable: Vec<UnreadableFile>,
}

/// A `--debug-files` path that does not exist or cannot be listed.
#[derive(Debug, thiserror::Error)]
#[error("debug files: cannot read {path}: {error}")]
pub struct ScanError {
    path: PathBuf,
    // Not a `source`: the message already includes it, and chains would print it twice.
    error: std::io::Error,
}

impl DebugFileIndex {
    /// Scans `paths` (files or directories, recursively) for object files.
    ///
    /// Errors only when a given path itself does not exist or a directory cannot be walked;
    /// files that look like objects but do not parse are kept in [`Self::unreadable`], and
    /// other files (plists, sources) are skipped.
    pub fn scan<P: AsRef<Path>>(paths: &[P]) -> Result<Self, ScanError> {
        let mut index = DebugFileIndex::default();
        for root in paths {
            let root = root.as_ref();
            std::fs::metadata(root).map_err(|source| ScanError {
                path: root.to_owned(),
                error: source,
            })?;
            for entry in walkdir::WalkDir::new(root)
                .follow_links(true)
                .sort_by_file_name()
            {
                let entry = entry.map_err(|e| ScanError {
                    path: e.path().unwrap_or(root).to_owned(),
                    error: e
                        .into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("directory loop")),
                })?;
                if entry.file_type().is_file() {
                    index.add_file(entry.path());
                }
            }
        }
        Ok(index)
    }

    /// Adds one file: every object in it is indexed by debug id. Non-object files are ignored.
    pub fn add_file(&mut self, path: &Path) {
        let data = match ByteView::open(path) {
            Ok(data) => data,
            Err(e) => {
                self.unreadable.push(UnreadableFile {
                    path: path.to_owned(),
                    reason: e.to_string(),
                });
                return;
            }
        };
        if !matches!(Archive::peek(&data), FileFormat::MachO | FileFormat::Elf) {
            return;
        }
        match list_objects(&data) {
            Ok(objects) => {
                for (debug_id, arch, has_debug_info) in objects {
                    let entries = self.by_id.entry(debug_id).or_default();
                    entries.push(DebugFileEntry {
                        path: path.to_owned(),
                        arch,
                        has_debug_info,
                    });
                    // Prefer files with DWARF (a dSYM) over stripped binaries with the same id.
                    entries.sort_by_key(|e| !e.has_debug_info);
                }
            }
            Err(reason) => self.unreadable.push(UnreadableFile {
                path: path.to_owned(),
                reason,
            }),
        }
    }

    /// The best file for a debug id: one with DWARF if there is one.
    pub fn get(&self, debug_id: &DebugId) -> Option<&DebugFileEntry> {
        self.by_id.get(debug_id)?.first()
    }

    /// Every file holding at least one indexed object, once each, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .by_id
            .values()
            .flatten()
            .map(|e| e.path.clone())
            .collect();
        files.sort();
        files.dedup();
        files
    }

    /// The best file of each debug id ([`Self::get`]), by debug id.
    pub fn best(&self) -> impl Iterator<Item = (&DebugId, &DebugFileEntry)> {
        let mut ids: Vec<&DebugId> = self.by_id.keys().collect();
        ids.sort();
        ids.into_iter()
            .filter_map(|id| Some((id, self.by_id.get(id)?.first()?)))
    }

    /// Number of distinct debug ids found.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no object file was found.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Files that looked like object files but could not be read.
    pub fn unreadable(&self) -> &[UnreadableFile] {
        &self.unreadable
    }
}

/// Lists `(debug id, arch, has DWARF)` for every object in an object file or fat archive.
///
/// Errors with a one-line reason when the container or any slice does not parse. Parsing runs
/// under `catch_unwind`, so a parser panic on hostile input becomes an error too.
pub fn list_objects(data: &[u8]) -> Result<Vec<(DebugId, Arch, bool)>, String> {
    crate::guard::no_panic(|| {
        let archive = Archive::parse(data).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(archive.object_count());
        for object in archive.objects() {
            let object = object.map_err(|e| e.to_string())?;
            out.push((object.debug_id(), object.arch(), object.has_debug_info()));
        }
        Ok(out)
    })
}

/// What one object (arch slice) of a debug file holds, as `symctl debug-files check` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its debug id (Mach-O `LC_UUID`; ELF: from the GNU build id).
    pub debug_id: DebugId,
    /// Its code id (Mach-O: the UUID; ELF: the build id, hex), when it has one.
    pub code_id: Option<String>,
    /// Its architecture.
    pub arch: Arch,
    /// `macho` or `elf`.
    pub format: &'static str,
    /// `debug` (a dSYM's DWARF companion, separate debug info), `executable`, `library`,
    /// `relocatable`, `dump` or `other` (symbolic's `ObjectKind`).
    pub kind: &'static str,
    /// A symbol table: function names for addresses, without files or lines.
    pub has_symbols: bool,
    /// DWARF: files and lines.
    pub has_debug_info: bool,
    /// Whether some function of the DWARF records inlined calls (optimized code): `None` when
    /// there is no DWARF; read until the first one is found, so a file of unoptimized code is
    /// read whole.
    pub has_inlinees: Option<bool>,
    /// Call frame information (for stack walking).
    pub has_unwind_info: bool,
    /// Embedded source code.
    pub has_sources: bool,
}

/// Every object of a Mach-O (thin or fat) or ELF file, described.
///
/// # Errors
/// The file is not an object file symbolic reads, or one of its objects is malformed (one
/// line).
pub fn describe_objects(data: &[u8]) -> Result<Vec<ObjectInfo>, String> {
    crate::guard::no_panic(|| {
        if !matches!(Archive::peek(data), FileFormat::MachO | FileFormat::Elf) {
            return Err("not a Mach-O or ELF file".to_owned());
        }
        let archive = Archive::parse(data).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(archive.object_count());
        for object in archive.objects() {
            let object = object.map_err(|e| e.to_string())?;
            out.push(ObjectInfo {
                debug_id: object.debug_id(),
                code_id: object.code_id().map(|c| c.to_string()),
                arch: object.arch(),
                format: match object.file_format() {
                    FileFormat::MachO => "macho",
                    _ => "elf",
                },
                kind: match object.kind() {
                    ObjectKind::Debug => "debug",
                    ObjectKind::Executable => "executable",
                    ObjectKind::Library => "library",
                    ObjectKind::Relocatable => "relocatable",
                    ObjectKind::Dump => "dump",
                    _ => "other",
                },
                has_symbols: object.has_symbols(),
                has_debug_info: object.has_debug_info(),
                has_inlinees: if object.has_debug_info() {
                    let session = object.debug_session().map_err(|e| e.to_string())?;
                    let mut found = false;
                    for function in session.functions() {
                        if !function.map_err(|e| e.to_string())?.inlinees.is_empty() {
                            found = true;
                            break;
                        }
                    }
                    Some(found)
                } else {
                    None
                },
                has_unwind_info: object.has_unwind_info(),
                has_sources: object.has_sources(),
            });
        }
        Ok(out)
    })
}
