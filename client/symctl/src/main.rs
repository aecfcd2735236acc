//! `symctl`: the symcluster command line.
//!
//! `symctl symbolicate` symbolicates a native crash report against local debug files with the
//! engine, in-process. Later subcommands talk to a cluster through `symcluster-client`.

mod cli;
mod commands;
mod profile;
mod renamed;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let (args, notes) = renamed::rewrite(std::env::args_os().collect());
    match profile::variables(&args) {
        Ok(variables) => {
            for (name, value) in variables {
                // SAFETY: nothing else runs yet (no thread, no runtime): the environment is
                // only read by this thread, by the parser below.
                unsafe { std::env::set_var(name, value) };
            }
        }
        Err(e) => {
            eprintln!("symctl: {e}");
            return ExitCode::from(2);
        }
    }
    let cli = cli::Cli::parse_from(args);
    commands::set_quiet(cli.quiet);
    symcluster_telemetry::init_logs_with(cli.log.log_format, "warn");
    // A parser panic caught by the engine is printed as the one-line error it becomes (details
    // with RUST_LOG=debug), not as a panic message and a backtrace.
    symcluster_engine::guard::quiet_caught_panics();
    for note in notes {
        commands::note(note);
    }
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
