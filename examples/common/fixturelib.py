"""What the DemoApp fixture generators share (imported by ../ios-demo/make_reports.py and
../linux-demo/make_request.py; standard library only).

Both build the same sources (ios-demo/src/) and crash in the same place, so the ground truth
is one: app_frames() below, from the `[frame ..]` markers in the source. Both then find the
frames' addresses in a disassembly, check every row with `llvm-symbolizer --inlines` and write
the crash in their own formats. Here:
  parse_args               the command line: the inputs, then the tools
  die, run                 errors and running the tools
  dashed_uuid              hex -> lowercase, dashed UUID
  app_frames, check_source the ground truth and the markers that document it
  read_disassembly         an objdump listing -> instructions per function
  find_addresses           the faulting store and the three call sites -> addresses
  symbolize, verify        llvm-symbolizer, and the ground truth checked against it
  truth_table, unadjusted_notes   the shared parts of expected.md
  walked_chain             the demo's crashed thread in a symbolicated minidump (the JSON of
                           `symctl symbolicate demo-app.dmp`), frame by frame, up to main
                           (../linux-demo/make_tombstone.py, ../rn-android/make_event.py)
The architecture- and format-specific parts stay in the generators.
"""

import argparse
import os
import re
import subprocess
import sys


def parse_args(doc, inputs, tools):
    """The command line of a generator (doc: its docstring): --INPUT for each of inputs,
    required, then --TOOL for each of tools, {tool: default}, the path of that tool."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name in inputs:
        ap.add_argument(f"--{name}", required=True)
    for name, default in tools.items():
        ap.add_argument(f"--{name}", default=default)
    return ap.parse_args()


def die(msg):
    sys.exit(f"{os.path.basename(sys.argv[0])}: error: {msg}")


def run(cmd):
    """The stdout of cmd; dies if it cannot be run or fails."""
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as e:
        die(f"{' '.join(cmd)} failed ({e.returncode}):\n{e.stderr}")
    except OSError as e:
        die(f"{' '.join(cmd)} failed: {e}")


def dashed_uuid(hex32):
    """32 hex digits as a UUID: lowercase, dashed."""
    h = hex32.lower()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# --- the ground truth, from the source ------------------------------------------------------
def app_frames(symbol_prefix=""):
    """The app frames of the crashed thread, innermost first.

    `in` and `callee` are symbol names as the object format spells them: the C names with
    symbol_prefix in front ("_" for Mach-O, "" for ELF). `rows` is innermost first (inline
    frames first), each (function as demangled, file, marker in that file, documented line,
    inlined?). The lines are where the `[frame ..]` markers are (check_source).
    """
    p = symbol_prefix
    return [
        {
            "index": 0,
            "in": p + "crash_write_null",
            "kind": "store",  # the faulting instruction itself
            "rows": [("crash_write_null", "crash.c", "frame 0", 23, False)],
        },
        {
            "index": 1,
            "in": p + "process_order",
            "kind": "call",
            "callee": p + "crash_write_null",
            "rows": [
                ("validate_total", "crash.c", "frame 1a", 33, True),
                ("process_order", "crash.c", "frame 1b", 41, False),
            ],
        },
        {
            "index": 2,
            "in": p + "_ZN4demo8Checkout3runEi",
            "kind": "call",
            "callee": p + "process_order",
            "rows": [("demo::Checkout::run(int)", "checkout.cpp", "frame 2", 23, False)],
        },
        {
            "index": 3,
            "in": p + "main",
            "kind": "call",
            "callee": p + "_ZN4demo8Checkout3runEi",
            "rows": [("main", "checkout.cpp", "frame 3", 35, False)],
        },
    ]


MARKER_RE = re.compile(r"(?://|/\*)\s*\[(frame \w+)\]\s*(?:\*/)?\s*$")


def source_markers(src_dir):
    """{(file, marker): 1-based line} for the `[frame ..]` markers at the end of code lines."""
    found = {}
    for name in sorted(os.listdir(src_dir)):
        with open(os.path.join(src_dir, name), encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                m = MARKER_RE.search(line)
                if m:
                    key = (name, m.group(1))
                    if key in found:
                        die(f"marker [{m.group(1)}] twice in {src_dir}/{name}")
                    found[key] = lineno
    return found


def check_source(src_dir, frames):
    """Dies unless every row's marker is on its documented line."""
    markers = source_markers(src_dir)
    for frame in frames:
        for _func, file, marker, line, _ in frame["rows"]:
            got = markers.get((file, marker))
            if got is None:
                die(f"marker [{marker}] not found in {src_dir}/{file}")
            if got != line:
                die(
                    f"marker [{marker}] is on line {got} of {src_dir}/{file}, documented as "
                    f"{line}: put the line back, or update the comments there and app_frames() "
                    "in examples/common/fixturelib.py"
                )


# --- reading the binary ---------------------------------------------------------------------
INSN_RE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*?)\s*$")


