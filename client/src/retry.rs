//! The one retry policy of symcluster's clients (the worker, the Kafka bridge, the SDK's
//! sender): exponential backoff with jitter (backon), started afresh after a success, and only
//! for errors that another try can fix.

use std::time::Duration;

use backon::ExponentialBuilder;
use tonic::Code;

use crate::ClientError;

/// Delays between tries: 200 ms doubling up to `max`, each with random jitter (so clients cut
/// off together do not come back together), never giving up by itself: the caller decides how
/// many tries (`.with_max_times(n)`) or rebuilds it after a success (`.build()` again).
pub fn backoff(max: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
}

/// Whether trying `error` again later can succeed: the masters out of reach or electing a
/// leader (`UNAVAILABLE`, a connection failure, a watch stream cut), a deadline
/// (`DEADLINE_EXCEEDED`), a rate limit (`RESOURCE_EXHAUSTED`), a conflict (`ABORTED`). A
/// refusal (`INVALID_ARGUMENT`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `NOT_FOUND`, …) will be
/// answered the same way every time.
pub fn is_retryable(error: &ClientError) -> bool {
    match error {
        ClientError::Connect { .. } | ClientError::WatchEnded(_) => true,
        ClientError::BadToken => false,
        ClientError::Status(status) => matches!(
            status.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted
        ),
    }
}

#[cfg(test)]
mod tests {
    use backon::BackoffBuilder;
    use tonic::Status;

    use super::*;

    #[test]
    fn only_transient_errors_are_retried() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
            Code::Aborted,
        ] {
            assert!(is_retryable(&Status::new(code, "x").into()), "{code:?}");
        }
        for code in [
            Code::InvalidArgument,
            Code::OutOfRange,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::Internal,
        ] {
            assert!(!is_retryable(&Status::new(code, "x").into()), "{code:?}");
        }
        assert!(is_retryable(&ClientError::Connect {
            endpoint: "http://a".into(),
            message: "refused".into()
        }));
        assert!(!is_retryable(&ClientError::BadToken));
    }

    #[test]
    fn delays_grow_to_the_cap_with_jitter_and_start_afresh() {
        let delays: Vec<Duration> = backoff(Duration::from_secs(2)).build().take(8).collect();
        // Try i waits its base (200 ms doubling, capped at 2 s) plus a jitter of up to one base.
        for (i, delay) in delays.iter().enumerate() {
            let base =
                (Duration::from_millis(200) * 2u32.pow(i as u32)).min(Duration::from_secs(2));
            assert!(*delay >= base && *delay <= base * 2, "try {i}: {delay:?}");
        }
        let again: Vec<Duration> = backoff(Duration::from_secs(2)).build().take(1).collect();
        assert!(
            again[0] <= Duration::from_millis(400),
            "a new backoff starts low"
        );
    }
}
