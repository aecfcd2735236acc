#!/usr/bin/env python3
"""Writes combined-event.json: a React Native crash on Android in all three layers, as the Sentry
event an SDK sends (https://develop.sentry.dev/sdk/data-model/event-payloads/), composed from
three real crashes made in this repository, so that each layer's ground truth is known:

- JavaScript: the Hermes VM's stack of examples/rn-demo (dist/stack-hermes.txt, `address at
  index.android.bundle:1:OFFSET`), as `app:///index.android.bundle` frames with `lineno` 1 and
  `colno` = OFFSET + 1 (Sentry's columns are 1-based); `at map (native)` is a `[native code]`
  frame. Source map: release `com.example.demo@1.0+1`, dist `1`.
- Java: the ProGuard-obfuscated run of examples/android-demo (obfuscated-sentry.json: both
  exceptions, and its `proguard` debug image).
- Native: the crashed thread of examples/linux-demo/demo-app.dmp, walked with CFI (the JSON of
  `symctl symbolicate --debug-files demo-app.debug demo-app.dmp` on stdin), from the faulting
  instruction up to `main`, as `instruction_addr`s in the ELF image `libdemo.so` (the demo's
  debug id and load address).

The thrown exception (last in Sentry's list) is a SIGSEGV whose one stack crosses every layer, as
a call from JavaScript through a TurboModule into Java and from there into C++ would: oldest
first, the JavaScript frames, then the Java frames of the IllegalStateException, then the native
frames. The two Java exceptions come before it, as its causes.

Usage: python3 make_event.py < symbolicated-minidump.json > combined-event.json (generate.sh).
Standard library only.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from fixturelib import walked_chain  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "/data/app/~~demo==/com.example.demo-1==/lib/x86_64/libdemo.so"


def js_frames():
    """The Hermes stack's frames, oldest call first."""
    frames = []
    with open(os.path.join(HERE, "../rn-demo/dist/stack-hermes.txt")) as f:
        for line in f:
            line = line.strip()
            m = re.fullmatch(r"at (\S+) \(address at ([^:]+):(\d+):(\d+)\)", line)
            if m:
                frames.append({
                    "function": m.group(1),
                    "abs_path": "app:///" + m.group(2),
                    "lineno": int(m.group(3)),
                    "colno": int(m.group(4)) + 1,
                    "platform": "javascript",
                })
                continue
            m = re.fullmatch(r"at (\S+) \(native\)", line)
            if m:
                frames.append({
                    "function": m.group(1),
                    "filename": "[native code]",
                    "platform": "javascript",
                })
    return frames[::-1]


def native_frames(result):
    """The crashed thread's frames walked by CFI in the demo, faulting instruction first, as
    (instruction_addr frames, module)."""
    chain, module = walked_chain(result)
    frames = [{"instruction_addr": f["instruction_addr"], "platform": "native"} for f in chain]
    return frames, module


def main():
    result = json.load(sys.stdin)
    native, module = native_frames(result)
    with open(os.path.join(HERE, "../android-demo/obfuscated-sentry.json")) as f:
        java = json.load(f)
    causes = java["exception"]["values"]
    cause_frames = [dict(f, platform="java") for f in causes[0]["stacktrace"]["frames"]]
    thrown = {
        "type": "SIGSEGV",
        "value": "Segmentation fault",
        "mechanism": {"type": "signalhandler", "handled": False},
        "stacktrace": {"frames": js_frames() + cause_frames + native[::-1]},
    }
    event = {
        "platform": "javascript",
        "release": "com.example.demo@1.0+1",
        "dist": "1",
        "sdk": {"name": "sentry.javascript.react-native"},
        "exception": {"values": causes + [thrown]},
        "debug_meta": {
            "images": java["debug_meta"]["images"] + [{
                "type": "elf",
                "code_file": LIB,
                "debug_id": module["debug_id"],
                "image_addr": module["image_addr"],
                "image_size": module["image_size"],
                "arch": "x86_64",
            }],
        },
    }
    json.dump(event, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
