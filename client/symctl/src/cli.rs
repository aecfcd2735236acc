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
    /// Restore a React Native JavaScript stack (Metro/JSC/V8 text or Hermes crash JSON) to
    /// original source with its source map.
    ///
    /// The stack format is detected from its content. Plain, indexed, RAM bundle, segmented,
    /// Metro function-map and Hermes bytecode source maps are all read.
    #[command(name = "restore-js")]
    RestoreJs(RestoreJsArgs),
}

#[derive(Debug, clap::Args)]
pub struct RestoreJsArgs {
    /// The source map of the bundle (or of the Hermes bytecode bundle).
    #[arg(long, value_name = "MAP_FILE")]
    pub sourcemap: PathBuf,

    /// The minified bundle the map belongs to. Optional: when given (and the map has no Metro
    /// function map), enclosing function names come from the bundle's scopes.
    #[arg(long, value_name = "MINIFIED_JS")]
    pub bundle: Option<PathBuf>,

    /// Output: `json` (one object per frame, 1-based lines and columns) or `text` (the stack
    /// rewritten as metro-symbolicate prints it, for diffing).
    #[arg(long, value_enum, default_value_t = JsOutputFormat::Json)]
    pub format: JsOutputFormat,

    /// The base of columns in text stacks: 1 as browsers, Node and Hermes print them, or 0 as
    /// metro-symbolicate reads its input by default.
    #[arg(long, value_name = "0|1", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1))]
    pub input_column_start: u32,

    /// The stack trace file (text, or Hermes crash JSON).
    #[arg(value_name = "STACK_FILE")]
    pub stack: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JsOutputFormat {
    /// One JSON object: `{"frames": [...]}`.
    Json,
    /// metro-symbolicate's output.
    Text,
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
