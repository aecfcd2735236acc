//! `symctl retrace`: a Java/Kotlin trace and its ProGuard/R8 mapping file in, original frames
//! out.

use anyhow::Context;
use symcluster_engine::jvm::{JvmMapping, mapping_id, parse_trace, render, retrace};

use crate::cli::RetraceArgs;

pub fn run(args: &RetraceArgs) -> anyhow::Result<()> {
    let trace_bytes = std::fs::read(&args.trace)
        .with_context(|| format!("cannot read {}", args.trace.display()))?;
    let trace = parse_trace(&trace_bytes).with_context(|| args.trace.display().to_string())?;
    let mapping_bytes = std::fs::read(&args.mapping)
        .with_context(|| format!("cannot read {}", args.mapping.display()))?;
    let mapping = JvmMapping::from_mapping_file(&mapping_bytes)
        .with_context(|| args.mapping.display().to_string())?;
    let id = mapping_id(&mapping_bytes);
    if !trace.mapping_ids.is_empty() && !trace.mapping_ids.contains(&id) {
        eprintln!(
            "symctl: warning: the event names mapping {} but {} is {id}",
            trace.mapping_ids.join(", "),
            args.mapping.display()
        );
    }
    let result = retrace(&trace, &mapping, Some(&id));

    super::output::print_stack(args.format, &result, || render::java_text(&result))
}
