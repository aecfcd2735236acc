//! Symbolicator-style request JSON: `modules` (images) plus `stacktraces` (threads).
//!
//! Shape as in Sentry's symbolicator `POST /symbolicate`: modules carry `debug_id`, `code_file`,
//! `image_addr`, `image_size`, `arch`; each stack trace has `frames` innermost first, optional
//! `registers`, and `is_requesting` on the thread that crashed. A top-level `signal` is the
//! POSIX signal number.

use serde_json::Value;

use super::ReportError;
use super::fields::{
    debug_id_from_build_id, ip_register, parse_addr, parse_arch, parse_debug_id, str_field,
};
use crate::model::{CallTreeNode, Image, NativeReport, RawFrame, ReportFormat, ReportKind, Thread};

const FORMAT: ReportFormat = ReportFormat::SymbolicatorRequest;

pub fn parse(request: &Value) -> Result<NativeReport, ReportError> {
    let modules = request
        .get("modules")
        .and_then(Value::as_array)
        .ok_or_else(|| ReportError::malformed(FORMAT, "`modules` is not an array"))?;
    let stacktraces = request
        .get("stacktraces")
        .and_then(Value::as_array)
        .ok_or_else(|| ReportError::malformed(FORMAT, "`stacktraces` is not an array"))?;

    let images: Vec<Image> = modules
        .iter()
        .filter_map(|m| {
            Some(Image {
                code_file: str_field(m, "code_file").map(str::to_owned),
                debug_id: str_field(m, "debug_id")
                    .and_then(parse_debug_id)
                    .or_else(|| {
                        // ELF modules may carry only the GNU build id.
                        str_field(m, "code_id").and_then(debug_id_from_build_id)
                    }),
                arch: str_field(m, "arch")
                    .map(parse_arch)
                    .unwrap_or(symbolic_common::Arch::Unknown),
                image_addr: m.get("image_addr").and_then(parse_addr)?,
                image_size: m.get("image_size").and_then(parse_addr).unwrap_or(0),
            })
        })
        .collect();
    let arch = images
        .iter()
        .map(|i| i.arch)
        .find(|a| *a != symbolic_common::Arch::Unknown)
        .unwrap_or(symbolic_common::Arch::Unknown);

    let kind = match request.get("kind") {
        None | Some(Value::Null) => ReportKind::Crash,
        Some(Value::String(name)) => ReportKind::from_name(name).ok_or_else(|| {
            ReportError::malformed(
                FORMAT,
                format!("`kind` {name:?} is not one of crash, hang, jank, cpu, oom, launch"),
            )
        })?,
        Some(_) => return Err(ReportError::malformed(FORMAT, "`kind` is not a string")),
    };
    if stacktraces.is_empty() && !kind.stackless() {
        return Err(ReportError::malformed(FORMAT, "`stacktraces` is empty"));
    }
    let requesting = stacktraces
        .iter()
        .position(|s| s.get("is_requesting").and_then(Value::as_bool) == Some(true))
        .unwrap_or(0);
    let mut threads = Vec::with_capacity(stacktraces.len());
    for (index, stack) in stacktraces.iter().enumerate() {
        let frames = stack
            .get("frames")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                ReportError::malformed(
                    FORMAT,
                    format!("`stacktraces[{index}].frames` is not an array"),
                )
            })?;
        threads.push(Thread {
            id: stack
                .get("thread_id")
                .and_then(parse_addr)
                .unwrap_or(index as u64),
            name: str_field(stack, "thread_name").map(str::to_owned),
            crashed: index == requesting,
            ip_register: ip_register(stack.get("registers"), arch),
            frames: frames
                .iter()
                .map(|f| RawFrame {
                    instruction_addr: f.get("instruction_addr").and_then(parse_addr).unwrap_or(0),
                    function: str_field(f, "function").map(str::to_owned),
                    image_index: None,
                    trust: None,
                })
                .collect(),
        });
    }

    Ok(NativeReport {
        format: FORMAT,
        arch,
        // Not part of symbolicator's request; symcluster's SDK reports carry it.
        crash_reason: str_field(request, "crash_reason").map(str::to_owned),
        signal: request
            .get("signal")
            .and_then(Value::as_u64)
            .map(|s| s as u32),
        threads,
        images,
        call_tree: call_tree(request.get("call_tree"))?,
        kind,
        details: details(request),
        modules: crate::model::Modules::Referenced,
        facets: sdk_facets(request.get("metadata")),
    })
}

