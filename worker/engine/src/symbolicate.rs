//! Native symbolication: from a [`NativeReport`] and a source of SymCaches to a
//! [`SymbolicationResult`].
//!
//! For every frame: find its image by address, work out the lookup address (return addresses
//! step back to the calling instruction, with `symbolic_common::InstructionInfo`, as atos and
//! symbolicator do), look the image-relative address up in the image's SymCache, and expand
//! inlined calls innermost first. Each image's SymCache is requested from the
//! [`SymCacheSource`] at most once per report, and only for images that frames reference. The
//! engine does no I/O itself: the source decides where debug files come from.

use std::borrow::Cow;
use std::sync::Arc;

use symbolic_common::{Arch, InstructionInfo};

use crate::model::{Image, Modules, NativeReport, RawFrame, Thread};
use crate::names::known;
use crate::result::{
    CallTreeResult, FrameResult, FrameStatus, HexAddr, ModuleResult, ModuleStatus, ResultStatus,
    SymbolicationResult, ThreadResult,
};
use crate::symcache::SymCacheFile;

/// What a [`SymCacheSource`] has for one image.
#[derive(Debug, Clone)]
pub enum ModuleLoad {
    /// The image's SymCache.
    Found(Arc<SymCacheFile>),
    /// No debug file with the image's debug id.
    Missing,
    /// A debug file exists but cannot be read; the reason is one line.
    Malformed(String),
    /// The debug file could not be fetched (source unreachable); the reason is one line.
    FetchingFailed(String),
}

/// Where the engine gets SymCaches from: local files (`symctl`), or S3 plus caches (worker).
pub trait SymCacheSource {
    /// The SymCache for `image` (which has a debug id). Called at most once per image per
    /// report, and only for images a frame or call-tree node is in; implementations cache
    /// across reports as they see fit.
    fn load(&self, image: &Image) -> ModuleLoad;
}

/// The images (indices into `report.images`) that at least one frame is in, in report order:
/// the ones [`symbolicate`] will ask its [`SymCacheSource`] for. A worker prefetches these.
pub fn referenced_images(report: &NativeReport) -> Vec<usize> {
    let ranges = ImageRanges::new(&report.images);
    let mut used = vec![false; report.images.len()];
    for frame in report.threads.iter().flat_map(|t| &t.frames) {
        if let Some(i) = frame
            .image_index
            .or_else(|| ranges.find(frame.instruction_addr))
            && let Some(slot) = used.get_mut(i)
        {
            *slot = true;
        }
    }
    for node in &report.call_tree {
        if let Some(slot) = ranges
            .find(node.instruction_addr)
            .and_then(|i| used.get_mut(i))
        {
            *slot = true;
        }
    }
    (0..used.len()).filter(|&i| used[i]).collect()
}

/// Symbolicates every thread (and call-tree node) of `report`. The result's `modules` list
/// the images [`NativeReport::modules`] asks for: those a frame or node is in (the others
/// counted in `unreferenced_modules`), or every image, the unreferenced ones `unused`.
///
/// Never fails: problems become frame and module statuses (see [`FrameStatus`],
/// [`ModuleStatus`]).
pub fn symbolicate(report: &NativeReport, source: &dyn SymCacheSource) -> SymbolicationResult {
    build(report, source, Paths::Copy).0
}

/// [`symbolicate`], taking the report: its images' paths move into the result's modules
/// instead of being copied (the report is dropped after).
pub fn symbolicate_owned(report: NativeReport, source: &dyn SymCacheSource) -> SymbolicationResult {
    let (mut result, listed) = build(&report, source, Paths::Move);
    // `listed` is in report order: one walk over the images, no second list of them.
    let mut images = report.images.into_iter().enumerate();
    for (module, index) in result.modules.iter_mut().zip(listed) {
        if let Some((_, image)) = images.find(|(i, _)| *i == index) {
            module.code_file = image.code_file;
        }
    }
    result
}

/// Whether [`build`] copies each image's path into its module, or leaves it for the caller to
/// move there.
#[derive(Clone, Copy, PartialEq)]
enum Paths {
    Copy,
    Move,
}

