#!/usr/bin/env python3
"""Writes the fuzz regressions that are made rather than kept as found: inputs a fuzz target
crashed on, rebuilt from the project's own examples so that they can be made again and read.

    python3 fuzz/regressions/make.py

minidump/sysv-short-path.dmp: examples/linux-demo/demo-app.dmp (the Linux demo crashed for
real) whose Linux maps stream (MD_LINUX_MAPS, 0x47670009) has its first line's path replaced by
`/SYSVso]`: a System V shared memory path shorter than the 13 bytes procfs-core 0.18.0 slices
(`&x[5..13]` in `MMapPath::from`, src/process/mod.rs:481), which panics. The `minidump` fuzz
target found it (a 17,488-byte mutation of the demo dump); this is the same defect, made on
purpose. The new stream text is appended to the dump and the directory entry pointed at it;
every other byte stays the demo's.

Every input under fuzz/regressions/TARGET/ is replayed by fuzz/run.sh --check (the test
command) and must not crash its target.
"""
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
LINUX_MAPS = 0x47670009


def sysv_short_path() -> bytes:
    dump = bytearray((REPO / "examples/linux-demo/demo-app.dmp").read_bytes())
    count, directory = struct.unpack_from("<II", dump, 8)
    for i in range(count):
        at = directory + 12 * i
        kind, size, rva = struct.unpack_from("<III", dump, at)
        if kind != LINUX_MAPS:
            continue
        lines = bytes(dump[rva : rva + size]).split(b"\n")
        fields = lines[0].split()
        # address perms offset dev inode path
        lines[0] = b" ".join(fields[:5] + [b"/SYSVso]"])
        text = b"\n".join(lines)
        struct.pack_into("<II", dump, at + 4, len(text), len(dump))
        return bytes(dump) + text
    raise SystemExit("demo-app.dmp has no Linux maps stream")


def main() -> None:
    out = HERE / "minidump/sysv-short-path.dmp"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(sysv_short_path())
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
