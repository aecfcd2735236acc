#!/usr/bin/env python3
"""Writes the DemoApp crash reports and expected.md (called by generate.sh).

Standard library only. Reads the arm64 binary with llvm-objdump / llvm-nm / llvm-dwarfdump:
  frame 0  = the faulting store in crash_write_null (its exact address),
  frame 1  = return address of `bl _crash_write_null` in process_order,
  frame 2  = return address of `bl _process_order` in demo::Checkout::run(int),
  frame 3  = return address of `bl demo::Checkout::run(int)` in main,
  frame 4  = a made-up libdyld `start` frame,
and writes the same crash, as loaded at LOAD_ADDR, in three formats:
  DemoApp.crash        Apple text crash report (Report Version 104)
  DemoApp.ips          Apple JSON crash report (iOS 15+, bug_type 309)
  DemoApp-sentry.json  Sentry event
The ground truth in expected.md comes from the source: the function names are fixed in
../common/fixturelib.py (app_frames, shared with ../linux-demo) and the line numbers are those
of the `[frame ..]` markers in src/, which must be where the comments in src/ say they are.
Then every row is checked with llvm-symbolizer on the dSYMs; any disagreement is an error.
The marker check, the call-site search and the llvm-symbolizer check are fixturelib's; the
Mach-O/arm64 specifics and the report formats are here.
"""

import hashlib
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from fixturelib import app_frames, check_source, dashed_uuid, die, run  # noqa: E402
from fixturelib import find_addresses, read_disassembly, verify  # noqa: E402
from fixturelib import parse_args, truth_table, unadjusted_notes  # noqa: E402

LOAD_ADDR = 0x104F48000  # where the app image was loaded in the crashed process
TEXT_VMADDR = 0x100000000  # __TEXT vmaddr of the binary (checked)

# --- the crashed process (all made up, fixed for reproducibility) ---------------------------
PID = 1234
APP_NAME = "DemoApp"
BUNDLE_ID = "com.example.DemoApp"
APP_VERSION = "1.0"
APP_BUILD = "1"
APP_PATH = (
    "/private/var/containers/Bundle/Application/"
    "0C1D2E3F-4A5B-4C6D-8E7F-9A0B1C2D3E4F/DemoApp.app/DemoApp"
)
INCIDENT_ID = "5E1B3C2A-7D4F-4A8E-9B6C-0F1E2D3C4B5A"
CRASH_REPORTER_KEY = "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39"
HARDWARE_MODEL = "iPhone13,2"
OS_VERSION = "iPhone OS 15.0 (19A346)"
DATE_TIME = "2021-10-05 14:03:12.3456 +0200"
LAUNCH_TIME = "2021-10-05 14:03:09.1234 +0200"
HEADER_TIMESTAMP = "2021-10-05 14:03:12.00 +0200"
SENTRY_TIMESTAMP = "2021-10-05T12:03:12.345600Z"
SENTRY_EVENT_ID = "6c1f2b3a4d5e4f60a7b8c9d0e1f2a3b4"
THREAD_IDS = (41219, 41230)  # kernel thread ids in the .ips

# System images: made-up but well-formed, inside a made-up shared cache.
SHARED_CACHE = {"base": 0x183000000, "size": 0x3A000000}
SYSTEM_IMAGES = [
    # name, path, base, size
    ("libdyld.dylib", "/usr/lib/system/libdyld.dylib", 0x1A1B6B000, 0x37000),
    ("libsystem_kernel.dylib", "/usr/lib/system/libsystem_kernel.dylib", 0x1B93A9000, 0x33000),
    (
        "UIKitCore",
        "/System/Library/PrivateFrameworks/UIKitCore.framework/UIKitCore",
        0x184C5C000,
        0x1568000,
    ),
]
# System frames: (image name, symbol, symbol offset in image, offset in symbol)
START_FRAME = ("libdyld.dylib", "start", 0x5F18, 4)
THREAD1_FRAMES = [
    ("libsystem_kernel.dylib", "mach_msg_trap", 0x14F0, 8),
    ("libsystem_kernel.dylib", "mach_msg", 0x1B28, 76),
]

# --- the ground truth, from the source (fixturelib) -----------------------------------------
# Mach-O symbols are the C names with a leading underscore.
APP_FRAMES = app_frames(symbol_prefix="_")

