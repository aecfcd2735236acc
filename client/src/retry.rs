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
/// A server that answers a `grpc-retry-pushback-ms` that is not a non-negative integer asks not
/// to be tried again (gRPC's retry design, gRFC A6): not retryable either.
pub fn is_retryable(error: &ClientError) -> bool {
    match error {
        ClientError::Connect { .. } | ClientError::WatchEnded(_) => true,
        ClientError::BadToken => false,
        ClientError::Status(status) => {
            matches!(
                status.code(),
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::ResourceExhausted
                    | Code::Aborted
            ) && pushback_value(status).is_none_or(|ms| ms.is_some())
        }
    }
}

/// The server's `grpc-retry-pushback-ms` trailer (gRFC A6): `None` without one, `Some(None)`
/// for one that is not a non-negative integer (do not retry), else `Some(Some(ms))`.
fn pushback_value(status: &tonic::Status) -> Option<Option<u64>> {
    let value = status.metadata().get(PUSHBACK_METADATA)?;
    Some(
        value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok()),
    )
}

/// The metadata key of gRPC's retry pushback (ms to wait before trying again).
pub const PUSHBACK_METADATA: &str = "grpc-retry-pushback-ms";

/// How long the server asked to wait before another try (`grpc-retry-pushback-ms`, the masters'
/// RESOURCE_EXHAUSTED answers carry it); `None` when it asked nothing.
pub fn pushback(error: &ClientError) -> Option<Duration> {
    match error {
        ClientError::Status(status) => pushback_value(status)?.map(Duration::from_millis),
        _ => None,
    }
}

/// The wait before the try after `error`: the backoff's `delay`, or the server's pushback when
/// it asked for longer (a delay of `None`, the backoff given up, stays `None`). For backon's
/// `Retry::adjust`.
pub fn adjust(error: &ClientError, delay: Option<Duration>) -> Option<Duration> {
    Some(at_least_asked(delay?, pushback(error)))
}

/// The backoff's `delay`, or the server's `asked` pushback when that is longer.
pub fn at_least_asked(delay: Duration, asked: Option<Duration>) -> Duration {
    asked.map_or(delay, |asked| asked.max(delay))
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
    fn the_servers_pushback_sets_the_wait_and_can_forbid_a_retry() {
        let with = |value: &str| {
            let mut status = Status::resource_exhausted("over its rate");
            status
                .metadata_mut()
                .insert(PUSHBACK_METADATA, value.parse().unwrap());
            ClientError::from(status)
        };
        let short = Some(Duration::from_millis(200));
        assert_eq!(
            adjust(&with("1500"), short),
            Some(Duration::from_millis(1500))
        );
        // Never shorter than the backoff's own delay, and no wait where the backoff gave up.
        assert_eq!(adjust(&with("10"), short), short);
        assert_eq!(adjust(&with("1500"), None), None);
        let plain = ClientError::from(Status::resource_exhausted("x"));
        assert_eq!((pushback(&plain), adjust(&plain, short)), (None, short));
        assert!(is_retryable(&with("1500")));
        assert!(
            !is_retryable(&with("-1")),
            "a negative pushback asks for no retry"
        );
        assert!(!is_retryable(&with("soon")));
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
