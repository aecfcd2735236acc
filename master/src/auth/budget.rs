//! What a `device` token may cost a master: its token ships inside every copy of the app, so
//! anyone can hold one, and nothing it sends may exhaust the masters' memory.
//!
//! Every device token gets, on each master:
//! - a rate of calls (and streamed jobs) per second ([`DeviceBudgets::rate`]), unless the tokens
//!   file gives its own `rate`, and a rate per project shared by all the device tokens of the
//!   project ([`DeviceBudgets::project_rate`]);
//! - a byte budget: the bytes of the job specs it submits per second
//!   ([`DeviceBudgets::bytes_per_second`], or the file's `bytes_per_second`), a token bucket
//!   ([`ByteBudget`]);
//! - a smaller largest report than ingest tokens ([`DeviceBudgets::max_report_bytes`]),
//!   enforced while the request is read ([`DeviceGate`] stops reading a request body past it),
//!   and again on the decompressed report: OUT_OF_RANGE, as tonic answers a message over its
//!   decoding limit, for no retry can change it;
//! - a share of the master's device reports in transfer ([`DeviceBudgets::max_in_flight`], for
//!   all device tokens together): a report past it is refused at its first bytes, and one not
//!   all sent within [`MESSAGE_READ_MS`] gives its place up.
//!
//! The other refusals are RESOURCE_EXHAUSTED with gRPC's retry pushback
//! (`grpc-retry-pushback-ms`): waiting helps. Each is counted in
//! `symcluster_refused_total{reason}`.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use tonic::body::Body;
use tonic::server::NamedService;

use super::{Caller, Role};
use crate::metrics::REFUSED;

/// How long a device refused for its rate, bytes or the calls in flight is told to wait, ms.
pub const DEVICE_RETRY_MS: u64 = 1_000;

/// Bytes a request may hold beyond its report (ids, release, the gRPC and protobuf framing, a
/// zstd frame's overhead on incompressible data).
pub const ENVELOPE_BYTES: usize = 64 << 10;

/// The budgets of device tokens on one master (`--device-*` flags).
#[derive(Debug, Clone, Copy)]
pub struct DeviceBudgets {
    /// Largest report or JS stack a device token may submit, decompressed, bytes.
    pub max_report_bytes: usize,
    /// Calls (and streamed jobs) per second of one device token without its own `rate`.
    pub rate: f64,
    /// Calls (and streamed jobs) per second of all the device tokens of one project together.
    pub project_rate: f64,
    /// Job spec bytes per second of one device token without its own `bytes_per_second`.
    pub bytes_per_second: u64,
    /// Device reports (gRPC messages) read at once by this master, all device tokens together.
    pub max_in_flight: usize,
}

impl Default for DeviceBudgets {
    fn default() -> Self {
        DeviceBudgets {
            max_report_bytes: 2 << 20,
            rate: 100.0,
            project_rate: 1000.0,
            bytes_per_second: 16 << 20,
            max_in_flight: 16,
        }
    }
}

/// A byte budget: a token bucket (GCRA, the `governor` crate) refilled at `per_second` bytes,
/// holding at most `burst` (at least one largest request, so that one always fits).
#[derive(Debug, Clone)]
pub struct ByteBudget {
    /// Bytes per second.
    pub per_second: u64,
    /// Bytes allowed at once.
    pub burst: u64,
    limiter: Arc<governor::DefaultDirectRateLimiter>,
}

impl ByteBudget {
    /// `None` unless `per_second` is at least 1; `burst` is four seconds' worth, at least
    /// `largest` (both at most `u32::MAX`).
    pub fn new(per_second: u64, largest: usize) -> Option<Self> {
        let rate = std::num::NonZeroU32::new(per_second.min(u64::from(u32::MAX)) as u32)?;
        let burst = (per_second.saturating_mul(4))
            .max(largest as u64)
            .min(u64::from(u32::MAX));
        let quota =
            governor::Quota::per_second(rate).allow_burst(std::num::NonZeroU32::new(burst as u32)?);
        Some(ByteBudget {
            per_second,
            burst,
            limiter: Arc::new(governor::RateLimiter::direct(quota)),
        })
    }

