//! The one internal model every report format is read into.
//!
//! Whatever the input (Apple `.crash`/`.ips`, KSCrash, Sentry, symbolicator request), the
//! readers in [`crate::reports`] produce a [`NativeReport`]: the loaded images, the threads with
//! their raw frames (innermost first), and what made the process crash. Addresses are absolute
//! addresses in the crashed process, in bytes.

use symbolic_common::{Arch, DebugId};

/// The report formats the engine reads; see [`crate::reports::parse_report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    /// Apple's text crash report (`.crash`, "Report Version: 104").
    AppleText,
    /// Apple's JSON crash report (`.ips`, iOS 15+): a one-line JSON header, then a JSON body.
    AppleIps,
    /// A KSCrash JSON report (`binary_images` + `crash.threads[].backtrace`).
    KsCrash,
    /// A Sentry event (`debug_meta.images` + `exception.values[].stacktrace` / `threads`).
    SentryEvent,
    /// A symbolicator-style request (`modules` + `stacktraces`).
    SymbolicatorRequest,
    /// A Breakpad/Crashpad minidump (`MDMP`), its stacks walked by [`crate::minidump`].
    Minidump,
    /// An Android tombstone in protobuf (`tombstone.proto`, Android 12+).
    Tombstone,
}

impl ReportFormat {
    /// A short, stable name for logs and errors (`apple-text`, `apple-ips`, `kscrash`, `sentry`,
    /// `symbolicator`, `minidump`, `tombstone`).
    pub fn name(self) -> &'static str {
        match self {
            ReportFormat::AppleText => "apple-text",
            ReportFormat::AppleIps => "apple-ips",
            ReportFormat::KsCrash => "kscrash",
            ReportFormat::SentryEvent => "sentry",
            ReportFormat::SymbolicatorRequest => "symbolicator",
            ReportFormat::Minidump => "minidump",
            ReportFormat::Tombstone => "tombstone",
        }
    }
}

/// A crash report, read from any supported format.
#[derive(Debug, Clone)]
pub struct NativeReport {
    /// The format it was read from.
    pub format: ReportFormat,
    /// The crashed process's CPU architecture, when the report says (else `Arch::Unknown`).
    pub arch: Arch,
    /// What made the process crash, in Apple's style: `EXC_BAD_ACCESS (SIGSEGV)`.
    pub crash_reason: Option<String>,
    /// The POSIX signal number (SIGSEGV = 11, ...), when known. Used for the frame-0 heuristic.
    pub signal: Option<u32>,
    /// Every thread, in report order. At most one has `crashed == true`.
    pub threads: Vec<Thread>,
    /// Every loaded image the report lists, in report order; with [`Modules::Referenced`] an
    /// image no frame is in may be known by its range only ([`Image::range_only`]).
    pub images: Vec<Image>,
    /// A hang report's call tree (the SDK's `call_tree`): every sampled path of the blocked
    /// thread with hit counts, flat, parents before children; empty for other reports.
    pub call_tree: Vec<CallTreeNode>,
    /// What the report is about (the SDK's `kind`); [`ReportKind::Crash`] for every format but
    /// the SDK's.
    pub kind: ReportKind,
    /// The SDK's fields of that kind, as sent (`cpu`, `oom`, `launch`, with `hang_duration_ms`
    /// / `jank_duration_ms` and `samples` folded in): carried into the result unchanged;
    /// `None` for crashes of other formats.
    pub details: Option<serde_json::Value>,
    /// Which images the result lists (the `modules` argument of
    /// [`crate::reports::parse_report_with`]). With [`Modules::Referenced`] a reader may leave an
    /// image that no frame or call-tree node is in read as far as its address range only
    /// ([`Image::range_only`]: no `code_file`, no `debug_id`): nothing reads more of it. Set by
    /// the reader: a report read for referenced images and then set to [`Modules::All`] would
    /// list such images without their paths.
    pub modules: Modules,
    /// Where the report came from (release, OS, device), as far as its format says.
    pub facets: crate::facets::ReportFacets,
}

impl NativeReport {
    /// A crash report as most readers make it: kind [`ReportKind::Crash`], no call tree, no
    /// SDK details, read for the referenced images ([`Modules::Referenced`]).
    pub fn crash(
        format: ReportFormat,
        arch: Arch,
        crash_reason: Option<String>,
        signal: Option<u32>,
        threads: Vec<Thread>,
        images: Vec<Image>,
    ) -> Self {
        NativeReport {
            format,
            arch,
            crash_reason,
            signal,
            threads,
            images,
            call_tree: Vec::new(),
            kind: ReportKind::Crash,
            details: None,
            modules: Modules::Referenced,
            facets: crate::facets::ReportFacets::default(),
        }
    }
}

/// Which images a symbolication result lists in `modules`
/// (`../shared/conformance/CONTRACT.md`).
///
/// A CrashProbe event lists 254-328 images of which 8-15 hold a frame; Apple's own `.ips`
/// reports (`usedImages`) and Xcode's text reports of iOS 15+ list the used ones only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Modules {
    /// Only the images at least one frame of a thread, or a node of a call tree, falls in; the
    /// result counts the others in `unreferenced_modules`. The default.
    #[default]
    Referenced,
    /// Every image of the report, those no frame uses with status `unused`.
    All,
}