/// The facets of an SDK report, from its `metadata` (`sdk-ios/src/lib.rs` writes it):
/// `os` + `os_version` (`iOS` + `17.2 (21C62)`), `machine` (`iPhone14,2`; on Linux the CPU),
/// `app` + `app_version` (`DemoApp` + `1.2 (34)`, version then build) as the release.
fn sdk_facets(metadata: Option<&Value>) -> crate::facets::ReportFacets {
    let Some(metadata) = metadata else {
        return crate::facets::ReportFacets::default();
    };
    let field = |name: &str| str_field(metadata, name).unwrap_or("");
    let (version, build) = crate::facets::split_apple_version(field("app_version"), false);
    let os = format!("{} {}", field("os"), field("os_version"));
    crate::facets::ReportFacets {
        release: crate::facets::release(field("app"), version, build),
        dist: None,
        os: Some(crate::facets::os_name(&os)),
        device: Some(field("machine").to_owned()),
    }
    .cleaned()
}

/// The SDK's kind-specific fields ([`DETAIL_FIELDS`]) of `request`, as one object; `None`
/// when it has none (crashes).
fn details(request: &Value) -> Option<Value> {
    let fields: serde_json::Map<String, Value> = DETAIL_FIELDS
        .iter()
        .filter_map(|f| Some(((*f).to_owned(), request.get(*f)?.clone())))
        .collect();
    (!fields.is_empty()).then_some(Value::Object(fields))
}

/// The SDK report fields carried into the result as `details`: `cpu` (thread, usage, level),
/// `oom` (foreground, footprint, breadcrumb), `launch` (duration), the hang's and jank's
/// durations (ms) and their sample counts.
const DETAIL_FIELDS: [&str; 6] = [
    "cpu",
    "oom",
    "launch",
    "hang_duration_ms",
    "jank_duration_ms",
    "samples",
];

/// The SDK's hang `call_tree`: a flat array, parents first, of
/// `{"instruction_addr", "hits", "parent": index or null}`. Absent: empty. A parent index that
/// does not point to an earlier node is an error (the tree would not be a tree).
fn call_tree(value: Option<&Value>) -> Result<Vec<CallTreeNode>, ReportError> {
    let Some(nodes) = value.and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    let mut tree = Vec::with_capacity(nodes.len());
    for (index, node) in nodes.iter().enumerate() {
        let parent = match node.get("parent") {
            None | Some(Value::Null) => None,
            Some(p) => match p.as_u64() {
                Some(p) if (p as usize) < index => Some(p as usize),
                _ => {
                    return Err(ReportError::malformed(
                        FORMAT,
                        format!("`call_tree[{index}].parent` is not the index of an earlier node"),
                    ));
                }
            },
        };
        tree.push(CallTreeNode {
            instruction_addr: node
                .get("instruction_addr")
                .and_then(parse_addr)
                .unwrap_or(0),
            hits: node.get("hits").and_then(Value::as_u64).unwrap_or(0),
            parent,
        });
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use crate::model::ReportKind;
    use crate::reports::parse_report;

    #[test]
    fn report_kinds_and_their_details() {
        let oom = br#"{"kind": "oom", "oom": {"in_foreground": true, "breadcrumb": "Settings"},
                       "modules": [], "stacktraces": []}"#;
        let report = parse_report(oom).unwrap();
        assert_eq!(report.kind, ReportKind::Oom);
        assert!(report.threads.is_empty());
        assert_eq!(
            report.details,
            Some(serde_json::json!({"oom": {"in_foreground": true, "breadcrumb": "Settings"}}))
        );
        // A crash (no kind) needs a stack; an unknown kind is refused with its name.
        let crash = br#"{"modules": [], "stacktraces": []}"#;
        assert!(
            parse_report(crash)
                .unwrap_err()
                .to_string()
                .contains("`stacktraces` is empty")
        );
        let unknown = br#"{"kind": "thermal", "modules": [], "stacktraces": []}"#;
        let error = parse_report(unknown).unwrap_err().to_string();
        assert!(error.contains("\"thermal\""), "{error}");
        let jank = br#"{"kind": "jank", "jank_duration_ms": 412, "samples": 5, "modules": [],
                        "stacktraces": [{"frames": [{"instruction_addr": "0x10"}]}]}"#;
        let report = parse_report(jank).unwrap();
        assert_eq!(report.kind, ReportKind::Jank);
        assert_eq!(
            report.details,
            Some(serde_json::json!({"jank_duration_ms": 412, "samples": 5}))
        );
    }
}
