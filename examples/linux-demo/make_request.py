#!/usr/bin/env python3
"""Writes demo-app-request.json and expected.md for the Linux DemoApp (called by generate.sh).

Standard library only. Reads the ELF itself (program headers, GNU build-id note, .symtab) and
the disassembly from binutils `objdump -d`:
  frame 0  = the faulting store in crash_write_null (its exact address),
  frame 1  = return address of `call crash_write_null` in process_order (validate_total is
             inlined there),
  frame 2  = return address of `call process_order` in demo::Checkout::run(int),
  frame 3  = return address of `call demo::Checkout::run(int)` in main,
  frame 4  = a made-up `__libc_start_call_main` frame in libc.so.6,
and writes the crash, with the binary loaded at IMAGE_ADDR, as a request for symbolicator's
POST /symbolicate (demo-app-request.json), plus expected.md.

The ground truth comes from the source: the function names are fixed in
../common/fixturelib.py (app_frames, shared with ../ios-demo) and the line numbers are those of
the `[frame ..]` markers in ../ios-demo/src, which must be where the comments there say they
are. Every row is then checked with llvm-symbolizer on the binary at the lookup address (frame
0 as is, return address - 1 for the others); any disagreement is an error. The marker check,
the call-site search and the llvm-symbolizer check are fixturelib's; the ELF/x86_64 specifics
and the request format are here.
"""

import hashlib
import json
import os
import re
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from fixturelib import app_frames, check_source, dashed_uuid, die  # noqa: E402
from fixturelib import find_addresses, read_disassembly, verify  # noqa: E402
from fixturelib import parse_args, truth_table, unadjusted_notes  # noqa: E402

# --- the crashed process (all made up, fixed for reproducibility) ---------------------------
IMAGE_ADDR = 0x55D4A0C00000  # where the PIE was mapped (its first PT_LOAD has vaddr 0)
CODE_FILE = "/opt/demo/demo-app"
DEBUG_FILE = "/opt/demo/demo-app.debug"
SIGNAL = 11  # SIGSEGV
PAGE = 0x1000

# libc.so.6: made-up build id and load address; the span is that of Debian 12's glibc 2.36.
LIBC = {
    "code_file": "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "image_addr": 0x7F3B8E400000,
    "image_size": 0x1E2000,
}
# libc frames: (symbol, return address as an offset in libc), all made up.
START_FRAME = ("__libc_start_call_main", 0x2724A)
THREAD1_FRAMES = [  # innermost first
    ("__GI___clock_nanosleep", 0xC9E45),
    ("__GI___nanosleep", 0xCE9A3),
]

# --- the ground truth, from the source (fixturelib) -------------------------------------------
# ELF symbols are the C names as they are.
APP_FRAMES = app_frames()


# --- identifiers ------------------------------------------------------------------------------
def debug_id_from_build_id(build_id):
    """The debug id of an ELF file, as Sentry/symbolic derive it from the GNU build id.

    The first 16 bytes (zero-padded if shorter) read as a GUID: the u32 of bytes 0-3 and the
    u16s of bytes 4-5 and 6-7 are little-endian, i.e. byte-swapped; appendix 0, so only the
    UUID is written (lowercase, dashed).
    """
    b = (bytes(build_id) + bytes(16))[:16]
    b = b[3::-1] + b[5:3:-1] + b[7:5:-1] + b[8:]
    return dashed_uuid(b.hex())


assert (
    debug_id_from_build_id(bytes.fromhex("f1c3bcc0279865fe3058404b2831d9e64135386c"))
    == "c0bcc3f1-9827-fe65-3058-404b2831d9e6"
)


def fake_build_id(name):
    """A stable, made-up 20-byte GNU build id for a system library."""
    return hashlib.sha1(f"symcluster linux-demo {name}".encode()).digest()


# --- reading the ELF --------------------------------------------------------------------------
PT_LOAD = 1
PT_NOTE = 4
NT_GNU_BUILD_ID = 3
SHT_SYMTAB = 2
STT_FUNC = 2


