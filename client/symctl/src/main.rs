//! `symctl`: the symcluster command line.
//!
//! `symctl symbolicate` symbolicates a native crash report against local debug files with the
//! engine, in-process. Later subcommands talk to a cluster through `symcluster-client`.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    symcluster_telemetry::init_logs_with(cli.log.log_format, "warn");
    match commands::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("symctl: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line: `a: b: c`.
fn one_line(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    text.lines().collect::<Vec<_>>().join(" ")
}
