#!/usr/bin/env python3
"""Writes demo-app-tombstone.pb: the crash in demo-app.dmp (the Linux demo crashed for real) as
an Android protobuf tombstone (AOSP system/core/debuggerd/proto/tombstone.proto) whose library
is loaded straight from an APK: every app frame's file is
/data/app/~~demo==/com.example.demo-1==/base.apk!libdemo.so, mapped from offset 0x8000 of the
APK, with the ELF's GNU build id: what debuggerd writes for an app built with
extractNativeLibs=false. No Android device made it: the frames (pc, rel_pc) are the real
crash's, from `symctl symbolicate` of the minidump (its JSON on stdin), pcs of callers moved
back into their call by 1 byte as libunwindstack does on x86_64.

With --text it writes the same tombstone as debuggerd prints it (demo-app-tombstone.txt: the
text layout of AOSP's libdebuggerd/tombstone_proto_to_text.cpp: banner, ABI, thread, signal,
`backtrace:` with `#NN pc REL_PC  FILE (offset 0x…) (BuildId: …)` lines; no function names, as
for a stripped library).

Usage: symctl symbolicate --debug-files demo-app.debug demo-app.dmp | python3 make_tombstone.py [--text]
(make_minidump.sh runs it). Standard library only.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from fixturelib import walked_chain  # noqa: E402

BUILD_ID = "f66635e08e9824a2503726179d47ad6c3185164a"
APK = "/data/app/~~demo==/com.example.demo-1==/base.apk"
LIB = APK + "!libdemo.so"
APK_OFFSET = 0x8000


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(tag, wire, payload):
    return varint(tag << 3 | wire) + payload


def uint(tag, n):
    return field(tag, 0, varint(n)) if n else b""


def text(tag, s):
    data = s.encode()
    return field(tag, 2, varint(len(data)) + data) if data else b""


def message(tag, body):
    return field(tag, 2, varint(len(body)) + body)


def text_tombstone(thread, rel_pcs):
    tid = thread["id"]
    lines = [
        "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***",
        "Build fingerprint: 'symcluster/demo/x86_64:14/DEMO/1:user/release-keys'",
        "Revision: '0'",
        "ABI: 'x86_64'",
        "Timestamp: 2026-11-20 10:00:00.000000000+0000",
        "Process uptime: 1s",
        "Cmdline: demo-app",
        f"pid: {tid}, tid: {tid}, name: demo-app  >>> demo-app <<<",
        "uid: 10123",
        "signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0000000000000000",
        "Cause: null pointer dereference",
        "    rax 0000000000000000  rbx 0000000000000000  rcx 0000000000000000  rdx 0000000000000000",
        "    rip %016x  rbp 0000000000000000  rsp 0000000000000000" % int(thread["frames"][0]["instruction_addr"], 16),
        "",
        "%d total frames" % len(rel_pcs),
        "backtrace:",
    ]
    for i, rel_pc in enumerate(rel_pcs):
        lines.append(
            f"      #{i:02d} pc {rel_pc:016x}  {LIB} (offset {APK_OFFSET:#x}) (BuildId: {BUILD_ID})"
        )
    lines.append("")
    return "\n".join(lines) + "\n"


def main():
    result = json.load(sys.stdin)
    thread = next(t for t in result["threads"] if t["crashed"])
    # The exact chain: the frames walked by CFI, up to main (its caller is libc's).
    chain, app = walked_chain(result)
    base = int(app["image_addr"], 16)
    frames = []
    rel_pcs = []
    for f in chain:
        addr = int(f["instruction_addr"], 16)
        pc = addr if f["index"] == 0 else addr - 1
        rel_pcs.append(pc - base)
        frames.append(
            uint(1, pc - base) + uint(2, pc) + text(6, LIB) + uint(7, APK_OFFSET) + text(8, BUILD_ID)
        )
    if sys.argv[1:] == ["--text"]:
        sys.stdout.write(text_tombstone(thread, rel_pcs))
        return
    tid = thread["id"]
    registers = message(3, text(1, "rip") + uint(2, int(thread["frames"][0]["instruction_addr"], 16)))
    body = uint(1, 3)  # arch X86_64
    body += text(2, "symcluster/demo/x86_64:14/DEMO/1:user/release-keys")
    body += uint(5, tid) + uint(6, tid)
    signal = uint(1, 11) + text(2, "SIGSEGV") + uint(3, 1) + text(4, "SEGV_MAPERR")
    signal += uint(8, 1) + field(9, 0, varint(0))
    body += message(10, signal)
    entry = uint(1, tid) + message(
        2, uint(1, tid) + text(2, "demo-app") + registers + b"".join(message(4, f) for f in frames)
    )
    body += message(16, entry)
    mapping = uint(1, base) + uint(2, base + app["image_size"]) + uint(3, APK_OFFSET)
    mapping += uint(4, 1) + uint(6, 1) + text(7, APK)
    body += message(17, mapping)
    sys.stdout.buffer.write(body)


if __name__ == "__main__":
    main()
