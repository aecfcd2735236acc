//! Bounds on what a dump may make the stack walker do, applied to a copy of the dump before
//! rust-minidump reads it: a dump comes from a device nobody trusts, and the walker has no
//! limits of its own (a stack scan makes a frame, with a whole CPU context, of every word that
//! points into code; a stream can announce more entries than memory holds).
//!
//! - Only the streams the walk and the result read are kept (the others' directory entries
//!   become `UnusedStream`): thread list, module list, exception, system info, misc info,
//!   Breakpad info. Memory lists are not read: a thread is walked in its own stack
//!   memory (a Windows dump whose thread has no stack memory is walked from its context
//!   alone); nor are thread names and unloaded modules (entries there may all point at one
//!   large string, each copied).
//! - Nor is Breakpad's Linux maps stream (`MD_LINUX_MAPS`, `/proc/<pid>/maps` as text): its
//!   parser panics on hostile lines. procfs-core 0.18.0 (the newest release, reached through
//!   minidump 0.27 `MinidumpLinuxMaps::read`), `src/process/mod.rs:481`, `MMapPath::from`:
//!   `x if x.starts_with("/SYSV") => ... &x[5..13]` slices a path such as `/SYSVso]` (shorter
//!   than 13 bytes, or with byte 13 inside a UTF-8 character) and panics. Found by our
//!   `minidump` fuzz target (the input is `fuzz/regressions/minidump/sysv-short-path.dmp`, made
//!   by `fuzz/regressions/make.py`); to be reported upstream, and this stream kept again once a
//!   release checks the length. What is lost: rust-minidump reads the maps only for its
//!   exception analysis (guard pages, memory access hints, `linux_memory_map_count`), none of
//!   which reaches a result: modules come from the module list, the crash reason and address
//!   from the exception stream, the walk from the stacks and the CFI.
//! - At most [`MAX_THREADS`] threads and [`MAX_MODULES`] modules (the list's size set to match:
//!   rust-minidump wants it exact). A module's name is read only within [`NAME_BYTES`] for all
//!   of them (past it, the name is empty), and its CodeView and misc records within
//!   [`RECORD_BYTES`] each: entries may share one large string, copied for each.
//! - Each thread's stack memory is cut to its first [`CRASHED_STACK_BYTES`] (the crashed
//!   thread) or [`STACK_BYTES`] (the others) from its lowest address (the stack pointer's end,
//!   where the innermost frames are), and all stacks together to [`TOTAL_STACK_BYTES`], the
//!   crashed thread's first: at most one frame per 8 bytes of stack walked.
//!
//! Format: `MINIDUMP_HEADER` (stream count at byte 8, directory RVA at byte 12), 12-byte
//! `MINIDUMP_DIRECTORY` entries, `MINIDUMP_THREAD_LIST` (a count, then 48-byte `MINIDUMP_THREAD`s
//! whose stack `MINIDUMP_MEMORY_DESCRIPTOR` is at byte 24: start u64, size u32, RVA u32),
//! little-endian (Microsoft's minidumpapiset.h).

use super::malformed;
use crate::reports::ReportError;

/// Threads walked, at most (an Android app runs 100-300).
pub const MAX_THREADS: u32 = 2048;
/// Stack bytes of the crashed thread walked, at most (its first 256 KiB above the stack pointer).
pub const CRASHED_STACK_BYTES: u32 = 256 * 1024;
/// Stack bytes of any other thread walked, at most.
pub const STACK_BYTES: u32 = 64 * 1024;
/// Stack bytes walked over all threads, at most.
pub const TOTAL_STACK_BYTES: u32 = 1024 * 1024;
/// Modules read, at most (an Android app maps 300-600).
pub const MAX_MODULES: u32 = 4096;
/// Bytes of module names read over all modules, at most (UTF-16, as stored).
pub const NAME_BYTES: u32 = 1024 * 1024;
/// Bytes of one module's CodeView or misc record read, at most (a CodeView record with a PDB
/// path is ~100 bytes; an ELF build id 20).
pub const RECORD_BYTES: u32 = 1024;

const THREAD_LIST: u32 = 3;
const MODULE_LIST: u32 = 4;
const EXCEPTION: u32 = 6;
/// The stream types kept: thread list, module list, exception, system info, misc info,
/// Breakpad info (not Linux maps, 0x4767_0009: see the module's comment).
const KEPT: [u32; 6] = [3, 4, 6, 7, 15, 0x4767_0001];
const THREAD_BYTES: usize = 48;
const MODULE_BYTES: usize = 108;
/// The header's checksum field, zeroed in the copy: a 0-length string for names past the budget.
const EMPTY_STRING: u32 = 16;

