//! The main run loop's observer: tells the watchdog when a pass starts and when the main
//! thread goes to wait for events, so that a slow pass is measured from its start and an idle
//! main thread is never taken for a hung one.
//!
//! A `CFRunLoopObserver` for every activity (`<CoreFoundation/CFRunLoop.h>`), added to the
//! main run loop in `kCFRunLoopCommonModes`: `kCFRunLoopEntry`, `kCFRunLoopBeforeTimers`,
//! `kCFRunLoopBeforeSources`, `kCFRunLoopAfterWaiting` and `kCFRunLoopExit` (a nested run
//! loop's end: its caller goes on) answer the watchdog ([`crate::watchdog::heartbeat`]: the main
//! thread is making progress); `kCFRunLoopBeforeWaiting` marks it idle
//! ([`crate::watchdog::will_wait`]).

use std::ffi::c_void;

type CFRunLoopRef = *mut c_void;
type CFRunLoopObserverRef = *mut c_void;
type CFStringRef = *const c_void;
/// `CFOptionFlags` (`unsigned long`).
type CFRunLoopActivity = usize;

const K_CF_RUN_LOOP_ENTRY: CFRunLoopActivity = 1 << 0;
const K_CF_RUN_LOOP_BEFORE_TIMERS: CFRunLoopActivity = 1 << 1;
const K_CF_RUN_LOOP_BEFORE_SOURCES: CFRunLoopActivity = 1 << 2;
const K_CF_RUN_LOOP_BEFORE_WAITING: CFRunLoopActivity = 1 << 5;
const K_CF_RUN_LOOP_AFTER_WAITING: CFRunLoopActivity = 1 << 6;
const K_CF_RUN_LOOP_EXIT: CFRunLoopActivity = 1 << 7;
const K_CF_RUN_LOOP_ALL_ACTIVITIES: CFRunLoopActivity = 0x0FFF_FFFF;

#[cfg_attr(
    target_vendor = "apple",
    link(name = "CoreFoundation", kind = "framework")
)]
unsafe extern "C" {
    /// `<CoreFoundation/CFRunLoop.h>`.
    fn CFRunLoopGetMain() -> CFRunLoopRef;
    /// `<CoreFoundation/CFRunLoop.h>`: `context` may be NULL; `repeats` is a `Boolean`.
    fn CFRunLoopObserverCreate(
        allocator: *const c_void,
        activities: CFRunLoopActivity,
        repeats: u8,
        order: isize,
        callout: extern "C" fn(CFRunLoopObserverRef, CFRunLoopActivity, *mut c_void),
        context: *mut c_void,
    ) -> CFRunLoopObserverRef;
    /// `<CoreFoundation/CFRunLoop.h>`.
    fn CFRunLoopAddObserver(rl: CFRunLoopRef, observer: CFRunLoopObserverRef, mode: CFStringRef);
    /// `<CoreFoundation/CFRunLoop.h>`.
    static kCFRunLoopCommonModes: CFStringRef;
}

extern "C" fn observe(
    _observer: CFRunLoopObserverRef,
    activity: CFRunLoopActivity,
    _: *mut c_void,
) {
    match activity {
        K_CF_RUN_LOOP_ENTRY
        | K_CF_RUN_LOOP_BEFORE_TIMERS
        | K_CF_RUN_LOOP_BEFORE_SOURCES
        | K_CF_RUN_LOOP_AFTER_WAITING
        // A nested run loop's exit: the outer handler goes on running.
        | K_CF_RUN_LOOP_EXIT => crate::watchdog::heartbeat(),
        K_CF_RUN_LOOP_BEFORE_WAITING => crate::watchdog::will_wait(),
        _ => {}
    }
}

/// Adds the observer to the main run loop (once per call: call it once). Returns whether it
/// was added.
pub fn observe_main() -> bool {
    // SAFETY: CoreFoundation calls with a null allocator (the default) and a null context
    // (allowed); the observer lives for the process (never released).
    unsafe {
        let observer = CFRunLoopObserverCreate(
            std::ptr::null(),
            K_CF_RUN_LOOP_ALL_ACTIVITIES,
            1,
            // Before other observers (UIKit's are ordered around 2,000,000).
            isize::MIN,
            observe,
            std::ptr::null_mut(),
        );
        if observer.is_null() {
            return false;
        }
        CFRunLoopAddObserver(CFRunLoopGetMain(), observer, kCFRunLoopCommonModes);
        true
    }
}