# argc = 1 -> run(1) -> process_order(10) -> validate_total(11) -> crash_write_null(11)
CRASH_VALUE = 11


def fake_uuid(name):
    """A stable, well-formed, made-up UUID (lowercase, dashed) for a system image."""
    h = hashlib.md5(f"symcluster ios-demo {name}".encode()).hexdigest()
    h = h[:12] + "3" + h[13:16] + "8" + h[17:]  # looks like an RFC 4122 v3 UUID
    return dashed_uuid(h)


# --- reading the binary --------------------------------------------------------------------
def read_text_segment(objdump, binary):
    out = run([objdump, "--macho", "--private-headers", binary])
    m = re.search(r"segname __TEXT\n\s*vmaddr (0x[0-9a-f]+)\n\s*vmsize (0x[0-9a-f]+)", out)
    if not m:
        die("no __TEXT segment in the load commands")
    return int(m.group(1), 16), int(m.group(2), 16)


def read_symbols(nm, binary):
    syms = {}
    for line in run([nm, "--defined-only", binary]).splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    return syms


def read_disassembly_macho(objdump, binary):
    """{function symbol: [(addr, mnemonic, operands)]} of __TEXT,__text."""

    def header(line):  # `symbol:`, but not the `path:` line that starts the listing
        m = re.match(r"^(\S+):$", line)
        return m.group(1) if m and not line.startswith(binary) else None

    return read_disassembly([objdump, "-d", "--macho", "--no-show-raw-insn", binary], header)


def read_uuids(dwarfdump, path):
    """[(arch, uuid lowercase dashed)] of a binary or dSYM."""
    out = run([dwarfdump, "--uuid", path])
    return [
        (arch, uuid.lower())
        for uuid, arch in re.findall(r"^UUID: ([0-9A-Fa-f-]{36}) \((\S+)\)", out, re.M)
    ]


# AArch64, as llvm-objdump writes it, for find_addresses.
ARM64 = {
    # `*target = value`: a store through a register that is not sp.
    "is_store": lambda i: i[1] in ("str", "stur", "strb", "strh")
    and re.fullmatch(r"[wx]\w+, \[x\d+\]", i[2]) is not None,
    "is_call": lambda i, callee, target: i[1] == "bl"
    and (i[2] == callee or i[2].split(";")[0].strip() in (hex(target), f"{target:x}")),
    "call_text": lambda callee: f"bl {callee}",
    "returns": ("ret",),
    "call_back": 4,  # the `bl` is the 4 bytes before the return address
}


# --- the reports ---------------------------------------------------------------------------
def runtime(file_addr):
    return file_addr - TEXT_VMADDR + LOAD_ADDR


class Crash:
    """Everything the three report writers share."""

    def __init__(self, uuid, text_size):
        self.uuid = uuid  # lowercase, dashed
        self.images = [
            {
                "name": APP_NAME,
                "path": APP_PATH,
                "base": LOAD_ADDR,
                "size": text_size,
                "uuid": uuid,
                "arch": "arm64",
            }
        ] + [
            {
                "name": name,
                "path": path,
                "base": base,
                "size": size,
                "uuid": fake_uuid(name),
                "arch": "arm64e",
            }
            for name, path, base, size in SYSTEM_IMAGES
        ]
        self.index = {img["name"]: i for i, img in enumerate(self.images)}

        def sys_frame(image, symbol, sym_off, delta):
            i = self.index[image]
            return {
                "image": i,
                "addr": self.images[i]["base"] + sym_off + delta,
                "symbol": symbol,
                "symbol_location": delta,
            }

        app = [
            {"image": 0, "addr": runtime(f["addr"]), "symbol": None} for f in APP_FRAMES
        ]
        self.thread0 = app + [sys_frame(*START_FRAME)]
        self.thread1 = [sys_frame(*f) for f in THREAD1_FRAMES]

        pc = self.thread0[0]["addr"]
        lr = self.thread0[1]["addr"]  # crash_write_null is a leaf: lr is frame 1
        fp = 0x16B0BF910  # process_order's frame
        sp = fp - 16  # process_order's sp (crash_write_null has no frame)
        x = [0] * 29
        x[0] = CRASH_VALUE  # value (w0)
        x[1] = 1  # items, left over from run()
        x[2], x[3] = 0x16B0BFA38, 0x16B0BFA48  # argv, envp left over
        x[8] = 0  # target, loaded from g_null_target
        x[9] = 0x5  # leftover
        x[19] = CRASH_VALUE  # process_order keeps `total` in w19
        x[20] = 0x16B0BF960
        self.regs = {"x": x, "fp": fp, "lr": lr, "sp": sp, "pc": pc,
                     "cpsr": 0x60000000, "far": 0, "esr": 0x92000046}
        self.esr_description = "(Data Abort) byte write Translation fault"


