//! Minidumps (Breakpad/Crashpad `MDMP` files, as `minidump-writer`, Crashpad, Breakpad and
//! sentry-native write them): their images, and their threads' stacks walked with call frame
//! information, into the same [`NativeReport`] every other format is read into.
//!
//! A minidump holds registers and raw stack memory, not frames: the stacks are unwound here,
//! with rust-minidump's stack walker (`minidump-processor`, `minidump-unwind`: CFI first, then
//! frame pointers, then stack scanning, as Breakpad does), fed the images' unwind rules
//! ([`UnwindInfo`], symbolic-cfi's `CfiCache`: what Sentry's symbolicator does). The frames
//! then go through [`crate::symbolicate`] as any report's do, each with its
//! [`FrameTrust`](crate::model::FrameTrust).
//!
//! Two steps, because the unwind rules come from the images' debug files: [`read_images`]
//! lists the images (to fetch their debug files), [`stackwalk`] walks with what was found.
//! Format: Microsoft's `MINIDUMP_HEADER` and streams, with Breakpad's Linux extensions
//! (<https://chromium.googlesource.com/breakpad/breakpad/+/HEAD/src/google_breakpad/common/minidump_format.h>).

pub mod bounds;
mod unwind_info;
mod walk;

use symbolic_common::Arch;

use crate::model::{Image, Modules, NativeReport, ReportFormat};
use crate::reports::ReportError;

pub use unwind_info::{CFICACHE_VERSION, UnwindInfo, UnwindTable};

/// The four bytes a minidump starts with (`MINIDUMP_SIGNATURE`, little-endian `MDMP`).
pub const MAGIC: &[u8; 4] = b"MDMP";

/// Whether `data` is a minidump: it starts with [`MAGIC`]. Nothing else is checked.
pub fn is_minidump(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

/// The images (modules) a minidump lists, in its order: code file, debug id (from the
/// module's CodeView record: a PDB 7.0 GUID and age, or an ELF build id read as a
/// little-endian GUID, age 0, as Breakpad and symbolic derive it), load address and size in
/// bytes. The debug files of these are what [`stackwalk`] wants unwind rules from. Read within
/// [`bounds`] (at most [`bounds::MAX_MODULES`]).
///
/// Errors: [`ReportError::Malformed`] when the header or the module list does not read (a
/// dump without a module list has no images: `Ok` and empty).
pub fn read_images(data: &[u8]) -> Result<Vec<Image>, ReportError> {
    let bounded = bounds::bounded(data)?;
    let dump = walk::open(&bounded)?;
    let arch = walk::dump_arch(&dump);
    Ok(walk::images(&dump, arch))
}

/// The debug id of the image the crash happened in (the exception context's program counter
/// is in it), read without walking: the routing key of a dump. `Ok(None)` when the dump has no
/// exception stream or the PC is in no image with a debug id. Errors: the header does not read.
pub fn crash_image(data: &[u8]) -> Result<Option<symbolic_common::DebugId>, ReportError> {
    let bounded = bounds::bounded(data)?;
    let dump = walk::open(&bounded)?;
    Ok(crate::guard::no_panic(|| Ok(walk::crash_image(&dump))).unwrap_or(None))
}

/// Walks every thread of the minidump `data`, using the unwind rules in `unwind` for the
/// images they are known for, into a report whose frames are innermost first: frame 0 is the
/// thread's program counter (trust `context`), every other frame a return address (so that
/// symbolication looks up the calling instruction), with how it was found. The thread that
/// the dump was written for (the exception stream's) is the crashed one; the crash reason is
/// rust-minidump's (`SIGSEGV / SEGV_MAPERR at 0x0`, `EXC_BAD_ACCESS / KERN_INVALID_ADDRESS
/// at 0x10`...), and on Linux and Android the signal number is kept for the frame-0 rules.
///
/// The walk stays within [`bounds`]: the threads and the stack bytes walked are capped (a
/// dump comes from an untrusted device), and only the streams the walk reads are read.
///
/// The report lists every image; `modules` says which ones the result will list
/// ([`NativeReport::modules`]).
///
/// Errors: [`ReportError::Malformed`] (`malformed minidump report: ...`) when the dump does
/// not read or has no thread list; never a panic, whatever the bytes.
pub fn stackwalk(
    data: &[u8],
    unwind: &UnwindTable,
    modules: Modules,
) -> Result<NativeReport, ReportError> {
    let mut report = walk::walk(data, unwind)?;
    report.modules = modules;
    Ok(report)
}

fn malformed(message: impl std::fmt::Display) -> ReportError {
    ReportError::malformed(ReportFormat::Minidump, message.to_string())
}

/// symbolic's name for a minidump CPU.
fn arch_of(cpu: minidump::system_info::Cpu) -> Arch {
    use minidump::system_info::Cpu;
    match cpu {
        Cpu::X86 => Arch::X86,
        Cpu::X86_64 => Arch::Amd64,
        Cpu::Arm => Arch::Arm,
        Cpu::Arm64 => Arch::Arm64,
        Cpu::Ppc => Arch::Ppc,
        Cpu::Ppc64 => Arch::Ppc64,
        Cpu::Mips => Arch::Mips,
        Cpu::Mips64 => Arch::Mips64,
        _ => Arch::Unknown,
    }
}
