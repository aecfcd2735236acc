//! Rate limits of the sampled reports (`hang`, `jank`, `cpu`), so that a device never floods
//! the cluster: at most [`DEFAULT_PER_LAUNCH`] reports of a kind per launch and
//! [`DEFAULT_PER_DAY`] per UTC day (both settable with [`set`]). The day's counts persist in
//! `<report dir>/report-limits` (one `kind day count` line per kind, `day` counted in days since
//! the Unix epoch), so relaunching does not reset them. A report over a limit is not written.

use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Reports of one kind per launch, by default.
pub const DEFAULT_PER_LAUNCH: u32 = 3;
/// Reports of one kind per UTC day, by default.
pub const DEFAULT_PER_DAY: u32 = 10;

struct State {
    per_launch: u32,
    per_day: u32,
    launch: Vec<(String, u32)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    per_launch: DEFAULT_PER_LAUNCH,
    per_day: DEFAULT_PER_DAY,
    launch: Vec::new(),
});

/// Sets the limits (reports of one kind per launch, per UTC day); 0 means no report of these
/// kinds at all.
pub fn set(per_launch: u32, per_day: u32) {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    state.per_launch = per_launch;
    state.per_day = per_day;
}

fn today() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

/// Takes one report of `kind` from the limits of this launch and of today, counted in `dir`;
/// `false` (and nothing taken) when either is used up.
pub fn take(dir: &Path, kind: &str) -> bool {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let launch = state
        .launch
        .iter()
        .find(|(k, _)| k == kind)
        .map_or(0, |(_, n)| *n);
    if launch >= state.per_launch {
        return false;
    }
    let file = dir.join("report-limits");
    let day = today();
    let mut counts: Vec<(String, u64, u32)> = std::fs::read_to_string(&file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let kind = parts.next()?.to_owned();
            let day = parts.next()?.parse().ok()?;
            let count = parts.next()?.parse().ok()?;
            Some((kind, day, count))
        })
        .filter(|(_, d, _)| *d == day)
        .collect();
    let today_count = counts
        .iter()
        .find(|(k, _, _)| k == kind)
        .map_or(0, |(_, _, c)| *c);
    if today_count >= state.per_day {
        return false;
    }
    match counts.iter_mut().find(|(k, _, _)| k == kind) {
        Some(entry) => entry.2 += 1,
        None => counts.push((kind.to_owned(), day, 1)),
    }
    let text: String = counts
        .iter()
        .map(|(k, d, c)| format!("{k} {d} {c}\n"))
        .collect();
    // A lost write only lets one more report through.
    let _ = crate::call_tree::write_atomically(&file, text.as_bytes());
    match state.launch.iter_mut().find(|(k, _)| k == kind) {
        Some(entry) => entry.1 += 1,
        None => state.launch.push((kind.to_owned(), 1)),
    }
    true
}
