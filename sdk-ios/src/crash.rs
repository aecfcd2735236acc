//! Crash capture: fatal POSIX signals on an alternate stack, written as a report with only
//! async-signal-safe calls.
//!
//! At install (allocation allowed): the report file is opened (`crash-<ms>-<pid>.inprogress` in
//! the report directory), the image list is serialized, an alternate signal stack and a report
//! buffer are allocated, and handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT and SIGTRAP are
//! installed, keeping the previous ones. In the handler: no allocation, no locks; the report is
//! formatted into the static buffer, written with `write(2)` and renamed to `crash-….json`; then
//! the previous handler runs (or the default action, which ends the process). A crash inside the
//! handler restores the default actions and ends the process instead of looping or hanging.

use std::ffi::CString;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::sampler;
use crate::unwind::{self, REGISTER_NAMES};
use crate::writer::Writer;

/// The signals handled.
pub const SIGNALS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTRAP,
];

const REPORT_BYTES: usize = 512 * 1024;
const ALT_STACK_BYTES: usize = 256 * 1024;
const MAX_THREADS: usize = 64;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static HANDLING: AtomicBool = AtomicBool::new(false);
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);

/// What the handler needs, prepared at install.
struct Prepared {
    modules_json: &'static [u8],
    metadata_json: &'static [u8],
    inprogress_path: CString,
    final_path: CString,
    buffer: *mut u8,
    exception: *mut ExceptionNote,
}

/// An uncaught C++/Objective-C exception recorded just before `abort()`.
pub struct ExceptionNote {
    /// Bytes used in `text`.
    pub len: usize,
    /// `type: reason`.
    pub text: [u8; 1024],
}

static mut PREPARED: Option<Prepared> = None;
static mut PREVIOUS: [Option<libc::sigaction>; 32] = [None; 32];

/// Installs the crash handlers, writing reports into `dir`. Idempotent.
pub fn install(dir: &std::path::Path, metadata_json: Vec<u8>) -> std::io::Result<()> {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
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
    REPORT_FD.store(file.into_raw_fd(), Ordering::Release);

    let images = crate::images::loaded_images();
    let ranges: Vec<(u64, u64)> = images.iter().flat_map(|i| i.code_ranges.clone()).collect();
    crate::unwind::set_code_ranges(&ranges);
    let prepared = Prepared {
        modules_json: Box::leak(crate::images::modules_json(&images).into_boxed_slice()),
        metadata_json: Box::leak(metadata_json.into_boxed_slice()),
        inprogress_path: CString::new(inprogress.into_os_string().into_encoded_bytes())
            .map_err(std::io::Error::other)?,
        final_path: CString::new(
            base.with_extension("json")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .map_err(std::io::Error::other)?,
        buffer: Box::leak(vec![0u8; REPORT_BYTES].into_boxed_slice()).as_mut_ptr(),
        exception: Box::leak(Box::new(ExceptionNote {
            len: 0,
            text: [0; 1024],
        })),
    };
    // SAFETY: written once, before any handler that reads it is installed.
    unsafe { *std::ptr::addr_of_mut!(PREPARED) = Some(prepared) };

    sampler::install()?;
    install_alt_stack()?;
    for sig in SIGNALS {
        // SAFETY: a zeroed sigaction is valid; handle_crash is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handle_crash as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &action, &mut previous) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            (*std::ptr::addr_of_mut!(PREVIOUS))[sig as usize] = Some(previous);
        }
    }
    Ok(())
}

/// Gives the calling thread an alternate signal stack (so a stack overflow can be reported).
/// Threads created later need their own: call [`install_alt_stack`] from them.
pub fn install_alt_stack() -> std::io::Result<()> {
    let stack = Box::leak(vec![0u8; ALT_STACK_BYTES].into_boxed_slice());
    let ss = libc::stack_t {
        ss_sp: stack.as_mut_ptr() as *mut libc::c_void,
        ss_flags: 0,
        ss_size: ALT_STACK_BYTES,
    };
    // SAFETY: the stack is leaked, so it outlives the thread.
    if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Records an uncaught exception's type and reason; the host app calls this from its C++
/// terminate handler or `NSSetUncaughtExceptionHandler` before the process aborts.
pub fn note_exception(kind: &str, reason: &str) {
    // SAFETY: PREPARED is written once at install; the note is only read by the handler.
    let Some(prepared) = (unsafe { (*std::ptr::addr_of!(PREPARED)).as_ref() }) else {
        return;
    };
    // SAFETY: the note was leaked at install.
    let note = unsafe { &mut *prepared.exception };
    let text = format!("{kind}: {reason}");
    let n = text.len().min(note.text.len());
    note.text[..n].copy_from_slice(&text.as_bytes()[..n]);
    note.len = n;
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTRAP => "SIGTRAP",
        _ => "signal",
    }
}

extern "C" fn handle_crash(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if HANDLING.swap(true, Ordering::AcqRel) {
        // A crash inside the handler (or a second thread crashing): let the default action end
        // the process rather than risk a loop or a hang.
        restore_defaults();
        return;
    }
    // SAFETY: PREPARED was written at install, before the handlers.
    if let Some(prepared) = unsafe { (*std::ptr::addr_of!(PREPARED)).as_ref() } {
        // SAFETY: `ctx` and `info` are this SA_SIGINFO handler's arguments.
        unsafe { write_report(prepared, sig, info, ctx) };
    }
    chain(sig, info, ctx);
}

