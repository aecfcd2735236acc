//! When a worker connects to the masters again: the clients' one retry policy
//! ([`symcluster_client::retry::backoff`]: 200 ms doubling to 5 s, with jitter, so that workers
//! cut off together do not come back together), started afresh after a good session (one that
//! registered and lasted at least the longest delay), so that a master lost after hours of work
//! is retried at once and not at the delay an earlier outage had reached, while a session that
//! registers and breaks at once (a master that accepts and then fails every lease stream) still
//! backs off.

use std::time::Duration;

use backon::BackoffBuilder as _;

/// Longest wait between two connection attempts.
const MAX_DELAY: Duration = Duration::from_secs(5);

/// The reconnect delays of one worker.
pub(crate) struct Reconnect {
    delays: backon::ExponentialBackoff,
}

impl Reconnect {
    pub(crate) fn new() -> Self {
        Reconnect {
            delays: symcluster_client::retry::backoff(MAX_DELAY).build(),
        }
    }

    /// A session registered and ended after `lasted`: when that is at least [`MAX_DELAY`], the
    /// next wait starts from the shortest again.
    pub(crate) fn registered(&mut self, lasted: Duration) {
        if lasted >= MAX_DELAY {
            *self = Self::new();
        }
    }

    /// The wait before the next attempt: longer after each failed one, up to [`MAX_DELAY`]
    /// (plus jitter).
    pub(crate) fn next_wait(&mut self) -> Duration {
        self.delays.next().unwrap_or(MAX_DELAY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_grows_while_connecting_fails_and_resets_after_a_long_session() {
        let mut reconnect = Reconnect::new();
        let first = reconnect.next_wait();
        assert!(first <= Duration::from_millis(400), "{first:?}");
        let grown: Vec<Duration> = (0..6).map(|_| reconnect.next_wait()).collect();
        // The 7th wait's base is 5 s (200 ms × 2⁶ capped), at most doubled by jitter.
        let last = *grown.last().unwrap();
        assert!(last >= MAX_DELAY && last <= 2 * MAX_DELAY, "{grown:?}");

        // A session that broke at once does not count as good.
        reconnect.registered(Duration::from_millis(50));
        let still = reconnect.next_wait();
        assert!(still >= MAX_DELAY, "{still:?}");

        reconnect.registered(Duration::from_secs(60));
        let after = reconnect.next_wait();
        assert!(after <= Duration::from_millis(400), "{after:?}");
    }
}