/// The result, and for each of its modules the index of its image in `report.images`
/// (ascending: modules are in report order).
fn build(
    report: &NativeReport,
    source: &dyn SymCacheSource,
    paths: Paths,
) -> (SymbolicationResult, Vec<usize>) {
    let ranges = ImageRanges::new(&report.images);

    // Which image each frame is in; then load each referenced image once.
    let frame_images: Vec<Vec<Option<usize>>> = report
        .threads
        .iter()
        .map(|t| {
            t.frames
                .iter()
                .map(|f| f.image_index.or_else(|| ranges.find(f.instruction_addr)))
                .collect()
        })
        .collect();
    let tree_images: Vec<Option<usize>> = report
        .call_tree
        .iter()
        .map(|n| ranges.find(n.instruction_addr))
        .collect();
    let mut loads: Vec<Option<ModuleLoad>> = vec![None; report.images.len()];
    for index in frame_images
        .iter()
        .flatten()
        .flatten()
        .chain(tree_images.iter().flatten())
    {
        if loads[*index].is_none() {
            let image = &report.images[*index];
            loads[*index] = Some(match image.debug_id {
                Some(_) => source.load(image),
                None => ModuleLoad::Missing,
            });
        }
    }

    let threads = report
        .threads
        .iter()
        .zip(&frame_images)
        .map(|(thread, images)| ThreadResult {
            id: thread.id,
            name: thread.name.clone(),
            crashed: thread.crashed,
            frames: symbolicate_thread(report, thread, images, &loads),
        })
        .collect();

    // Referenced images are the loaded ones (an image without a debug id is loaded as
    // `Missing`).
    let listed: Vec<usize> = match report.modules {
        Modules::Referenced => (0..loads.len()).filter(|&i| loads[i].is_some()).collect(),
        Modules::All => (0..loads.len()).collect(),
    };
    let modules: Vec<ModuleResult> = listed
        .iter()
        .map(|&i| module_result(&report.images[i], loads[i].as_ref(), paths))
        .collect();
    let unreferenced_modules = report.images.len() - modules.len();

    let result = SymbolicationResult {
        status: ResultStatus::Complete,
        crash_reason: report.crash_reason.clone(),
        threads,
        modules,
        unreferenced_modules,
        call_tree: symbolicate_tree(report, &tree_images, &loads),
        kind: report.kind,
        details: report.details.clone(),
        facets: report.facets.clone(),
    };
    (result, listed)
}

/// Every node of a hang report's call tree, symbolicated as a frame: a node with children holds
/// a return address (the calling instruction is looked up), a node without is a sampled PC
/// (looked up as it is).
fn symbolicate_tree(
    report: &NativeReport,
    images: &[Option<usize>],
    loads: &[Option<ModuleLoad>],
) -> Vec<CallTreeResult> {
    let has_children = tree_has_children(report);
    report
        .call_tree
        .iter()
        .zip(images)
        .enumerate()
        .map(|(index, (node, image_index))| {
            let image = image_index.map(|i| &report.images[i]);
            let lookup_addr = tree_lookup_address(
                arch_of(report, image),
                node.instruction_addr,
                has_children[index],
            );
            let frame = RawFrame {
                instruction_addr: node.instruction_addr,
                function: None,
                image_index: *image_index,
                trust: None,
            };
            let load = image_index.and_then(|i| loads[i].as_ref());
            let mut frames = Vec::new();
            symbolicate_frame(index, &frame, lookup_addr, image, load, &mut frames);
            CallTreeResult {
                parent: node.parent,
                hits: node.hits,
                frames,
            }
        })
        .collect()
}

fn symbolicate_thread(
    report: &NativeReport,
    thread: &Thread,
    images: &[Option<usize>],
    loads: &[Option<ModuleLoad>],
) -> Vec<FrameResult> {
    let mut out = Vec::with_capacity(thread.frames.len());
    for (index, (frame, image_index)) in thread.frames.iter().zip(images).enumerate() {
        let image = image_index.map(|i| &report.images[i]);
        let lookup_addr = lookup_address(report, thread, index, frame, arch_of(report, image));
        let load = image_index.and_then(|i| loads[i].as_ref());
        symbolicate_frame(index, frame, lookup_addr, image, load, &mut out);
    }
    out
}

/// Whether each call-tree node has children (then it holds a return address).
fn tree_has_children(report: &NativeReport) -> Vec<bool> {
    let mut has_children = vec![false; report.call_tree.len()];
    for node in &report.call_tree {
        if let Some(slot) = node.parent.and_then(|p| has_children.get_mut(p)) {
            *slot = true;
        }
    }
    has_children
}

/// The address to look up for a call-tree node at `addr`: the calling instruction when it has
/// children (a return address), else the sampled PC itself.
fn tree_lookup_address(arch: Arch, addr: u64, has_children: bool) -> u64 {
    let mut info = InstructionInfo::new(arch, addr);
    info.is_crashing_frame(!has_children);
    if has_children {
        info.caller_address()
    } else {
        info.aligned_address()
    }
}