/// A copy of `data` within the bounds above. Errors: the header or the stream directory is
/// cut short.
pub(super) fn bounded(data: &[u8]) -> Result<Vec<u8>, ReportError> {
    let mut dump = data.to_vec();
    let count = u32_at(&dump, 8).ok_or_else(|| malformed("header cut short"))? as usize;
    let directory = u32_at(&dump, 12).ok_or_else(|| malformed("header cut short"))? as usize;
    let end = count
        .checked_mul(12)
        .and_then(|n| n.checked_add(directory))
        .filter(|&end| end <= dump.len())
        .ok_or_else(|| malformed("the stream directory runs past the end of the dump"))?;
    put_u32(&mut dump, EMPTY_STRING as usize, 0);
    let mut seen = Vec::new();
    let mut threads = None;
    let mut modules = None;
    let mut crashed = None;
    for entry in (directory..end).step_by(12) {
        let kind = u32_at(&dump, entry).unwrap_or(0);
        // A stream given twice is read once (the first).
        if !KEPT.contains(&kind) || seen.contains(&kind) {
            put_u32(&mut dump, entry, 0);
            continue;
        }
        seen.push(kind);
        let rva = u32_at(&dump, entry + 8).unwrap_or(0) as usize;
        match kind {
            THREAD_LIST => threads = Some(entry),
            MODULE_LIST => modules = Some(entry),
            EXCEPTION => crashed = u32_at(&dump, rva),
            _ => {}
        }
    }
    if let Some(entry) = threads
        && let Some(list) = capped_list(&mut dump, entry, MAX_THREADS, THREAD_BYTES)
    {
        bound_threads(&mut dump, list, crashed);
    }
    if let Some(entry) = modules
        && let Some(list) = capped_list(&mut dump, entry, MAX_MODULES, MODULE_BYTES)
    {
        bound_modules(&mut dump, list);
    }
    Ok(dump)
}

/// Caps the list stream of directory entry `entry` (a u32 count, then `size`-byte entries) at
/// `max` entries, its size in the directory set to match (rust-minidump reads a list only when
/// its size is exactly that of its entries, 4 bytes of padding allowed). Returns the list's
/// offset and count when it is there.
fn capped_list(dump: &mut [u8], entry: usize, max: u32, size: usize) -> Option<(usize, u32)> {
    let list = u32_at(dump, entry + 8)? as usize;
    let count = u32_at(dump, list)?;
    if count > max {
        put_u32(dump, list, max);
        put_u32(dump, entry + 4, (4 + max as usize * size) as u32);
    }
    Some((list, count.min(max)))
}

fn bound_threads(dump: &mut [u8], (list, count): (usize, u32), crashed: Option<u32>) {
    let entry = |i: u32| list + 4 + i as usize * THREAD_BYTES;
    let mut budget = TOTAL_STACK_BYTES;
    // The crashed thread first (when it is in the list), then the others in order.
    let crashed_index =
        crashed.and_then(|tid| (0..count).find(|&i| u32_at(dump, entry(i)) == Some(tid)));
    let order = crashed_index
        .into_iter()
        .chain((0..count).filter(|&i| Some(i) != crashed_index));
    for i in order {
        let size_at = entry(i) + 32;
        let Some(size) = u32_at(dump, size_at) else {
            // Entries past the end: rust-minidump refuses the list.
            return;
        };
        let limit = if Some(i) == crashed_index {
            CRASHED_STACK_BYTES
        } else {
            STACK_BYTES
        };
        let kept = size.min(limit).min(budget);
        put_u32(dump, size_at, kept);
        budget -= kept;
    }
}

