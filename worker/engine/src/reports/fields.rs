//! Small field readers shared by the report readers: addresses, architectures, debug ids,
//! signals.

use std::str::FromStr;

use serde_json::Value;
use symbolic_common::{Arch, DebugId};

/// Reads an address: a JSON number, a `"0x…"` hex string, or a decimal string.
///
/// Returns `None` for anything else (negative numbers, floats, junk). Addresses are in bytes.
pub fn parse_addr(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => parse_addr_str(s),
        _ => None,
    }
}

/// Reads an address from text: `0x1a2b` (any case) or decimal `6699`.
pub fn parse_addr_str(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Parses a debug id or Mach-O UUID, with or without dashes, any case; `None` when invalid or
/// nil (all zeros).
pub fn parse_debug_id(s: &str) -> Option<DebugId> {
    let id = DebugId::from_str(s.trim()).ok()?;
    (!id.is_nil()).then_some(id)
}

/// The debug id of an ELF file from its GNU build-id (hex, as a report's `code_id`), the way
/// symbolic and Breakpad derive it: the first 16 bytes as a little-endian GUID (bytes 0-3, 4-5
/// and 6-7 byte-swapped), age 0. Build ids shorter than 16 bytes are zero-padded.
pub fn debug_id_from_build_id(code_id: &str) -> Option<DebugId> {
    let hex = code_id.trim();
    if hex.len() < 2 || !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    let mut guid = [0u8; 16];
    for (i, slot) in guid.iter_mut().enumerate().take(hex.len() / 2) {
        *slot = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    // debugid's GUID reading does the byte swap (the same one symbolic's ELF reader uses).
    let id = DebugId::from_guid_age(&guid, 0).ok()?;
    (!id.is_nil()).then_some(id)
}

/// Maps a Mach-O `cputype`/`cpusubtype` pair (`<mach/machine.h>`) to an architecture.
///
/// Unknown pairs give `Arch::Unknown`. The subtype's capability bits (`0xff000000`) are ignored.
pub fn arch_from_macho_cpu(cpu_type: u64, cpu_subtype: u64) -> Arch {
    const ABI64: u64 = 0x0100_0000;
    const ABI64_32: u64 = 0x0200_0000;
    const X86: u64 = 7;
    const ARM: u64 = 12;
    let subtype = cpu_subtype & 0x00ff_ffff;
    match cpu_type {
        t if t == X86 => Arch::X86,
        t if t == X86 | ABI64 => match subtype {
            8 => Arch::Amd64h,
            _ => Arch::Amd64,
        },
        t if t == ARM | ABI64 => match subtype {
            2 => Arch::Arm64e,
            _ => Arch::Arm64,
        },
        t if t == ARM | ABI64_32 => Arch::Arm64_32,
        t if t == ARM => match subtype {
            6 => Arch::ArmV6,
            9 => Arch::ArmV7,
            10 => Arch::ArmV7f,
            11 => Arch::ArmV7s,
            12 => Arch::ArmV7k,
            _ => Arch::Arm,
        },
        _ => Arch::Unknown,
    }
}

/// Parses an architecture name as reports write it: `arm64`, `arm64e`, `armv7`, `x86_64`,
/// `ARM-64`, `X86-64` (Apple's "Code Type"). Unknown names give `Arch::Unknown`.
pub fn parse_arch(name: &str) -> Arch {
    let lower = name
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .to_ascii_lowercase();
    let normalized = match lower.split_whitespace().next().unwrap_or("") {
        "arm-64" => "arm64",
        "x86-64" => "x86_64",
        "x86" | "i386" => "x86",
        "arm" => "arm",
        other => other,
    };
    Arch::from_str(normalized).unwrap_or(Arch::Unknown)
}

/// The POSIX signal number for a name like `SIGSEGV` (Darwin numbering, which agrees with Linux
/// for the crash signals). `None` for unknown names.
pub fn signal_number(name: &str) -> Option<u32> {
    Some(match name.trim() {
        "SIGHUP" => 1,
        "SIGINT" => 2,
        "SIGQUIT" => 3,
        "SIGILL" => 4,
        "SIGTRAP" => 5,
        "SIGABRT" => 6,
        "SIGEMT" => 7,
        "SIGFPE" => 8,
        "SIGKILL" => 9,
        "SIGBUS" => 10,
        "SIGSEGV" => 11,
        "SIGSYS" => 12,
        "SIGPIPE" => 13,
        "SIGALRM" => 14,
        "SIGTERM" => 15,
        _ => return None,
    })
}

/// Finds the signal name in an Apple exception type such as `EXC_BAD_ACCESS (SIGSEGV)`.
pub fn signal_in_text(text: &str) -> Option<u32> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find_map(signal_number)
}

/// Joins a Mach exception name and a signal name the way Apple writes them:
/// `EXC_BAD_ACCESS (SIGSEGV)`; either part alone when the other is missing.
pub fn crash_reason(exception: Option<&str>, signal: Option<&str>) -> Option<String> {
    match (
        exception.filter(|s| !s.is_empty()),
        signal.filter(|s| !s.is_empty()),
    ) {
        (Some(e), Some(s)) => Some(format!("{e} ({s})")),
        (Some(e), None) => Some(e.to_owned()),
        (None, Some(s)) => Some(s.to_owned()),
        (None, None) => None,
    }
}

/// A string field, if present and a string.
pub fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key)?.as_str()
}

