//! Android tombstones in protobuf (`tombstone.proto`, Android 12+: what debuggerd writes to
//! `/data/tombstones/tombstone_NN.pb` and `ApplicationExitInfo.getTraceInputStream()` gives an
//! app for a native crash).
//!
//! Format: AOSP `system/core/debuggerd/proto/tombstone.proto` (Apache-2.0); only the fields
//! read here are declared (prost skips the others). Frames come from libunwindstack, which has
//! already moved every caller's `pc` back into its call instruction (4 bytes on arm64, 2 or 4
//! on 32-bit ARM, 1 on x86): the reader adds 4, 2 and 1 back, so that frames are return
//! addresses as in every other format and symbolication steps back exactly once (on 32-bit ARM,
//! whose instructions are 2-byte aligned, the lookup then lands on the call instruction for
//! 2- and 4-byte Thumb calls and ARM calls alike).
//!
//! Images come from the frames themselves: a frame names its ELF (`file_name`, with
//! `base.apk!libfoo.so` for a library loaded straight from the APK at `file_map_offset`), its
//! GNU build id, and its address relative to that ELF (`rel_pc`), so the ELF's load address is
//! `pc - rel_pc` wherever in the APK it was mapped: the library is matched to its debug file by
//! build id, as any ELF (the mapping list, which names the APK, is used for sizes only).

use std::collections::BTreeMap;

use prost::Message;
use symbolic_common::Arch;

use super::ReportError;
use super::fields::debug_id_from_build_id;
use crate::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};

#[derive(Clone, PartialEq, Message)]
struct Tombstone {
    #[prost(int32, tag = "1")]
    arch: i32,
    #[prost(string, tag = "2")]
    build_fingerprint: String,
    #[prost(uint32, tag = "6")]
    tid: u32,
    #[prost(message, optional, tag = "10")]
    signal_info: Option<Signal>,
    #[prost(string, tag = "14")]
    abort_message: String,
    #[prost(btree_map = "uint32, message", tag = "16")]
    threads: BTreeMap<u32, TombstoneThread>,
    #[prost(message, repeated, tag = "17")]
    memory_mappings: Vec<MemoryMapping>,
}

#[derive(Clone, PartialEq, Message)]
struct Signal {
    #[prost(int32, tag = "1")]
    number: i32,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(string, tag = "4")]
    code_name: String,
    #[prost(bool, tag = "8")]
    has_fault_address: bool,
    #[prost(uint64, tag = "9")]
    fault_address: u64,
}

#[derive(Clone, PartialEq, Message)]
struct TombstoneThread {
    #[prost(int32, tag = "1")]
    id: i32,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(message, repeated, tag = "3")]
    registers: Vec<Register>,
    #[prost(message, repeated, tag = "4")]
    current_backtrace: Vec<BacktraceFrame>,
}

#[derive(Clone, PartialEq, Message)]
struct Register {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(uint64, tag = "2")]
    u64: u64,
}

#[derive(Clone, PartialEq, Message)]
struct BacktraceFrame {
    #[prost(uint64, tag = "1")]
    rel_pc: u64,
    #[prost(uint64, tag = "2")]
    pc: u64,
    #[prost(string, tag = "4")]
    function_name: String,
    #[prost(string, tag = "6")]
    file_name: String,
    #[prost(string, tag = "8")]
    build_id: String,
}

#[derive(Clone, PartialEq, Message)]
struct MemoryMapping {
    #[prost(uint64, tag = "1")]
    begin_address: u64,
    #[prost(uint64, tag = "2")]
    end_address: u64,
    #[prost(string, tag = "7")]
    mapping_name: String,
}

/// Threads read, at most (an Android app runs 100-300).
pub const MAX_THREADS: usize = 2048;
/// Frames of one thread, at most (libunwindstack stops at 256 by default).
pub const MAX_FRAMES: usize = 4096;
/// Frames of all threads, at most.
pub const MAX_TOTAL_FRAMES: usize = 100_000;
/// Memory mappings, at most (an app maps a few thousand).
pub const MAX_MAPPINGS: usize = 100_000;

/// Reads `data` when it is a protobuf tombstone: it decodes, names its crashed thread
/// (`tid`, not 0), and that thread has frames; `None` when it is not one (another format may
/// take it). Before decoding, the threads, frames and mappings are counted on the wire (a
/// frame of 2 bytes there is 90 decoded): a tombstone over [`MAX_THREADS`], [`MAX_FRAMES`],
/// [`MAX_TOTAL_FRAMES`] or [`MAX_MAPPINGS`] is refused (`Some(Err)`) without being decoded.
pub fn try_parse(data: &[u8]) -> Option<Result<NativeReport, ReportError>> {
    let counts = wire::counts(data)?;
    if counts.threads > MAX_THREADS
        || counts.most_frames > MAX_FRAMES
        || counts.frames > MAX_TOTAL_FRAMES
        || counts.mappings > MAX_MAPPINGS
    {
        return Some(Err(ReportError::malformed(
            ReportFormat::Tombstone,
            format!(
                "{} threads, {} frames (at most {} in one thread), {} mappings: more than read \
                 ({MAX_THREADS} threads, {MAX_FRAMES} frames in one, {MAX_TOTAL_FRAMES} in all, \
                 {MAX_MAPPINGS} mappings)",
                counts.threads, counts.frames, counts.most_frames, counts.mappings
            ),
        )));
    }
    let tombstone = Tombstone::decode(data).ok()?;
    let crashed = tombstone.threads.get(&tombstone.tid)?;
    if tombstone.tid == 0 || crashed.current_backtrace.is_empty() {
        return None;
    }
    Some(Ok(read(tombstone)))
}

