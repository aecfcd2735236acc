"""Writes the Java 8 API's class files (signatures only) out of a JDK's lib/ct.sym.

Usage: java8_library.py CT_SYM OUT_DIR

ct.sym (a zip) holds, per set of releases, a directory named by the releases' digits (`8`,
`789`, `89A`...) with `<module>/<package>/<Class>.sig` files: class files without code. The
ones whose directory names release 8 are Java 8's API. ProGuard 6.2.2 reads class files up to
version 57 (Java 13) and these are version 61, so each is written as `<package>/<Class>.class`
with its major version (bytes 6-7, big-endian) set to 52 (Java 8); nothing else changes.
"""

import sys
import zipfile
from pathlib import Path


def main() -> None:
    ct_sym, out = Path(sys.argv[1]), Path(sys.argv[2])
    written = 0
    with zipfile.ZipFile(ct_sym) as archive:
        for name in archive.namelist():
            parts = name.split("/")
            if len(parts) < 3 or "8" not in parts[0] or not name.endswith(".sig"):
                continue
            # <releases>/<module>/<path>.sig -> <path>.class
            target = out / Path(*parts[2:]).with_suffix(".class")
            data = bytearray(archive.read(name))
            if data[:4] != b"\xca\xfe\xba\xbe":
                sys.exit(f"{name}: not a class file")
            data[6:8] = (52).to_bytes(2, "big")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(bytes(data))
            written += 1
    if written == 0:
        sys.exit(f"{ct_sym}: no Java 8 signatures")
    print(f"{written} class files")


if __name__ == "__main__":
    main()
