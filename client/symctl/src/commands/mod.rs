//! One module per subcommand; [`run`] dispatches.

mod cluster;
mod restore_js;
mod submit_dir;
mod symbolicate;
mod upload;

use crate::cli::Command;

/// Runs a parsed subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Symbolicate(args) => symbolicate::run(&args),
        Command::RestoreJs(args) => restore_js::run(&args),
        Command::Upload(command) => block_on(upload::run(command)),
        Command::Submit(args) => block_on(cluster::submit(args)),
        Command::Job(args) => block_on(cluster::job(args)),
        Command::Groups(args) => block_on(cluster::groups(args)),
        Command::Missing(args) => block_on(cluster::missing(args)),
        Command::Status(args) => block_on(cluster::status(args)),
    }
}

/// Runs a cluster command on a small runtime (the local commands need none).
fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}
