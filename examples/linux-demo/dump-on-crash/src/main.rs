//! `dump-on-crash OUT.dmp PROGRAM [ARGS...]`: runs PROGRAM (with an empty environment) as its
//! tracer; when the program stops on a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
//! SIGTRAP), writes a minidump of it to OUT.dmp with `minidump-writer`, with the crash
//! context (the signal's `siginfo` and the crashed thread's registers at the faulting
//! instruction) that an in-process crash handler would give it, then kills the program.
//!
//! How: the child asks to be traced (`PTRACE_TRACEME`) and execs; at its fatal signal's
//! delivery stop its registers are read (`PTRACE_GETREGS`, `PTRACE_GETFPREGS`) with the signal
//! (`PTRACE_GETSIGINFO`); the tracer then detaches, turning the signal into SIGSTOP, so that
//! the process stays stopped at the faulting instruction for minidump-writer (which attaches
//! to each thread itself). x86_64 Linux only. Exit status 0 when a minidump was written.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::Command;

const FATAL: [i32; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTRAP,
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: dump-on-crash OUT.dmp PROGRAM [ARGS...]");
        std::process::exit(2);
    }
    if let Err(e) = run(&args[0], &args[1], &args[2..]) {
        eprintln!("dump-on-crash: {e}");
        std::process::exit(1);
    }
}

fn run(out: &str, program: &str, args: &[String]) -> Result<(), String> {
    let mut command = Command::new(program);
    command.args(args).env_clear();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    // The exec stop (SIGTRAP), then every signal until a fatal one.
    let mut first = true;
    let signal = loop {
        let mut status = 0;
        if unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } != pid {
            return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        if libc::WIFEXITED(status) {
            return Err(format!(
                "{program} exited with {} without crashing",
                libc::WEXITSTATUS(status)
            ));
        }
        if libc::WIFSIGNALED(status) {
            return Err(format!(
                "{program} was killed by signal {}",
                libc::WTERMSIG(status)
            ));
        }
        let sig = libc::WSTOPSIG(status);
        if first && sig == libc::SIGTRAP {
            first = false;
            cont(pid, 0)?;
            continue;
        }
        first = false;
        if FATAL.contains(&sig) {
            break sig;
        }
        cont(pid, sig)?;
    };
    let context = crash_context(pid)?;
    eprintln!(
        "dump-on-crash: {program} (pid {pid}) stopped on signal {signal} at rip {:#x}",
        context.context.uc_mcontext.gregs[libc::REG_RIP as usize]
    );
    // Detached with SIGSTOP in place of the fatal signal: stopped, registers unchanged.
    if unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, libc::SIGSTOP as usize) } != 0 {
        return Err(format!("detach: {}", std::io::Error::last_os_error()));
    }
    let mut file = File::create(out).map_err(|e| format!("{out}: {e}"))?;
    let mut config = minidump_writer::minidump_writer::MinidumpWriterConfig::new(pid, pid);
    config.set_crash_context(minidump_writer::CrashContextExt { inner: context });
    let written = config.write(&mut file);
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    written.map_err(|e| format!("writing {out}: {e}"))?;
    eprintln!("dump-on-crash: wrote {out}");
    Ok(())
}

fn cont(pid: libc::pid_t, sig: i32) -> Result<(), String> {
    if unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, sig as usize) } != 0 {
        return Err(format!("PTRACE_CONT: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The crashed thread's `siginfo` and registers, as a signal handler's `ucontext` holds them.
fn crash_context(pid: libc::pid_t) -> Result<crash_context::CrashContext, String> {
    let os_error = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain C structs of integers (and null pointers): all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    let mut fpregs: libc::user_fpregs_struct = unsafe { std::mem::zeroed() };
    unsafe {
        if libc::ptrace(libc::PTRACE_GETSIGINFO, pid, 0, &mut info as *mut _) != 0 {
            return Err(os_error("PTRACE_GETSIGINFO"));
        }
        if libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs as *mut _) != 0 {
            return Err(os_error("PTRACE_GETREGS"));
        }
        if libc::ptrace(libc::PTRACE_GETFPREGS, pid, 0, &mut fpregs as *mut _) != 0 {
            return Err(os_error("PTRACE_GETFPREGS"));
        }
    }
    let mut context: crash_context::CrashContext = unsafe { std::mem::zeroed() };
    let g = &mut context.context.uc_mcontext.gregs;
    let set = |g: &mut [i64; 23], reg: libc::c_int, value: u64| g[reg as usize] = value as i64;
    set(g, libc::REG_R8, regs.r8);
    set(g, libc::REG_R9, regs.r9);
    set(g, libc::REG_R10, regs.r10);
    set(g, libc::REG_R11, regs.r11);
    set(g, libc::REG_R12, regs.r12);
    set(g, libc::REG_R13, regs.r13);
    set(g, libc::REG_R14, regs.r14);
    set(g, libc::REG_R15, regs.r15);
    set(g, libc::REG_RDI, regs.rdi);
    set(g, libc::REG_RSI, regs.rsi);
    set(g, libc::REG_RBP, regs.rbp);
    set(g, libc::REG_RBX, regs.rbx);
    set(g, libc::REG_RDX, regs.rdx);
    set(g, libc::REG_RAX, regs.rax);
    set(g, libc::REG_RCX, regs.rcx);
    set(g, libc::REG_RSP, regs.rsp);
    set(g, libc::REG_RIP, regs.rip);
    set(g, libc::REG_EFL, regs.eflags);
    set(
        g,
        libc::REG_CSGSFS,
        (regs.cs & 0xffff) | ((regs.gs & 0xffff) << 16) | ((regs.fs & 0xffff) << 32),
    );
    // The FXSAVE area: the same 512 bytes in both structs.
    const _: () = assert!(
        std::mem::size_of::<libc::user_fpregs_struct>()
            == std::mem::size_of::<crash_context::fpregset_t>()
    );
    unsafe {
        std::ptr::copy_nonoverlapping(
            &fpregs as *const _ as *const u8,
            &mut context.float_state as *mut _ as *mut u8,
            std::mem::size_of::<libc::user_fpregs_struct>(),
        );
    }
    context.siginfo.ssi_signo = info.si_signo as u32;
    context.siginfo.ssi_errno = info.si_errno;
    context.siginfo.ssi_code = info.si_code;
    context.siginfo.ssi_addr = unsafe { info.si_addr() } as u64;
    context.pid = pid;
    context.tid = pid;
    Ok(context)
}
