//! The Mach, dyld and Darwin declarations the Apple backend calls, transcribed from the SDK
//! headers named on each item (XNU's `osfmk/mach/*.h`, `bsd/sys/_types/*.h`, dyld's
//! `<mach-o/dyld.h>`).
//!
//! Declared here rather than taken from the `libc`/`mach2` crates, which compile their Apple
//! items only for Apple targets: with our own declarations the backend type-checks on any host
//! (`--features apple-typecheck`), so the code built for iOS is the code checked in CI. Sizes
//! are pinned by compile-time assertions against the headers' `*_COUNT` constants.

#![allow(non_camel_case_types, non_upper_case_globals, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

pub type kern_return_t = c_int;
pub type mach_port_t = u32;
pub type natural_t = u32;
pub type mach_msg_type_number_t = natural_t;
pub type exception_mask_t = u32;
pub type exception_behavior_t = c_int;
pub type thread_state_flavor_t = c_int;
pub type vm_address_t = usize;
pub type vm_size_t = usize;

/// `<mach/kern_return.h>`.
pub const KERN_SUCCESS: kern_return_t = 0;
/// `<mach/kern_return.h>`: the reply that tells the kernel the exception was not handled.
pub const KERN_FAILURE: kern_return_t = 5;
/// `<mach/port.h>`.
pub const MACH_PORT_NULL: mach_port_t = 0;
/// `<mach/port.h>`.
pub const MACH_PORT_RIGHT_RECEIVE: u32 = 1;
/// `<mach/message.h>`.
pub const MACH_MSG_TYPE_MAKE_SEND: u32 = 20;
/// `<mach/message.h>`.
pub const MACH_SEND_MSG: c_int = 0x0000_0001;
/// `<mach/message.h>`.
pub const MACH_RCV_MSG: c_int = 0x0000_0002;
/// `<mach/message.h>`.
pub const MACH_MSG_TIMEOUT_NONE: u32 = 0;
/// `<mach/message.h>`: `MACH_MSGH_BITS_REMOTE_MASK`.
pub const MACH_MSGH_BITS_REMOTE_MASK: u32 = 0x0000_001f;
/// `<mach/message.h>`: the message carries descriptors.
pub const MACH_MSGH_BITS_COMPLEX: u32 = 0x8000_0000;
/// `<mach/message.h>`: the receive port is gone: the server loop ends.
pub const MACH_RCV_INVALID_NAME: kern_return_t = 0x1000_4002;
/// `<mach/message.h>`.
pub const MACH_RCV_PORT_DIED: kern_return_t = 0x1000_4009;
/// `<mach/message.h>`.
pub const MACH_RCV_PORT_CHANGED: kern_return_t = 0x1000_4006;
/// `<mach/exception_types.h>`.
pub const EXCEPTION_DEFAULT: exception_behavior_t = 1;
/// `<mach/exception_types.h>`: 64-bit codes (`mach_exception_raise`, message id 2405).
pub const MACH_EXCEPTION_CODES: exception_behavior_t = 0x8000_0000_u32 as i32;
/// `<mach/exception_types.h>`: `EXC_TYPES_COUNT`, the most masks `task_get_exception_ports`
/// returns.
pub const EXC_TYPES_COUNT: usize = 14;
/// The MIG message id of `mach_exception_raise` (`mach_exc.defs`: subsystem `mach_exc` 2405,
/// routine 0; 2401 is the 32-bit `exc.defs`).
pub const MACH_EXCEPTION_RAISE_ID: i32 = 2405;

/// `<mach/arm/thread_status.h>` / `<mach/i386/thread_status.h>`: `THREAD_STATE_NONE`.
#[cfg(target_arch = "aarch64")]
pub const THREAD_STATE_NONE: thread_state_flavor_t = 5;
#[cfg(not(target_arch = "aarch64"))]
pub const THREAD_STATE_NONE: thread_state_flavor_t = 13;

