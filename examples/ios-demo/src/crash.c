/* DemoApp, the C half: the crash, and a helper that is always inlined.
 *
 * This is test-fixture source: the crash reports and expected.md generated
 * from it depend on these line numbers. Do not move the marked lines:
 *   line 23  crash_write_null: `*target = value;`          [frame 0]  faulting store
 *   line 33  validate_total:   `crash_write_null(total);`  [frame 1a] call (inlined code)
 *   line 41  process_order:    `validate_total(total + 1)` [frame 1b] inline call site
 * make_reports.py finds the `[frame ..]` markers and fails if they moved.
 */
#include "demo.h"

volatile int g_sink;
int *volatile g_null_target; /* never assigned: stays NULL */

/* Not inlined: frame 0. A leaf, so at the crash lr still holds the return
 * address into process_order. */
__attribute__((noinline)) void crash_write_null(int value)
{
    /* volatile load: the compiler cannot prove the pointer is NULL */
    int *target = g_null_target;

    /* store through NULL -> EXC_BAD_ACCESS (SIGSEGV) at 0x0 */
    *target = value; /* [frame 0] */
    g_sink += 1;
}

/* Always inlined into process_order: an inline frame inside frame 1. */
static inline __attribute__((always_inline)) int validate_total(int total)
{
    if (total < 0)
        total = -total;
    /* a real bl that returns: there is work after it, so no tail call */
    crash_write_null(total); /* [frame 1a] */
    g_sink += total;
    return total * 2;
}

__attribute__((noinline)) int process_order(int total)
{
    /* validate_total is inlined here */
    int checked = validate_total(total + 1); /* [frame 1b] */
    g_sink += checked;
    return checked + 3;
}