def frame_line(n, crash, f):
    img = crash.images[f["image"]]
    if f["symbol"] is None:
        where = f"0x{img['base']:x} + {f['addr'] - img['base']}"
    else:
        where = f"{f['symbol']} + {f['symbol_location']}"
    return f"{n:<4}{img['name']:<30}\t0x{f['addr']:016x} {where}"


def write_text(crash, path):
    r = crash.regs
    lines = [
        f"Incident Identifier: {INCIDENT_ID}",
        f"CrashReporter Key:   {CRASH_REPORTER_KEY}",
        f"Hardware Model:      {HARDWARE_MODEL}",
        f"Process:             {APP_NAME} [{PID}]",
        f"Path:                {APP_PATH}",
        f"Identifier:          {BUNDLE_ID}",
        f"Version:             {APP_BUILD} ({APP_VERSION})",
        "Code Type:           ARM-64 (Native)",
        "Role:                Foreground",
        "Parent Process:      launchd [1]",
        f"Coalition:           {BUNDLE_ID} [789]",
        "",
        f"Date/Time:           {DATE_TIME}",
        f"Launch Time:         {LAUNCH_TIME}",
        f"OS Version:          {OS_VERSION}",
        "Release Type:        User",
        "Report Version:      104",
        "",
        "Exception Type:  EXC_BAD_ACCESS (SIGSEGV)",
        "Exception Subtype: KERN_INVALID_ADDRESS at 0x0000000000000000",
        "Exception Codes: 0x0000000000000001, 0x0000000000000000",
        "Exception Note:  EXC_CORPSE_NOTIFY",
        "Termination Signal: Segmentation fault: 11",
        "Termination Reason: Namespace SIGNAL, Code 0xb",
        f"Terminating Process: exc handler [{PID}]",
        "Crashed Thread:  0",
        "",
        "Thread 0 name:  Dispatch queue: com.apple.main-thread",
        "Thread 0 Crashed:",
    ]
    lines += [frame_line(n, crash, f) for n, f in enumerate(crash.thread0)]
    lines += ["", "Thread 1:"]
    lines += [frame_line(n, crash, f) for n, f in enumerate(crash.thread1)]
    lines += ["", "Thread 0 crashed with ARM Thread State (64-bit):"]
    regs = [(f"x{i}", f"0x{v:016x}") for i, v in enumerate(r["x"])]
    regs += [("fp", f"0x{r['fp']:016x}"), ("lr", f"0x{r['lr']:016x}")]
    for i in range(0, len(regs), 4):
        lines.append("".join(f"{k:>6}: {v}" for k, v in regs[i : i + 4]))
    lines.append(f"    sp: 0x{r['sp']:016x}    pc: 0x{r['pc']:016x}  cpsr: 0x{r['cpsr']:08x}")
    lines.append(f"   far: 0x{r['far']:016x}   esr: 0x{r['esr']:08x} {crash.esr_description}")
    lines += ["", "Binary Images:"]
    for img in sorted(crash.images, key=lambda i: i["base"]):
        start = f"0x{img['base']:x}"
        end = f"0x{img['base'] + img['size'] - 1:x}"
        uuid = img["uuid"].replace("-", "")
        lines.append(
            f"{start:>18} - {end:>18} {img['name']} {img['arch']}  <{uuid}> {img['path']}"
        )
    lines += ["", "EOF", ""]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines))


