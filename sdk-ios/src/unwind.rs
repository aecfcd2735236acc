//! Frame-pointer stack walking, safe to run in a signal handler.
//!
//! Every frame record is `[saved frame pointer, return address]` at the frame pointer (x86-64
//! `rbp`, arm64 `x29`; arm64 iOS guarantees frame pointers, C and Swift code keep them). Memory is
//! read through the platform backend (`process_vm_readv` on Linux, `vm_read_overwrite` on Apple
//! platforms), which reports unmapped memory instead of faulting, so a corrupt stack ends the
//! walk instead of crashing the handler. Return addresses lose their arm64e
//! pointer-authentication bits ([`Backend::strip_code_pointer`]).
//!
//! Code built without frame pointers (glibc on Linux; on Apple platforms every arm64 binary
//! keeps them) breaks the chain at once. Then [`walk_with_scan`] scans the stack upwards, as
//! Breakpad's stack scanning does: the first word that points into a loaded image is taken as a
//! return address, and the first intact frame record above it resumes the frame-pointer walk.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::platform::{Backend, Host};

/// Frames kept per stack.
pub const MAX_FRAMES: usize = 128;

const MAX_RANGES: usize = 1024;
static RANGE_COUNT: AtomicUsize = AtomicUsize::new(0);
static mut RANGES: [(u64, u64); MAX_RANGES] = [(0, 0); MAX_RANGES];

/// Adds address ranges of loaded images' code (`[start, end)`), for stack scanning; past
/// 1,024 ranges the rest are ignored. Called at install and, on Apple platforms, as dyld
/// loads images; callers are serialized (install, then dyld's callbacks under dyld's lock).
pub fn add_code_ranges(ranges: &[(u64, u64)]) {
    let start = RANGE_COUNT.load(Ordering::Acquire);
    let n = ranges.len().min(MAX_RANGES - start);
    // SAFETY: entries past RANGE_COUNT are not read until RANGE_COUNT is raised below.
    unsafe {
        (&mut *std::ptr::addr_of_mut!(RANGES))[start..start + n].copy_from_slice(&ranges[..n])
    };
    RANGE_COUNT.store(start + n, Ordering::Release);
}

fn in_image(addr: u64) -> bool {
    let n = RANGE_COUNT.load(Ordering::Acquire);
    // SAFETY: RANGES[..n] was written before RANGE_COUNT.
    let ranges = unsafe { &(&*std::ptr::addr_of!(RANGES))[..n] };
    ranges
        .iter()
        .any(|&(start, end)| addr >= start && addr < end)
}

/// Whether `addr` looks like a return address: inside executable code of a loaded image, right
/// after a call instruction (x86-64 `call rel32` / `call r/m`; arm64 `bl` / `blr`).
fn is_return_address(addr: u64) -> bool {
    if !in_image(addr) {
        return false;
    }
    let Some(before) = addr.checked_sub(8).and_then(read_word) else {
        return false;
    };
    let b = before.to_le_bytes(); // b[i] is the byte at addr - 8 + i
    if cfg!(target_arch = "x86_64") {
        let call_rm = |op: u8, modrm: u8| op == 0xff && (modrm >> 3) & 7 == 2;
        b[3] == 0xe8 || call_rm(b[6], b[7]) || call_rm(b[5], b[6]) || call_rm(b[2], b[3])
    } else {
        let insn = (before >> 32) as u32;
        insn & 0xfc00_0000 == 0x9400_0000 || insn & 0xffff_fc1f == 0xd63f_0000
    }
}

/// Whether `addr` holds a frame record: `[next record above it, return address]`.
fn is_frame_record(addr: u64) -> Option<u64> {
    let next = read_word(addr)?;
    let ret = Host::strip_code_pointer(read_word(addr + 8)?);
    (addr.is_multiple_of(8) && next > addr && next < addr + (1 << 20) && is_return_address(ret))
        .then_some(next)
}

