//! `symcluster-master`: parse the configuration, run until SIGINT/SIGTERM.

use clap::Parser;

/// mimalloc instead of glibc's malloc: the Raft thread allocates and frees many short-lived
/// buffers (redb pages, log entries, messages) from several threads, where glibc's arenas spent
/// ~10 % of the master's CPU (measured with `perf record -e cpu-clock` under the load test).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = symcluster_master::config::MasterConfig::parse();
    let telemetry =
        symcluster_telemetry::init_service(&config.log, &config.trace, "symcluster-master")?;
    // A report's routing key is read by the engine's parsers: a panic caught there is a refused
    // submit with a one-line reason, not a backtrace on stderr.
    symcluster_engine::guard::quiet_caught_panics();
    // A build for the tests: the points `FAILPOINTS` names are armed before anything runs.
    #[cfg(feature = "failpoints")]
    symcluster_master::failpoints::arm_from_env().map_err(anyhow::Error::msg)?;
    let ran = symcluster_master::run(config, shutdown_signal()).await;
    telemetry.shutdown().await;
    ran
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
