//! The Mach exception server: a port registered as the task's exception port for bad access,
//! bad instruction, arithmetic, software and breakpoint exceptions, served by its own thread.
//!
//! A Mach exception reaches us before the kernel turns it into a signal, while the faulting
//! thread is stopped, so even a stack overflow (no stack left to run a signal handler on) is
//! reported from a healthy thread. The protocol is MIG's `mach_exception_raise` (message id
//! 2405, `EXCEPTION_DEFAULT | MACH_EXCEPTION_CODES`, see `mach_exc.defs`), as KSCrash's and
//! PLCrashReporter's servers use it. On a crash the server:
//! 1. puts back the exception ports that were registered before ours (saved at install), so
//!    that a crash of this thread cannot wait on its own port;
//! 2. claims the report ([`crate::crash::claim`]), writes it for the faulting thread from its
//!    thread state with every other thread suspended ([`crate::crash_report::write`]), and
//!    marks it written;
//! 3. replies as KSCrash does: `KERN_SUCCESS` when a previous port covers this exception (the
//!    faulting instruction runs again, faults again, and the exception now goes to that port:
//!    a debugger, another reporter), else `KERN_FAILURE` ("not handled"): the kernel goes on to
//!    the BSD signal, for which our POSIX handler only chains to the previous signal handlers.
//!
//! Exceptions that are not crashes (a soft signal relayed to a debugger) change nothing. The
//! server is not installed while a debugger is attached (`P_TRACED`): its breakpoints would
//! come to our port; the signal handlers still report crashes then. The request is checked as
//! MIG's generated server checks it (complex, two port descriptors, size), its port rights are
//! released after the reply, and the loop ends if the port dies.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::exception::{self, EXCEPTION_MASK, darwin_signal};
use super::ffi::{self, mach_port_t};
use super::threads;
use crate::crash_report::CrashInfo;

/// The exception ports registered before ours (`task_get_exception_ports`).
struct PreviousPorts {
    count: usize,
    masks: [ffi::exception_mask_t; ffi::EXC_TYPES_COUNT],
    ports: [mach_port_t; ffi::EXC_TYPES_COUNT],
    behaviors: [ffi::exception_behavior_t; ffi::EXC_TYPES_COUNT],
    flavors: [ffi::thread_state_flavor_t; ffi::EXC_TYPES_COUNT],
}

static mut PREVIOUS: PreviousPorts = PreviousPorts {
    count: 0,
    masks: [0; ffi::EXC_TYPES_COUNT],
    ports: [0; ffi::EXC_TYPES_COUNT],
    behaviors: [0; ffi::EXC_TYPES_COUNT],
    flavors: [0; ffi::EXC_TYPES_COUNT],
};
static SERVER_THREAD: AtomicU32 = AtomicU32::new(0);
static MAIN_STACK_LOW: AtomicU64 = AtomicU64::new(0);
static MAIN_STACK_HIGH: AtomicU64 = AtomicU64::new(0);

fn check(kr: ffi::kern_return_t, call: &str) -> std::io::Result<()> {
    if kr == ffi::KERN_SUCCESS {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{call} failed: kern_return_t {kr}"
        )))
    }
}

