//! KSCrash JSON reports (report format 2.x and 3.x).
//!
//! Shape (KSCrash `KSCrashReportFields.h`): `binary_images[]` with `image_addr`, `image_size`,
//! `name`, `uuid`, `cpu_type`, `cpu_subtype`; `crash.threads[]` with `index`, `name`,
//! `dispatch_queue`, `crashed`, `backtrace.contents[]` (innermost first: `instruction_addr`,
//! `symbol_name`) and `registers.basic`; `crash.error` with `mach`, `signal`, `type`;
//! `system.cpu_arch`.

use serde_json::Value;

use super::ReportError;
use super::fields::{
    arch_from_macho_cpu, crash_reason, ip_register, parse_addr, parse_arch, parse_debug_id,
    str_field,
};
use crate::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};

const FORMAT: ReportFormat = ReportFormat::KsCrash;

pub fn parse(report: &Value) -> Result<NativeReport, ReportError> {
    let arch = report
        .pointer("/system/cpu_arch")
        .and_then(Value::as_str)
        .map(parse_arch)
        .unwrap_or(symbolic_common::Arch::Unknown);
    let images = report
        .get("binary_images")
        .and_then(Value::as_array)
        .ok_or_else(|| ReportError::malformed(FORMAT, "`binary_images` is not an array"))?
        .iter()
        .filter_map(|i| {
            Some(Image {
                code_file: str_field(i, "name").map(str::to_owned),
                debug_id: str_field(i, "uuid").and_then(parse_debug_id),
                arch: match i.get("cpu_type").and_then(Value::as_u64) {
                    Some(t) => arch_from_macho_cpu(
                        t,
                        i.get("cpu_subtype").and_then(Value::as_u64).unwrap_or(0),
                    ),
                    None => arch,
                },
                image_addr: i.get("image_addr").and_then(parse_addr)?,
                image_size: i.get("image_size").and_then(parse_addr).unwrap_or(0),
            })
        })
        .collect();

    let crash = report
        .get("crash")
        .filter(|c| c.is_object())
        .ok_or_else(|| ReportError::malformed(FORMAT, "`crash` is not an object"))?;
    let error = crash.get("error");
    let signal = error
        .and_then(|e| e.pointer("/signal/signal"))
        .and_then(Value::as_u64)
        .map(|s| s as u32);
    let crash_reason = crash_reason(
        error
            .and_then(|e| e.pointer("/mach/exception_name"))
            .and_then(Value::as_str),
        error
            .and_then(|e| e.pointer("/signal/name"))
            .and_then(Value::as_str),
    )
    .or_else(|| error.and_then(|e| str_field(e, "type")).map(str::to_owned));

    let list = crash
        .get("threads")
        .and_then(Value::as_array)
        .ok_or_else(|| ReportError::malformed(FORMAT, "`crash.threads` is not an array"))?;
    let mut threads = Vec::with_capacity(list.len());
    for (position, t) in list.iter().enumerate() {
        let contents = match t.pointer("/backtrace/contents") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(c)) => c.as_slice(),
            Some(_) => {
                return Err(ReportError::malformed(
                    FORMAT,
                    format!("`crash.threads[{position}].backtrace.contents` is not an array"),
                ));
            }
        };
        let crashed = t.get("crashed").and_then(Value::as_bool).unwrap_or(false)
            && !threads.iter().any(|t: &Thread| t.crashed);
        threads.push(Thread {
            id: t
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64),
            name: str_field(t, "name")
                .or_else(|| str_field(t, "dispatch_queue"))
                .map(str::to_owned),
            crashed,
            ip_register: ip_register(t.pointer("/registers/basic"), arch),
            frames: contents
                .iter()
                .map(|f| RawFrame {
                    instruction_addr: f.get("instruction_addr").and_then(parse_addr).unwrap_or(0),
                    function: str_field(f, "symbol_name").map(str::to_owned),
                    image_index: None,
                    trust: None,
                })
                .collect(),
        });
    }

    Ok(NativeReport::crash(
        FORMAT,
        arch,
        crash_reason,
        signal,
        threads,
        images,
    ))
}
