//! The image list from dyld: every image's `mach_header`, read with [`super::macho`] for its
//! `LC_UUID`, `__TEXT` size and CPU type, and its path from `dladdr`.
//!
//! `_dyld_register_func_for_add_image` calls us back for every image already loaded (during the
//! registration) and then for each image loaded later (`dlopen`, under dyld's lock). After
//! install, each new image is added to the stack scanner's code ranges and the published
//! `modules` list is rebuilt, so a crash in a plug-in loaded late still names its image. The
//! callback allocates (it runs in normal context); the crash handler only reads the published
//! list.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ffi;
use super::macho;
use crate::images::{Image, ImageId};

static IMAGES: Mutex<Vec<Image>> = Mutex::new(Vec::new());
static REGISTERED: std::sync::Once = std::sync::Once::new();
/// Set once the first list is published: from then on, new images are published as they load.
static LIVE: AtomicBool = AtomicBool::new(false);

/// Reads the image whose header is at `header`; `None` for a header that is not a Mach-O
/// image or lacks `__TEXT`.
///
/// # Safety
/// `header` must point at a `mach_header` dyld reported (mapped, with its load commands).
unsafe fn image_at(header: *const ffi::mach_header) -> Option<Image> {
    // SAFETY: the first 32 bytes of a mapped image are readable (a header is at least 28
    // bytes, followed by its load commands).
    let first = unsafe { std::slice::from_raw_parts(header as *const u8, 32) };
    let len = macho::header_and_commands_len(first).ok()?;
    // SAFETY: dyld maps the header and all of its load commands.
    let bytes = unsafe { std::slice::from_raw_parts(header as *const u8, len) };
    let parsed = macho::parse(bytes).ok()?;
    // SAFETY: dladdr only reads its arguments; a zeroed Dl_info is valid.
    let path = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(header as *const libc::c_void, &mut info) != 0 && !info.dli_fname.is_null()
        {
            std::ffi::CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        }
    };
    let image_addr = header as u64;
    Some(Image {
        path,
        image_addr,
        image_size: parsed.text_vmsize,
        id: parsed.uuid.map_or(ImageId::None, ImageId::MachUuid),
        arch: parsed.arch,
        code_ranges: vec![(image_addr, image_addr + parsed.text_vmsize)],
    })
}

unsafe extern "C" fn on_add_image(header: *const ffi::mach_header, _slide: isize) {
    // SAFETY: dyld passes the header of an image it mapped.
    let Some(image) = (unsafe { image_at(header) }) else {
        return;
    };
    let Ok(mut images) = IMAGES.lock() else {
        return;
    };
    if LIVE.load(Ordering::Acquire) {
        crate::unwind::add_code_ranges(&image.code_ranges);
        images.push(image);
        crate::images::publish(&images);
    } else {
        images.push(image);
    }
}

/// Every loaded image, the main executable first. Registers for dyld's add-image callback on
/// the first call; later loads are published as they happen.
pub fn loaded_images() -> Vec<Image> {
    // SAFETY: registering a callback that only reads what dyld hands it.
    REGISTERED.call_once(|| unsafe { ffi::_dyld_register_func_for_add_image(on_add_image) });
    // SAFETY: image 0 is the main executable. Asked before taking IMAGES: dyld may hold its
    // own lock while its callback waits for IMAGES (a `dlopen` on another thread).
    let main = unsafe { ffi::_dyld_get_image_header(0) } as u64;
    let Ok(images) = IMAGES.lock() else {
        return Vec::new();
    };
    let mut list = images.clone();
    list.sort_by_key(|i| (i.image_addr != main, i.image_addr));
    LIVE.store(true, Ordering::Release);
    list
}
