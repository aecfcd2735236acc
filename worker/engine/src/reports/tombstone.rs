//! Android tombstones in protobuf (`tombstone.proto`, Android 12+: what debuggerd writes to
//! `/data/tombstones/tombstone_NN.pb` and `ApplicationExitInfo.getTraceInputStream()` gives an
//! app for a native crash).
//!
//! Format: AOSP `system/core/debuggerd/proto/tombstone.proto` (Apache-2.0); only the fields
//! read here are declared (prost skips the others). Frames come from libunwindstack, which has
//! already moved every caller's `pc` back into its call instruction (by 4 bytes on arm64 and
//! arm, 1 on x86): the reader adds it back, so that frames are return addresses as in every
//! other format and symbolication steps back exactly once (on 32-bit ARM a 2-byte Thumb call is
//! then looked up 2 bytes past it).
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
use crate::model::{Image, Modules, NativeReport, RawFrame, ReportFormat, ReportKind, Thread};

#[derive(Clone, PartialEq, Message)]
struct Tombstone {
    #[prost(int32, tag = "1")]
    arch: i32,
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

/// Whether `data` reads as a protobuf tombstone: it decodes, and its crashed thread (`tid`) is
/// among its threads. Cheap enough to try on any binary input.
pub fn looks_like_tombstone(data: &[u8]) -> bool {
    Tombstone::decode(data).is_ok_and(|t| t.threads.contains_key(&t.tid))
}

/// Reads a protobuf tombstone. Errors: it does not decode, or has no threads.
pub fn parse(data: &[u8]) -> Result<NativeReport, ReportError> {
    let tombstone = Tombstone::decode(data)
        .map_err(|e| ReportError::malformed(ReportFormat::Tombstone, e.to_string()))?;
    if tombstone.threads.is_empty() {
        return Err(ReportError::malformed(
            ReportFormat::Tombstone,
            "no threads",
        ));
    }
    let arch = match tombstone.arch {
        0 => Arch::Arm,
        1 => Arch::Arm64,
        2 => Arch::X86,
        3 => Arch::Amd64,
        _ => Arch::Unknown,
    };
    // What libunwindstack took off every caller's pc.
    let adjustment = match arch {
        Arch::X86 | Arch::Amd64 => 1,
        _ => 4,
    };
    let mut images: Vec<Image> = Vec::new();
    let mut threads = Vec::with_capacity(tombstone.threads.len());
    for (tid, thread) in &tombstone.threads {
        let frames = thread
            .current_backtrace
            .iter()
            .enumerate()
            .map(|(index, frame)| {
                note_image(&mut images, frame, arch, &tombstone.memory_mappings);
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
    Ok(NativeReport {
        format: ReportFormat::Tombstone,
        arch,
        crash_reason,
        signal: signal.and_then(|s| u32::try_from(s.number).ok()),
        threads,
        images,
        call_tree: Vec::new(),
        kind: ReportKind::Crash,
        details: None,
        modules: Modules::Referenced,
    })
}

/// Adds the ELF `frame` is in to `images`, once per load address: at `pc - rel_pc`, its size
/// the span of the mappings of the same name from there (unnamed mappings between them, its
/// `.bss`, included; 0 when the list does not say: the image then extends to the next one).
fn note_image(images: &mut Vec<Image>, frame: &BacktraceFrame, arch: Arch, maps: &[MemoryMapping]) {
    if frame.file_name.is_empty() || frame.rel_pc > frame.pc {
        return;
    }
    let image_addr = frame.pc - frame.rel_pc;
    if images.iter().any(|i| i.image_addr == image_addr) {
        return;
    }
    // debuggerd lists the mappings in address order.
    let mut end = image_addr;
    for map in maps.iter().skip_while(|m| m.begin_address < image_addr) {
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
