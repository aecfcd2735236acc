//! The symbolication result: what `symctl symbolicate --format json` prints and what a worker
//! sends back to the master.
//!
//! The shape is the native part of the symctl contract (`shared/conformance/CONTRACT.md`):
//! addresses are `"0x…"` lowercase hex strings; `lineno`/`colno` are 1-based and `null` when
//! unknown; frames are innermost first, an inlined call expanding into several frames with the
//! same `index` and `instruction_addr` (innermost inlinee first, `inlined: true` on all but the
//! outermost, real function).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An address (bytes) that serializes as `"0x1a2b"` and reads from that form or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HexAddr(pub u64);

impl fmt::Display for HexAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl HexAddr {
    /// `"0x…"`, lowercase, no leading zeros (`0x0` for zero): what [`fmt::Display`] writes,
    /// without the formatting machinery (a result writes hundreds of addresses).
    fn write_hex(self, buf: &mut [u8; 18]) -> &str {
        let digits = (16 - self.0.leading_zeros() as usize / 4).max(1);
        buf[0] = b'0';
        buf[1] = b'x';
        for (i, slot) in buf[2..2 + digits].iter_mut().enumerate() {
            let nibble = (self.0 >> (4 * (digits - 1 - i))) & 0xf;
            *slot = b"0123456789abcdef"[nibble as usize];
        }
        std::str::from_utf8(&buf[..2 + digits]).expect("only ASCII hex digits were written")
    }
}

impl Serialize for HexAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.write_hex(&mut [0; 18]))
    }
}

impl<'de> Deserialize<'de> for HexAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        crate::reports::parse_addr(&value)
            .map(HexAddr)
            .ok_or_else(|| serde::de::Error::custom("expected an address (\"0x…\" or a number)"))
    }
}

/// Overall status of a symbolication job's result. A result is produced even when debug files are
/// missing; those show in frame and module statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    /// Every thread was processed.
    Complete,
}

/// Status of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameStatus {
    /// Function (and, with DWARF, file and line) found.
    Symbolicated,
    /// The debug file was found, but has no symbol at this address.
    MissingSymbol,
    /// No image of the report contains the address.
    UnknownImage,
    /// No debug file was found (or could be fetched) for the frame's image.
    Missing,
    /// The image's debug file is unreadable (corrupt, truncated, wrong format).
    Malformed,
}

/// Status of one image (module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleStatus {
    /// A debug file with the image's debug id was found (and, if frames needed it, read).
    Found,
    /// Frames need the image, but no debug file has its debug id (or it has no debug id).
    Missing,
    /// The debug file exists but is unreadable.
    Malformed,
    /// Fetching the debug file failed (source unreachable after retries).
    FetchingFailed,
    /// No frame is in this image, so its debug file was not looked for (listed with
    /// [`crate::model::Modules::All`] only).
    Unused,
}

/// The whole result of symbolicating one native report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SymbolicationResult {
    /// Always [`ResultStatus::Complete`] for a produced result.
    pub status: ResultStatus,
    /// What made the process crash, Apple style (`EXC_BAD_ACCESS (SIGSEGV)`), when known.
    pub crash_reason: Option<String>,
    /// Threads in report order; exactly one has `crashed: true` when the report names one.
    pub threads: Vec<ThreadResult>,
    /// The images of the report that a frame or call-tree node is in, in report order; every
    /// image with [`crate::model::Modules::All`] (the others `unused`).
    pub modules: Vec<ModuleResult>,
    /// How many images of the report `modules` leaves out because no frame or node is in them
    /// (the stored report keeps them, unless its sender left them out before sending, as the
    /// SDK does): 0 when `modules` lists every image. Results stored before it existed read as
    /// 0.
    #[serde(default)]
    pub unreferenced_modules: usize,
    /// A hang report's call tree, symbolicated node by node (flat, parents first, as the
    /// report gives it); absent from the JSON for other reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_tree: Vec<CallTreeResult>,
    /// What the report was about (`hang`, `jank`, `cpu`, `oom`, `launch`); absent from the
    /// JSON for crashes.
    #[serde(default, skip_serializing_if = "is_crash")]
    pub kind: crate::model::ReportKind,
    /// The SDK's fields of that kind, as the report gave them (see
    /// [`crate::model::NativeReport::details`]); absent for crashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    /// Where the report came from, as far as it says: `{"release", "dist", "os", "device"}`
    /// ([`crate::facets::ReportFacets`]); absent from the JSON when it says nothing.
    #[serde(default, skip_serializing_if = "crate::facets::ReportFacets::is_empty")]
    pub facets: crate::facets::ReportFacets,
}

