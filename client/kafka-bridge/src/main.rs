//! `symcluster-kafka-bridge`: parse the configuration, run until SIGTERM/SIGINT.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = symcluster_kafka_bridge::config::BridgeConfig::parse();
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
