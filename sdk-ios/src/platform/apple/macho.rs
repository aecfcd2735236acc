//! The Mach-O header and load commands of an image mapped in memory: its `LC_UUID`, its
//! `__TEXT` segment (image size and code range) and its CPU type.
//!
//! Pure code over bytes, so it runs (and is tested against real Mach-O files) on any host; on
//! Apple platforms it reads the `mach_header` dyld hands out. Layouts from `<mach-o/loader.h>`
//! and `<mach/machine.h>`: `mach_header_64` (32 bytes; `mach_header` 28), load commands
//! `{cmd, cmdsize}`, `LC_SEGMENT_64` (`segname[16]` at 8, `vmaddr` at 24, `vmsize` at 32),
//! `LC_SEGMENT` (32-bit: `vmaddr` at 24, `vmsize` at 28), `LC_UUID` (`uuid[16]` at 8).
//! Little-endian only (every Apple platform since PowerPC).

/// `MH_MAGIC_64`.
pub const MH_MAGIC_64: u32 = 0xfeed_facf;
/// `MH_MAGIC` (32-bit images: armv7, arm64_32).
pub const MH_MAGIC: u32 = 0xfeed_face;
const LC_SEGMENT: u32 = 0x1;
const LC_SEGMENT_64: u32 = 0x19;
const LC_UUID: u32 = 0x1b;
/// `LC_MAIN` (`LC_REQ_DYLD | 0x28`): `entry_point_command`, `entryoff` (u64) at 8.
const LC_MAIN: u32 = 0x8000_0028;
/// `LC_FUNCTION_STARTS`: `linkedit_data_command`, `dataoff` (u32) at 8, `datasize` at 12.
const LC_FUNCTION_STARTS: u32 = 0x26;
const CPU_ARCH_ABI64: i32 = 0x0100_0000;
const CPU_ARCH_ABI64_32: i32 = 0x0200_0000;
const CPU_TYPE_X86: i32 = 7;
const CPU_TYPE_ARM: i32 = 12;
const CPU_SUBTYPE_MASK: i32 = 0xff00_0000_u32 as i32;

/// What a report needs from one image's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachImage {
    /// `LC_UUID`, when the image has one (every image Xcode links does).
    pub uuid: Option<[u8; 16]>,
    /// Architecture name, as Apple's crash reports and symbolic spell it (`arm64`, `arm64e`,
    /// `x86_64`, `armv7`, `arm64_32`, …).
    pub arch: &'static str,
    /// `__TEXT`'s link-time address (`vmaddr`); the slide is the header's address minus this.
    pub text_vmaddr: u64,
    /// `__TEXT`'s size in bytes (`vmsize`): the image size reports give.
    pub text_vmsize: u64,
    /// `LC_MAIN`'s `entryoff`: `main`'s offset from the header (executables only).
    pub main_entry_offset: Option<u64>,
    /// `LC_FUNCTION_STARTS`: `(dataoff, datasize)` of the function starts in the file.
    pub function_starts: Option<(u32, u32)>,
    /// `__LINKEDIT`'s `(vmaddr, fileoff)`: where the function starts are mapped.
    pub linkedit: Option<(u64, u64)>,
}

/// The function start that follows `offset` (both offsets from the header, bytes) in
/// `LC_FUNCTION_STARTS` data: a ULEB128 delta per function, the first from the start of
/// `__TEXT`, ended by a 0 (`<mach-o/loader.h>`, as `dyldinfo -function_starts` reads it).
/// `None` when `offset` is at or past the last start, or the data is cut short.
pub fn next_function_start(data: &[u8], offset: u64) -> Option<u64> {
    let mut at = 0u64;
    let mut bytes = data.iter();
    loop {
        let mut delta = 0u64;
        let mut shift = 0;
        loop {
            let byte = *bytes.next()?;
            delta |= u64::from(byte & 0x7f).checked_shl(shift)?;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        if delta == 0 {
            return None;
        }
        at = at.checked_add(delta)?;
        if at > offset {
            return Some(at);
        }
    }
}

/// Why a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachOError {
    /// Fewer bytes than the header, or a magic number that is not a thin little-endian
    /// Mach-O (`0xfeedfacf` / `0xfeedface`).
    NotMachO,
    /// A load command runs past `sizeofcmds` or past the bytes given, or has a size under 8.
    Truncated {
        /// 0-based index of the load command.
        index: u32,
    },
    /// No `__TEXT` segment.
    NoTextSegment,
}