def write_ips(crash, path):
    r = crash.regs
    header = {
        "app_name": APP_NAME,
        "timestamp": HEADER_TIMESTAMP,
        "app_version": APP_VERSION,
        "slice_uuid": crash.uuid,
        "build_version": APP_BUILD,
        "platform": 2,
        "bundleID": BUNDLE_ID,
        "share_with_app_devs": 0,
        "is_first_party": 0,
        "bug_type": "309",
        "os_version": OS_VERSION,
        "incident_id": INCIDENT_ID,
        "name": APP_NAME,
    }

    def frames(list_):
        out = []
        for f in list_:
            img = crash.images[f["image"]]
            d = {"imageOffset": f["addr"] - img["base"]}
            if f["symbol"] is not None:
                d["symbol"] = f["symbol"]
                d["symbolLocation"] = f["symbol_location"]
            d["imageIndex"] = f["image"]
            out.append(d)
        return out

    used_images = []
    for img in crash.images:
        d = {
            "source": "P",
            "arch": img["arch"],
            "base": img["base"],
            "size": img["size"],
            "uuid": img["uuid"],
            "path": img["path"],
            "name": img["name"],
        }
        if img["name"] == APP_NAME:
            d["CFBundleShortVersionString"] = APP_VERSION
            d["CFBundleIdentifier"] = BUNDLE_ID
            d["CFBundleVersion"] = APP_BUILD
        used_images.append(d)

    body = {
        "uptime": 86000,
        "procLaunch": LAUNCH_TIME,
        "procRole": "Foreground",
        "version": 2,
        "userID": 501,
        "deployVersion": 210,
        "modelCode": HARDWARE_MODEL,
        "coalitionID": 789,
        "osVersion": {
            "isEmbedded": True,
            "train": "iPhone OS 15.0",
            "releaseType": "User",
            "build": "19A346",
        },
        "captureTime": DATE_TIME,
        "incident": INCIDENT_ID,
        "bug_type": "309",
        "pid": PID,
        "cpuType": "ARM-64",
        "procName": APP_NAME,
        "procPath": APP_PATH,
        "bundleInfo": {
            "CFBundleShortVersionString": APP_VERSION,
            "CFBundleVersion": APP_BUILD,
            "CFBundleIdentifier": BUNDLE_ID,
        },
        "parentProc": "launchd",
        "parentPid": 1,
        "coalitionName": BUNDLE_ID,
        "crashReporterKey": CRASH_REPORTER_KEY,
        "exception": {
            "codes": "0x0000000000000001, 0x0000000000000000",
            "rawCodes": [1, 0],
            "type": "EXC_BAD_ACCESS",
            "signal": "SIGSEGV",
            "subtype": "KERN_INVALID_ADDRESS at 0x0000000000000000",
        },
        "termination": {
            "flags": 0,
            "code": 11,
            "namespace": "SIGNAL",
            "indicator": "Segmentation fault: 11",
            "byProc": "exc handler",
            "byPid": PID,
        },
        "faultingThread": 0,
        "threads": [
            {
                "triggered": True,
                "id": THREAD_IDS[0],
                "threadState": {
                    "x": [{"value": v} for v in r["x"]],
                    "flavor": "ARM_THREAD_STATE64",
                    "lr": {"value": r["lr"]},
                    "cpsr": {"value": r["cpsr"]},
                    "fp": {"value": r["fp"]},
                    "sp": {"value": r["sp"]},
                    "esr": {"value": r["esr"], "description": crash.esr_description},
                    "pc": {"value": r["pc"], "matchesCrashFrame": 1},
                    "far": {"value": r["far"]},
                },
                "queue": "com.apple.main-thread",
                "frames": frames(crash.thread0),
            },
            {"id": THREAD_IDS[1], "frames": frames(crash.thread1)},
        ],
        "usedImages": used_images,
        "sharedCache": {
            "base": SHARED_CACHE["base"],
            "size": SHARED_CACHE["size"],
            "uuid": fake_uuid("dyld_shared_cache_arm64e"),
        },
        "legacyInfo": {"threadTriggered": {"queue": "com.apple.main-thread"}},
    }
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(header, separators=(",", ":")))
        f.write("\n")
        f.write(json.dumps(body, indent=2, separators=(",", " : ")))
        f.write("\n")