fn is_crash(kind: &crate::model::ReportKind) -> bool {
    *kind == crate::model::ReportKind::Crash
}

/// One symbolicated node of a hang report's call tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTreeResult {
    /// Index of the calling frame's node in `call_tree` (always lower); `null` at the top.
    pub parent: Option<usize>,
    /// Samples through this frame.
    pub hits: u64,
    /// The frame, inlined calls expanded as in a thread's `frames` (innermost first; `index`
    /// is the node's index).
    pub frames: Vec<FrameResult>,
}

impl SymbolicationResult {
    /// The crashed thread, if the report names one.
    pub fn crashed_thread(&self) -> Option<&ThreadResult> {
        self.threads.iter().find(|t| t.crashed)
    }
}

/// One symbolicated thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadResult {
    /// The thread id or index the report gives.
    pub id: u64,
    /// Thread name or dispatch queue, when known.
    pub name: Option<String>,
    /// Whether this thread crashed.
    pub crashed: bool,
    /// Frames, innermost first, inlined calls expanded.
    pub frames: Vec<FrameResult>,
}

/// One symbolicated frame (one inline level of one raw frame).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameResult {
    /// The raw frame's index in its thread (0 = innermost); shared by its inline levels.
    pub index: usize,
    /// The raw instruction address from the report.
    pub instruction_addr: HexAddr,
    /// The address that was looked up: the instruction address, or the previous instruction
    /// for a return address (arm64: `(addr & !3) - 4`; x86: `addr - 1`).
    pub lookup_addr: HexAddr,
    /// The name (basename) of the image holding the address.
    pub image: Option<String>,
    /// The load address of that image.
    pub image_addr: Option<HexAddr>,
    /// How this frame fared.
    pub status: FrameStatus,
    /// The raw (possibly mangled) symbol name.
    pub symbol: Option<String>,
    /// The demangled function name; for unsymbolicated frames, the name the report gave.
    pub function: Option<String>,
    /// The absolute start address of `function`, when known (for `function + offset`).
    pub sym_addr: Option<HexAddr>,
    /// The source file's basename.
    pub filename: Option<String>,
    /// The source file's full path as recorded in the debug info.
    pub abs_path: Option<String>,
    /// 1-based source line; `None` when unknown.
    pub lineno: Option<u32>,
    /// 1-based source column; `None` when unknown (SymCaches do not keep columns).
    pub colno: Option<u32>,
    /// Whether this level is an inlined call (all levels of a frame but the last).
    pub inlined: bool,
    /// How the raw frame was found, for stacks the engine walked (minidumps): `context`,
    /// `cfi`, `fp`, `cfi_scan`, `scan`...; absent for frames the report listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<crate::model::FrameTrust>,
}

/// One image of the report and what became of its debug file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleResult {
    /// Full path of the image on the device.
    pub code_file: Option<String>,
    /// Debug id, lowercase with dashes (`82d13d98-219e-3040-b62a-07a297007a7c`).
    pub debug_id: Option<String>,
    /// Architecture name (`arm64`, `x86_64`, `unknown`): one of symbolic's names, borrowed,
    /// when the engine made it.
    pub arch: std::borrow::Cow<'static, str>,
    /// Load address.
    pub image_addr: HexAddr,
    /// Size in bytes (0 when the report does not say).
    pub image_size: u64,
    /// What became of the debug file.
    pub status: ModuleStatus,
    /// Why, for `malformed` and `fetching_failed` (one line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_serialize_as_display_writes_them() {
        let mut samples = vec![0, 1, 0xf, 0x10, 0xff, 0x100, 0x1_0000_0000, u64::MAX];
        samples.extend((0..64).map(|shift| 0x9e37_79b9_7f4a_7c15_u64 >> shift));
        for addr in samples {
            let json = serde_json::to_string(&HexAddr(addr)).unwrap();
            assert_eq!(json, format!("\"{:#x}\"", addr), "{addr}");
        }
    }
}