impl std::fmt::Display for MachOError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MachOError::NotMachO => write!(f, "not a thin little-endian Mach-O header"),
            MachOError::Truncated { index } => {
                write!(f, "load command {index} runs past the load commands")
            }
            MachOError::NoTextSegment => write!(f, "no __TEXT segment"),
        }
    }
}

impl std::error::Error for MachOError {}

fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        bytes.get(offset..offset + 4)?.try_into().ok()?,
    ))
}

fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        bytes.get(offset..offset + 8)?.try_into().ok()?,
    ))
}

/// The size of the header and its load commands (`sizeof(header) + sizeofcmds`), read from
/// the first 32 bytes; how many bytes [`parse`] needs.
pub fn header_and_commands_len(header: &[u8]) -> Result<usize, MachOError> {
    let magic = u32_at(header, 0).ok_or(MachOError::NotMachO)?;
    let header_len = match magic {
        MH_MAGIC_64 => 32,
        MH_MAGIC => 28,
        _ => return Err(MachOError::NotMachO),
    };
    let sizeofcmds = u32_at(header, 20).ok_or(MachOError::NotMachO)? as usize;
    Ok(header_len + sizeofcmds)
}

/// The architecture name of a `cputype` / `cpusubtype` pair.
pub fn arch_name(cputype: i32, cpusubtype: i32) -> &'static str {
    let subtype = cpusubtype & !CPU_SUBTYPE_MASK;
    match cputype {
        t if t == CPU_TYPE_ARM | CPU_ARCH_ABI64 => match subtype {
            2 => "arm64e",
            _ => "arm64",
        },
        t if t == CPU_TYPE_ARM | CPU_ARCH_ABI64_32 => "arm64_32",
        CPU_TYPE_ARM => match subtype {
            9 => "armv7",
            11 => "armv7s",
            12 => "armv7k",
            _ => "arm",
        },
        t if t == CPU_TYPE_X86 | CPU_ARCH_ABI64 => match subtype {
            8 => "x86_64h",
            _ => "x86_64",
        },
        CPU_TYPE_X86 => "x86",
        _ => "unknown",
    }
}