def write_sentry(crash, path):
    r = crash.regs

    def frames(list_):
        out = []
        for f in reversed(list_):  # Sentry: outermost first
            img = crash.images[f["image"]]
            d = {
                "instruction_addr": f"0x{f['addr']:x}",
                "image_addr": f"0x{img['base']:x}",
                "package": img["path"],
                "in_app": img["name"] == APP_NAME,
            }
            if f["symbol"] is not None:
                d["function"] = f["symbol"]
                d["symbol_addr"] = f"0x{f['addr'] - f['symbol_location']:x}"
            out.append(d)
        return out

    registers = {f"x{i}": f"0x{v:x}" for i, v in enumerate(r["x"])}
    registers.update({k: f"0x{r[k]:x}" for k in ("fp", "lr", "sp", "pc", "cpsr")})

    images = []
    for img in crash.images:
        d = {
            "type": "macho",
            "debug_id": img["uuid"],
            "code_file": img["path"],
            "image_addr": f"0x{img['base']:x}",
            "image_size": img["size"],
            "arch": img["arch"],
        }
        if img["name"] == APP_NAME:
            d["image_vmaddr"] = f"0x{TEXT_VMADDR:x}"
        images.append(d)

    event = {
        "event_id": SENTRY_EVENT_ID,
        "timestamp": SENTRY_TIMESTAMP,
        "platform": "cocoa",
        "level": "fatal",
        "release": f"{BUNDLE_ID}@{APP_VERSION}+{APP_BUILD}",
        "dist": APP_BUILD,
        "contexts": {
            "device": {"family": "iOS", "model": HARDWARE_MODEL, "arch": "arm64"},
            "os": {"name": "iOS", "version": "15.0", "build": "19A346"},
            "app": {
                "app_identifier": BUNDLE_ID,
                "app_name": APP_NAME,
                "app_version": APP_VERSION,
                "app_build": APP_BUILD,
            },
        },
        "debug_meta": {"images": images},
        "exception": {
            "values": [
                {
                    "type": "EXC_BAD_ACCESS",
                    "value": "KERN_INVALID_ADDRESS at 0x0000000000000000",
                    "thread_id": 0,
                    "mechanism": {
                        "type": "mach",
                        "handled": False,
                        "meta": {
                            "signal": {"number": 11, "code": 0, "name": "SIGSEGV"},
                            "mach_exception": {
                                "exception": 1,
                                "code": 1,
                                "subcode": 0,
                                "name": "EXC_BAD_ACCESS",
                            },
                        },
                    },
                    "stacktrace": {"frames": frames(crash.thread0), "registers": registers},
                }
            ]
        },
        "threads": {
            "values": [
                {"id": 0, "crashed": True, "current": True,
                 "name": "com.apple.main-thread"},
                {"id": 1, "crashed": False, "current": False,
                 "stacktrace": {"frames": frames(crash.thread1)}},
            ]
        },
    }
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(event, indent=2))
        f.write("\n")