/// Saves the current exception ports, allocates ours, starts the server thread and registers
/// the port for [`EXCEPTION_MASK`]; does nothing under a debugger. Errors name the Mach call
/// that failed.
pub fn install() -> std::io::Result<()> {
    if threads::being_debugged() {
        return Ok(());
    }
    let (low, high) = threads::main_stack_region();
    MAIN_STACK_LOW.store(low, Ordering::Release);
    MAIN_STACK_HIGH.store(high, Ordering::Release);
    let task = ffi::mach_task_self();
    // SAFETY: PREVIOUS is written here, once, before the server thread that reads it exists.
    unsafe {
        let previous = &mut *std::ptr::addr_of_mut!(PREVIOUS);
        let mut count = ffi::EXC_TYPES_COUNT as ffi::mach_msg_type_number_t;
        check(
            ffi::task_get_exception_ports(
                task,
                EXCEPTION_MASK,
                previous.masks.as_mut_ptr(),
                &mut count,
                previous.ports.as_mut_ptr(),
                previous.behaviors.as_mut_ptr(),
                previous.flavors.as_mut_ptr(),
            ),
            "task_get_exception_ports",
        )?;
        previous.count = (count as usize).min(ffi::EXC_TYPES_COUNT);
    }
    let mut port: mach_port_t = ffi::MACH_PORT_NULL;
    // SAFETY: allocating a receive right in our own task and making a send right from it.
    unsafe {
        check(
            ffi::mach_port_allocate(task, ffi::MACH_PORT_RIGHT_RECEIVE, &mut port),
            "mach_port_allocate",
        )?;
        check(
            ffi::mach_port_insert_right(task, port, port, ffi::MACH_MSG_TYPE_MAKE_SEND),
            "mach_port_insert_right",
        )?;
    }
    std::thread::Builder::new()
        .name("symcluster-mach-exceptions".into())
        .spawn(move || serve(port))?;
    // SAFETY: registering our own port for our own task.
    check(
        unsafe {
            ffi::task_set_exception_ports(
                task,
                EXCEPTION_MASK,
                port,
                ffi::EXCEPTION_DEFAULT | ffi::MACH_EXCEPTION_CODES,
                ffi::THREAD_STATE_NONE,
            )
        },
        "task_set_exception_ports",
    )
}

/// The server thread's Mach port (0 before it runs): left out of crash reports.
pub fn server_thread() -> mach_port_t {
    SERVER_THREAD.load(Ordering::Acquire)
}

fn serve(port: mach_port_t) {
    SERVER_THREAD.store(threads::current(), Ordering::Release);
    loop {
        // SAFETY: a zeroed request is valid; mach_msg receives at most its size.
        let mut request: ffi::mach_exception_raise_request = unsafe { std::mem::zeroed() };
        // SAFETY: receiving into our own buffer; a larger message is destroyed, not queued.
        let kr = unsafe {
            ffi::mach_msg(
                &mut request as *mut _ as *mut ffi::mach_msg_header_t,
                ffi::MACH_RCV_MSG,
                0,
                std::mem::size_of::<ffi::mach_exception_raise_request>() as u32,
                port,
                ffi::MACH_MSG_TIMEOUT_NONE,
                ffi::MACH_PORT_NULL,
            )
        };
        match kr {
            ffi::KERN_SUCCESS => {}
            ffi::MACH_RCV_INVALID_NAME | ffi::MACH_RCV_PORT_DIED | ffi::MACH_RCV_PORT_CHANGED => {
                return;
            }
            _ => continue,
        }
        let head = request.head;
        let well_formed = head.msgh_id == ffi::MACH_EXCEPTION_RAISE_ID
            && head.msgh_bits & ffi::MACH_MSGH_BITS_COMPLEX != 0
            && request.msgh_descriptor_count == 2
            && head.msgh_size >= ffi::MACH_EXCEPTION_RAISE_REQUEST_SIZE;
        if !well_formed {
            continue;
        }
        let ret_code = handle(&request);
        if head.msgh_remote_port != ffi::MACH_PORT_NULL {
            reply(&request, ret_code);
        }
        let (thread, task) = (request.thread.name, request.task.name);
        // SAFETY: releasing the send rights the message carried to us.
        unsafe {
            ffi::mach_port_deallocate(ffi::mach_task_self(), thread);
            ffi::mach_port_deallocate(ffi::mach_task_self(), task);
        }
    }
}