/// `<mach/arm/_structs.h>`: `_STRUCT_ARM_THREAD_STATE64` (non-opaque form).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct arm_thread_state64_t {
    pub x: [u64; 29],
    pub fp: u64,
    pub lr: u64,
    pub sp: u64,
    pub pc: u64,
    pub cpsr: u32,
    pub pad: u32,
}
/// `<mach/arm/thread_status.h>`.
pub const ARM_THREAD_STATE64: thread_state_flavor_t = 6;
/// `<mach/arm/thread_status.h>`: `sizeof(arm_thread_state64_t) / sizeof(uint32_t)`.
pub const ARM_THREAD_STATE64_COUNT: mach_msg_type_number_t = 68;
const _: () =
    assert!(std::mem::size_of::<arm_thread_state64_t>() == ARM_THREAD_STATE64_COUNT as usize * 4);

/// `<mach/i386/_structs.h>`: `_STRUCT_X86_THREAD_STATE64` (the simulator on Intel Macs).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct x86_thread_state64_t {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rbp: u64,
    pub rsp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rflags: u64,
    pub cs: u64,
    pub fs: u64,
    pub gs: u64,
}
/// `<mach/i386/thread_status.h>`.
pub const X86_THREAD_STATE64: thread_state_flavor_t = 4;
/// `<mach/i386/thread_status.h>`: `sizeof(x86_thread_state64_t) / sizeof(int)`.
pub const X86_THREAD_STATE64_COUNT: mach_msg_type_number_t = 42;
const _: () =
    assert!(std::mem::size_of::<x86_thread_state64_t>() == X86_THREAD_STATE64_COUNT as usize * 4);

/// `<mach/arm/_structs.h>`: `_STRUCT_ARM_EXCEPTION_STATE64`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct arm_exception_state64_t {
    pub far: u64,
    pub esr: u32,
    pub exception: u32,
}

/// `<mach/arm/_structs.h>`: the start of `_STRUCT_MCONTEXT64` (arm64); the NEON state that
/// follows is not read.
#[repr(C)]
pub struct arm_mcontext64_head {
    pub es: arm_exception_state64_t,
    pub ss: arm_thread_state64_t,
}

/// `<mach/i386/_structs.h>`: `_STRUCT_X86_EXCEPTION_STATE64`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct x86_exception_state64_t {
    pub trapno: u16,
    pub cpu: u16,
    pub err: u32,
    pub faultvaddr: u64,
}

/// `<mach/i386/_structs.h>`: the start of `_STRUCT_MCONTEXT64` (x86-64).
#[repr(C)]
pub struct x86_mcontext64_head {
    pub es: x86_exception_state64_t,
    pub ss: x86_thread_state64_t,
}

/// `<sys/_types/_ucontext.h>` (`_STRUCT_UCONTEXT`, 64-bit) up to `uc_mcontext`, a pointer on
/// Darwin (unlike Linux, where the machine context is inline).
#[repr(C)]
pub struct darwin_ucontext_head {
    pub uc_onstack: c_int,
    pub uc_sigmask: u32,
    pub uc_stack_sp: *mut c_void,
    pub uc_stack_size: usize,
    pub uc_stack_flags: c_int,
    pub uc_link: *mut c_void,
    pub uc_mcsize: usize,
    pub uc_mcontext: *mut c_void,
}
const _: () = assert!(std::mem::offset_of!(darwin_ucontext_head, uc_mcontext) == 48);

/// `<sys/signal.h>`: `__siginfo` up to `si_addr`.
#[repr(C)]
pub struct darwin_siginfo_head {
    pub si_signo: c_int,
    pub si_errno: c_int,
    pub si_code: c_int,
    pub si_pid: c_int,
    pub si_uid: u32,
    pub si_status: c_int,
    pub si_addr: *mut c_void,
}
const _: () = assert!(std::mem::offset_of!(darwin_siginfo_head, si_addr) == 24);