class Elf:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = data = f.read()
        if data[:4] != b"\x7fELF":
            die(f"{path} is not an ELF file")
        if data[4] != 2 or data[5] != 1:
            die(f"{path}: not a little-endian ELF64 file")
        (e_type, e_machine) = struct.unpack_from("<HH", data, 16)
        if e_machine != 62:
            die(f"{path}: e_machine {e_machine}, expected 62 (x86_64)")
        if e_type != 3:
            die(f"{path}: e_type {e_type}, expected 3 (ET_DYN, a PIE)")
        (e_phoff, e_shoff) = struct.unpack_from("<QQ", data, 32)
        (e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from(
            "<HHHHH", data, 54
        )
        self.phdrs = []
        for i in range(e_phnum):
            p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, p_align = (
                struct.unpack_from("<IIQQQQQQ", data, e_phoff + i * e_phentsize)
            )
            self.phdrs.append(
                {"type": p_type, "flags": p_flags, "offset": p_offset, "vaddr": p_vaddr,
                 "filesz": p_filesz, "memsz": p_memsz, "align": p_align}
            )
        self.shdrs = []
        for i in range(e_shnum):
            (sh_name, sh_type, _flags, sh_addr, sh_offset, sh_size, sh_link, _info, _align,
             sh_entsize) = struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
            self.shdrs.append(
                {"name_off": sh_name, "type": sh_type, "addr": sh_addr, "offset": sh_offset,
                 "size": sh_size, "link": sh_link, "entsize": sh_entsize}
            )
        shstr = self.shdrs[e_shstrndx]
        for s in self.shdrs:
            s["name"] = self._cstr(shstr["offset"] + s["name_off"])

    def _cstr(self, off):
        return self.data[off : self.data.index(b"\0", off)].decode()

    def section_names(self):
        return [s["name"] for s in self.shdrs if s["name"]]

    def loads(self):
        return [p for p in self.phdrs if p["type"] == PT_LOAD]

    def build_id(self):
        for p in self.phdrs:
            if p["type"] != PT_NOTE:
                continue
            off, end = p["offset"], p["offset"] + p["filesz"]
            while off + 12 <= end:
                namesz, descsz, ntype = struct.unpack_from("<III", self.data, off)
                name = self.data[off + 12 : off + 12 + namesz]
                desc_off = off + 12 + ((namesz + 3) & ~3)
                if ntype == NT_GNU_BUILD_ID and name == b"GNU\0":
                    return self.data[desc_off : desc_off + descsz]
                off = desc_off + ((descsz + 3) & ~3)
        die("no GNU build-id note (link with -Wl,--build-id=sha1)")

    def functions(self):
        """{name: (value, size)} of the STT_FUNC symbols in .symtab."""
        symtab = [s for s in self.shdrs if s["type"] == SHT_SYMTAB]
        if not symtab:
            die("no .symtab")
        sym, strtab = symtab[0], self.shdrs[symtab[0]["link"]]
        funcs = {}
        for off in range(sym["offset"], sym["offset"] + sym["size"], sym["entsize"]):
            st_name, st_info, _other, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", self.data, off
            )
            if st_info & 0xF == STT_FUNC and st_shndx != 0:
                funcs[self._cstr(strtab["offset"] + st_name)] = (st_value, st_size)
        return funcs


# --- reading the disassembly ----------------------------------------------------------------
def read_disassembly_gnu(objdump, binary):
    """{function symbol: [(addr, mnemonic, operands)]} of the executable sections."""

    def header(line):  # `0000000000001130 <crash_write_null>:`
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        return m.group(1) if m else None

    return read_disassembly([objdump, "-d", "--no-show-raw-insn", binary], header)