fn read(tombstone: Tombstone) -> NativeReport {
    let arch = match tombstone.arch {
        0 => Arch::Arm,
        1 => Arch::Arm64,
        2 => Arch::X86,
        3 => Arch::Amd64,
        _ => Arch::Unknown,
    };
    // What libunwindstack took off every caller's pc (on 32-bit ARM 2 or 4: 2 lands inside
    // the call either way).
    let adjustment = match arch {
        Arch::X86 | Arch::Amd64 => 1,
        Arch::Arm => 2,
        _ => 4,
    };
    // Mappings by address (debuggerd lists them so; not trusted).
    let mut maps: Vec<&MemoryMapping> = tombstone.memory_mappings.iter().collect();
    maps.sort_by_key(|m| m.begin_address);
    let mut images: Vec<Image> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut threads = Vec::with_capacity(tombstone.threads.len());
    for (tid, thread) in &tombstone.threads {
        let frames = thread
            .current_backtrace
            .iter()
            .enumerate()
            .map(|(index, frame)| {
                note_image(&mut images, &mut seen, frame, arch, &maps);
                RawFrame {
                    instruction_addr: if index == 0 {
                        frame.pc
                    } else {
                        frame.pc.wrapping_add(adjustment)
                    },
                    function: Some(frame.function_name.clone()).filter(|f| !f.is_empty()),
                    image_index: None,
                    trust: None,
                }
            })
            .collect();
        let ip = ["pc", "rip", "eip"];
        threads.push(Thread {
            id: u64::from(*tid),
            name: Some(thread.name.clone()).filter(|n| !n.is_empty()),
            crashed: *tid == tombstone.tid,
            ip_register: thread
                .registers
                .iter()
                .find(|r| ip.contains(&r.name.as_str()))
                .map(|r| r.u64),
            frames,
        });
    }
    images.sort_by_key(|i| i.image_addr);
    let signal = tombstone.signal_info.as_ref();
    let crash_reason = signal.filter(|s| !s.name.is_empty()).map(|s| {
        let mut reason = s.name.clone();
        if !s.code_name.is_empty() {
            reason = format!("{reason} / {}", s.code_name);
        }
        if s.has_fault_address {
            reason = format!("{reason} at {:#x}", s.fault_address);
        }
        if !tombstone.abort_message.is_empty() {
            reason = format!("{reason}: {}", tombstone.abort_message);
        }
        reason
    });
    let mut report = NativeReport::crash(
        ReportFormat::Tombstone,
        arch,
        crash_reason,
        signal.and_then(|s| u32::try_from(s.number).ok()),
        threads,
        images,
    );
    report.facets = crate::facets::android_fingerprint(&tombstone.build_fingerprint);
    report
}

/// Adds the ELF `frame` is in to `images`, once per load address: at `pc - rel_pc`, its size
/// the span of the mappings of the same name from there (unnamed mappings between them, its
/// `.bss`, included; 0 when the list does not say: the image then extends to the next one).
fn note_image(
    images: &mut Vec<Image>,
    seen: &mut std::collections::HashSet<u64>,
    frame: &BacktraceFrame,
    arch: Arch,
    maps: &[&MemoryMapping],
) {
    if frame.file_name.is_empty() || frame.rel_pc > frame.pc {
        return;
    }
    let image_addr = frame.pc - frame.rel_pc;
    if !seen.insert(image_addr) {
        return;
    }
    let mut end = image_addr;
    let first = maps.partition_point(|m| m.begin_address < image_addr);
    // An ELF's mappings (and its .bss) are a handful: a few dozen at most are looked at.
    for map in maps[first..].iter().take(64) {
        if map.mapping_name == frame.file_name {
            end = end.max(map.end_address);
        } else if !map.mapping_name.is_empty() && !map.mapping_name.starts_with("[anon:.bss") {
            break;
        }
    }
    images.push(Image {
        code_file: Some(frame.file_name.clone()),
        debug_id: debug_id_from_build_id(&frame.build_id),
        arch,
        image_addr,
        image_size: end - image_addr,
    });
}

/// Protobuf wire format (<https://protobuf.dev/programming-guides/encoding/>), as far as
/// counting a tombstone's threads, frames and mappings without decoding them.
mod wire {
    /// What [`counts`] found.
    pub(super) struct Counts {
        pub threads: usize,
        pub frames: usize,
        pub most_frames: usize,
        pub mappings: usize,
    }

