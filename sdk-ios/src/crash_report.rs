//! Writing a crash report from inside a crash handler: async-signal-safe, no allocation, no
//! locks.
//!
//! Everything the writer needs is prepared at install ([`prepare`], allocation allowed): the
//! report file (`crash-<ms>-<pid>.inprogress`, opened then), the serialized metadata, a 512 KiB
//! buffer, and room for an exception note. [`write`] formats one report into the buffer, writes
//! it with `write(2)`, `fsync`s it and renames it to `crash-<ms>-<pid>.json`; it runs once per
//! process. It is called by the POSIX signal handler ([`crate::crash`]) on the crashing thread,
//! and on Apple platforms by the Mach exception server's thread for the thread that faulted.

use std::ffi::CString;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::platform::Backend;
use crate::unwind::{self, MAX_FRAMES, REGISTER_NAMES, Registers};
use crate::writer::Writer;

/// The report buffer's size unless the app sets another ([`set_report_bytes`]), bytes.
pub const DEFAULT_REPORT_BYTES: usize = 512 * 1024;
/// The smallest and largest report buffers [`set_report_bytes`] accepts, bytes.
pub const REPORT_BYTES_RANGE: std::ops::RangeInclusive<usize> = (16 * 1024)..=(16 * 1024 * 1024);
/// Kept free for the report's end (`]`, `"truncated":true`, `}`) while its body is written.
const TAIL_BYTES: usize = 64;
/// Room the head needs after its metadata or image list (`,"modules":[]`, `,"stacktraces":[`).
const HEAD_REST_BYTES: usize = 64;
/// A thread that does not fit whole is written with half its frames, then half again, down to
/// this many; below, it is left out (the crashed thread: with no frame).
const MIN_FRAMES: usize = 4;
const MAX_THREADS: usize = 256;

static REPORT_BYTES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(DEFAULT_REPORT_BYTES);

/// Sets the report buffer's size (bytes, clamped to [`REPORT_BYTES_RANGE`]) for the next
/// [`prepare`]; call before install. A report that does not fit is written whole all the same,
/// with fewer threads and frames and `"truncated": true`.
pub fn set_report_bytes(bytes: usize) {
    let bytes = bytes.clamp(*REPORT_BYTES_RANGE.start(), *REPORT_BYTES_RANGE.end());
    REPORT_BYTES.store(bytes, Ordering::Relaxed);
}

static REPORT_FD: AtomicI32 = AtomicI32::new(-1);

/// What the writer needs, prepared at install.
struct Prepared {
    metadata_json: &'static [u8],
    inprogress_path: CString,
    final_path: CString,
    buffer: *mut u8,
    /// The buffer's length, bytes.
    buffer_len: usize,
    exception: *mut ExceptionNote,
}

/// An uncaught C++/Objective-C exception recorded just before `abort()`.
struct ExceptionNote {
    /// Bytes used in `text`.
    len: usize,
    /// `type: reason`, cut at 1,024 bytes.
    text: [u8; 1024],
}

static mut PREPARED: Option<Prepared> = None;

/// A Mach exception as the kernel delivered it (`exception_type_t` and the two 64-bit codes of
/// `MACH_EXCEPTION_CODES`), with the names the report shows.
#[derive(Debug, Clone, Copy)]
pub struct MachExceptionNote {
    /// `EXC_*` number.
    pub exception: u32,
    /// `code[0]` (for `EXC_BAD_ACCESS`, a `kern_return_t` such as `KERN_INVALID_ADDRESS`).
    pub code: i64,
    /// `code[1]` (for `EXC_BAD_ACCESS`, the fault address).
    pub subcode: i64,
    /// `EXC_BAD_ACCESS`, … .
    pub name: &'static str,
    /// `KERN_INVALID_ADDRESS`, … ; empty when the code has no name.
    pub code_name: &'static str,
}

/// The crash being reported.
#[derive(Debug, Clone, Copy)]
pub struct CrashInfo<T> {
    /// The POSIX signal number (on Apple platforms, the signal the kernel turns the Mach
    /// exception into).
    pub signal: i32,
    /// Its name (`SIGSEGV`).
    pub signal_name: &'static str,
    /// The Mach exception, when a Mach exception server caught the crash.
    pub mach_exception: Option<MachExceptionNote>,
    /// The faulting address (`si_addr`; for `EXC_BAD_ACCESS`, `code[1]`), 0 if none.
    pub fault_address: u64,
    /// The thread that crashed.
    pub thread: T,
    /// Its registers at the crash.
    pub registers: Registers,
    /// A thread left out of the report (the Mach exception server's own), if any.
    pub skip: Option<T>,
}

