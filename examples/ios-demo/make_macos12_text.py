#!/usr/bin/env python3
"""Writes DemoApp-macos12.crash: DemoApp.crash (the classic "Report Version: 104" text) in the
text form Console and Xcode write from .ips files since macOS 12 / iOS 15 ("Translated
Report", "Report Version: 12").

The crash is the same (same addresses, images and UUIDs, so expected.md is its ground truth
too); only the layout changes, in the places Apple changed it:
- a "Translated Report (Full Report Below)" banner, and "Report Version: 12";
- thread headers with the queue on the same line: `Thread 0 Crashed::  Dispatch queue: ...`
  (no separate `Thread 0 name:` line);
- frame addresses without zero padding (`0x104f4c008`);
- Binary Images lines with no arch, `(*)` for the version, and the UUID lowercase with dashes:
  `0x104f48000 - 0x104f4ffff DemoApp (*) <4c4c443b-5555-3144-a126-3cc30cf88fdb> /path/DemoApp`.

Run by generate.sh; `python3 make_macos12_text.py` from this directory regenerates it alone.
"""

import re
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent


def convert(text: str) -> str:
    out = [
        "-------------------------------------",
        "Translated Report (Full Report Below)",
        "-------------------------------------",
        "",
    ]
    names = {}
    for line in text.splitlines():
        m = re.match(r"^Thread (\d+) name:\s*(.*)$", line)
        if m:
            names[m.group(1)] = m.group(2).strip()
    in_images = False
    for line in text.splitlines():
        if line.startswith("Report Version:"):
            out.append("Report Version:      12")
            continue
        if re.match(r"^Thread \d+ name:", line):
            continue
        m = re.match(r"^Thread (\d+)( Crashed)?:\s*$", line)
        if m:
            header = f"Thread {m.group(1)}{m.group(2) or ''}:"
            name = names.get(m.group(1))
            out.append(f"{header}:  {name}" if name else header)
            continue
        m = re.match(r"^(\d+\s+\S+\s+)0x0*([0-9a-f]+)(.*)$", line)
        if m and not in_images:
            out.append(f"{m.group(1)}0x{m.group(2)}{m.group(3)}")
            continue
        if line.startswith("Binary Images:"):
            in_images = True
            out.append(line)
            continue
        m = re.match(r"^(\s*0x[0-9a-f]+ -\s+0x[0-9a-f]+) (\S+) \S+\s+<([0-9a-f]{32})> (.*)$", line)
        if in_images and m:
            dashed = str(uuid.UUID(m.group(3)))
            out.append(f"{m.group(1)} {m.group(2)} (*) <{dashed}> {m.group(4)}")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def main() -> int:
    source = (HERE / "DemoApp.crash").read_text()
    (HERE / "DemoApp-macos12.crash").write_text(convert(source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
