/*
 * A test app that links the SDK's static library and crashes (or hangs) for real.
 *
 *   crasher REPORT_DIR null|abort|overflow|thread|hang|hang-forever
 *   crasher REPORT_DIR chain            (the app's own SIGSEGV handler, installed first, still runs)
 *   crasher REPORT_DIR two-threads      (two threads crash at the same moment)
 *   crasher REPORT_DIR tiny-altstack    (the app gives the main thread a 4 KiB alternate stack
 *                                        above a guard page: the SDK's handler overflows it)
 *   crasher REPORT_DIR send ENDPOINT TOKEN      (sends pending reports, prints how many)
 *
 * Each crash site ends with a [sdk-frame NAME] marker; the tests read the expected line numbers
 * from these markers. Compiled with -g -O0 -fno-omit-frame-pointer by the tests.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "symcluster_sdk.h"

__attribute__((noinline)) static void crash_null_deref(void) {
    volatile int *p = (volatile int *)0;
    *p = 42; /* [sdk-frame null] */
}

__attribute__((noinline)) static void call_abort(void) {
    abort(); /* [sdk-frame abort] */
}

__attribute__((noinline)) static int recurse_forever(int depth) {
    volatile char pad[512];
    pad[0] = (char)depth;
    return recurse_forever(depth + 1) + pad[0]; /* [sdk-frame overflow] */
}

static void *crashing_thread(void *arg) {
    (void)arg;
    symcluster_sdk_thread_init();
    crash_null_deref(); /* [sdk-frame thread] */
    return NULL;
}

/* The app's own crash handler, installed before the SDK: it must still run. */
static void previous_handler(int sig, siginfo_t *info, void *ctx) {
    (void)info;
    (void)ctx;
    char line[] = "previous handler ran for signal 00\n";
    line[sizeof line - 4] = (char)('0' + sig / 10);
    line[sizeof line - 3] = (char)('0' + sig % 10);
    write(1, line, sizeof line - 1);
    _exit(42);
}

static void install_previous_handler(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = previous_handler;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, NULL);
}

static pthread_barrier_t crash_together;

static void *crash_at_once(void *arg) {
    (void)arg;
    symcluster_sdk_thread_init();
    pthread_barrier_wait(&crash_together);
    crash_null_deref(); /* [sdk-frame two-threads] */
    return NULL;
}

/* A 4 KiB alternate signal stack right above an inaccessible guard page. */
static void install_tiny_altstack(void) {
    long page = sysconf(_SC_PAGESIZE);
    char *region = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(region, (size_t)page, PROT_NONE);
    stack_t ss;
    ss.ss_sp = region + page;
    ss.ss_size = (size_t)page;
    ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

__attribute__((noinline)) static void busy_wait_ms(long long ms) {
    long long end = now_ms() + ms;
    /* Spin without calls, so nearly every sample lands on the marked line. */
    while (now_ms() < end) {
        for (volatile int i = 0; i < 1000000; i++) {} /* [sdk-frame hang] */
    }
}

__attribute__((noinline)) static void block_main_thread(long long ms) {
    busy_wait_ms(ms); /* [sdk-frame hang-caller] */
}

static void run_loop(int iterations) {
    for (int i = 0; i < iterations; i++) {
        symcluster_sdk_heartbeat();
        usleep(10 * 1000);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: crasher REPORT_DIR MODE [ENDPOINT TOKEN]\n");
        return 2;
    }
    const char *mode = argv[2];
    if (strcmp(mode, "send") == 0) {
        if (argc < 5) return 2;
        printf("%d\n", symcluster_sdk_send_pending(argv[1], argv[3], argv[4]));
        return 0;
    }
    if (strcmp(mode, "chain") == 0) install_previous_handler();
    symcluster_sdk_set_app_version("1.2 (34)");
    if (symcluster_sdk_install(argv[1]) != 0) {
        fprintf(stderr, "install failed\n");
        return 3;
    }
    if (strcmp(mode, "null") == 0) crash_null_deref();
    if (strcmp(mode, "chain") == 0) crash_null_deref();
    if (strcmp(mode, "tiny-altstack") == 0) {
        install_tiny_altstack();
        crash_null_deref();
    }
    if (strcmp(mode, "two-threads") == 0) {
        pthread_t a, b;
        pthread_barrier_init(&crash_together, NULL, 2);
        pthread_create(&a, NULL, crash_at_once, NULL);
        pthread_create(&b, NULL, crash_at_once, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }
    if (strcmp(mode, "abort") == 0) call_abort();
    if (strcmp(mode, "overflow") == 0) return recurse_forever(0);
    if (strcmp(mode, "thread") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, crashing_thread, NULL);
        pthread_join(t, NULL);
    }
    if (strcmp(mode, "hang") == 0 || strcmp(mode, "hang-forever") == 0) {
        symcluster_sdk_start_hang_watchdog(200, 500);
        run_loop(20);
        block_main_thread(strcmp(mode, "hang") == 0 ? 1500 : 60000);
        run_loop(50);
        return 0;
    }
    return 1;
}
