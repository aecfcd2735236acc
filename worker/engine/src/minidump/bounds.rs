//! Bounds on what a dump may make the stack walker do, applied to a copy of the dump before
//! rust-minidump reads it: a dump comes from a device nobody trusts, and the walker has no
//! limits of its own (a stack scan makes a frame, with a whole CPU context, of every word that
//! points into code; a stream can announce more entries than memory holds).
//!
//! - Only the streams the walk and the result read are kept (the others' directory entries
//!   become `UnusedStream`): thread list, thread names, module lists, exception, system info,
//!   misc info, Breakpad info, Linux maps. Memory lists are not read: a thread is walked in its
//!   own stack memory (a Windows dump whose thread has no stack memory is walked from its
//!   context alone).
//! - At most [`MAX_THREADS`] threads.
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

const THREAD_LIST: u32 = 3;
const EXCEPTION: u32 = 6;
/// The stream types kept: thread list, module list, exception, system info, unloaded modules,
/// misc info, thread names, Breakpad info, Linux maps.
const KEPT: [u32; 9] = [3, 4, 6, 7, 14, 15, 24, 0x4767_0001, 0x4767_0009];
const THREAD_BYTES: usize = 48;

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
    let mut seen = Vec::new();
    let mut threads = None;
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
            THREAD_LIST => threads = Some(rva),
            EXCEPTION => crashed = u32_at(&dump, rva),
            _ => {}
        }
    }
    if let Some(list) = threads {
        bound_threads(&mut dump, list, crashed);
    }
    Ok(dump)
}

fn bound_threads(dump: &mut [u8], list: usize, crashed: Option<u32>) {
    let Some(count) = u32_at(dump, list) else {
        return;
    };
    let count = count.min(MAX_THREADS);
    put_u32(dump, list, count);
    let entry = |i: u32| list + 4 + i as usize * THREAD_BYTES;
    let mut budget = TOTAL_STACK_BYTES;
    // The crashed thread first, then the others in order.
    let order = (0..count)
        .filter(|&i| crashed.is_some() && u32_at(dump, entry(i)) == crashed)
        .chain((0..count).filter(|&i| crashed.is_none() || u32_at(dump, entry(i)) != crashed))
        .collect::<Vec<_>>();
    for (n, i) in order.into_iter().enumerate() {
        let size_at = entry(i) + 32;
        let Some(size) = u32_at(dump, size_at) else {
            // Entries past the end: rust-minidump refuses the list.
            return;
        };
        let limit = if n == 0 && crashed.is_some() {
            CRASHED_STACK_BYTES
        } else {
            STACK_BYTES
        };
        let kept = size.min(limit).min(budget);
        put_u32(dump, size_at, kept);
        budget -= kept;
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