/// Opens the report file in `dir` and allocates what [`write`] needs. Call once, before any
/// handler that may call [`write`] is installed.
pub fn prepare(dir: &std::path::Path, metadata_json: Vec<u8>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let base = dir.join(format!("crash-{stamp}-{}", std::process::id()));
    let inprogress = base.with_extension("inprogress");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&inprogress)?;
    let report_bytes = REPORT_BYTES.load(Ordering::Relaxed);
    let prepared = Prepared {
        metadata_json: Box::leak(metadata_json.into_boxed_slice()),
        inprogress_path: CString::new(inprogress.into_os_string().into_encoded_bytes())
            .map_err(std::io::Error::other)?,
        final_path: CString::new(
            base.with_extension("json")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .map_err(std::io::Error::other)?,
        buffer: Box::leak(vec![0u8; report_bytes].into_boxed_slice()).as_mut_ptr(),
        buffer_len: report_bytes,
        exception: Box::leak(Box::new(ExceptionNote {
            len: 0,
            text: [0; 1024],
        })),
    };
    // SAFETY: written once, before any handler that reads it is installed.
    unsafe { *std::ptr::addr_of_mut!(PREPARED) = Some(prepared) };
    REPORT_FD.store(file.into_raw_fd(), Ordering::Release);
    Ok(())
}

fn prepared() -> Option<&'static Prepared> {
    // SAFETY: PREPARED is written once at install, before anything reads it.
    unsafe { (*std::ptr::addr_of!(PREPARED)).as_ref() }
}

/// Records an uncaught exception's type and reason for the report; the host app calls this
/// (through `symcluster_sdk_note_exception`) from its C++ terminate handler or
/// `NSSetUncaughtExceptionHandler` before the process aborts.
pub fn note_exception(kind: &str, reason: &str) {
    let Some(prepared) = prepared() else {
        return;
    };
    // SAFETY: the note was leaked at install; only the app's terminate path writes it.
    let note = unsafe { &mut *prepared.exception };
    let text = format!("{kind}: {reason}");
    // Cut at a character's start: the report is UTF-8.
    let mut n = text.len().min(note.text.len());
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    note.text[..n].copy_from_slice(&text.as_bytes()[..n]);
    note.len = n;
}

/// Formats the report of `crash` and writes it to the report file, which is then renamed to
/// `.json`. Does nothing when the SDK is not installed. Async-signal-safe; call at most once
/// (the callers hold [`crate::crash`]'s once-only guard). `B` is the platform backend
/// ([`crate::platform::Host`]).
pub fn write<B: Backend>(crash: &CrashInfo<B::Thread>) {
    let Some(prepared) = prepared() else {
        return;
    };
    // SAFETY: the buffer was leaked at install; only the one guarded writer uses it.
    let buffer = unsafe { std::slice::from_raw_parts_mut(prepared.buffer, prepared.buffer_len) };
    let mut w = Writer::new(buffer);
    // The report is always closed: its end has room kept for it.
    w.reserve(TAIL_BYTES);
    // SAFETY: the note was leaked at install.
    let note = unsafe { &*prepared.exception };
    write_head(
        &mut w,
        crash,
        &note.text[..note.len],
        realtime_ms(),
        prepared.metadata_json,
        crate::images::published_modules_json(),
    );

    // The crashing thread, from its registers.
    let regs = crash.registers;
    let mut frames = [0u64; MAX_FRAMES];
    let n = unwind::walk_with_scan(regs.pc, regs.fp, regs.sp, &mut frames);
    // `first`: no thread written yet (no comma before the next).
    let mut first = !write_thread::<B>(&mut w, crash.thread, true, Some(&regs), &frames[..n], true);
    let mut room = true;

    // Every other thread, held still while it is read.
    let mut threads = [crash.thread; MAX_THREADS];
    let count = B::list_threads(&mut threads);
    // Compared by report id: on Apple platforms the crashed thread may be named by a different
    // port than the one `task_threads` lists.
    let crashed = B::thread_report_id(crash.thread);
    let skip = crash.skip.map(B::thread_report_id);
    let current = B::thread_report_id(B::current_thread());
    // The SDK's own threads (`symcluster-*`: memory records, CPU monitor, watchdog) are not
    // the app's: left out.
    let others = |t: &B::Thread| {
        let id = B::thread_report_id(*t);
        let mut name = [0u8; 16];
        let len = B::thread_name(*t, &mut name);
        id != crashed
            && Some(id) != skip
            && id != current
            && !name[..len].starts_with(b"symcluster-")
    };
    for &other in threads[..count].iter().filter(|t| others(t)) {
        B::suspend(other);
    }
    for &other in threads[..count].iter().filter(|t| others(t)) {
        if !room {
            break;
        }
        let n = B::sample_thread(other, &mut frames, 50);
        room = write_thread::<B>(&mut w, other, false, None, &frames[..n], first);
        first &= !room;
    }
    for &other in threads[..count].iter().filter(|t| others(t)) {
        B::resume(other);
    }
    write_tail(&mut w);
    write_file(prepared, w.as_bytes());
}

