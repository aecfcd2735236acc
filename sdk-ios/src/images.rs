//! The binary image list in reports: name, load address, size, identifier and arch of every
//! loaded object, serialized once outside the crash handler and published for it.
//!
//! The platform backends produce the list ([`crate::platform::Backend::loaded_images`]):
//! `dl_iterate_phdr` with GNU build ids on Linux, dyld with `LC_UUID` on Apple platforms, where
//! images loaded later (`dlopen`) are added as dyld reports them. [`publish`] serializes a list
//! into the report's `modules` JSON and makes it the one the crash handler writes; the handler
//! reads it with [`published_modules_json`], an atomic load, without allocating.

use std::sync::atomic::{AtomicPtr, Ordering};

/// How an image is identified, which decides the report's module `type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageId {
    /// ELF: the GNU build id bytes (`type: "elf"`, `code_id` in lowercase hex; the engine
    /// derives the debug id from it as symbolic does).
    GnuBuildId(Vec<u8>),
    /// Mach-O: the `LC_UUID` (`type: "macho"`, `debug_id` as the UUID in its 8-4-4-4-12 form,
    /// `code_id` as 32 lowercase hex digits).
    MachUuid([u8; 16]),
    /// Neither (an object linked without one): the engine cannot find its debug file.
    None,
}

/// One loaded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Full path.
    pub path: String,
    /// Load address of its first byte (ELF: lowest `PT_LOAD`; Mach-O: the `mach_header`).
    pub image_addr: u64,
    /// Bytes from `image_addr` (ELF: span of the `PT_LOAD` segments; Mach-O: `__TEXT`'s vmsize,
    /// as Apple's crash reports show it).
    pub image_size: u64,
    /// Build id or UUID.
    pub id: ImageId,
    /// CPU architecture name (`x86_64`, `arm64`, `arm64e`, …).
    pub arch: &'static str,
    /// Executable ranges, `[start, end)` absolute addresses (for stack scanning).
    pub code_ranges: Vec<(u64, u64)>,
}

/// The CPU architecture of this build, as reports name it.
pub const ARCH: &str = if cfg!(target_arch = "x86_64") {
    "x86_64"
} else if cfg!(target_arch = "aarch64") {
    "arm64"
} else {
    "unknown"
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A UUID in its 8-4-4-4-12 lowercase form.
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let h = hex(uuid);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The images as a JSON array in the report's `modules` shape (symbolicator's module shape:
/// `type`, `code_file`, `debug_id` / `code_id`, `image_addr` as a `"0x…"` string, `image_size`
/// in bytes, `arch`).
pub fn modules_json(images: &[Image]) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(b'[');
    for (i, image) in images.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut buf = vec![0u8; image.path.len() * 6 + 512];
        let mut w = crate::writer::Writer::new(&mut buf);
        w.raw(b"{");
        w.key("type", true);
        match &image.id {
            ImageId::GnuBuildId(id) => {
                w.string(b"elf");
                w.key("code_id", false);
                w.string(hex(id).as_bytes());
            }
            ImageId::MachUuid(uuid) => {
                w.string(b"macho");
                w.key("debug_id", false);
                w.string(uuid_string(uuid).as_bytes());
                w.key("code_id", false);
                w.string(hex(uuid).as_bytes());
            }
            ImageId::None => w.string(b"unknown"),
        }
        w.key("code_file", false);
        w.string(image.path.as_bytes());
        w.key("image_addr", false);
        w.hex(image.image_addr);
        w.key("image_size", false);
        w.dec(image.image_size);
        w.key("arch", false);
        w.string(image.arch.as_bytes());
        w.raw(b"}");
        out.extend_from_slice(w.as_bytes());
    }
    out.push(b']');
    out
}

static PUBLISHED: AtomicPtr<Vec<u8>> = AtomicPtr::new(std::ptr::null_mut());

/// Serializes `images` and makes them the list crash reports carry. The previous list is
/// leaked on purpose: a crash handler may be reading it at this moment (one list per
/// `dlopen`, a few kilobytes each).
pub fn publish(images: &[Image]) {
    let json = Box::into_raw(Box::new(modules_json(images)));
    PUBLISHED.store(json, Ordering::Release);
}

/// The `modules` JSON last [`publish`]ed (`[]` before). Async-signal-safe.
pub fn published_modules_json() -> &'static [u8] {
    let json = PUBLISHED.load(Ordering::Acquire);
    if json.is_null() {
        return b"[]";
    }
    // SAFETY: published lists are leaked, never freed or changed.
    unsafe { (*json).as_slice() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mach_o_modules_carry_the_uuid_as_debug_id() {
        let image = Image {
            path: "/var/containers/Bundle/Application/X/DemoApp.app/DemoApp".into(),
            image_addr: 0x1_04f4_8000,
            image_size: 0x8000,
            id: ImageId::MachUuid([
                0x4c, 0x4c, 0x44, 0x3b, 0x55, 0x55, 0x31, 0x44, 0xa1, 0x26, 0x3c, 0xc3, 0x0c, 0xf8,
                0x8f, 0xdb,
            ]),
            arch: "arm64",
            code_ranges: vec![],
        };
        let json: serde_json::Value = serde_json::from_slice(&modules_json(&[image])).unwrap();
        assert_eq!(
            json[0],
            serde_json::json!({
                "type": "macho",
                "debug_id": "4c4c443b-5555-3144-a126-3cc30cf88fdb",
                "code_id": "4c4c443b55553144a1263cc30cf88fdb",
                "code_file": "/var/containers/Bundle/Application/X/DemoApp.app/DemoApp",
                "image_addr": "0x104f48000",
                "image_size": 32768,
                "arch": "arm64",
            })
        );
    }
}
