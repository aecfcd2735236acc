//! A [`SymCacheSource`] over debug files on the local disk, as `symctl symbolicate` uses it.
//!
//! SymCaches are built on first use, once per debug id, and kept in memory for the life of the
//! value, so symbolicating many reports against the same files converts each file once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use symbolic_common::{ByteView, DebugId};

use crate::debug_files::{DebugFileIndex, ScanError};
use crate::minidump::{UnwindInfo, UnwindTable};
use crate::model::Image;
use crate::symbolicate::{ModuleLoad, SymCacheSource};
use crate::symcache::{SymCacheError, SymCacheFile};

/// SymCaches built from local debug files, cached in memory by debug id.
#[derive(Debug, Default)]
pub struct LocalSymCaches {
    index: DebugFileIndex,
    cache: Mutex<HashMap<DebugId, ModuleLoad>>,
}

impl LocalSymCaches {
    /// Scans `paths` (dSYM bundles, object files, directories) for debug files.
    /// Errors when a path does not exist; see [`DebugFileIndex::scan`].
    pub fn scan<P: AsRef<Path>>(paths: &[P]) -> Result<Self, ScanError> {
        Ok(Self::from_index(DebugFileIndex::scan(paths)?))
    }

    /// Wraps an existing index.
    pub fn from_index(index: DebugFileIndex) -> Self {
        LocalSymCaches {
            index,
            cache: Mutex::default(),
        }
    }

    /// The index of debug files found.
    pub fn index(&self) -> &DebugFileIndex {
        &self.index
    }

    /// The SymCache for a debug id, building it on first use.
    pub fn load_debug_id(&self, debug_id: DebugId) -> ModuleLoad {
        if let Some(load) = self.cache.lock().expect("cache lock").get(&debug_id) {
            return load.clone();
        }
        let load = self.build(debug_id);
        self.cache
            .lock()
            .expect("cache lock")
            .entry(debug_id)
            .or_insert(load)
            .clone()
    }

    fn build(&self, debug_id: DebugId) -> ModuleLoad {
        let Some(entry) = self.index.get(&debug_id) else {
            return ModuleLoad::Missing;
        };
        let data = match ByteView::open(&entry.path) {
            Ok(data) => data,
            Err(e) => {
                return ModuleLoad::Malformed(format!("{}: {e}", entry.path.display()));
            }
        };
        match SymCacheFile::from_object_file(&data, debug_id) {
            Ok(symcache) => ModuleLoad::Found(Arc::new(symcache)),
            Err(SymCacheError::WrongDebugId(_)) => ModuleLoad::Missing,
            Err(e @ SymCacheError::Malformed(_)) => {
                ModuleLoad::Malformed(format!("{}: {e}", entry.path.display()))
            }
        }
    }
}

impl LocalSymCaches {
    /// The unwind information ([`UnwindInfo`]) of every image of `images` whose debug file is
    /// here, for [`crate::minidump::stackwalk`]. An image without one, or whose debug file does
    /// not convert, is left out: it is walked without CFI (its frames' SymCache says what is
    /// wrong with the file). Built on each call, not cached.
    pub fn unwind_table(&self, images: &[Image]) -> UnwindTable {
        let mut table = UnwindTable::new();
        for debug_id in images.iter().filter_map(|i| i.debug_id) {
            if table.contains_key(&debug_id) {
                continue;
            }
            let Some(entry) = self.index.get(&debug_id) else {
                continue;
            };
            let Ok(data) = ByteView::open(&entry.path) else {
                continue;
            };
            if let Ok(info) = UnwindInfo::from_object_file(&data, debug_id) {
                table.insert(debug_id, Arc::new(info));
            }
        }
        table
    }
}

impl SymCacheSource for LocalSymCaches {
    fn load(&self, image: &Image) -> ModuleLoad {
        match image.debug_id {
            Some(id) => self.load_debug_id(id),
            None => ModuleLoad::Missing,
        }
    }
}
