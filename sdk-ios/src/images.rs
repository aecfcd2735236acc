//! The binary image list: name, load address, size and build id of every loaded object.
//!
//! Linux host backend: `dl_iterate_phdr`, the GNU build id from each object's `PT_NOTE`
//! segments (`NT_GNU_BUILD_ID`), and `/proc/self/exe` for the main program's path. Reports carry
//! the build id as `code_id`; the engine derives the debug id from it. On Apple platforms the same
//! list comes from dyld (`_dyld_image_count`, `_dyld_get_image_header`, `LC_UUID`): that backend is
//! not built or verified on this host.
//!
//! The list is read at install time (allocation allowed) and serialized once; the crash handler
//! writes the serialized bytes as they are.

use std::ffi::CStr;

/// One loaded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Full path (the main program's from `/proc/self/exe`).
    pub path: String,
    /// Lowest mapped address, bytes.
    pub image_addr: u64,
    /// Span of its `PT_LOAD` segments, bytes.
    pub image_size: u64,
    /// GNU build id, lowercase hex; empty when the object has none.
    pub build_id: String,
    /// Executable segments, `[start, end)` absolute addresses (for stack scanning).
    pub code_ranges: Vec<(u64, u64)>,
}

/// The CPU architecture name reports use.
pub const ARCH: &str = if cfg!(target_arch = "x86_64") {
    "x86_64"
} else if cfg!(target_arch = "aarch64") {
    "arm64"
} else {
    "unknown"
};

/// Every loaded object, main program first.
#[cfg(target_os = "linux")]
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
        let mut build_id = String::new();
        for h in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
            let addr = info.dlpi_addr + h.p_vaddr;
            // SAFETY: a PT_NOTE segment of a loaded object is mapped and readable.
            let note = unsafe { std::slice::from_raw_parts(addr as *const u8, h.p_memsz as usize) };
            if let Some(id) = gnu_build_id(note) {
                build_id = id.iter().map(|b| format!("{b:02x}")).collect();
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
                build_id,
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

/// The image list on platforms without a backend here: empty.
#[cfg(not(target_os = "linux"))]
pub fn loaded_images() -> Vec<Image> {
    Vec::new()
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

/// The images as a JSON array in the report's `modules` shape.
pub fn modules_json(images: &[Image]) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(b'[');
    for (i, image) in images.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut buf = vec![0u8; image.path.len() * 6 + 256];
        let mut w = crate::writer::Writer::new(&mut buf);
        w.raw(b"{");
        w.key("type", true);
        w.string(b"elf");
        w.key("code_file", false);
        w.string(image.path.as_bytes());
        w.key("code_id", false);
        w.string(image.build_id.as_bytes());
        w.key("image_addr", false);
        w.hex(image.image_addr);
        w.key("image_size", false);
        w.dec(image.image_size);
        w.key("arch", false);
        w.string(ARCH.as_bytes());
        w.raw(b"}");
        out.extend_from_slice(w.as_bytes());
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_binary_itself_is_listed_with_a_build_id() {
        let images = loaded_images();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let main = &images[0];
        assert_eq!(main.path, exe.display().to_string());
        assert!(main.image_size > 0);
        // Rust test binaries on Linux are linked with a build id by default.
        assert_eq!(main.build_id.len(), 40, "{main:?}");
        assert!(images.iter().any(|i| i.path.contains("libc.so")));
        let json: serde_json::Value = serde_json::from_slice(&modules_json(&images)).unwrap();
        assert_eq!(json[0]["code_id"], main.build_id.as_str());
    }
}