    /// Counts the entries of `Tombstone.threads` (16), their `Thread.current_backtrace` (4)
    /// and `Tombstone.memory_mappings` (17); `None` when `data` is not well-formed protobuf.
    pub(super) fn counts(data: &[u8]) -> Option<Counts> {
        let mut counts = Counts {
            threads: 0,
            frames: 0,
            most_frames: 0,
            mappings: 0,
        };
        for (field, value) in Fields::new(data) {
            match (field?, value) {
                (16, Some(entry)) => {
                    counts.threads += 1;
                    for (field, value) in Fields::new(entry) {
                        if let (2, Some(thread)) = (field?, value) {
                            let mut frames = 0;
                            for (field, _) in Fields::new(thread) {
                                frames += usize::from(field? == 4);
                            }
                            counts.frames += frames;
                            counts.most_frames = counts.most_frames.max(frames);
                        }
                    }
                }
                (17, _) => counts.mappings += 1,
                _ => {}
            }
        }
        Some(counts)
    }

    /// The fields of one message: `(Some(number), Some(bytes))` for a length-delimited one,
    /// `(Some(number), None)` for others, `(None, None)` (then the end) when malformed.
    struct Fields<'a> {
        data: &'a [u8],
        failed: bool,
    }

    impl<'a> Fields<'a> {
        fn new(data: &'a [u8]) -> Self {
            Fields {
                data,
                failed: false,
            }
        }

        fn varint(&mut self) -> Option<u64> {
            let mut value = 0u64;
            for (i, byte) in self.data.iter().enumerate().take(10) {
                value |= u64::from(byte & 0x7f) << (7 * i);
                if byte & 0x80 == 0 {
                    self.data = &self.data[i + 1..];
                    return Some(value);
                }
            }
            None
        }

        fn take(&mut self, n: u64) -> Option<&'a [u8]> {
            let n = usize::try_from(n).ok().filter(|&n| n <= self.data.len())?;
            let (taken, rest) = self.data.split_at(n);
            self.data = rest;
            Some(taken)
        }

        fn field(&mut self) -> Option<(u64, Option<&'a [u8]>)> {
            let key = self.varint()?;
            let value = match key & 7 {
                0 => self.varint().map(|_| None)?,
                1 => self.take(8).map(|_| None)?,
                2 => {
                    let len = self.varint()?;
                    Some(self.take(len)?)
                }
                5 => self.take(4).map(|_| None)?,
                _ => return None,
            };
            Some((key >> 3, value))
        }
    }

    impl<'a> Iterator for Fields<'a> {
        type Item = (Option<u64>, Option<&'a [u8]>);

        fn next(&mut self) -> Option<Self::Item> {
            if self.failed || self.data.is_empty() {
                return None;
            }
            match self.field() {
                Some((number, value)) => Some((Some(number), value)),
                None => {
                    self.failed = true;
                    Some((None, None))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tombstone(frames: usize) -> Tombstone {
        let frame = BacktraceFrame {
            rel_pc: 0x10,
            pc: 0x1010,
            function_name: String::new(),
            file_name: "/data/app/x/base.apk!liba.so".into(),
            build_id: "f66635e08e9824a2503726179d47ad6c3185164a".into(),
        };
        let thread = TombstoneThread {
            id: 7,
            name: "main".into(),
            registers: Vec::new(),
            current_backtrace: vec![frame; frames],
        };
        Tombstone {
            arch: 1,
            tid: 7,
            threads: BTreeMap::from([(7, thread)]),
            ..Default::default()
        }
    }

    #[test]
    fn counts_on_the_wire_match_the_decoded_message() {
        let data = tombstone(3).encode_to_vec();
        let counts = wire::counts(&data).unwrap();
        assert_eq!(
            (counts.threads, counts.frames, counts.most_frames),
            (1, 3, 3)
        );
        let report = try_parse(&data).unwrap().unwrap();
        assert_eq!(report.threads[0].frames.len(), 3);
        // One image, at pc - rel_pc, however many frames are in it.
        assert_eq!(report.images.len(), 1);
        assert_eq!(report.images[0].image_addr, 0x1000);
    }

    #[test]
    fn too_many_frames_are_refused_before_decoding() {
        let data = tombstone(MAX_FRAMES + 1).encode_to_vec();
        let e = try_parse(&data).unwrap().unwrap_err().to_string();
        assert!(
            e.contains("4097 frames (at most 4097 in one thread)"),
            "{e}"
        );
    }

    #[test]
    fn what_is_not_a_tombstone_is_left_to_the_others() {
        // Decodes (an empty map entry, tid 0), but names no crashed thread with frames.
        assert!(try_parse(b"\x82\x01\x00").is_none());
        assert!(try_parse(&tombstone(0).encode_to_vec()).is_none());
        assert!(try_parse(b"\xff\xff\xff").is_none());
    }
}
