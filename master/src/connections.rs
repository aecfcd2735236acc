//! The master's gRPC listener, with a cap on the connections it holds at once
//! (`--max-connections`): a connection accepted past the cap is closed at once (the caller sees
//! UNAVAILABLE and tries again or another master), so that no number of callers can make a master
//! hold unbounded HTTP/2 connection state. Calls per connection are capped by HTTP/2's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` (`--max-streams-per-connection`, set on the server).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::metrics::REFUSED;

/// An accepted connection holding one of the listener's places until it is dropped.
pub struct Connection {
    io: TcpStream,
    _place: OwnedSemaphorePermit,
}

/// The connections accepted on `listener`, at most `max` open at once (see the module
/// documentation). Accept errors (out of file descriptors) are logged and retried after 100 ms;
/// the stream never ends.
pub fn incoming(listener: TcpListener, max: usize) -> impl Stream<Item = io::Result<Connection>> {
    let max = max.max(1);
    let places = Arc::new(Semaphore::new(max));
    let last_warning: Option<Instant> = None;
    futures::stream::unfold(
        (listener, places, last_warning),
        move |(listener, places, mut last_warning)| async move {
            loop {
                let io = match listener.accept().await {
                    Ok((io, _)) => io,
                    Err(error) => {
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                match places.clone().try_acquire_owned() {
                    Ok(place) => {
                        let _ = io.set_nodelay(true);
                        let connection = Connection { io, _place: place };
                        return Some((Ok(connection), (listener, places, last_warning)));
                    }
                    Err(_) => {
                        REFUSED.with_label_values(&["connections"]).inc();
                        if last_warning.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                            tracing::warn!(
                                max,
                                "connection refused: this master holds as many as it may"
                            );
                            last_warning = Some(Instant::now());
                        }
                        drop(io);
                    }
                }
            }
        },
    )
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
