//! Stopping on SIGTERM or SIGINT: the first signal asks the worker to drain (no new leases,
//! running jobs finish within `--drain-timeout`, the rest go back to the queue); a second one
//! cuts the drain short (running jobs are handed back at once).

use tokio::sync::watch;

/// How many stop requests arrived; cloned into every task that must react.
#[derive(Debug, Clone)]
pub struct Shutdown {
    requests: watch::Receiver<u32>,
}

impl Shutdown {
    /// Counts SIGTERM and SIGINT from now on. Errors when a signal handler cannot be installed.
    pub fn on_signals() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let (requests, shutdown) = Self::manual();
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = interrupt.recv() => "SIGINT",
                };
                requests.send_modify(|n| *n += 1);
                match *requests.borrow() {
                    1 => tracing::info!(signal = name, "stopping: draining"),
                    _ => tracing::warn!(signal = name, "stopping now: handing running jobs back"),
                }
            }
        });
        Ok(shutdown)
    }

    /// A shutdown driven by hand: each `send_modify(|n| *n += 1)` on the sender is one request.
    pub fn manual() -> (watch::Sender<u32>, Self) {
        let (tx, rx) = watch::channel(0);
        (tx, Shutdown { requests: rx })
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        *self.requests.borrow() >= 1
    }

    /// Whether a second stop was asked for (no more waiting).
    pub fn is_urgent(&self) -> bool {
        *self.requests.borrow() >= 2
    }

    /// Resolves once a stop is asked for (never, when the sender is gone first).
    pub async fn requested(&mut self) {
        if self.requests.wait_for(|n| *n >= 1).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once a second stop is asked for (never, when the sender is gone first).
    pub async fn urgent(&mut self) {
        if self.requests.wait_for(|n| *n >= 2).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