/// What a report is about: the SDK's `kind` field (`"crash"` when absent).
///
/// Crashes and hangs have a stack; a `jank` (one slow main run-loop pass) and a `cpu` hog carry
/// a sampled call tree like a hang; an `oom` (the previous run was killed for memory, decided at
/// the next launch) and a `launch` (time to the first frame) may carry no stack at all.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    /// A crash (signal, Mach exception, uncaught exception).
    #[default]
    Crash,
    /// The main thread did not answer for the hang threshold (iOS's watchdog kills such apps).
    Hang,
    /// One main run-loop pass took longer than the jank threshold, but less than a hang.
    Jank,
    /// A thread used more than a threshold of a core for most of a sampling window.
    Cpu,
    /// The previous run was ended by the system for memory (foreground or background).
    Oom,
    /// Time from process start to the app's first frame.
    Launch,
}

impl ReportKind {
    /// The SDK's name of the kind (`crash`, `hang`, `jank`, `cpu`, `oom`, `launch`).
    pub fn name(self) -> &'static str {
        match self {
            ReportKind::Crash => "crash",
            ReportKind::Hang => "hang",
            ReportKind::Jank => "jank",
            ReportKind::Cpu => "cpu",
            ReportKind::Oom => "oom",
            ReportKind::Launch => "launch",
        }
    }

    /// The kind named `name`; `None` for an unknown name.
    pub fn from_name(name: &str) -> Option<ReportKind> {
        [
            ReportKind::Crash,
            ReportKind::Hang,
            ReportKind::Jank,
            ReportKind::Cpu,
            ReportKind::Oom,
            ReportKind::Launch,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }

    /// Whether a report of this kind may have no stack trace (`oom`, `launch`).
    pub fn stackless(self) -> bool {
        matches!(self, ReportKind::Oom | ReportKind::Launch)
    }
}

/// One node of a sampled call tree: a frame reached by `hits` samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallTreeNode {
    /// The frame's address: a return address, or the sampled PC for a node with no children.
    pub instruction_addr: u64,
    /// Samples through this frame.
    pub hits: u64,
    /// Index of the calling frame's node in the same list (always lower); `None` at the top
    /// (the outermost frames).
    pub parent: Option<usize>,
}

/// One loaded binary image (executable, framework, dylib, shared object).
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// Full path of the image on the device, when known.
    pub code_file: Option<String>,
    /// The debug id (Mach-O `LC_UUID`, ELF GNU build-id): matches the image to its debug file.
    pub debug_id: Option<DebugId>,
    /// The image's architecture (the report's when the image does not say).
    pub arch: Arch,
    /// The address the image was loaded at (start of `__TEXT`), in bytes.
    pub image_addr: u64,
    /// The image's size in bytes; 0 when unknown (the image then extends to the next one).
    pub image_size: u64,
}

impl Image {
    /// An image known by its address range only (`image_addr`, `image_size` in bytes): what a
    /// reader keeps of an image no frame is in when the result lists referenced images only
    /// ([`Modules::Referenced`]); it still bounds its neighbours' ranges.
    pub fn range_only(image_addr: u64, image_size: u64) -> Image {
        Image {
            code_file: None,
            debug_id: None,
            arch: Arch::Unknown,
            image_addr,
            image_size,
        }
    }

    /// The image's file name: the last component of `code_file` (`/a/b/App` → `App`).
    pub fn name(&self) -> Option<&str> {
        let path = self.code_file.as_deref()?;
        Some(path.rsplit(['/', '\\']).next().unwrap_or(path))
    }
}

/// One thread of the crashed process.
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    /// The thread's id or index as the report gives it.
    pub id: u64,
    /// The thread's name (or dispatch queue), when known.
    pub name: Option<String>,
    /// Whether this thread crashed (or triggered the report).
    pub crashed: bool,
    /// The value of the instruction pointer register (`pc`/`rip`), when the report has it.
    pub ip_register: Option<u64>,
    /// Frames, innermost (frame 0, the current PC) first.
    pub frames: Vec<RawFrame>,
}

/// One unsymbolicated frame.
#[derive(Debug, Clone, PartialEq)]
pub struct RawFrame {
    /// The absolute instruction address: the PC for frame 0, a return address for the others.
    pub instruction_addr: u64,
    /// The function name the report itself gives (on-device symbolication), if any.
    pub function: Option<String>,
    /// Index into [`NativeReport::images`] when the report names the frame's image explicitly
    /// (`.ips` `imageIndex`); otherwise the image is found by address.
    pub image_index: Option<usize>,
    /// How the frame was found, for stacks the engine walked itself (minidumps); `None` for
    /// frames a report lists.
    pub trust: Option<FrameTrust>,
}

/// How a walked frame was found, most trusted first; the names are rust-minidump's and
/// Sentry's (`trust` in their frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameTrust {
    /// Frame 0: the thread's registers as the dump holds them.
    Context,
    /// Unwound from the stack walker's own earlier result (a dump that carries its stacks).
    Prewalked,
    /// Unwound with call frame information (CFI: `.eh_frame`, `.debug_frame`, compact unwind)
    /// from the callee's debug file.
    Cfi,
    /// Unwound by following the frame pointer chain.
    Fp,
    /// Found by scanning the stack for a return address, near a CFI-unwound frame.
    CfiScan,
    /// Found by scanning the stack for a value that points into code: may be a stale one.
    Scan,
    /// Unknown.
    None,
}
