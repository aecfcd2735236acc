/* DemoApp: declarations shared by crash.c (C) and checkout.cpp (C++). */
#ifndef DEMO_H
#define DEMO_H

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque globals: volatile, so -O1 keeps every load and store and cannot
 * prove that g_null_target is NULL. */
extern volatile int g_sink;
extern int *volatile g_null_target;

int process_order(int total);
void crash_write_null(int value);

#ifdef __cplusplus
}
#endif

#endif /* DEMO_H */
