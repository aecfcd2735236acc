//! `symcluster-kafka-bridge`: parse the configuration, run until SIGTERM/SIGINT.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: symcluster_kafka_bridge::config::BridgeConfig =
        symcluster_telemetry::flags::parse_with_renamed_env(&[(
            "--metrics-listen",
            "SYMCLUSTER_METRICS_LISTEN",
            "SYMCLUSTER_BRIDGE_METRICS_LISTEN",
        )]);
    let telemetry =
        symcluster_telemetry::init_service(&config.log, &config.trace, "symcluster-kafka-bridge")?;
    let ran = symcluster_kafka_bridge::bridge::run(config, shutdown_signal()).await;
    telemetry.shutdown().await;
    ran
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
