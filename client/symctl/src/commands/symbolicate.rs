//! `symctl symbolicate`: a native report (or a minidump) and local debug files in, the result
//! out.

use std::io::Write;

use anyhow::Context;
use symcluster_engine::{LocalSymCaches, minidump, parse_report_with, render, symbolicate};

use crate::cli::{OutputFormat, SymbolicateArgs};

pub fn run(args: &SymbolicateArgs) -> anyhow::Result<()> {
    let data = std::fs::read(&args.report)
        .with_context(|| format!("cannot read {}", args.report.display()))?;
    let sources = LocalSymCaches::scan(&args.debug_files)?;
    for problem in sources.index().unreadable() {
        eprintln!("symctl: warning: skipped unreadable debug file {problem}");
    }
    let report = if minidump::is_minidump(&data) {
        // Walked with the CFI of the images whose debug files are given.
        let images =
            minidump::read_images(&data).with_context(|| format!("{}", args.report.display()))?;
        minidump::stackwalk(&data, &sources.unwind_table(&images), args.modules.into())
    } else {
        parse_report_with(&data, args.modules.into())
    }
    .with_context(|| format!("{}", args.report.display()))?;
    let result = symbolicate(&report, &sources);

    let mut out = std::io::stdout().lock();
    match args.format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &result)?;
            writeln!(out)?;
        }
        OutputFormat::Apple => {
            let text = render::apple(&data, &report, &result)?;
            out.write_all(text.as_bytes())?;
        }
    }
    out.flush()?;
    Ok(())
}
