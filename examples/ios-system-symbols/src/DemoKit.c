// A stand-in for a system framework (UIKitCore-like) that calls into the system library.
void demo_kernel_trap(int *where);
int demo_kernel_wait(int n);

volatile int demokit_events;

__attribute__((noinline)) void demokit_dispatch_event(int *target) {
    demokit_events += demo_kernel_wait(3);
    demo_kernel_trap(target);
    demokit_events += 1;
}

__attribute__((noinline)) void demokit_run_loop(int *target) {
    demokit_dispatch_event(target);
    demokit_events += 2;
}