/// `<mach/thread_info.h>`.
pub const THREAD_IDENTIFIER_INFO: u32 = 4;
/// `<mach/thread_info.h>`: `struct thread_identifier_info`.
#[repr(C)]
pub struct thread_identifier_info {
    /// The system-wide unique thread id (what `pthread_threadid_np` returns).
    pub thread_id: u64,
    pub thread_handle: u64,
    pub dispatch_qaddr: u64,
}
/// `<mach/thread_info.h>`: `sizeof(thread_identifier_info_data_t) / sizeof(natural_t)`.
pub const THREAD_IDENTIFIER_INFO_COUNT: mach_msg_type_number_t = 6;
const _: () = assert!(
    std::mem::size_of::<thread_identifier_info>() == THREAD_IDENTIFIER_INFO_COUNT as usize * 4
);

/// `<mach/thread_info.h>`.
pub const THREAD_EXTENDED_INFO: u32 = 5;
/// `<mach/thread_info.h>`: `struct thread_extended_info`.
#[repr(C)]
pub struct thread_extended_info {
    pub pth_user_time: u64,
    pub pth_system_time: u64,
    pub pth_cpu_usage: i32,
    pub pth_policy: i32,
    pub pth_run_state: i32,
    pub pth_flags: i32,
    pub pth_sleep_time: i32,
    pub pth_curpri: i32,
    pub pth_priority: i32,
    pub pth_maxpriority: i32,
    /// `MAXTHREADNAMESIZE` (64) bytes, NUL-terminated.
    pub pth_name: [c_char; 64],
}
/// `<mach/thread_info.h>`: `sizeof(thread_extended_info_data_t) / sizeof(natural_t)`.
pub const THREAD_EXTENDED_INFO_COUNT: mach_msg_type_number_t = 28;
const _: () =
    assert!(std::mem::size_of::<thread_extended_info>() == THREAD_EXTENDED_INFO_COUNT as usize * 4);

/// `<mach/message.h>`: `mach_msg_header_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mach_msg_header_t {
    pub msgh_bits: u32,
    pub msgh_size: u32,
    pub msgh_remote_port: mach_port_t,
    pub msgh_local_port: mach_port_t,
    pub msgh_voucher_port: mach_port_t,
    pub msgh_id: i32,
}

/// `<mach/ndr.h>`: `NDR_record_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NDR_record_t {
    pub bytes: [u8; 8],
}

/// `<mach/message.h>`: `mach_msg_port_descriptor_t` (user space, 64-bit: 12 bytes).
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct mach_msg_port_descriptor_t {
    pub name: mach_port_t,
    pub pad1: u32,
    pub pad2: u16,
    pub disposition: u8,
    pub kind: u8,
}

/// MIG's `__Request__mach_exception_raise_t` (`mach_exc.defs`, `#pragma pack(4)`), followed by
/// room for the receive trailer and anything larger the kernel may send.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct mach_exception_raise_request {
    pub head: mach_msg_header_t,
    pub msgh_descriptor_count: u32,
    pub thread: mach_msg_port_descriptor_t,
    pub task: mach_msg_port_descriptor_t,
    pub ndr: NDR_record_t,
    pub exception: c_int,
    pub code_count: mach_msg_type_number_t,
    pub code: [i64; 2],
    pub trailer_and_room: [u8; 512],
}
const _: () = assert!(std::mem::offset_of!(mach_exception_raise_request, code) == 68);
const _: () = assert!(std::mem::offset_of!(mach_exception_raise_request, trailer_and_room) == 84);
/// The size of the request without the trailer room (`sizeof(__Request__mach_exception_raise_t)`).
pub const MACH_EXCEPTION_RAISE_REQUEST_SIZE: u32 = 84;

/// MIG's `__Reply__mach_exception_raise_t`.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct mach_exception_raise_reply {
    pub head: mach_msg_header_t,
    pub ndr: NDR_record_t,
    pub ret_code: kern_return_t,
}
const _: () = assert!(std::mem::size_of::<mach_exception_raise_reply>() == 36);

