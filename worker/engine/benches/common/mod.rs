//! What the benchmarks share: timing a few runs, and reading criterion's estimates back.
//! (Each bench uses some of it.)
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

/// The median time of `runs` calls of `f`.
pub fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs).map(|_| f()).collect();
    times.sort();
    times[runs / 2]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The mean time of criterion benchmark `id` (`group/function`, as criterion names its
/// folder) in ns, from `<target dir>/criterion/<id>/new/estimates.json`; `None` before it ran.
pub fn mean_ns(id: &str) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = dir.join("criterion").join(id).join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    json.pointer("/mean/point_estimate")?.as_f64()
}
