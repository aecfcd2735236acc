//! The command-line interface: every subcommand and flag, with its help text.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// symcluster command line: symbolicate crash reports.
#[derive(Debug, Parser)]
#[command(name = "symctl", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Symbolicate a native (iOS/macOS/Linux) crash report against local debug files.
    ///
    /// The report format is detected from its content: Apple .crash or .ips, KSCrash JSON,
    /// Sentry event JSON, or a symbolicator request.
    Symbolicate(SymbolicateArgs),
}

#[derive(Debug, clap::Args)]
pub struct SymbolicateArgs {
    /// dSYM bundles, Mach-O or ELF debug files, or directories searched recursively. Files are
    /// matched to the report's images by debug id (Mach-O UUID, ELF build id).
    #[arg(long = "debug-files", value_name = "PATH", required = true)]
    pub debug_files: Vec<PathBuf>,

    /// Output: `json` (the result as JSON) or `apple` (the report itself, each frame
    /// rewritten as Xcode shows it).
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    pub format: OutputFormat,

    /// The crash report file.
    #[arg(value_name = "REPORT")]
    pub report: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The symbolication result as one JSON object.
    Json,
    /// The original report with symbolicated frames, in its own Apple format.
    Apple,
}
