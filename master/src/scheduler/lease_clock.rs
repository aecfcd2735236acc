//! The clock lease deadlines are kept on: monotonic, so a step of the wall clock (an NTP
//! correction, a VM resumed, an operator's `date -s`) neither expires every lease at once nor
//! keeps a dead worker's leases for as long as the clock went back.
//!
//! Deadlines never leave the leader's memory (they are not replicated: a new leader gives every
//! running job a fresh one), so they need no clock shared between masters. Only the `Lease`
//! message tells a worker its deadline, in ms since the Unix epoch as the API documents:
//! [`wall_ms`] converts one at the moment it is sent.

use std::sync::LazyLock;
use std::time::Instant;

use crate::index::command::now_ms;

static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Ms on this process's monotonic clock (`CLOCK_MONOTONIC`, through [`Instant`]) since its
/// first use: what lease deadlines are compared with.
pub fn now() -> u64 {
    ORIGIN.elapsed().as_millis() as u64
}

/// Deadline `deadline` (ms on [`now`]'s clock) as ms since the Unix epoch by this master's wall
/// clock now: the wall time that is as far ahead as the deadline is (a deadline already passed
/// is now).
pub fn wall_ms(deadline: u64) -> u64 {
    now_ms() + deadline.saturating_sub(now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_as_far_ahead_on_the_wall_clock_as_on_the_monotonic_one() {
        let deadline = now() + 30_000;
        let wall = wall_ms(deadline);
        let ahead = wall.saturating_sub(now_ms());
        assert!((29_000..=30_000).contains(&ahead), "{ahead} ms ahead");
        // Passed: now.
        let passed = wall_ms(now().saturating_sub(1)).abs_diff(now_ms());
        assert!(passed < 1_000, "{passed}");
    }
}
