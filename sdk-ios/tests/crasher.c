/*
 * A test app that links the SDK's static library and crashes (or hangs) for real.
 *
 *   crasher REPORT_DIR null|abort|overflow|thread|hang|hang-forever
 *   crasher REPORT_DIR chain            (the app's own SIGSEGV handler, installed first, still runs)
 *   crasher REPORT_DIR two-threads      (two threads crash at the same moment)
 *   crasher REPORT_DIR tiny-altstack    (the app gives the main thread a 4 KiB alternate stack
 *                                        above a guard page: the SDK's handler overflows it)
 *   crasher REPORT_DIR send ENDPOINT TOKEN      (sends pending reports, prints how many)
 *   crasher REPORT_DIR send-all-images ENDPOINT TOKEN   (the same, every image of each report)
 *   crasher REPORT_DIR cpu | cpu-burst  (a thread named "hog" spins until it is reported | for
 *                                        100 ms, under the CPU monitor; an idle thread sleeps)
 *   crasher REPORT_DIR cpu-main         (the main thread spins for 1.5 s inside main itself)
 *   crasher REPORT_DIR jank N           (N slow main run-loop passes of 400 ms, limit 2 a launch,
 *                                        the last ending in a 1.2 s wait for events)
 *   crasher REPORT_DIR oom              (allocates and touches memory until the system ends it)
 *   crasher REPORT_DIR wait | clean     (waits to be killed | exits normally at once)
 *   crasher REPORT_DIR launch           (marks its first frame 300 ms after start, twice)
 *
 * The app version is "1.2 (34)", or $CRASHER_APP_VERSION.
 *
 * Each crash site ends with a [sdk-frame NAME] marker; the tests read the expected line numbers
 * from these markers. Compiled with -g -O0 -fno-omit-frame-pointer by the tests.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
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

/* `many-threads`: threads that each wait 100 calls deep while the main thread crashes. */
#define DEEP_THREADS 200
static pthread_barrier_t deep_ready;

__attribute__((noinline)) static int deep_then_wait(int depth) {
    volatile char pad[16];
    pad[0] = (char)depth;
    if (depth == 0) {
        pthread_barrier_wait(&deep_ready);
        for (;;) pause();
    }
    return deep_then_wait(depth - 1) + pad[0];
}

static void *deep_thread(void *arg) {
    (void)arg;
    deep_then_wait(100);
    return NULL;
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

/* The CPU hog: spins until `ms` have passed. */
__attribute__((noinline)) static void spin_hog(long long ms) {
    busy_wait_ms(ms); /* [sdk-frame cpu] */
}

static long long hog_ms;
static const char *report_dir;

/* Whether a `cpu-*.json` report is in the report directory. */
static int has_cpu_report(void) {
    DIR *dir = opendir(report_dir);
    if (dir == NULL) return 0;
    int found = 0;
    struct dirent *entry;
    while (!found && (entry = readdir(dir)) != NULL) {
        size_t len = strlen(entry->d_name);
        found = strncmp(entry->d_name, "cpu-", 4) == 0 && len > 5 &&
                strcmp(entry->d_name + len - 5, ".json") == 0;
    }
    closedir(dir);
    return found;
}

/* Spins `hog_ms` (100: a burst), or in 50 ms steps until the CPU monitor reported it (at
 * most 10 s): one hog, one report. */
static void *hog_thread(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "hog");
    if (hog_ms > 0) {
        spin_hog(hog_ms);
        return NULL;
    }
    long long end = now_ms() + 10000;
    while (!has_cpu_report() && now_ms() < end) spin_hog(50);
    return NULL;
}

static void *idle_thread(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "idle");
    usleep(3500 * 1000);
    return NULL;
}

