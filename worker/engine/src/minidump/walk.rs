//! The stack walk itself: rust-minidump's processor, with a symbol provider that gives it the
//! images' CFI and nothing else, and its result read into a [`NativeReport`].

use std::path::PathBuf;

use minidump::{Minidump, MinidumpException, MinidumpModuleList, MinidumpSystemInfo, Module};
use minidump_unwind::{
    FileError, FileKind, FillSymbolError, FrameSymbolizer, FrameTrust as WalkTrust, FrameWalker,
    SymbolProvider,
};
use symbolic_common::Arch;

use super::{UnwindTable, arch_of, malformed};
use crate::model::{FrameTrust, Image, NativeReport, RawFrame, ReportFormat};
use crate::reports::ReportError;

/// The dump's header and stream directory, read (streams are read when asked for).
pub(super) fn open(data: &[u8]) -> Result<Minidump<'_, &[u8]>, ReportError> {
    crate::guard::no_panic(|| Minidump::read(data).map_err(|e| e.to_string())).map_err(malformed)
}

/// The dump's CPU, from its system info stream (`Arch::Unknown` without one).
pub(super) fn dump_arch(dump: &Minidump<'_, &[u8]>) -> Arch {
    dump.get_stream::<MinidumpSystemInfo>()
        .map(|info| arch_of(info.cpu))
        .unwrap_or(Arch::Unknown)
}

/// The dump's images, in its order.
pub(super) fn images(dump: &Minidump<'_, &[u8]>, arch: Arch) -> Vec<Image> {
    let Ok(list) = dump.get_stream::<MinidumpModuleList>() else {
        return Vec::new();
    };
    list.iter().map(|module| image(module, arch)).collect()
}

fn image(module: &dyn Module, arch: Arch) -> Image {
    Image {
        code_file: Some(module.code_file().into_owned()).filter(|f| !f.is_empty()),
        debug_id: module.debug_identifier().filter(|id| !id.is_nil()),
        arch,
        image_addr: module.base_address(),
        image_size: module.size(),
    }
}

/// The debug id of the image the crash happened in: the one holding the exception context's
/// instruction pointer (no walk needed); `None` without an exception stream or when the PC is
/// in no image with a debug id.
pub(super) fn crash_image(dump: &Minidump<'_, &[u8]>) -> Option<symbolic_common::DebugId> {
    let exception = dump.get_stream::<MinidumpException>().ok()?;
    let system_info = dump.get_stream::<MinidumpSystemInfo>().ok()?;
    let misc = dump.get_stream::<minidump::MinidumpMiscInfo>().ok();
    let pc = exception
        .context(&system_info, misc.as_ref())?
        .get_instruction_pointer();
    let modules = dump.get_stream::<MinidumpModuleList>().ok()?;
    let module = modules.module_at_address(pc)?;
    module.debug_identifier().filter(|id| !id.is_nil())
}

/// Gives the walker the CFI of the images it has, and no symbols: without symbols the walker
/// takes any scanned address inside an image as a candidate, as it does for images nobody has
/// symbols for (symbols come later, from the SymCaches).
struct Provider<'a> {
    unwind: &'a UnwindTable,
}

#[async_trait::async_trait]
impl SymbolProvider for Provider<'_> {
    async fn fill_symbol(
        &self,
        _module: &(dyn Module + Sync),
        _frame: &mut (dyn FrameSymbolizer + Send),
    ) -> Result<(), FillSymbolError> {
        Err(FillSymbolError {})
    }

    async fn walk_frame(
        &self,
        module: &(dyn Module + Sync),
        walker: &mut (dyn FrameWalker + Send),
    ) -> Option<()> {
        let info = self.unwind.get(&module.debug_identifier()?)?;
        info.symbols().walk_frame(module, walker)
    }

    async fn get_file_path(
        &self,
        _module: &(dyn Module + Sync),
        _file_kind: FileKind,
    ) -> Result<PathBuf, FileError> {
        Err(FileError::NotFound)
    }
}