/// Formats and writes the report. Async-signal-safe.
unsafe fn write_report(
    prepared: &Prepared,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    // SAFETY: the buffer was leaked at install; only this (first) handler uses it.
    let buffer = unsafe { std::slice::from_raw_parts_mut(prepared.buffer, REPORT_BYTES) };
    let mut w = Writer::new(buffer);
    // SAFETY: ctx is the handler's context.
    let regs = unsafe { unwind::registers(ctx) };
    let fault_addr = if info.is_null() {
        0
    } else {
        // SAFETY: info is the handler's siginfo.
        unsafe { (*info).si_addr() as u64 }
    };
    let tid = sampler::gettid();

    w.raw(b"{");
    w.key("symcluster_sdk_report", true);
    w.dec(1);
    w.key("kind", false);
    w.string(b"crash");
    w.key("signal", false);
    w.dec(sig as u64);
    w.key("crash_reason", false);
    w.string(signal_name(sig).as_bytes());
    w.key("fault_address", false);
    w.hex(fault_addr);
    // SAFETY: the note was leaked at install.
    let note = unsafe { &*prepared.exception };
    if note.len > 0 {
        w.key("exception", false);
        w.string(&note.text[..note.len]);
    }
    w.key("timestamp_ms", false);
    w.dec(realtime_ms());
    w.key("metadata", false);
    w.raw(prepared.metadata_json);
    w.key("modules", false);
    w.raw(prepared.modules_json);
    w.key("stacktraces", false);
    w.raw(b"[");

    // The crashing thread, from the signal context.
    let mut frames = [0u64; sampler::MAX_FRAMES];
    let n = unwind::walk_with_scan(regs.pc, regs.fp, regs.sp, &mut frames);
    write_thread(&mut w, tid, true, Some(&regs), &frames[..n], true);

    // Every other thread, sampled through the sampling signal.
    let mut tids = [0i32; MAX_THREADS];
    let count = list_threads(&mut tids);
    for &other in &tids[..count] {
        if other == tid {
            continue;
        }
        let n = sampler::sample(other, &mut frames, 50);
        write_thread(&mut w, other, false, None, &frames[..n], false);
    }
    w.raw(b"]");
    if w.overflowed() {
        w.key("truncated", false);
        w.raw(b"true");
    }
    w.raw(b"}\n");

    let fd = REPORT_FD.load(Ordering::Acquire);
    if fd >= 0 {
        let bytes = w.as_bytes();
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
}

fn write_thread(
    w: &mut Writer<'_>,
    tid: i32,
    crashed: bool,
    regs: Option<&unwind::Registers>,
    frames: &[u64],
    first: bool,
) {
    if !first {
        w.raw(b",");
    }
    w.raw(b"{");
    w.key("thread_id", true);
    w.dec(tid as u64);
    let mut name = [0u8; 32];
    let len = thread_name(tid, &mut name);
    if len > 0 {
        w.key("thread_name", false);
        w.string(&name[..len]);
    }
    w.key("is_requesting", false);
    w.raw(if crashed { b"true" } else { b"false" });
    if let Some(regs) = regs {
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
    w.frames(frames);
    w.raw(b"}");
}

/// Reads `/proc/self/task/<tid>/comm` into `out`. Async-signal-safe.
fn thread_name(tid: i32, out: &mut [u8]) -> usize {
    let mut path = [0u8; 48];
    let mut w = Writer::new(&mut path);
    w.raw(b"/proc/self/task/");
    w.dec(tid as u64);
    w.raw(b"/comm\0");
    // SAFETY: open/read/close are async-signal-safe; `path` is NUL-terminated.
    unsafe {
        let fd = libc::open(w.as_bytes().as_ptr() as *const libc::c_char, libc::O_RDONLY);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, out.as_mut_ptr() as *mut libc::c_void, out.len());
        libc::close(fd);
        if n <= 0 {
            return 0;
        }
        let n = n as usize;
        if out[n - 1] == b'\n' { n - 1 } else { n }
    }
}

/// Lists the process's thread ids (`/proc/self/task`, with `getdents64`). Async-signal-safe.
fn list_threads(out: &mut [i32]) -> usize {
    let mut count = 0;
    // SAFETY: open/getdents64/close are async-signal-safe; records are parsed within `buf`.
    unsafe {
        let fd = libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY,
        );
        if fd < 0 {
            return 0;
        }
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let mut offset = 0usize;
            while offset + 19 < n as usize {
                let reclen = u16::from_ne_bytes([buf[offset + 16], buf[offset + 17]]) as usize;
                let name = &buf[offset + 19..offset + reclen.max(19)];
                let mut tid: i32 = 0;
                let mut digits = 0;
                for &b in name {
                    if !b.is_ascii_digit() {
                        break;
                    }
                    tid = tid.saturating_mul(10).saturating_add((b - b'0') as i32);
                    digits += 1;
                }
                if digits > 0 && count < out.len() {
                    out[count] = tid;
                    count += 1;
                }
                if reclen == 0 {
                    break;
                }
                offset += reclen;
            }
        }
        libc::close(fd);
    }
    count
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

fn restore_defaults() {
    for sig in SIGNALS {
        // SAFETY: resetting to SIG_DFL is always valid.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

/// Runs the previous handler for `sig`, or the default action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: PREVIOUS was filled at install.
    let previous = unsafe { (*std::ptr::addr_of!(PREVIOUS))[sig as usize] };
    restore_defaults();
    match previous {
        Some(prev) if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN => {
            // SAFETY: calling the previously installed handler the way the kernel would.
            unsafe {
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(prev.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                    f(sig);
                }
            }
        }
        _ => {
            // Returning re-executes the faulting instruction under the default action; for
            // signals sent by raise/abort, send it again.
            // SAFETY: raise is async-signal-safe.
            if !matches!(
                sig,
                libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
            ) {
                unsafe { libc::raise(sig) };
            }
        }
    }
}
