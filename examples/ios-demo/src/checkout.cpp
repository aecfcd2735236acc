// DemoApp, the C++ half: a class method in a namespace (C++-mangled symbol
// __ZN4demo8Checkout3runEi), and main.
//
// This is test-fixture source: the crash reports and expected.md generated
// from it depend on these line numbers. Do not move the marked lines:
//   line 23  demo::Checkout::run(int): `process_order(...)` [frame 2]
//   line 35  main:                     `checkout.run(argc)` [frame 3]
// make_reports.py finds the `[frame ..]` markers and fails if they moved.
// Built with -fno-exceptions -fno-rtti and no C++ standard library.

#include "demo.h"

namespace demo {

class Checkout {
public:
    int run(int items);
    int orders = 0;
};

__attribute__((noinline)) int Checkout::run(int items)
{
    int result = process_order(items * 10); // [frame 2]
    orders += 1;
    g_sink += result; // work after the call: not a tail call
    return result;
}

} // namespace demo

int main(int argc, char **argv)
{
    (void)argv;
    demo::Checkout checkout;
    int result = checkout.run(argc); // [frame 3]
    g_sink += result + checkout.orders;
    return 0;
}
