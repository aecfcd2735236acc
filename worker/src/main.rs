//! `symcluster-worker`: parse the configuration, run.

/// mimalloc instead of glibc's malloc: reading a report builds and frees thousands of small
/// strings and maps per job, where glibc's malloc and free took ~20 % of the worker's CPU under
/// the load test (measured with `perf record -e cpu-clock`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: symcluster_worker::config::WorkerConfig =
        symcluster_telemetry::flags::parse_with_renamed_env(&[(
            "--metrics-listen",
            "SYMCLUSTER_METRICS_LISTEN",
            "SYMCLUSTER_WORKER_METRICS_LISTEN",
        )]);
    let telemetry =
        symcluster_telemetry::init_service(&config.log, &config.trace, "symcluster-worker")?;
    // A parser panic caught by the engine fails one module or one job with a one-line reason;
    // its details go to the debug log, not to stderr.
    symcluster_engine::guard::quiet_caught_panics();
    let ran = symcluster_worker::run(config).await;
    telemetry.shutdown().await;
    ran?;
    // Drained. A job stopped at the drain timeout may still be computing on the blocking pool
    // (a SymCache conversion cannot be interrupted), and dropping the runtime would wait for
    // it: its lease is handed back already, so exit now.
    std::process::exit(0)
}