/// Module names within [`NAME_BYTES`] in all (past it, or unreadable: the empty string), and
/// CodeView (at byte 76) and misc (84) records within [`RECORD_BYTES`] each.
fn bound_modules(dump: &mut [u8], (list, count): (usize, u32)) {
    let mut names = NAME_BYTES;
    for i in 0..count {
        let module = list + 4 + i as usize * MODULE_BYTES;
        let Some(name_rva) = u32_at(dump, module + 20) else {
            return;
        };
        let name_bytes = u32_at(dump, name_rva as usize).unwrap_or(u32::MAX);
        if name_bytes <= names {
            names -= name_bytes;
        } else {
            put_u32(dump, module + 20, EMPTY_STRING);
        }
        for record in [module + 76, module + 84] {
            if let Some(size) = u32_at(dump, record) {
                put_u32(dump, record, size.min(RECORD_BYTES));
            }
        }
    }
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn put_u32(data: &mut [u8], at: usize, value: u32) {
    if let Some(bytes) = at.checked_add(4).and_then(|end| data.get_mut(at..end)) {
        bytes.copy_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dump of `threads` threads with `stack` bytes of stack each, thread 2 crashed.
    fn dump(threads: u32, stack: u32, extra: &[u32]) -> Vec<u8> {
        let kinds: Vec<u32> = [THREAD_LIST, EXCEPTION]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let directory = 32;
        let list = directory + 12 * kinds.len();
        let exception = list + 4 + threads as usize * THREAD_BYTES;
        let mut d = vec![0u8; exception + 8];
        d[..4].copy_from_slice(b"MDMP");
        put_u32(&mut d, 4, 0xa793); // MINIDUMP_VERSION
        put_u32(&mut d, 8, kinds.len() as u32);
        put_u32(&mut d, 12, directory as u32);
        for (i, kind) in kinds.iter().enumerate() {
            let at = directory + 12 * i;
            put_u32(&mut d, at, *kind);
            let rva = match *kind {
                THREAD_LIST => list,
                EXCEPTION => exception,
                _ => 0,
            };
            put_u32(&mut d, at + 8, rva as u32);
            if *kind == THREAD_LIST {
                put_u32(&mut d, at + 4, 4 + threads * THREAD_BYTES as u32);
            }
        }
        put_u32(&mut d, list, threads);
        for i in 0..threads {
            let at = list + 4 + i as usize * THREAD_BYTES;
            put_u32(&mut d, at, i + 1);
            put_u32(&mut d, at + 32, stack);
        }
        put_u32(&mut d, exception, 2);
        d
    }

    fn stacks(d: &[u8]) -> Vec<u32> {
        let list = u32_at(d, 32 + 8).unwrap() as usize;
        let count = u32_at(d, list).unwrap();
        (0..count)
            .map(|i| u32_at(d, list + 4 + i as usize * THREAD_BYTES + 32).unwrap())
            .collect()
    }

    #[test]
    fn stacks_are_cut_the_crashed_thread_first() {
        let d = bounded(&dump(20, 1 << 20, &[])).unwrap();
        let s = stacks(&d);
        assert_eq!(s[1], CRASHED_STACK_BYTES);
        assert_eq!(s[0], STACK_BYTES);
        assert_eq!(s.iter().sum::<u32>(), TOTAL_STACK_BYTES);
        assert_eq!(s[13..], [0; 7]);
        // Small stacks are kept whole.
        assert_eq!(stacks(&bounded(&dump(3, 4096, &[])).unwrap()), [4096; 3]);
    }

    #[test]
    fn threads_are_capped_and_other_streams_unused() {
        // The handle data stream (12) and memory list (5) are dropped; a second thread list too.
        let d = bounded(&dump(MAX_THREADS + 5, 0, &[12, 5, THREAD_LIST])).unwrap();
        assert_eq!(stacks(&d).len(), MAX_THREADS as usize);
        // The list's size in the directory matches its new count: rust-minidump reads it.
        assert_eq!(
            u32_at(&d, 32 + 4),
            Some(4 + MAX_THREADS * THREAD_BYTES as u32)
        );
        let read = minidump::Minidump::read(&d[..]).unwrap();
        let list = read.get_stream::<minidump::MinidumpThreadList>().unwrap();
        assert_eq!(list.threads.len(), MAX_THREADS as usize);
        let kinds: Vec<u32> = (0..5).map(|i| u32_at(&d, 32 + 12 * i).unwrap()).collect();
        assert_eq!(kinds, [THREAD_LIST, EXCEPTION, 0, 0, 0]);
    }

    #[test]
    fn a_directory_past_the_end_is_refused() {
        let mut d = dump(1, 0, &[]);
        put_u32(&mut d, 8, 1 << 30);
        let e = bounded(&d).unwrap_err().to_string();
        assert_eq!(
            e,
            "malformed minidump report: the stream directory runs past the end of the dump"
        );
        assert!(bounded(b"MDMP").is_err());
    }
}
