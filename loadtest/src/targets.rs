//! The targets a load run is held to, printed as lines with their ratios beside the run's
//! table row: issue 60's ("Replication that costs less than symbolication") for full
//! CrashProbe events with 16 clients, and the peer's figures measured on this machine kind
//! (Sentry's symbolicator 26.8, one process, the same 42 events as full `/symbolicate`
//! requests from 16 keep-alive clients: 1,589-1,658 reports/s, 1.07-1.14 ms of CPU per report;
//! `loadtest/README.md`). The lines are information for a reader: nothing checks them, and no
//! test asserts a time.

/// What one run measured, per job (CPU in ms, bytes on the leader's disk).
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Masters in the run.
    pub masters: usize,
    /// Reports symbolicated per second.
    pub reports_per_s: f64,
    /// 99th percentile of a job's latency, submit to result, ms.
    pub p99_ms: f64,
    /// CPU of every master and worker summed, ms per report.
    pub cpu_all_ms: f64,
    /// The leader's CPU, ms per job.
    pub leader_ms: f64,
    /// A follower's CPU (their mean), ms per job; `None` with one master.
    pub follower_ms: Option<f64>,
    /// The workers' CPU, ms per job.
    pub worker_ms: f64,
    /// The leader's index and Raft log on disk, bytes per job.
    pub disk_bytes_per_job: f64,
}

/// The peer's throughput on this machine kind, reports/s (its lower figure).
pub const PEER_REPORTS_PER_S: f64 = 1_589.0;
/// The peer's CPU per report on this machine kind, ms (its lower figure).
pub const PEER_CPU_MS: f64 = 1.07;

/// One line per target: "target: WHAT TARGET: MEASURED (RATIO x, met|missed)", the ratio
/// measured / target (for a ceiling, target / measured: above 1 is met either way).
pub fn lines(m: &Measured) -> Vec<String> {
    let at_least = |what: &str, target: f64, got: f64| {
        let ratio = got / target;
        format!(
            "target: {what} >= {target}: {got:.1} ({ratio:.2}x, {})",
            if ratio >= 1.0 { "met" } else { "missed" }
        )
    };
    let at_most = |what: &str, target: f64, got: f64| {
        let ratio = target / got.max(f64::MIN_POSITIVE);
        format!(
            "target: {what} <= {target}: {got:.2} ({ratio:.2}x, {})",
            if ratio >= 1.0 { "met" } else { "missed" }
        )
    };
    let mut out = Vec::new();
    if m.masters >= 3 {
        out.push(at_least("reports/s, 3 masters", 2_400.0, m.reports_per_s));
        out.push(at_most("CPU ms/report, all processes", 0.7, m.cpu_all_ms));
        out.push(at_most("leader CPU ms/job", 0.15, m.leader_ms));
        if let Some(follower) = m.follower_ms {
            out.push(at_most("follower CPU ms/job", 0.05, follower));
        }
        out.push(at_most("worker CPU ms/job", 0.45, m.worker_ms));
        out.push(at_most("p99 ms", 25.0, m.p99_ms));
    } else {
        out.push(at_least("reports/s, 1 master", 3_000.0, m.reports_per_s));
    }
    out.push(at_most(
        "index and log KB/job on the leader",
        4.0,
        m.disk_bytes_per_job / 1000.0,
    ));
    out.push(format!(
        "peer (symbolicator, one process): reports/s {:.2}x its {PEER_REPORTS_PER_S}, CPU per \
         report {:.2}x its {PEER_CPU_MS} ms",
        m.reports_per_s / PEER_REPORTS_PER_S,
        m.cpu_all_ms / PEER_CPU_MS,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_prints_its_ratio_and_whether_it_is_met() {
        let m = Measured {
            masters: 3,
            reports_per_s: 1_200.0,
            p99_ms: 20.0,
            cpu_all_ms: 1.4,
            leader_ms: 0.3,
            follower_ms: Some(0.05),
            worker_ms: 0.5,
            disk_bytes_per_job: 24_000.0,
        };
        assert_eq!(
            lines(&m),
            [
                "target: reports/s, 3 masters >= 2400: 1200.0 (0.50x, missed)",
                "target: CPU ms/report, all processes <= 0.7: 1.40 (0.50x, missed)",
                "target: leader CPU ms/job <= 0.15: 0.30 (0.50x, missed)",
                "target: follower CPU ms/job <= 0.05: 0.05 (1.00x, met)",
                "target: worker CPU ms/job <= 0.45: 0.50 (0.90x, missed)",
                "target: p99 ms <= 25: 20.00 (1.25x, met)",
                "target: index and log KB/job on the leader <= 4: 24.00 (0.17x, missed)",
                "peer (symbolicator, one process): reports/s 0.76x its 1589, CPU per report 1.31x its 1.07 ms",
            ]
        );
        let one = Measured {
            masters: 1,
            follower_ms: None,
            ..m
        };
        assert_eq!(
            lines(&one)[0],
            "target: reports/s, 1 master >= 3000: 1200.0 (0.40x, missed)"
        );
    }
}