fn write_file(prepared: &Prepared, bytes: &[u8]) {
    let fd = REPORT_FD.swap(-1, Ordering::AcqRel);
    if fd < 0 {
        return;
    }
    let mut written = 0;
    while written < bytes.len() {
        // SAFETY: write(2) on our own fd, from our own buffer.
        let r = unsafe {
            libc::write(
                fd,
                bytes[written..].as_ptr() as *const libc::c_void,
                bytes.len() - written,
            )
        };
        if r <= 0 {
            break;
        }
        written += r as usize;
    }
    // SAFETY: fsync, close and rename are async-signal-safe.
    unsafe {
        libc::fsync(fd);
        libc::close(fd);
        libc::rename(
            prepared.inprogress_path.as_ptr(),
            prepared.final_path.as_ptr(),
        );
    }
}

/// Serializes one thread of the running process as a [`ThreadStack`] ([`write_thread_fitting`]);
/// whether it was written.
fn write_thread<B: Backend>(
    w: &mut Writer<'_>,
    thread: B::Thread,
    crashed: bool,
    registers: Option<&Registers>,
    frames: &[u64],
    first: bool,
) -> bool {
    let mut name = [0u8; 64];
    let len = B::thread_name(thread, &mut name);
    let stack = ThreadStack {
        id: B::thread_report_id(thread),
        name: &name[..len],
        crashed,
        registers,
        frames,
    };
    write_thread_fitting(w, &stack, first)
}

/// Writes `thread` ([`write_thread_json`]) whole if it fits; else with its innermost half of
/// frames, then half again while that leaves at least [`MIN_FRAMES`] (the crashed thread then
/// with no frame); else not at all. What does not fit is taken back ([`Writer::rewind`]: the report says
/// `"truncated": true`). Whether the thread was written. No allocation.
pub fn write_thread_fitting(w: &mut Writer<'_>, thread: &ThreadStack<'_>, first: bool) -> bool {
    let mark = w.mark();
    let mut frames = thread.frames;
    loop {
        write_thread_json(w, &ThreadStack { frames, ..*thread }, first);
        if !w.overflowed() {
            return true;
        }
        w.rewind(mark);
        frames = match frames.len() {
            0 => return false,
            n if n / 2 >= MIN_FRAMES => &frames[..n / 2],
            _ if thread.crashed => &[],
            _ => return false,
        };
    }
}