    /// Takes `bytes` from the budget, or says it is spent.
    fn take(&self, bytes: usize) -> bool {
        let n = std::num::NonZeroU32::new(bytes.clamp(1, u32::MAX as usize) as u32)
            .expect("clamped to at least 1");
        matches!(self.limiter.check_n(n), Ok(Ok(())))
    }
}

impl Caller {
    /// Takes a submitted spec of `bytes` from the token's byte budget (device tokens, and tokens
    /// whose entry gives `bytes_per_second`): RESOURCE_EXHAUSTED with a retry pushback when it
    /// is spent.
    pub fn take_bytes(&self, bytes: usize) -> Result<(), Status> {
        match &self.bytes {
            Some(budget) if !budget.take(bytes) => {
                REFUSED.with_label_values(&["device_bytes"]).inc();
                Err(crate::service::exhausted(
                    format!(
                        "token {:?} is over its budget of {} bytes per second (burst {})",
                        self.name, budget.per_second, budget.burst
                    ),
                    DEVICE_RETRY_MS,
                ))
            }
            _ => Ok(()),
        }
    }
}

/// Checks that a device's report or JS stack of `len` bytes (decompressed) is at most `max`
/// ([`Caller::max_report_bytes`]); OUT_OF_RANGE naming the limit otherwise (no retry can
/// change it).
pub fn check_report_len(max: usize, len: usize) -> Result<(), Status> {
    if len <= max {
        return Ok(());
    }
    REFUSED.with_label_values(&["device_report_size"]).inc();
    Err(Status::out_of_range(format!(
        "the report is {len} bytes; a device token's reports may be at most {max} bytes"
    )))
}

/// How long a device has to send one message once its length prefix arrived, ms: a place
/// ([`DeviceBudgets::max_in_flight`]) is never held by a sender that stalls.
pub const MESSAGE_READ_MS: u64 = 30_000;

/// A service (the Ingest service, inside its auth interceptor) whose device calls are gated
/// message by message, before tonic buffers them: a message whose gRPC length prefix declares
/// more than [`DeviceBudgets::max_report_bytes`] + [`ENVELOPE_BYTES`] is refused
/// (OUT_OF_RANGE); any other takes one of the master's [`DeviceBudgets::max_in_flight`]
/// places while it is read, and is refused when none is free (RESOURCE_EXHAUSTED with a retry
/// pushback) or when it is not all sent within [`MESSAGE_READ_MS`]. A place is held only while
/// a message is in transfer, never by an idle call or stream. Calls of other roles pass
/// untouched.
#[derive(Clone)]
pub struct DeviceGate<S> {
    inner: S,
    in_flight: Arc<Semaphore>,
    max_body_bytes: usize,
}

impl<S> DeviceGate<S> {
    /// Gates `inner`'s device calls by `budgets`.
    pub fn new(inner: S, budgets: &DeviceBudgets) -> Self {
        DeviceGate {
            inner,
            in_flight: Arc::new(Semaphore::new(budgets.max_in_flight.max(1))),
            max_body_bytes: budgets.max_report_bytes.saturating_add(ENVELOPE_BYTES),
        }
    }
}

impl<S: NamedService> NamedService for DeviceGate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for DeviceGate<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let device = request
            .extensions()
            .get::<Caller>()
            .is_some_and(|caller| caller.role == Role::Device);
        if !device {
            return self.inner.call(request);
        }
        let (places, limit) = (self.in_flight.clone(), self.max_body_bytes);
        self.inner.call(request.map(|body| {
            Body::new(Limited {
                body,
                prefix: [0; 5],
                prefix_len: 0,
                remaining: 0,
                limit,
                places,
                place: None,
                deadline: None,
            })
        }))
    }
}

/// Why [`Limited`] stops reading a device's body.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// A message declares this many bytes, over the limit.
    TooLarge(usize),
    /// Every place is taken.
    Busy,
}