def read_disassembly(cmd, function_header):
    """{function symbol: [(addr, mnemonic, operands)]} from the disassembler run as cmd
    (without raw bytes). function_header(line) gives the symbol a line starts, or None."""
    funcs, cur = {}, None
    for line in run(cmd).splitlines():
        name = function_header(line)
        if name is not None:
            cur = funcs.setdefault(name, [])
            continue
        m = INSN_RE.match(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def find_addresses(frames, insns_by_func, syms, isa):
    """Fills, for each app frame, "addr" (file address, as a crash report has it), "lookup"
    (the address to look up), "insn" (what the instruction is, for expected.md) and, for the
    call frames, "call_addr".

    syms: {symbol: address}. isa describes the instruction set:
      is_store(insn)               a store through a pointer register (`*target = value`)
      is_call(insn, callee, addr)  a direct call of callee, at addr
      call_text(callee)            how expected.md names that call
      returns                      the return mnemonics
      call_back                    return address - call_back is inside the call
    """
    for frame in frames:
        name = frame["in"]
        insns = insns_by_func.get(name)
        if not insns:
            die(f"{name} not in the disassembly")
        if insns[0][0] != syms.get(name):
            die(f"{name}: the disassembly and the symbol table disagree on its address")
        if frame["kind"] == "store":
            stores = [i for i in insns if isa["is_store"](i)]
            if not stores:
                die(f"{name}: no store through a pointer register")
            frame["addr"] = stores[0][0]
            frame["insn"] = f"{stores[0][1]} {stores[0][2]}"
            frame["lookup"] = frame["addr"]
        else:
            callee = frame["callee"]
            calls = [(n, i) for n, i in enumerate(insns) if isa["is_call"](i, callee, syms[callee])]
            if len(calls) != 1:
                die(f"{name}: expected exactly one call of {callee}, found {len(calls)}")
            n, call = calls[0]
            # A sibling call would be a jump, found above as no call at all; still check that
            # the function goes on after the call and returns.
            if not any(i[1] in isa["returns"] for i in insns[n + 1 :]):
                die(f"{name}: no return after the call of {callee}")
            frame["call_addr"] = call[0]
            frame["insn"] = isa["call_text"](callee)
            frame["addr"] = insns[n + 1][0]  # the return address, as a stack walker has it
            frame["lookup"] = frame["addr"] - isa["call_back"]


# --- verification ---------------------------------------------------------------------------
def symbolize(symbolizer, obj, addrs, arch=None):
    """[[(function, file basename, line, path)]] per address, innermost first."""
    cmd = [symbolizer, "--inlines", "--demangle", f"--obj={obj}"]
    if arch:
        cmd.append(f"--default-arch={arch}")
    out = run(cmd + [hex(a) for a in addrs])
    result = []
    for block in out.strip("\n").split("\n\n"):
        lines = block.splitlines()
        rows = []
        for func, loc in zip(lines[0::2], lines[1::2]):
            path, line, _col = loc.rsplit(":", 2)
            rows.append((func, os.path.basename(path), int(line), path))
        result.append(rows)
    if len(result) != len(addrs):
        die(f"llvm-symbolizer gave {len(result)} answers for {len(addrs)} addresses:\n{out}")
    return result


def verify(symbolizer, frames, objs, path_prefix=None):
    """Checks the ground truth against llvm-symbolizer on each of objs, [(object, arch or
    None)], and, with path_prefix, that every source path starts with it; dies on any
    disagreement. Returns what the unadjusted return addresses of frames 1.. give on the first
    object, for the notes in expected.md."""
    print("ground truth (source) vs llvm-symbolizer:")
    problems = []
    for obj, arch in objs:
        answers = symbolize(symbolizer, obj, [f["lookup"] for f in frames], arch)
        for frame, rows in zip(frames, answers):
            want = [(func, file, line) for func, file, _, line, _ in frame["rows"]]
            got = [r[:3] for r in rows]
            print(f"  frame {frame['index']} @ {frame['lookup']:#x}: {got}")
            if got != want:
                problems.append(f"{obj} frame {frame['index']}: expected {want}, got {got}")
            for r in rows:
                if path_prefix is not None and not r[3].startswith(path_prefix):
                    problems.append(f"{obj} frame {frame['index']}: path {r[3]} is not mapped")
    if problems:
        die("the ground truth and llvm-symbolizer disagree:\n  " + "\n  ".join(problems))
    return symbolize(symbolizer, objs[0][0], [f["addr"] for f in frames[1:]])


# --- expected.md ----------------------------------------------------------------------------
def truth_table(frames, runtime):
    """The rows of the crashed thread's table: frame, instruction_addr (runtime(file
    address)), lookup, function, file, line, inlined."""
    out = []
    for f in frames:
        for func, file, _m, line, inlined in f["rows"]:
            inl = f"yes (into {f['rows'][-1][0]})" if inlined else "no"
            out.append(
                f"| {f['index']} | `0x{runtime(f['addr']):x}` | `0x{f['lookup']:x}` "
                f"| `{func}` | {file} | {line} | {inl} |"
            )
    return out


def unadjusted_notes(frames, unadjusted):
    """One line a call frame: what looking up the return address itself gives."""
    out = []
    for f, rows in zip(frames[1:], unadjusted):
        desc = ", ".join(f"`{func}` {file}:{line}" for func, file, line, _ in rows)
        out.append(f"- frame {f['index']} at `0x{f['addr']:x}`: {desc}")
    return out


def walked_chain(result, image="demo-app"):
    """The crashed thread of a symbolicated minidump's JSON from its faulting instruction up to
    main: the frames in `image` walked from the context or by CFI (main's caller is libc's),
    one per input frame (inlinees share their frame's index). Returns (frames, module): the
    frames as the JSON gives them, and `image`'s module."""
    thread = next(t for t in result["threads"] if t["crashed"])
    module = next(m for m in result["modules"] if m["code_file"].endswith("/" + image))
    frames, seen = [], set()
    for f in thread["frames"]:
        if f.get("image") != image or f.get("trust") not in ("context", "cfi"):
            break
        if f["index"] in seen:
            continue
        seen.add(f["index"])
        frames.append(f)
    return frames, module
