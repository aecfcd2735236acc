// A stand-in for a system library (libsystem_kernel.dylib-like): what an iOS DeviceSupport
// Symbols tree holds, a dylib with its symbol table and no DWARF.
volatile int demo_kernel_counter;

__attribute__((noinline)) void demo_kernel_trap(int *where) {
    demo_kernel_counter += 1;
    *where = demo_kernel_counter; // the crash: a write through a NULL pointer
}

__attribute__((noinline)) int demo_kernel_wait(int n) {
    for (int i = 0; i < n; i++) {
        demo_kernel_counter += i;
    }
    return demo_kernel_counter;
}