/// A device's request body, followed through its gRPC framing: each message is a
/// length-prefixed message (a compressed-flag byte, then its length as a big-endian `u32`;
/// gRPC over HTTP/2, `PROTOCOL-HTTP2.md`), so its length is known from its first five bytes,
/// long before tonic would have buffered it (see [`DeviceGate`]).
struct Limited {
    body: Body,
    /// The prefix of the message being read, while fewer than five bytes of it were seen.
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the current message still to come after its prefix.
    remaining: usize,
    limit: usize,
    places: Arc<Semaphore>,
    /// The place the message in transfer holds.
    place: Option<OwnedSemaphorePermit>,
    /// When the message in transfer must have arrived.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Limited {
    /// Follows the framing through `data`, taking a place for each message while it is read.
    fn scan(&mut self, mut data: &[u8]) -> Result<(), Refusal> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let skip = self.remaining.min(data.len());
                self.remaining -= skip;
                data = &data[skip..];
                if self.remaining == 0 {
                    self.place = None;
                    self.deadline = None;
                }
                continue;
            }
            let take = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
            self.prefix_len += take;
            data = &data[take..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as usize;
                if len > self.limit {
                    return Err(Refusal::TooLarge(len));
                }
                if len > 0 {
                    self.place = Some(
                        self.places
                            .clone()
                            .try_acquire_owned()
                            .map_err(|_| Refusal::Busy)?,
                    );
                    self.deadline = Some(Box::pin(tokio::time::sleep(
                        std::time::Duration::from_millis(MESSAGE_READ_MS),
                    )));
                }
                self.remaining = len;
            }
        }
        Ok(())
    }

    fn refusal(&self, refusal: Refusal) -> Status {
        match refusal {
            Refusal::TooLarge(len) => {
                REFUSED.with_label_values(&["device_report_size"]).inc();
                Status::out_of_range(format!(
                    "a {len}-byte request is larger than a device token may send ({} bytes: a \
                     report of at most {} bytes)",
                    self.limit,
                    self.limit - ENVELOPE_BYTES
                ))
            }
            Refusal::Busy => {
                REFUSED.with_label_values(&["device_in_flight"]).inc();
                crate::service::exhausted(
                    "this master reads as many device reports as it may at once; retry later"
                        .into(),
                    DEVICE_RETRY_MS,
                )
            }
        }
    }
}

impl HttpBody for Limited {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if let Some(deadline) = &mut this.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            this.place = None;
            this.deadline = None;
            REFUSED.with_label_values(&["device_in_flight"]).inc();
            return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                "a device's report must arrive within {MESSAGE_READ_MS} ms of its start"
            )))));
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(refusal) = this.scan(data)
                {
                    this.place = None;
                    this.deadline = None;
                    return Poll::Ready(Some(Err(this.refusal(refusal))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(limit: usize, places: &Arc<Semaphore>) -> Limited {
        Limited {
            body: Body::empty(),
            prefix: [0; 5],
            prefix_len: 0,
            remaining: 0,
            limit,
            places: places.clone(),
            place: None,
            deadline: None,
        }
    }

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(7, len as usize));
        m
    }

    #[tokio::test]
    async fn each_message_is_measured_by_its_prefix_and_holds_a_place_while_read() {
        let places = Arc::new(Semaphore::new(1));
        let mut body = limited(10, &places);
        // Two messages within the limit, cut into chunks anywhere, the prefix split too.
        let stream = [message(10), message(0), message(3)].concat();
        for chunk in stream.chunks(3) {
            assert_eq!(body.scan(chunk), Ok(()));
        }
        assert_eq!(places.available_permits(), 1, "no message in transfer");
        // A message in transfer holds the one place: another body's message waits for it.
        let half = message(4);
        assert_eq!(body.scan(&half[..7]), Ok(()));
        assert_eq!(places.available_permits(), 0);
        let mut other = limited(10, &places);
        assert_eq!(other.scan(&message(2)), Err(Refusal::Busy));
        assert_eq!(body.scan(&half[7..]), Ok(()));
        assert_eq!(places.available_permits(), 1);
        // The next one declares 11 bytes: refused at its prefix, its bytes not needed.
        let next = message(11);
        assert_eq!(body.scan(&next[..2]), Ok(()));
        assert_eq!(body.scan(&next[2..5]), Err(Refusal::TooLarge(11)));
    }

    #[test]
    fn a_byte_budget_always_fits_the_largest_request_and_then_runs_out() {
        let budget = ByteBudget::new(1_000, 10_000).unwrap();
        assert_eq!(budget.burst, 10_000);
        assert!(budget.take(10_000));
        assert!(!budget.take(500));
        assert!(ByteBudget::new(0, 10).is_none());
    }
}