/// [`walk`], falling back to stack scanning when the frame-pointer chain gives no caller:
/// the lowest frame record above `sp` that chains to a second one (else the lowest single
/// record) resumes the walk. Frames between the crash and that record (code without frame
/// pointers, such as glibc's) are skipped.
pub fn walk_with_scan(pc: u64, fp: u64, sp: u64, out: &mut [u64]) -> usize {
    let n = walk(pc, fp, sp, out);
    if n > 1 || out.len() < 2 {
        return n;
    }
    const SCAN_BYTES: u64 = 64 * 1024;
    let start = sp & !7;
    let find = |need_chain: bool| {
        (0..SCAN_BYTES / 8).map(|i| start + i * 8).find(|&record| {
            is_frame_record(record)
                .is_some_and(|next| !need_chain || is_frame_record(next).is_some())
        })
    };
    let Some(record) = find(true).or_else(|| find(false)) else {
        return n;
    };
    let (Some(next), Some(ret)) = (read_word(record), read_word(record + 8)) else {
        return n;
    };
    1 + walk(Host::strip_code_pointer(ret), next, record, &mut out[1..])
}

/// Reads one word of our own memory through the platform backend; `None` if it is not
/// readable. Async-signal-safe.
pub fn read_word(addr: u64) -> Option<u64> {
    Host::read_word(addr)
}

/// Walks from `pc` and `fp` (and `sp`, the lowest valid frame address) into `out`:
/// `out[0] = pc`, then return addresses, innermost first. Returns the number of frames.
pub fn walk(pc: u64, fp: u64, sp: u64, out: &mut [u64]) -> usize {
    if out.is_empty() {
        return 0;
    }
    out[0] = pc;
    let mut n = 1;
    let mut fp = fp;
    while n < out.len() {
        if fp == 0 || !fp.is_multiple_of(8) || fp < sp {
            break;
        }
        let (Some(next), Some(ret)) = (read_word(fp), read_word(fp + 8)) else {
            break;
        };
        let ret = Host::strip_code_pointer(ret);
        if ret == 0 {
            break;
        }
        out[n] = ret;
        n += 1;
        // Frames grow towards higher addresses as we go out; anything else is a broken chain.
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// Registers read from a signal context: `(pc, fp, sp)` plus the named set for the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Registers {
    /// Program counter.
    pub pc: u64,
    /// Frame pointer.
    pub fp: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Link register (arm64) or 0.
    pub lr: u64,
}

/// The names of the registers in reports: `[pc, fp, sp, lr]`.
pub const REGISTER_NAMES: [&str; 4] = if cfg!(target_arch = "x86_64") {
    ["rip", "rbp", "rsp", ""]
} else {
    ["pc", "fp", "sp", "lr"]
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_memory_is_none_not_a_crash() {
        assert_eq!(read_word(0), None);
        assert_eq!(read_word(8), None);
        let x: u64 = 0x1234_5678;
        assert_eq!(read_word(&x as *const u64 as u64), Some(0x1234_5678));
    }

    #[test]
    fn a_broken_chain_ends_the_walk() {
        let mut out = [0u64; 8];
        assert_eq!(walk(0x1000, 0, 0, &mut out), 1);
        assert_eq!(walk(0x1000, 0xdead_0000, 0, &mut out), 1);
        // A fake two-frame chain in our own memory.
        let outer: [u64; 2] = [0, 0x2222];
        let inner: [u64; 2] = [outer.as_ptr() as u64, 0x1111];
        let n = walk(0x1000, inner.as_ptr() as u64, 0, &mut out);
        if (outer.as_ptr() as u64) > (inner.as_ptr() as u64) {
            assert_eq!(&out[..n], &[0x1000, 0x1111, 0x2222]);
        } else {
            assert_eq!(&out[..n], &[0x1000, 0x1111]);
        }
    }
}