/// Reads the header and load commands at the start of `bytes` (at least
/// [`header_and_commands_len`] bytes of a mapped image, or a whole thin Mach-O file).
pub fn parse(bytes: &[u8]) -> Result<MachImage, MachOError> {
    let total = header_and_commands_len(bytes)?;
    let magic = u32_at(bytes, 0).ok_or(MachOError::NotMachO)?;
    let is_64 = magic == MH_MAGIC_64;
    let cputype = u32_at(bytes, 4).ok_or(MachOError::NotMachO)? as i32;
    let cpusubtype = u32_at(bytes, 8).ok_or(MachOError::NotMachO)? as i32;
    let ncmds = u32_at(bytes, 16).ok_or(MachOError::NotMachO)?;
    let end = total.min(bytes.len());
    let mut offset = if is_64 { 32 } else { 28 };
    let mut image = MachImage {
        uuid: None,
        arch: arch_name(cputype, cpusubtype),
        text_vmaddr: 0,
        text_vmsize: 0,
        main_entry_offset: None,
        function_starts: None,
        linkedit: None,
    };
    let mut has_text = false;
    for index in 0..ncmds {
        let truncated = MachOError::Truncated { index };
        let cmd = u32_at(bytes, offset).ok_or(truncated.clone())?;
        let cmdsize = u32_at(bytes, offset + 4).ok_or(truncated.clone())? as usize;
        if cmdsize < 8 || offset + cmdsize > end {
            return Err(truncated);
        }
        let command = &bytes[offset..offset + cmdsize];
        match cmd {
            LC_UUID if cmdsize >= 24 => {
                image.uuid = command[8..24].try_into().ok();
            }
            LC_SEGMENT_64 if command.get(8..14) == Some(b"__TEXT") && command[14] == 0 => {
                image.text_vmaddr = u64_at(command, 24).ok_or(truncated.clone())?;
                image.text_vmsize = u64_at(command, 32).ok_or(truncated)?;
                has_text = true;
            }
            LC_MAIN => image.main_entry_offset = u64_at(command, 8),
            LC_FUNCTION_STARTS => {
                image.function_starts = u32_at(command, 8).zip(u32_at(command, 12));
            }
            LC_SEGMENT_64 if command.get(8..18) == Some(b"__LINKEDIT") && command[18] == 0 => {
                image.linkedit = u64_at(command, 24).zip(u64_at(command, 40));
            }
            LC_SEGMENT if command.get(8..14) == Some(b"__TEXT") && command[14] == 0 => {
                image.text_vmaddr = u64::from(u32_at(command, 24).ok_or(truncated.clone())?);
                image.text_vmsize = u64::from(u32_at(command, 28).ok_or(truncated)?);
                has_text = true;
            }
            _ => {}
        }
        offset += cmdsize;
    }
    if !has_text {
        return Err(MachOError::NoTextSegment);
    }
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit header with `__TEXT` and `LC_UUID`, built by hand.
    fn synthetic() -> Vec<u8> {
        let mut b = Vec::new();
        let segment_len = 72u32;
        let uuid_len = 24u32;
        for word in [
            MH_MAGIC_64,
            0x0100_000c,
            0x8000_0002, // arm64e with the capability bit set
            2,           // MH_EXECUTE
            2,
            segment_len + uuid_len,
            0,
            0,
        ] {
            b.extend_from_slice(&word.to_le_bytes());
        }
        b.extend_from_slice(&LC_SEGMENT_64.to_le_bytes());
        b.extend_from_slice(&segment_len.to_le_bytes());
        b.extend_from_slice(b"__TEXT\0\0\0\0\0\0\0\0\0\0");
        b.extend_from_slice(&0x1_0000_0000u64.to_le_bytes());
        b.extend_from_slice(&0x8000u64.to_le_bytes());
        b.resize(b.len() + 32, 0);
        b.extend_from_slice(&LC_UUID.to_le_bytes());
        b.extend_from_slice(&uuid_len.to_le_bytes());
        b.extend_from_slice(&[7u8; 16]);
        b
    }

    #[test]
    fn function_starts_give_the_end_of_main() {
        // Functions at 0x4000 (first delta from __TEXT), 0x4010, 0x4400 (delta 0x3f0: two
        // ULEB bytes), then the terminating 0.
        let data = [0x80, 0x80, 0x01, 0x10, 0xf0, 0x07, 0x00];
        assert_eq!(next_function_start(&data, 0x4000), Some(0x4010));
        assert_eq!(next_function_start(&data, 0x4010), Some(0x4400));
        assert_eq!(next_function_start(&data, 0x3000), Some(0x4000));
        assert_eq!(next_function_start(&data, 0x4400), None);
        assert_eq!(next_function_start(&data[..4], 0x4010), None);
    }

    #[test]
    fn reads_uuid_text_and_arch() {
        assert_eq!(
            parse(&synthetic()),
            Ok(MachImage {
                uuid: Some([7; 16]),
                arch: "arm64e",
                text_vmaddr: 0x1_0000_0000,
                text_vmsize: 0x8000,
                main_entry_offset: None,
                function_starts: None,
                linkedit: None,
            })
        );
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let bytes = synthetic();
        for len in 0..bytes.len() {
            assert!(parse(&bytes[..len]).is_err(), "{len} bytes parsed");
        }
        assert_eq!(parse(b"\x7fELF\x02\x01\x01\0"), Err(MachOError::NotMachO));
    }
}
