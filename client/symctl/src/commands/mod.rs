//! One module per subcommand; [`run`] dispatches.

mod backup;
mod cluster;
mod debug_files;
mod members;
mod output;
mod restore_event;
mod restore_js;
mod retrace;
mod sourcemaps;
mod submit_dir;
mod symbolicate;
mod upload;
mod upload_cluster;

use crate::cli::Command;

/// `--quiet`: no progress bars, no informational notes on stderr.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `--quiet` for the commands to come.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// A progress bar of `len` units in `template`'s style (indicatif), drawn on stderr unless
/// `--quiet`.
pub(crate) fn progress_bar(len: u64, template: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len)
        .with_style(indicatif::ProgressStyle::with_template(template).expect("valid template"));
    if quiet() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}

/// An informational note on stderr (what happened, what to do next), unless `--quiet`.
pub(crate) fn note(text: impl std::fmt::Display) {
    if !quiet() {
        eprintln!("{text}");
    }
}

/// Runs a parsed subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Symbolicate(args) => symbolicate::run(&args),
        Command::RestoreJs(args) => restore_js::run(&args),
        Command::Retrace(args) => retrace::run(&args),
        Command::RestoreEvent(args) => restore_event::run(&args),
        Command::Upload(command) => block_on(upload::run(command)),
        Command::DebugFiles(command) => debug_files::run(command),
        Command::Sourcemaps(crate::cli::SourcemapsCommand::Inject { bundle, map }) => {
            sourcemaps::run_inject(&bundle, &map)
        }
        Command::Submit(args) => block_on(cluster::submit(args)),
        Command::Job(args) => block_on(cluster::job(args)),
        Command::Groups(args) => block_on(cluster::groups(args)),
        Command::Missing(args) => block_on(cluster::missing(args)),
        Command::Status(args) => block_on(cluster::status(args)),
        Command::Admin(crate::cli::AdminCommand::Backup(args)) => block_on(backup::run(args)),
        Command::Admin(crate::cli::AdminCommand::Members(args)) => block_on(members::run(args)),
        Command::Completions(args) => {
            let mut command = <crate::cli::Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.shell, &mut command, "symctl", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let command = <crate::cli::Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(command).render(&mut std::io::stdout())?;
            Ok(())
        }
    }
}

/// The spec of native job `job_id` whose result lists `modules`: `report` compressed, with its
/// cache-affinity key read here
/// (`NativeJob.routing_key`; `-` when it has no image to route by), so that the master need
/// not decompress it to place it. A report this reader cannot read goes without a key: the
/// master then reads it and gives the precise status.
fn native_spec(
    job_id: &str,
    report: &[u8],
    modules: crate::cli::ModulesArg,
) -> Result<symcluster_client::api::JobSpec, String> {
    let mut spec = symcluster_client::native_spec(job_id, report).map_err(|e| e.to_string())?;
    if let Some(symcluster_client::api::job_spec::Payload::Native(native)) = &mut spec.payload {
        native.set_modules(modules.into());
        if let Ok(image) = symcluster_engine::reports::routing::routing_image(report) {
            native.routing_key = image.map_or_else(
                || symcluster_client::report::NO_ROUTING_KEY.to_owned(),
                |id| id.to_string(),
            );
        }
    }
    Ok(spec)
}

/// Runs a cluster command on a small runtime (the local commands need none).
fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}
