//! Debug-file scanning (Mach-O, fat, ELF, dSYM DWARF), SymCache and CFI conversion of each
//! object found, then lookups in the SymCache: a mutated binary must give an error, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symcluster_engine::debug_files::list_objects;
use symcluster_engine::minidump::UnwindInfo;
use symcluster_engine::symcache::SymCacheFile;

fuzz_target!(|data: &[u8]| {
    let Ok(objects) = list_objects(data) else {
        return;
    };
    for (debug_id, _, _) in objects.into_iter().take(4) {
        if let Ok(cficache) = UnwindInfo::convert(data, debug_id) {
            let _ = UnwindInfo::parse(&cficache);
        }
        if let Ok(cache) = SymCacheFile::from_object_file(data, debug_id) {
            for addr in [0u64, 0x1000, 0x4000, 0x10_0000] {
                let _ = cache.get().lookup(addr).count();
            }
        }
    }
});
