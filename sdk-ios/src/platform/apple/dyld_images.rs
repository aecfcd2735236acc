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

/// `main`'s `[start, end)`: the main executable's `LC_MAIN` entry offset from its header,
/// ended by the next function start in its `LC_FUNCTION_STARTS` (read where `__LINKEDIT` is
/// mapped: the header's slide plus `__LINKEDIT`'s `vmaddr`, plus the data's offset in it).
/// `None` for an executable without `LC_MAIN` or without function starts.
pub fn main_function() -> Option<(u64, u64)> {
    // SAFETY: image 0 is the main executable, mapped with its load commands.
    let header = unsafe { ffi::_dyld_get_image_header(0) };
    if header.is_null() {
        return None;
    }
    // SAFETY: as in `image_at`: the header and its load commands are mapped.
    let parsed = unsafe {
        let first = std::slice::from_raw_parts(header as *const u8, 32);
        let len = macho::header_and_commands_len(first).ok()?;
        macho::parse(std::slice::from_raw_parts(header as *const u8, len)).ok()?
    };
    let base = header as u64;
    let entry = parsed.main_entry_offset?;
    let (dataoff, datasize) = parsed.function_starts?;
    let (linkedit_vmaddr, linkedit_fileoff) = parsed.linkedit?;
    let slide = base.wrapping_sub(parsed.text_vmaddr);
    let data_addr = slide
        .wrapping_add(linkedit_vmaddr)
        .wrapping_add(u64::from(dataoff).checked_sub(linkedit_fileoff)?);
    // SAFETY: dyld maps __LINKEDIT whole; the function starts lie inside it.
    let data = unsafe { std::slice::from_raw_parts(data_addr as *const u8, datasize as usize) };
    let end = macho::next_function_start(data, entry)?;
    Some((base + entry, base + end))
}