pub(super) fn walk(data: &[u8], unwind: &UnwindTable) -> Result<NativeReport, ReportError> {
    let bounded = super::bounds::bounded(data)?;
    let dump = open(&bounded)?;
    let provider = Provider { unwind };
    let state = crate::guard::no_panic(|| {
        futures::executor::block_on(minidump_processor::process_minidump(&dump, &provider))
            .map_err(|e| e.to_string())
    })
    .map_err(malformed)?;
    let arch = arch_of(state.system_info.cpu);
    let images = state
        .modules
        .iter()
        .map(|module| image(module, arch))
        .collect();
    let linux = linux_like(state.system_info.os);
    // On Linux and Android the exception code is the signal number (Breakpad's convention).
    let signal = linux
        .then(|| dump.get_stream::<MinidumpException>().ok())
        .flatten()
        .map(|exception| exception.raw.exception_record.exception_code);
    let crash_reason = state
        .exception_info
        .as_ref()
        .map(|info| format!("{} at {:#x}", info.reason, info.address.0));
    let threads = state
        .threads
        .iter()
        .enumerate()
        .map(|(index, stack)| crate::model::Thread {
            id: u64::from(stack.thread_id),
            name: stack.thread_name.clone().filter(|n| !n.is_empty()),
            crashed: state.requesting_thread == Some(index),
            ip_register: stack.frames.first().map(|f| f.instruction),
            frames: stack
                .frames
                .iter()
                .map(|frame| RawFrame {
                    // The return address for callers (`instruction` is already inside the
                    // call); symbolication steps back to the call itself, as for any report.
                    instruction_addr: frame.resume_address,
                    function: None,
                    image_index: None,
                    trust: Some(trust(frame.trust)),
                })
                .collect(),
        })
        .collect();
    let mut report = NativeReport::crash(
        ReportFormat::Minidump,
        arch,
        crash_reason,
        signal,
        threads,
        images,
    );
    report.facets = facets(&state.system_info);
    Ok(report)
}

/// The facets of a minidump: the OS from its system info stream (`macOS 14.2.1 (23C71)`;
/// on Linux the kernel release, `Linux 6.1.0-18-amd64`, which minidump-writer and Breakpad
/// write as the first words after `Linux` of the build, `uname -srvm`, leaving the version
/// 0.0.0). A minidump names no device model and no release.
fn facets(info: &minidump_unwind::SystemInfo) -> crate::facets::ReportFacets {
    let name = info.os.long_name();
    let version = info.os_version.as_deref().filter(|v| *v != "0.0.0");
    let kernel = info
        .os_build
        .as_deref()
        .and_then(|b| b.strip_prefix("Linux "))
        .and_then(|b| b.split_whitespace().next());
    let build = info.os_build.as_deref().filter(|b| !b.trim().is_empty());
    let os = match (info.os, version, kernel, build) {
        (minidump::system_info::Os::Linux, None, Some(kernel), _) => format!("{name} {kernel}"),
        (os, Some(version), _, Some(build)) if !linux_like(os) => {
            format!("{name} {version} ({build})")
        }
        (_, Some(version), _, _) => format!("{name} {version}"),
        _ => name.into_owned(),
    };
    crate::facets::ReportFacets {
        os: Some(crate::facets::os_name(&os)),
        ..Default::default()
    }
    .cleaned()
}

fn linux_like(os: minidump::system_info::Os) -> bool {
    matches!(
        os,
        minidump::system_info::Os::Linux | minidump::system_info::Os::Android
    )
}

fn trust(trust: WalkTrust) -> FrameTrust {
    match trust {
        WalkTrust::Context => FrameTrust::Context,
        WalkTrust::PreWalked => FrameTrust::Prewalked,
        WalkTrust::CallFrameInfo => FrameTrust::Cfi,
        WalkTrust::FramePointer => FrameTrust::Fp,
        WalkTrust::CfiScan => FrameTrust::CfiScan,
        WalkTrust::Scan => FrameTrust::Scan,
        WalkTrust::None => FrameTrust::None,
    }
}