def write_expected(crash, path, text_size, fat_uuids, unadjusted):
    base_end = LOAD_ADDR + text_size - 1
    out = [
        "# DemoApp crash: ground truth",
        "",
        "Generated by `generate.sh` (`make_reports.py`); do not edit by hand.",
        "",
        "The function names and lines below come from the source (`src/`, the `[frame ..]`",
        "markers), not from a symbolicator; `generate.sh` then checked every row with",
        "`llvm-symbolizer --inlines` against `DemoApp.dSYM` and the arm64 slice of",
        "`DemoAppFat.dSYM`, and they agree.",
        "",
        "## Image",
        "",
        "| | |",
        "|---|---|",
        f"| UUID / debug_id | `{crash.uuid}` |",
        f"| load address | `0x{LOAD_ADDR:x}` (`0x{LOAD_ADDR:x}`-`0x{base_end:x}`) |",
        f"| `__TEXT` vmaddr / vmsize | `0x{TEXT_VMADDR:x}` / `0x{text_size:x}` |",
        "| runtime -> dSYM address | `addr - 0x%x + 0x%x` |" % (LOAD_ADDR, TEXT_VMADDR),
        "",
        "`DemoAppFat.dSYM` (`Contents/Resources/DWARF/DemoApp`) slices:",
        "",
    ]
    for arch, uuid in fat_uuids:
        note = "same binary as `DemoApp.dSYM`, the one the reports name" if uuid == crash.uuid \
            else "not in any report"
        out.append(f"- {arch}: `{uuid}` ({note})")
    out += [
        "",
        "## Thread 0 (crashed), innermost first",
        "",
        "Lookup address = the address itself for frame 0 (the faulting instruction), the return",
        "address - 4 (the `bl`) for the frames above it. Frame 1 is one address that expands to",
        "two frames: `validate_total` was inlined into `process_order`.",
        "",
        "| frame | instruction_addr | lookup (dSYM) | function | file | line | inlined |",
        "|---|---|---|---|---|---|---|",
    ]
    out += truth_table(APP_FRAMES, runtime)
    start = crash.thread0[len(APP_FRAMES)]
    out += [
        f"| {len(APP_FRAMES)} | `0x{start['addr']:x}` | - | `start` (libdyld.dylib, not in "
        "the dSYM) | - | - | - |",
        "",
        "Instructions: "
        + "; ".join(f"frame {f['index']} `{f['insn']}`" for f in APP_FRAMES)
        + " (frames 1-3 name the call; the report holds the address after it).",
        "",
        "Looking up the return address itself (no `- 4`) is wrong: llvm-symbolizer puts it on",
        "the statement after the call:",
        "",
    ]
    out += unadjusted_notes(APP_FRAMES, unadjusted)
    out += [
        "",
        "## Other frames",
        "",
        "Thread 1 (`mach_msg_trap + 8`, `mach_msg + 76` in libsystem_kernel.dylib) and frame 4",
        "are system frames with made-up addresses and UUIDs: no dSYM here covers them.",
        "`UIKitCore` is loaded (listed in the images) but on no stack.",
        "",
    ]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out))


def main():
    args = parse_args(
        __doc__,
        ["binary", "dsym", "fat-dsym", "src", "out-dir"],
        {t: f"llvm-{t}" for t in ("objdump", "nm", "dwarfdump", "symbolizer")},
    )

    check_source(args.src, APP_FRAMES)

    vmaddr, text_size = read_text_segment(args.objdump, args.binary)
    if vmaddr != TEXT_VMADDR:
        die(f"__TEXT vmaddr is {vmaddr:#x}, expected {TEXT_VMADDR:#x}")
    syms = read_symbols(args.nm, args.binary)
    funcs = read_disassembly_macho(args.objdump, args.binary)
    find_addresses(APP_FRAMES, funcs, syms, ARM64)

    (arch, uuid), = read_uuids(args.dwarfdump, args.binary)
    dsym_uuids = read_uuids(args.dwarfdump, args.dsym)
    fat_uuids = read_uuids(args.dwarfdump, args.fat_dsym)
    if dsym_uuids != [("arm64", uuid)]:
        die(f"{args.dsym} has UUIDs {dsym_uuids}, the binary {uuid}")
    if ("arm64", uuid) not in fat_uuids or len(fat_uuids) != 2:
        die(f"{args.fat_dsym} has UUIDs {fat_uuids}; expected arm64 {uuid} and one more")

    name = os.path.basename(args.binary)
    dwarf = os.path.join(args.dsym, "Contents", "Resources", "DWARF", name)
    fat_dwarf = os.path.join(args.fat_dsym, "Contents", "Resources", "DWARF", name)
    # Dies on any disagreement; returns what the unadjusted return addresses give (for the
    # notes in expected.md).
    unadjusted = verify(args.symbolizer, APP_FRAMES, [(dwarf, None), (fat_dwarf, "arm64")])

    crash = Crash(uuid, text_size)
    out = args.out_dir
    write_text(crash, os.path.join(out, "DemoApp.crash"))
    write_ips(crash, os.path.join(out, "DemoApp.ips"))
    write_sentry(crash, os.path.join(out, "DemoApp-sentry.json"))
    write_expected(crash, os.path.join(out, "expected.md"), text_size, fat_uuids, unadjusted)

    for f in APP_FRAMES:
        print(
            f"frame {f['index']}: {f['insn']:<34} file {f['addr']:#x}  "
            f"runtime {runtime(f['addr']):#x}  lookup {f['lookup']:#x}"
        )
    print("wrote DemoApp.crash DemoApp.ips DemoApp-sentry.json expected.md")


if __name__ == "__main__":
    main()
