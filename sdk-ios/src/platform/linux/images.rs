//! The image list on Linux: `dl_iterate_phdr`, with the GNU build id read from each object's
//! `PT_NOTE` segments (`NT_GNU_BUILD_ID`) and `/proc/self/exe` for the main program's path.

use std::ffi::CStr;

use crate::images::{ARCH, Image, ImageId};

/// Every loaded object, main program first.
pub fn loaded_images() -> Vec<Image> {
    let mut images: Vec<Image> = Vec::new();
    unsafe extern "C" fn callback(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call, and `data`
        // is the Vec handed in below.
        let (info, images) = unsafe { (&*info, &mut *(data as *mut Vec<Image>)) };
        let headers = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
        };
        let loads = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
        let start = loads.clone().map(|h| h.p_vaddr).min().unwrap_or(0);
        let end = loads.map(|h| h.p_vaddr + h.p_memsz).max().unwrap_or(0);
        let code_ranges = headers
            .iter()
            .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0)
            .map(|h| {
                (
                    info.dlpi_addr + h.p_vaddr,
                    info.dlpi_addr + h.p_vaddr + h.p_memsz,
                )
            })
            .collect();
        let mut id = ImageId::None;
        for h in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
            let addr = info.dlpi_addr + h.p_vaddr;
            // SAFETY: a PT_NOTE segment of a loaded object is mapped and readable.
            let note = unsafe { std::slice::from_raw_parts(addr as *const u8, h.p_memsz as usize) };
            if let Some(build_id) = gnu_build_id(note) {
                id = ImageId::GnuBuildId(build_id.to_vec());
                break;
            }
        }
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: dlpi_name is a NUL-terminated string.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        let path = if name.is_empty() && images.is_empty() {
            std::fs::read_link("/proc/self/exe")
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        } else {
            name
        };
        if end > start && !path.is_empty() {
            images.push(Image {
                path,
                image_addr: info.dlpi_addr + start,
                image_size: end - start,
                id,
                arch: ARCH,
                code_ranges,
            });
        }
        0
    }
    // SAFETY: the callback only reads the info it is given and pushes into `images`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(callback),
            &mut images as *mut Vec<Image> as *mut libc::c_void,
        );
    }
    images
}

/// Finds the `NT_GNU_BUILD_ID` descriptor in a note segment.
fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |b: &[u8]| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (
            word(&notes[0..]) as usize,
            word(&notes[4..]) as usize,
            word(&notes[8..]),
        );
        let name_end = 12 + align4(namesz);
        let desc_end = name_end + align4(descsz);
        if desc_end > notes.len() {
            return None;
        }
        if kind == NT_GNU_BUILD_ID && &notes[12..12 + namesz] == b"GNU\0" {
            return Some(&notes[name_end..name_end + descsz]);
        }
        notes = &notes[desc_end..];
    }
    None
}

/// The `[start, end)` addresses of the program's `main`: the `main` function symbol of
/// `/proc/self/exe` (`.symtab`, else `.dynsym`; read with the `object` crate), moved by the
/// main program's load bias. `None` for a stripped program.
pub fn main_function() -> Option<(u64, u64)> {
    use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
    let data = std::fs::read("/proc/self/exe").ok()?;
    let file = object::File::parse(data.as_slice()).ok()?;
    let symbol = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.kind() == SymbolKind::Text && s.name() == Ok("main"))?;
    let link_base = file.segments().map(|s| s.address()).min()?;
    let bias = loaded_images().first()?.image_addr.checked_sub(link_base)?;
    let start = symbol.address() + bias;
    Some((start, start + symbol.size().max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::modules_json;

    #[test]
    fn the_test_binary_itself_is_listed_with_a_build_id() {
        let images = loaded_images();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let main = &images[0];
        assert_eq!(main.path, exe.display().to_string());
        assert!(main.image_size > 0);
        // Rust test binaries on Linux are linked with a build id by default.
        let ImageId::GnuBuildId(build_id) = &main.id else {
            panic!("no build id: {main:?}");
        };
        assert_eq!(build_id.len(), 20, "{main:?}");
        assert!(images.iter().any(|i| i.path.contains("libc.so")));
        let json: serde_json::Value = serde_json::from_slice(&modules_json(&images)).unwrap();
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(json[0]["code_id"], hex.as_str());
        assert_eq!(json[0]["type"], "elf");
    }
}