/// Handles one exception; returns the reply's return code.
fn handle(request: &ffi::mach_exception_raise_request) -> ffi::kern_return_t {
    let exception_type = request.exception as u32;
    let code_count = request.code_count;
    let codes = request.code;
    let code = if code_count > 0 { codes[0] } else { 0 };
    let subcode = if code_count > 1 { codes[1] } else { 0 };
    let main_stack = (
        MAIN_STACK_LOW.load(Ordering::Acquire),
        MAIN_STACK_HIGH.load(Ordering::Acquire),
    );
    let (note, signal, fault_address) =
        exception::describe(exception_type, code, subcode, Some(main_stack));
    if signal == 0 || signal == darwin_signal::SIGKILL {
        return ffi::KERN_FAILURE;
    }
    restore_previous_ports();
    let ret_code = if previous_port_covers(exception_type) {
        ffi::KERN_SUCCESS
    } else {
        ffi::KERN_FAILURE
    };
    if !crate::crash::claim() {
        return ret_code;
    }
    let thread = request.thread.name;
    let registers = threads::thread_registers(thread).unwrap_or_default();
    crate::crash_report::write::<super::Apple>(&CrashInfo {
        signal,
        signal_name: darwin_signal::name(signal),
        mach_exception: Some(note),
        fault_address,
        thread,
        registers,
        skip: Some(server_thread()),
    });
    crate::crash::mark_reported();
    ret_code
}

/// Whether a port saved at install handles `exception`.
fn previous_port_covers(exception: u32) -> bool {
    // SAFETY: PREVIOUS was written at install, before this thread started.
    let previous = unsafe { &*std::ptr::addr_of!(PREVIOUS) };
    (0..previous.count).any(|i| {
        previous.masks[i] & (1 << exception) != 0 && previous.ports[i] != ffi::MACH_PORT_NULL
    })
}

/// Puts back the exception ports saved at install.
fn restore_previous_ports() {
    let task = ffi::mach_task_self();
    // SAFETY: PREVIOUS was written at install, before this thread started.
    let previous = unsafe { &*std::ptr::addr_of!(PREVIOUS) };
    if previous.count == 0 {
        // SAFETY: unregistering our port: exceptions go to the host's handlers and signals.
        unsafe {
            ffi::task_set_exception_ports(
                task,
                EXCEPTION_MASK,
                ffi::MACH_PORT_NULL,
                ffi::EXCEPTION_DEFAULT,
                ffi::THREAD_STATE_NONE,
            )
        };
        return;
    }
    for i in 0..previous.count {
        // SAFETY: re-registering ports the task had before.
        unsafe {
            ffi::task_set_exception_ports(
                task,
                previous.masks[i],
                previous.ports[i],
                previous.behaviors[i],
                previous.flavors[i],
            )
        };
    }
}

/// Answers the kernel with `ret_code`.
fn reply(request: &ffi::mach_exception_raise_request, ret_code: ffi::kern_return_t) {
    let head = request.head;
    let mut reply = ffi::mach_exception_raise_reply {
        head: ffi::mach_msg_header_t {
            msgh_bits: head.msgh_bits & ffi::MACH_MSGH_BITS_REMOTE_MASK,
            msgh_size: std::mem::size_of::<ffi::mach_exception_raise_reply>() as u32,
            msgh_remote_port: head.msgh_remote_port,
            msgh_local_port: ffi::MACH_PORT_NULL,
            msgh_voucher_port: ffi::MACH_PORT_NULL,
            msgh_id: head.msgh_id + 100,
        },
        // SAFETY: a constant libSystem defines.
        ndr: unsafe { ffi::NDR_record },
        ret_code,
    };
    // SAFETY: sending our own reply buffer to the kernel's reply port.
    unsafe {
        ffi::mach_msg(
            &mut reply as *mut _ as *mut ffi::mach_msg_header_t,
            ffi::MACH_SEND_MSG,
            std::mem::size_of::<ffi::mach_exception_raise_reply>() as u32,
            0,
            ffi::MACH_PORT_NULL,
            ffi::MACH_MSG_TIMEOUT_NONE,
            ffi::MACH_PORT_NULL,
        )
    };
}