/* Allocates 1 MiB at a time, touching every page, until the system ends the process. */
__attribute__((noinline)) static void eat_memory(void) {
    for (;;) {
        char *chunk = malloc(1 << 20);
        if (chunk == NULL) continue;
        memset(chunk, 7, 1 << 20); /* [sdk-frame oom] */
        usleep(2 * 1000);
    }
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
    if (strcmp(mode, "send") == 0 || strcmp(mode, "send-all-images") == 0) {
        if (argc < 5) return 2;
        if (strcmp(mode, "send-all-images") == 0) symcluster_sdk_set_send_all_images(true);
        printf("%d\n", symcluster_sdk_send_pending(argv[1], argv[3], argv[4]));
        return 0;
    }
    if (strcmp(mode, "chain") == 0) install_previous_handler();
    /* 200 threads 100 calls deep do not fit in 128 KiB: the report is cut, and stays whole. */
    if (strcmp(mode, "many-threads") == 0) symcluster_sdk_set_report_bytes(128 * 1024);
    const char *version = getenv("CRASHER_APP_VERSION");
    symcluster_sdk_set_app_version(version != NULL ? version : "1.2 (34)");
    symcluster_sdk_set_memory_interval(20);
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
    if (strcmp(mode, "many-threads") == 0) {
        pthread_barrier_init(&deep_ready, NULL, DEEP_THREADS + 1);
        for (int i = 0; i < DEEP_THREADS; i++) {
            pthread_t t;
            pthread_create(&t, NULL, deep_thread, NULL);
        }
        pthread_barrier_wait(&deep_ready);
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
    if (strcmp(mode, "cpu") == 0 || strcmp(mode, "cpu-burst") == 0) {
        /* 50 ms intervals; 5 of the last 8 above 50 % of a core start sampling (50 %, not the
         * usual 80 %: the tests share two cores); 6 samples make a report. */
        if (symcluster_sdk_start_cpu_monitor(50, 50, 8, 5, 6) != 0) return 4;
        report_dir = argv[1];
        hog_ms = strcmp(mode, "cpu") == 0 ? 0 : 100;
        pthread_t hog, idle;
        pthread_create(&idle, NULL, idle_thread, NULL);
        usleep(200 * 1000);
        pthread_create(&hog, NULL, hog_thread, NULL);
        pthread_join(hog, NULL);
        pthread_join(idle, NULL);
        return 0;
    }
    if (strcmp(mode, "cpu-main") == 0) {
        /* The main thread hogs a core for 1.5 s inside main itself (no call into app code):
         * main's own frame is not app code, so no sample counts. */
        if (symcluster_sdk_start_cpu_monitor(50, 50, 8, 5, 6) != 0) return 4;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long end = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 1500;
        do {
            for (volatile int i = 0; i < 1000000; i++) {}
            clock_gettime(CLOCK_MONOTONIC, &ts);
        } while ((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 < end);
        return 0;
    }
    if (strcmp(mode, "jank") == 0) {
        int passes = argc > 3 ? atoi(argv[3]) : 1;
        const char *day = getenv("CRASHER_DAY_LIMIT");
        symcluster_sdk_set_report_limits(2, day != NULL ? (uint32_t)atoi(day) : 100);
        symcluster_sdk_start_hang_watchdog(200, 1000);
        run_loop(10);
        for (int i = 0; i < passes; i++) {
            block_main_thread(400);
            if (i + 1 < passes) run_loop(10);
        }
        /* The last slow pass ends in a wait for events (1.2 s, past the hang threshold): a jank,
         * and the idle wait is neither a jank nor a hang. */
        symcluster_sdk_runloop_will_wait();
        usleep(1200 * 1000);
        /* The watchdog writes a jank once it wakes (it sleeps up to 500 ms between samples). */
        run_loop(60);
        return 0;
    }
    if (strcmp(mode, "oom") == 0) {
        symcluster_sdk_set_breadcrumb("Settings");
        eat_memory();
    }
    if (strcmp(mode, "wait") == 0) {
        symcluster_sdk_set_breadcrumb("Checkout");
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (strcmp(mode, "clean") == 0) return 0;
    if (strcmp(mode, "launch") == 0) {
        usleep(300 * 1000);
        long long first = symcluster_sdk_mark_launched();
        long long second = symcluster_sdk_mark_launched();
        printf("%lld %lld\n", first, second);
        return 0;
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
