//! One module per subcommand; [`run`] dispatches.

mod restore_js;
mod symbolicate;

use crate::cli::Command;

/// Runs a parsed subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Symbolicate(args) => symbolicate::run(&args),
        Command::RestoreJs(args) => restore_js::run(&args),
    }
}
