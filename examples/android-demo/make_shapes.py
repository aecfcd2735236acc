"""Writes a Java stack trace (as `Throwable.printStackTrace` printed it) in two more shapes.

Usage: make_shapes.py TRACE LOGCAT_OUT SENTRY_OUT

- LOGCAT_OUT: as Android's logcat shows an app's crash (`adb logcat`, threadtime format): each
  line prefixed with `<date> <time> <pid> <tid> E AndroidRuntime: `, after the `FATAL EXCEPTION`
  and `Process:` lines; the throwable line without the JVM's `Exception in thread "main" `, and
  no `java.base/` module prefix in frames (Android's runtime prints none).
- SENTRY_OUT: a Sentry event as sentry-java sends one (https://develop.sentry.dev/sdk/data-model/
  event-payloads/exception/): `exception.values` ordered cause first, the thrown exception last;
  `type` the class's simple name and `module` its package; frames oldest call first, each with
  `module` (the class), `function`, `filename`, `lineno`; `debug_meta.images` naming the
  ProGuard mapping by its UUID (sentry-cli's: UUIDv5 of the file's bytes in the namespace
  UUIDv5(DNS, "guardsquare.com")), of mapping.txt beside this script.

Only the text changes shape: every class, method, file name and line is the trace's own.
"""

import hashlib
import json
import re
import sys
import uuid
from pathlib import Path

FRAME = re.compile(r"^\s*at (?:[^/(]+/)?([^(]+)\.([^.(]+)\(([^:)]*)(?::(\d+))?\)$")
MORE = re.compile(r"^\s*\.\.\. (\d+) more$")


def parse(text: str):
    """[(class, message, [(class, method, file, line)])], thrown exception first."""
    exceptions = []
    for line in text.splitlines():
        if MORE.match(line):
            continue
        frame = FRAME.match(line)
        if frame:
            cls, method, file, lineno = frame.groups()
            exceptions[-1][2].append((cls, method, file, int(lineno) if lineno else None))
            continue
        line = line.removeprefix("Caused by: ")
        line = re.sub(r'^Exception in thread "[^"]*" ', "", line)
        cls, _, message = line.partition(": ")
        exceptions.append((cls, message or None, []))
    return exceptions


def main() -> None:
    trace, logcat_out, sentry_out = map(Path, sys.argv[1:4])
    text = trace.read_text()

    prefix = "11-27 10:15:02.731  4321  4321 E AndroidRuntime: "
    lines = ["FATAL EXCEPTION: main", "Process: com.example.shop, PID: 4321"]
    for line in text.splitlines():
        line = re.sub(r'^Exception in thread "[^"]*" ', "", line)
        line = re.sub(r"^(\s*at )java\.base/", r"\1", line)
        lines.append(line)
    logcat_out.write_text("".join(prefix + line + "\n" for line in lines))

    namespace = uuid.uuid5(uuid.NAMESPACE_DNS, "guardsquare.com")
    mapping = (Path(__file__).parent / "mapping.txt").read_bytes()
    # uuid.uuid5 takes text; the UUIDv5 of bytes (RFC 9562 5.5), as sentry-cli hashes the file.
    digest = hashlib.sha1(namespace.bytes + mapping).digest()
    mapping_id = uuid.UUID(bytes=digest[:16], version=5)
    values = []
    for cls, message, frames in reversed(parse(text)):
        module, _, name = cls.rpartition(".")
        values.append(
            {
                "type": name,
                "module": module,
                "value": message,
                "stacktrace": {
                    "frames": [
                        {"module": c, "function": m, "filename": f, "lineno": l}
                        for c, m, f, l in reversed(frames)
                    ]
                },
            }
        )
    event = {
        "platform": "java",
        "exception": {"values": values},
        "debug_meta": {"images": [{"type": "proguard", "uuid": str(mapping_id)}]},
    }
    sentry_out.write_text(json.dumps(event, indent=2) + "\n")


if __name__ == "__main__":
    main()