/// `<mach-o/loader.h>`: the start of `mach_header` / `mach_header_64`.
#[repr(C)]
pub struct mach_header {
    pub magic: u32,
    pub cputype: i32,
    pub cpusubtype: i32,
    pub filetype: u32,
    pub ncmds: u32,
    pub sizeofcmds: u32,
    pub flags: u32,
}

unsafe extern "C" {
    /// `<mach/mach_init.h>`: what `mach_task_self()` returns.
    pub static mach_task_self_: mach_port_t;
    /// `<mach/ndr.h>`.
    pub static NDR_record: NDR_record_t;

    /// `<mach/mach_port.h>`.
    pub fn mach_port_allocate(
        task: mach_port_t,
        right: u32,
        name: *mut mach_port_t,
    ) -> kern_return_t;
    /// `<mach/mach_port.h>`.
    pub fn mach_port_insert_right(
        task: mach_port_t,
        name: mach_port_t,
        poly: mach_port_t,
        poly_poly: u32,
    ) -> kern_return_t;
    /// `<mach/mach_port.h>`.
    pub fn mach_port_deallocate(task: mach_port_t, name: mach_port_t) -> kern_return_t;
    /// `<mach/task.h>`.
    pub fn task_get_exception_ports(
        task: mach_port_t,
        exception_mask: exception_mask_t,
        masks: *mut exception_mask_t,
        masks_count: *mut mach_msg_type_number_t,
        old_handlers: *mut mach_port_t,
        old_behaviors: *mut exception_behavior_t,
        old_flavors: *mut thread_state_flavor_t,
    ) -> kern_return_t;
    /// `<mach/task.h>`.
    pub fn task_set_exception_ports(
        task: mach_port_t,
        exception_mask: exception_mask_t,
        new_port: mach_port_t,
        behavior: exception_behavior_t,
        new_flavor: thread_state_flavor_t,
    ) -> kern_return_t;
    /// `<mach/task.h>`: the task's threads; the array is `vm_allocate`d in our task.
    pub fn task_threads(
        task: mach_port_t,
        act_list: *mut *mut mach_port_t,
        act_list_count: *mut mach_msg_type_number_t,
    ) -> kern_return_t;
    /// `<mach/message.h>`.
    pub fn mach_msg(
        msg: *mut mach_msg_header_t,
        option: c_int,
        send_size: u32,
        rcv_size: u32,
        rcv_name: mach_port_t,
        timeout: u32,
        notify: mach_port_t,
    ) -> kern_return_t;
    /// `<mach/thread_act.h>`.
    pub fn thread_suspend(thread: mach_port_t) -> kern_return_t;
    /// `<mach/thread_act.h>`.
    pub fn thread_resume(thread: mach_port_t) -> kern_return_t;
    /// `<mach/thread_act.h>`.
    pub fn thread_get_state(
        thread: mach_port_t,
        flavor: thread_state_flavor_t,
        state: *mut natural_t,
        count: *mut mach_msg_type_number_t,
    ) -> kern_return_t;
    /// `<mach/thread_act.h>`.
    pub fn thread_info(
        thread: mach_port_t,
        flavor: u32,
        info: *mut c_int,
        count: *mut mach_msg_type_number_t,
    ) -> kern_return_t;
    /// `<mach/vm_map.h>`: copies `size` bytes at `address` into `data`; fails with
    /// `KERN_INVALID_ADDRESS` instead of faulting.
    pub fn vm_read_overwrite(
        task: mach_port_t,
        address: vm_address_t,
        size: vm_size_t,
        data: vm_address_t,
        out_size: *mut vm_size_t,
    ) -> kern_return_t;
    /// `<mach/vm_map.h>`.
    pub fn vm_deallocate(
        task: mach_port_t,
        address: vm_address_t,
        size: vm_size_t,
    ) -> kern_return_t;
    /// `<pthread.h>` (Darwin): the Mach thread port of a pthread, without a new reference.
    pub fn pthread_mach_thread_np(thread: libc::pthread_t) -> mach_port_t;
    /// `<pthread.h>` (Darwin): the main thread.
    pub fn pthread_main_thread_np() -> libc::pthread_t;
    /// `<pthread.h>` (Darwin): the top (highest address) of a thread's stack.
    pub fn pthread_get_stackaddr_np(thread: libc::pthread_t) -> *mut c_void;
    /// `<pthread.h>` (Darwin): a thread's stack size in bytes.
    pub fn pthread_get_stacksize_np(thread: libc::pthread_t) -> usize;
    /// `<sys/sysctl.h>`.
    pub fn sysctlbyname(
        name: *const c_char,
        oldp: *mut c_void,
        oldlenp: *mut usize,
        newp: *mut c_void,
        newlen: usize,
    ) -> c_int;
    /// `<sys/sysctl.h>`.
    pub fn sysctl(
        name: *mut c_int,
        namelen: u32,
        oldp: *mut c_void,
        oldlenp: *mut usize,
        newp: *mut c_void,
        newlen: usize,
    ) -> c_int;

    /// `<mach-o/dyld.h>`.
    pub fn _dyld_register_func_for_add_image(
        func: unsafe extern "C" fn(header: *const mach_header, slide: isize),
    );
    /// `<mach-o/dyld.h>`.
    pub fn _dyld_get_image_header(index: u32) -> *const mach_header;
    /// `<mach/task.h>`.
    pub fn task_info(
        task: mach_port_t,
        flavor: u32,
        info: *mut c_int,
        count: *mut mach_msg_type_number_t,
    ) -> kern_return_t;
}