/// The report from its first byte through `"stacktraces":[`: version, kind, `signal`,
/// `crash_reason` (`SIGSEGV`, or `EXC_BAD_ACCESS (SIGSEGV)` for a Mach exception),
/// `mach_exception`, `fault_address`, `exception` (when `exception_note` is not empty: the
/// uncaught exception's `type: reason`), `timestamp_ms` (Unix epoch, ms), and the serialized
/// `metadata` object and `modules` array as given. Follow with [`write_thread_json`] per
/// thread and [`write_tail`]. No allocation.
pub fn write_head<T>(
    w: &mut Writer<'_>,
    crash: &CrashInfo<T>,
    exception_note: &[u8],
    timestamp_ms: u64,
    metadata_json: &[u8],
    modules_json: &[u8],
) {
    w.raw(b"{");
    w.key("symcluster_sdk_report", true);
    w.dec(u64::from(crate::SYMCLUSTER_REPORT_VERSION));
    w.key("kind", false);
    w.string(b"crash");
    w.key("signal", false);
    w.dec(crash.signal as u64);
    w.key("crash_reason", false);
    let mut reason = [0u8; 96];
    let mut r = Writer::new(&mut reason);
    match &crash.mach_exception {
        Some(mach) => {
            r.raw(mach.name.as_bytes());
            r.raw(b" (");
            r.raw(crash.signal_name.as_bytes());
            r.raw(b")");
        }
        None => r.raw(crash.signal_name.as_bytes()),
    }
    w.string(r.as_bytes());
    if let Some(mach) = &crash.mach_exception {
        w.key("mach_exception", false);
        w.raw(b"{");
        w.key("exception", true);
        w.dec(u64::from(mach.exception));
        w.key("code", false);
        w.hex(mach.code as u64);
        w.key("subcode", false);
        w.hex(mach.subcode as u64);
        w.key("name", false);
        w.string(mach.name.as_bytes());
        if !mach.code_name.is_empty() {
            w.key("code_name", false);
            w.string(mach.code_name.as_bytes());
        }
        w.raw(b"}");
    }
    w.key("fault_address", false);
    w.hex(crash.fault_address);
    if !exception_note.is_empty() {
        w.key("exception", false);
        w.string(exception_note);
    }
    w.key("timestamp_ms", false);
    w.dec(timestamp_ms);
    // Raw JSON cut part way would leave the report unreadable: what does not fit whole, with
    // room left for the rest of the head, is taken back and written empty.
    for (key, json, empty) in [
        ("metadata", metadata_json, &b"{}"[..]),
        ("modules", modules_json, &b"[]"[..]),
    ] {
        let mark = w.mark();
        w.key(key, false);
        w.raw(json);
        if w.overflowed() || w.room() < HEAD_REST_BYTES {
            w.rewind(mark);
            w.key(key, false);
            w.raw(empty);
        }
    }
    w.key("stacktraces", false);
    w.raw(b"[");
}

/// One thread of a report, innermost frame first.
#[derive(Debug, Clone, Copy)]
pub struct ThreadStack<'a> {
    /// `thread_id` (Linux tid; Apple `THREAD_IDENTIFIER_INFO` id).
    pub id: u64,
    /// Its name; empty when unnamed (then no `thread_name` is written).
    pub name: &'a [u8],
    /// Whether it crashed (`is_requesting`).
    pub crashed: bool,
    /// Its registers (`pc`/`fp`/`sp`/`lr`, or `rip`/`rbp`/`rsp`), for the crashed thread.
    pub registers: Option<&'a Registers>,
    /// Program counter, then return addresses.
    pub frames: &'a [u64],
}

/// One `stacktraces` entry (with a leading comma unless `first`). No allocation.
pub fn write_thread_json(w: &mut Writer<'_>, thread: &ThreadStack<'_>, first: bool) {
    if !first {
        w.raw(b",");
    }
    w.raw(b"{");
    w.key("thread_id", true);
    w.dec(thread.id);
    if !thread.name.is_empty() {
        w.key("thread_name", false);
        w.string(thread.name);
    }
    w.key("is_requesting", false);
    w.raw(if thread.crashed { b"true" } else { b"false" });
    if let Some(regs) = thread.registers {
        w.key("registers", false);
        w.raw(b"{");
        let values = [regs.pc, regs.fp, regs.sp, regs.lr];
        let mut first = true;
        for (name, value) in REGISTER_NAMES.iter().zip(values) {
            if name.is_empty() {
                continue;
            }
            w.key(name, first);
            w.hex(value);
            first = false;
        }
        w.raw(b"}");
    }
    w.key("frames", false);
    w.frames(thread.frames);
    w.raw(b"}");
}

/// Closes `stacktraces` and the report (`"truncated":true` first when something was left
/// out), in the room kept for it ([`Writer::reserve`]).
pub fn write_tail(w: &mut Writer<'_>) {
    w.release();
    w.raw(b"]");
    if w.truncated() {
        w.key("truncated", false);
        w.raw(b"true");
    }
    w.raw(b"}\n");
}

fn realtime_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}