# x86_64, as binutils objdump writes it (AT&T syntax), for find_addresses.
X86_64 = {
    # `*target = value`: the first store through a pointer register (no displacement, not the
    # stack), e.g. `mov %edi,(%rax)`.
    "is_store": lambda i: i[1].startswith("mov")
    and re.fullmatch(r"%\w+,\(%r(?!sp\)|ip\))\w+\)", i[2]) is not None,
    "is_call": lambda i, callee, target: i[1] in ("call", "callq")
    and re.fullmatch(rf"{target:x} <{re.escape(callee)}>", i[2]) is not None,
    "call_text": lambda callee: f"call {callee}"
    + (" (demo::Checkout::run(int))" if callee.startswith("_Z") else ""),
    "returns": ("ret", "retq"),
    "call_back": 1,  # x86: any byte inside the call instruction
}


# --- the outputs ------------------------------------------------------------------------------
def hexaddr(a):
    return f"0x{a:x}"


def build_request(build_id, debug_id, image_size):
    libc_build_id = fake_build_id("libc.so.6")
    libc_base = LIBC["image_addr"]
    modules = [
        {
            "type": "elf",
            "code_id": build_id.hex(),
            "debug_id": debug_id,
            "code_file": CODE_FILE,
            "debug_file": DEBUG_FILE,
            "image_addr": hexaddr(IMAGE_ADDR),
            "image_size": image_size,
            "arch": "x86_64",
        },
        {
            "type": "elf",
            "code_id": libc_build_id.hex(),
            "debug_id": debug_id_from_build_id(libc_build_id),
            "code_file": LIBC["code_file"],
            "image_addr": hexaddr(libc_base),
            "image_size": LIBC["image_size"],
            "arch": "x86_64",
        },
    ]
    crashed = [{"instruction_addr": hexaddr(IMAGE_ADDR + f["addr"])} for f in APP_FRAMES]
    crashed.append({"instruction_addr": hexaddr(libc_base + START_FRAME[1])})
    other = [{"instruction_addr": hexaddr(libc_base + off)} for _, off in THREAD1_FRAMES]
    return {
        "signal": SIGNAL,
        "modules": modules,
        "stacktraces": [
            {
                "is_requesting": True,
                "registers": {"rip": crashed[0]["instruction_addr"]},
                "frames": crashed,
            },
            {"frames": other},
        ],
    }