/// The architecture a frame in `image` is read with: the image's, else the report's.
fn arch_of(report: &NativeReport, image: Option<&Image>) -> Arch {
    match image.map(|i| i.arch) {
        Some(Arch::Unknown) | None => report.arch,
        Some(arch) => arch,
    }
}

/// For every image a frame or call-tree node is in (those [`referenced_images`] lists), the
/// addresses [`symbolicate`] looks up in its SymCache, relative to the image's load address,
/// sorted and without repeats (none for an image whose frames are all below it): what a partial SymCache
/// ([`SymCacheFile::for_addresses`]) must hold to answer the report as the full one would.
pub fn image_lookups(report: &NativeReport) -> Vec<(usize, Vec<u64>)> {
    let ranges = ImageRanges::new(&report.images);
    let mut by_image: std::collections::BTreeMap<usize, Vec<u64>> = Default::default();
    // An image is listed even when none of its addresses is above its load address (then
    // with none): symbolicate still loads it.
    let mut add = |i: usize, lookup_addr: u64| {
        let Some(image) = report.images.get(i) else {
            return;
        };
        let addresses = by_image.entry(i).or_default();
        if let Some(relative) = lookup_addr.checked_sub(image.image_addr) {
            addresses.push(relative);
        }
    };
    for thread in &report.threads {
        for (index, frame) in thread.frames.iter().enumerate() {
            let Some(i) = frame
                .image_index
                .or_else(|| ranges.find(frame.instruction_addr))
            else {
                continue;
            };
            let arch = arch_of(report, report.images.get(i));
            add(i, lookup_address(report, thread, index, frame, arch));
        }
    }
    let has_children = tree_has_children(report);
    for (index, node) in report.call_tree.iter().enumerate() {
        if let Some(i) = ranges.find(node.instruction_addr) {
            let arch = arch_of(report, report.images.get(i));
            add(
                i,
                tree_lookup_address(arch, node.instruction_addr, has_children[index]),
            );
        }
    }
    by_image
        .into_iter()
        .map(|(i, mut addresses)| {
            addresses.sort_unstable();
            addresses.dedup();
            (i, addresses)
        })
        .collect()
}

/// The address to look up for frame `index` of `thread`: the PC itself for a thread's frame 0
/// (unless the crash heuristics say frame 0 holds a return address), the calling instruction
/// for every return address.
pub fn lookup_address(
    report: &NativeReport,
    thread: &Thread,
    index: usize,
    frame: &RawFrame,
    arch: Arch,
) -> u64 {
    let addr = frame.instruction_addr;
    let mut info = InstructionInfo::new(arch, addr);
    info.is_crashing_frame(index == 0);
    if thread.crashed {
        info.signal(report.signal)
            .ip_register_value(thread.ip_register);
    }
    // A null or tiny address (a jump to 0) has no previous instruction.
    if info.should_adjust_caller() && info.aligned_address() < 16 {
        return info.aligned_address();
    }
    info.caller_address()
}

fn symbolicate_frame(
    index: usize,
    frame: &RawFrame,
    lookup_addr: u64,
    image: Option<&Image>,
    load: Option<&ModuleLoad>,
    out: &mut Vec<FrameResult>,
) {
    let unsymbolicated = |status| FrameResult {
        index,
        instruction_addr: HexAddr(frame.instruction_addr),
        lookup_addr: HexAddr(lookup_addr),
        image: image.and_then(Image::name).map(str::to_owned),
        image_addr: image.map(|i| HexAddr(i.image_addr)),
        status,
        symbol: None,
        function: frame.function.clone(),
        sym_addr: None,
        filename: None,
        abs_path: None,
        lineno: None,
        colno: None,
        inlined: false,
        trust: frame.trust,
    };
    let (Some(image), Some(load)) = (image, load) else {
        out.push(unsymbolicated(FrameStatus::UnknownImage));
        return;
    };
    let symcache = match load {
        ModuleLoad::Found(symcache) => symcache,
        ModuleLoad::Missing | ModuleLoad::FetchingFailed(_) => {
            out.push(unsymbolicated(FrameStatus::Missing));
            return;
        }
        ModuleLoad::Malformed(_) => {
            out.push(unsymbolicated(FrameStatus::Malformed));
            return;
        }
    };
    let Some(relative) = lookup_addr.checked_sub(image.image_addr) else {
        out.push(unsymbolicated(FrameStatus::UnknownImage));
        return;
    };

    let start = out.len();
    for location in symcache.get().lookup(relative) {
        let function = location.function();
        let Some(raw_name) = known(function.name()) else {
            continue;
        };
        let file = location.file();
        let abs_path = file
            .as_ref()
            .map(|f| f.full_path())
            .filter(|p| !p.is_empty());
        let filename = abs_path
            .as_deref()
            .map(|p| p.rsplit(['/', '\\']).next().unwrap_or(p).to_owned());
        let entry_pc = function.entry_pc();
        out.push(FrameResult {
            index,
            instruction_addr: HexAddr(frame.instruction_addr),
            lookup_addr: HexAddr(lookup_addr),
            image: image.name().map(str::to_owned),
            image_addr: Some(HexAddr(image.image_addr)),
            status: FrameStatus::Symbolicated,
            symbol: Some(raw_name.to_string()),
            function: Some(
                symcache
                    .demangled(&raw_name, function.language())
                    .to_string(),
            ),
            sym_addr: (entry_pc != u32::MAX)
                .then(|| HexAddr(image.image_addr.wrapping_add(entry_pc as u64))),
            filename,
            abs_path,
            lineno: (location.line() > 0).then_some(location.line()),
            colno: None,
            inlined: true,
            trust: frame.trust,
        });
    }
    match out.len() - start {
        0 => out.push(unsymbolicated(FrameStatus::MissingSymbol)),
        // The lookup yields innermost first; the last level is the real (outermost) function.
        _ => out.last_mut().expect("at least one level").inlined = false,
    }
}