/// The name of the instruction pointer register for an architecture, or the usual candidates
/// when the architecture is unknown.
pub fn ip_register_names(arch: Arch) -> &'static [&'static str] {
    match arch.cpu_family().ip_register_name() {
        Some("pc") => &["pc"],
        Some("rip") => &["rip"],
        Some("eip") => &["eip"],
        _ => &["pc", "rip", "eip"],
    }
}

/// Reads the instruction pointer from a register map (`{"pc": "0x…"}`), if present.
pub fn ip_register(registers: Option<&Value>, arch: Arch) -> Option<u64> {
    let registers = registers?;
    ip_register_names(arch)
        .iter()
        .find_map(|name| registers.get(*name).and_then(parse_addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_addr(&Value::from("0x1007da384")), Some(0x1007da384));
        assert_eq!(parse_addr(&Value::from("4096")), Some(4096));
        assert_eq!(parse_addr(&Value::from(389120u64)), Some(389120));
        assert_eq!(parse_addr(&Value::from(-1i64)), None);
        assert_eq!(parse_addr(&Value::from("0xZZ")), None);
        assert_eq!(parse_addr(&Value::Null), None);
    }

    #[test]
    fn archs() {
        assert_eq!(arch_from_macho_cpu(16777228, 0), Arch::Arm64);
        assert_eq!(arch_from_macho_cpu(16777228, 2), Arch::Arm64e);
        assert_eq!(arch_from_macho_cpu(12, 9), Arch::ArmV7);
        assert_eq!(arch_from_macho_cpu(16777223, 3), Arch::Amd64);
        assert_eq!(arch_from_macho_cpu(99, 0), Arch::Unknown);
        assert_eq!(parse_arch("ARM-64 (Native)"), Arch::Arm64);
        assert_eq!(parse_arch("X86-64"), Arch::Amd64);
        assert_eq!(parse_arch("arm64e"), Arch::Arm64e);
        assert_eq!(parse_arch("(x86_64)"), Arch::Amd64);
    }

    #[test]
    fn signals() {
        assert_eq!(signal_in_text("EXC_BAD_ACCESS (SIGSEGV)"), Some(11));
        assert_eq!(signal_in_text("EXC_CRASH (SIGABRT)"), Some(6));
        assert_eq!(signal_in_text("EXC_BREAKPOINT"), None);
        assert_eq!(
            crash_reason(Some("EXC_CRASH"), Some("SIGABRT")).as_deref(),
            Some("EXC_CRASH (SIGABRT)")
        );
    }

    #[test]
    fn debug_ids() {
        let id = parse_debug_id("54039061-A983-3323-A49D-837A894D667F").unwrap();
        assert_eq!(id.to_string(), "54039061-a983-3323-a49d-837a894d667f");
        assert_eq!(parse_debug_id("54039061a9833323a49d837a894d667f"), Some(id));
        assert_eq!(parse_debug_id("00000000-0000-0000-0000-000000000000"), None);
        assert_eq!(parse_debug_id("nope"), None);
        assert_eq!(
            debug_id_from_build_id("f1c3bcc0279865fe3058404b2831d9e64135386c")
                .unwrap()
                .to_string(),
            "c0bcc3f1-9827-fe65-3058-404b2831d9e6"
        );
        assert_eq!(debug_id_from_build_id("xyz"), None);
    }
}