/// `<mach/task_info.h>`: `TASK_VM_INFO`.
pub const TASK_VM_INFO: u32 = 22;
/// `<mach/task_info.h>`: byte offset of `phys_footprint` in `struct task_vm_info` (after
/// `virtual_size`, `region_count`, `page_size` and 16 `mach_vm_size_t` counters), and
/// `TASK_VM_INFO_REV1_COUNT` (the revision that added it), in `natural_t` words.
pub const TASK_VM_INFO_PHYS_FOOTPRINT_OFFSET: usize = 144;
pub const TASK_VM_INFO_REV1_COUNT: mach_msg_type_number_t = 38;
const _: () =
    assert!(TASK_VM_INFO_PHYS_FOOTPRINT_OFFSET + 8 == TASK_VM_INFO_REV1_COUNT as usize * 4);

/// `<sys/sysctl.h>`: `CTL_KERN`, `KERN_PROC`, `KERN_PROC_PID`.
pub const CTL_KERN: c_int = 1;
pub const KERN_PROC: c_int = 14;
pub const KERN_PROC_PID: c_int = 1;
/// `<sys/sysctl.h>`: byte offset of `kp_proc.p_flag` in `struct kinfo_proc` (after
/// `p_un` (16 bytes), `p_vmspace` and `p_sigacts`), and `sizeof(struct kinfo_proc)` (648).
pub const KINFO_PROC_P_FLAG_OFFSET: usize = 32;
pub const KINFO_PROC_SIZE: usize = 648;
/// `<sys/sysctl.h>`: `kp_proc.p_un.__p_starttime`, a `struct timeval` at offset 0 of
/// `struct kinfo_proc` (`tv_sec` i64, then `tv_usec` i32).
pub const KINFO_PROC_P_STARTTIME_OFFSET: usize = 0;
/// `<sys/proc.h>`: the process is being debugged.
pub const P_TRACED: c_int = 0x0000_0800;

/// `mach_task_self()`.
pub fn mach_task_self() -> mach_port_t {
    // SAFETY: a variable libSystem initializes before any user code runs.
    unsafe { mach_task_self_ }
}