fn module_result(image: &Image, load: Option<&ModuleLoad>, paths: Paths) -> ModuleResult {
    let (status, error) = match load {
        Some(ModuleLoad::Found(_)) => (ModuleStatus::Found, None),
        Some(ModuleLoad::Missing) => (ModuleStatus::Missing, None),
        Some(ModuleLoad::Malformed(e)) => (ModuleStatus::Malformed, Some(e.clone())),
        Some(ModuleLoad::FetchingFailed(e)) => (ModuleStatus::FetchingFailed, Some(e.clone())),
        None => (ModuleStatus::Unused, None),
    };
    ModuleResult {
        code_file: match paths {
            Paths::Copy => image.code_file.clone(),
            Paths::Move => None,
        },
        debug_id: image.debug_id.map(debug_id_text),
        arch: Cow::Borrowed(image.arch.name()),
        image_addr: HexAddr(image.image_addr),
        image_size: image.image_size,
        status,
        error,
    }
}

/// A debug id as its `Display` writes it: `82d13d98-219e-3040-b62a-07a297007a7c`, then
/// `-<appendix in hex>` when it has one; a PDB 2.0 id as its 8 uppercase hex digits of
/// timestamp and `-<age>`. The usual id (a UUID, no appendix) is written without the formatting
/// machinery (`--modules all` lists every image of a report); the others by `Display`.
fn debug_id_text(id: symbolic_common::DebugId) -> String {
    if id.appendix() != 0 || id.is_pdb20() {
        return id.to_string();
    }
    let mut text = String::with_capacity(36);
    for (i, byte) in id.uuid().as_bytes().iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        text.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    text
}

/// Images sorted by load address, for finding the image that holds an address.
struct ImageRanges {
    /// `(start, end exclusive, index into the report's images)`, sorted by start.
    ranges: Vec<(u64, u64, usize)>,
}

impl ImageRanges {
    fn new(images: &[Image]) -> Self {
        let mut starts: Vec<(u64, usize)> = images
            .iter()
            .enumerate()
            .map(|(i, image)| (image.image_addr, i))
            .collect();
        starts.sort_unstable();
        let mut ranges = Vec::with_capacity(starts.len());
        for (n, &(start, i)) in starts.iter().enumerate() {
            let size = images[i].image_size;
            let end = if size > 0 {
                start.saturating_add(size)
            } else {
                // Unknown size: the image extends to the next one.
                starts[n + 1..]
                    .iter()
                    .map(|&(s, _)| s)
                    .find(|&s| s > start)
                    .unwrap_or(u64::MAX)
            };
            ranges.push((start, end, i));
        }
        ImageRanges { ranges }
    }

    /// The image with the greatest start `<= addr`, if `addr` is below its end.
    fn find(&self, addr: u64) -> Option<usize> {
        let after = self.ranges.partition_point(|&(start, _, _)| start <= addr);
        let &(_, end, index) = self.ranges[..after].last()?;
        (addr < end).then_some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symbolic_common::DebugId;

    #[test]
    fn debug_ids_read_as_display_writes_them() {
        for text in [
            "82D13D98-219E-3040-B62A-07A297007A7C",
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9-1a",
            // PDB 2.0: a timestamp and an age, 0 or not.
            "5AB38077-0",
            "5ab380771",
        ] {
            let id: DebugId = text.parse().unwrap();
            assert_eq!(debug_id_text(id), id.to_string(), "{text}");
        }
    }
}