def write_expected(path, build_id, debug_id, elf, image_size, unadjusted, libc_request):
    loads = elf.loads()
    L = []
    L += [
        "# DemoApp crash (Linux x86_64): ground truth",
        "",
        "Generated by `generate.sh` (`make_request.py`); do not edit by hand.",
        "",
        "The function names and lines below come from the source (`../ios-demo/src/`, the",
        "`[frame ..]` markers), not from a symbolicator; `generate.sh` then checked every row",
        "with `llvm-symbolizer --inlines` against `demo-app.debug`, and they agree.",
        "",
        "## Image",
        "",
        "| | |",
        "|---|---|",
        f"| file | `demo-app.debug` (reported as code_file `{CODE_FILE}`, debug_file `{DEBUG_FILE}`) |",
        f"| GNU build id / code_id | `{build_id.hex()}` |",
        f"| debug_id | `{debug_id}` |",
        f"| image_addr | `{hexaddr(IMAGE_ADDR)}` (PIE, first `PT_LOAD` vaddr `0x0`) |",
        f"| image_size | `{hexaddr(image_size)}` ({image_size}): end of the last `PT_LOAD`, page-aligned |",
        f"| runtime -> file address | `addr - {hexaddr(IMAGE_ADDR)}` |",
        "",
        "`PT_LOAD` segments:",
        "",
        "| vaddr | memsz | flags |",
        "|---|---|---|",
    ]
    for p in loads:
        flags = ("R" if p["flags"] & 4 else "") + ("W" if p["flags"] & 2 else "") + (
            "X" if p["flags"] & 1 else ""
        )
        L.append(f"| `{hexaddr(p['vaddr'])}` | `{hexaddr(p['memsz'])}` | {flags} |")
    L += [
        "",
        "The debug id is the build id's first 16 bytes read as a little-endian GUID (bytes",
        "0-3, 4-5 and 6-7 byte-swapped), appendix 0, as Sentry/symbolic derive it.",
        "",
        "## Crashed thread (`is_requesting`), innermost first",
        "",
        "SIGSEGV (signal 11), write through NULL. Lookup address = the address itself for frame 0",
        "(the faulting instruction, also `rip`), the return address - 1 for the frames above it.",
        "Frame 1 is one address that expands to two frames: `validate_total` was inlined into",
        "`process_order`.",
        "",
        "| frame | instruction_addr | lookup (file) | function | file | line | inlined |",
        "|---|---|---|---|---|---|---|",
    ]
    L += truth_table(APP_FRAMES, lambda addr: IMAGE_ADDR + addr)
    start = libc_request["stacktraces"][0]["frames"][-1]["instruction_addr"]
    L.append(f"| {len(APP_FRAMES)} | `{start}` | - | `{START_FRAME[0]}` (libc.so.6, no debug file here) | - | - | - |")
    L += [
        "",
        "Instructions: frame 0 `" + APP_FRAMES[0]["insn"] + "`; "
        + "; ".join(
            f"frame {f['index']} `{f['insn']}` at `{hexaddr(f['call_addr'])}`" for f in APP_FRAMES[1:]
        )
        + " (frames 1-3 name the call; the request holds the address after it).",
        "",
        "Looking up the return address itself (no `- 1`) is wrong: llvm-symbolizer puts it on",
        "the statement after the call:",
        "",
    ]
    L += unadjusted_notes(APP_FRAMES, unadjusted)
    L += [
        "",
        "Source paths in the DWARF: `/home/dev/DemoApp/src/<file>` (`-fdebug-prefix-map`).",
        "",
        "## Other frames",
        "",
        "Frame 4 and the second thread ("
        + ", ".join(f"`{s}`" for s, _ in THREAD1_FRAMES)
        + ", innermost first)",
        "are in `libc.so.6`, loaded at "
        f"`{libc_request['modules'][1]['image_addr']}` with a made-up build id",
        f"`{libc_request['modules'][1]['code_id']}` (debug_id "
        f"`{libc_request['modules'][1]['debug_id']}`).",
        "No debug file here covers them; the symbol names are only what they would be.",
        "",
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(L))


def main():
    args = parse_args(
        __doc__,
        ["binary", "src", "out-dir"],
        {"objdump": "objdump", "symbolizer": "llvm-symbolizer"},
    )

    check_source(args.src, APP_FRAMES)

    elf = Elf(args.binary)
    names = elf.section_names()
    for needed in (".symtab", ".debug_info", ".debug_line", ".note.gnu.build-id"):
        if needed not in names:
            die(f"{args.binary} has no {needed}")
    loads = elf.loads()
    if not loads or loads[0]["vaddr"] != 0:
        die("the first PT_LOAD does not have vaddr 0 (not a PIE?)")
    end = max(p["vaddr"] + p["memsz"] for p in loads)
    image_size = (end + PAGE - 1) // PAGE * PAGE
    build_id = elf.build_id()
    debug_id = debug_id_from_build_id(build_id)
    print(f"build id {build_id.hex()}, debug id {debug_id}, image size {image_size:#x}")

    syms = {name: value for name, (value, _size) in elf.functions().items()}
    find_addresses(APP_FRAMES, read_disassembly_gnu(args.objdump, args.binary), syms, X86_64)

    # Dies on any disagreement (or a source path not mapped to /home/dev/DemoApp); returns
    # what the unadjusted return addresses give (for the notes in expected.md).
    unadjusted = verify(
        args.symbolizer, APP_FRAMES, [(args.binary, None)], path_prefix="/home/dev/DemoApp/src/"
    )

    request = build_request(build_id, debug_id, image_size)
    with open(os.path.join(args.out_dir, "demo-app-request.json"), "w", encoding="utf-8") as f:
        json.dump(request, f, indent=2)
        f.write("\n")
    write_expected(
        os.path.join(args.out_dir, "expected.md"), build_id, debug_id, elf, image_size,
        unadjusted, request,
    )
    print("wrote demo-app-request.json expected.md")


if __name__ == "__main__":
    main()
