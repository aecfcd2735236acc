//! Raft messages between masters, over tonic (`symcluster.cluster.v1.Peer`).
//!
//! Sending: one task per peer, in order, batching whatever is waiting into one `RaftBatch`, sent
//! as one message of a long-lived `StepStream` call (no call set-up, headers or response per
//! batch). A snapshot goes alone, streamed in chunks by an `InstallSnapshot` call
//! ([`super::snapshot`]), so that the node learns whether it arrived.
//! A broken stream or a failed call tells the node the peer is unreachable (raft-rs then probes
//! it gently) and drops the messages queued for it: Raft resends what matters. HTTP/2 keepalive
//! (1 s, 2 s timeout) notices a peer cut off by the network; a snapshot transfer whose receiver
//! takes no chunk for [`snapshot::STALL`] is given up. A snapshot message that is not sent (the
//! peer unreachable) is reported failed to the node at once, so that raft-rs sends another. Receiving: [`PeerService`] decodes each
//! message and hands each batch to the node's channel; a snapshot is written to a file and
//! checked before its message is handed over.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use prost011::Message as _;
use raft::prelude::{Message, MessageType};
use symcluster_client::BearerToken;
use symcluster_proto::cluster::v1::{self as pb, peer_client::PeerClient, peer_server::Peer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{CertificateDer, Channel, Endpoint};
use tonic::{Request, Response, Status, Streaming};

use super::membership::Members;
use super::peer_identity;
use super::snapshot::{self, Outbox};
use super::{Inbox, Network, RaftConfig};
use crate::metrics;

/// Largest Raft batch, bytes (a snapshot of a master before streamed snapshots travels in one
/// message; a streaming master's messages are far smaller).
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// `scheme://host:port` with `port` in place of its port (`--peer-listen`'s port); `None` when
/// `address` is not a URI with a host.
pub fn with_port(address: &str, port: u16) -> Option<String> {
    let uri: http::Uri = address.parse().ok()?;
    let host = uri.host()?;
    let scheme = uri.scheme_str().unwrap_or("http");
    // `Uri::host` keeps an IPv6 literal's brackets.
    Some(format!("{scheme}://{host}:{port}"))
}

/// The sending side: a queue per peer, and what it takes to start one for a member that
/// joins.
pub struct Transport {
    peers: HashMap<u64, mpsc::UnboundedSender<Message>>,
    addresses: BTreeMap<u64, String>,
    id: u64,
    token: Option<BearerToken>,
    tls: symcluster_client::Tls,
    node: Inbox,
    outbox: Outbox,
    chunk_bytes: usize,
    peer_port: Option<u16>,
    runtime: tokio::runtime::Handle,
}

impl Transport {
    /// Starts one sending task per member of `addresses` but this one, on `runtime`; snapshots
    /// are taken from `outbox`.
    pub fn start(
        config: &RaftConfig,
        addresses: &BTreeMap<u64, String>,
        node: Inbox,
        outbox: Outbox,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let mut transport = Transport {
            peers: HashMap::new(),
            addresses: BTreeMap::new(),
            id: config.id,
            token: BearerToken::new(&config.token).ok(),
            tls: config.tls.clone(),
            node,
            outbox,
            chunk_bytes: config.snapshot_chunk_bytes,
            peer_port: config.peer_port,
            runtime: runtime.clone(),
        };
        transport.set_members(addresses);
        transport
    }

    /// Follows a membership change: a sending task for each new member (or one whose address
    /// changed), none any more for a member that left (its queue is dropped, which ends its
    /// task).
    pub fn set_members(&mut self, addresses: &BTreeMap<u64, String>) {
        self.peers
            .retain(|id, _| addresses.get(id) == self.addresses.get(id));
        for (&id, address) in addresses {
            if id == self.id || self.peers.contains_key(&id) {
                continue;
            }
            if let Some(queue) = self.connect(id, address) {
                self.peers.insert(id, queue);
            }
        }
        self.addresses = addresses.clone();
    }

    fn connect(&self, id: u64, address: &str) -> Option<mpsc::UnboundedSender<Message>> {
        let peer_address = match self.peer_port {
            Some(port) => with_port(address, port),
            None => Some(address.to_owned()),
        };
        let address = peer_address.as_deref().unwrap_or(address);
        let endpoint = Endpoint::from_shared(address.to_owned())
            .ok()
            .and_then(|e| self.tls.apply(e, address).ok());
        let (Some(endpoint), Some(token)) = (endpoint, self.token.clone()) else {
            tracing::error!(
                peer = id,
                address,
                "invalid peer address, TLS settings or token; not sending to it"
            );
            return None;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let snapshots = SnapshotSender {
            from: self.id,
            to: id,
            outbox: self.outbox.clone(),
            chunk_bytes: self.chunk_bytes,
        };
        let _guard = self.runtime.enter();
        let channel = endpoint
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(2))
            .keep_alive_while_idle(true)
            .max_frame_size(symcluster_proto::HTTP2_MAX_FRAME_BYTES)
            .connect_lazy();
        let client = PeerClient::new(InterceptedService::new(channel, token))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.runtime
            .spawn(send_loop(client, rx, self.node.clone(), snapshots));
        Some(tx)
    }

    /// Queues `messages` for their peers.
    pub fn send(&self, messages: Vec<Message>) {
        for m in messages {
            if let Some(peer) = self.peers.get(&m.to) {
                let _ = peer.send(m);
            } else if m.get_msg_type() == MessageType::MsgSnapshot {
                // Nobody to send it to: raft-rs would wait for it for good.
                drop(self.outbox.take(m.to));
                let _ = self.node.send(Network::SnapshotSent {
                    peer: m.to,
                    ok: false,
                });
            }
        }
    }
}

impl super::Outbound for Transport {
    fn send(&mut self, messages: Vec<Message>) {
        Transport::send(self, messages);
    }

    fn set_members(&mut self, addresses: &BTreeMap<u64, String>) {
        Transport::set_members(self, addresses);
    }
}

type Client = PeerClient<InterceptedService<Channel, BearerToken>>;

/// Batches wanted in flight on a stream before the sender waits (HTTP/2 flow control bounds
/// the bytes).
const STREAM_BUFFER: usize = 64;

/// A batch takes no more messages once its entries pass this many bytes (a follower catching up
/// gets appends of up to [`super::MAX_APPEND_BYTES`]: each travels in a batch of a few).
const MAX_BATCH_BYTES: usize = 2 << 20;

/// Bytes of the entries a message carries.
fn entry_bytes(m: &Message) -> usize {
    m.entries
        .iter()
        .map(|e| e.data.len() + e.context.len())
        .sum()
}

async fn send_loop(
    client: Client,
    mut rx: mpsc::UnboundedReceiver<Message>,
    node: Inbox,
    snapshots: SnapshotSender,
) {
    let (from, to) = (snapshots.from, snapshots.to);
    let mut stream: Option<BatchStream> = None;
    while let Some(first) = rx.recv().await {
        // What is waiting, up to 512 messages or [`MAX_BATCH_BYTES`] of entries.
        let mut bytes = entry_bytes(&first);
        let mut batch = vec![first];
        while batch.len() < 512 && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(m) => {
                    bytes += entry_bytes(&m);
                    batch.push(m);
                }
                Err(_) => break,
            }
        }
        // Snapshots go alone, by `InstallSnapshot`, after what came before them (by the stream).
        let (snapshot_messages, messages): (Vec<Message>, Vec<Message>) = batch
            .into_iter()
            .partition(|m| m.get_msg_type() == MessageType::MsgSnapshot);
        // A stream whose call ended has lost whatever was queued on it.
        let mut ok = !stream.as_ref().is_some_and(BatchStream::is_broken);
        if ok && !messages.is_empty() {
            let open = stream.get_or_insert_with(|| BatchStream::open(client.clone()));
            ok = open.send(from, &messages).await;
        }
        for snapshot in snapshot_messages {
            if ok {
                ok = snapshots.send(client.clone(), &snapshot).await;
            } else {
                snapshots.drop_source();
            }
            let _ = node.send(Network::SnapshotSent { peer: to, ok });
        }
        if !ok {
            tracing::debug!(peer = to, "raft peer unreachable");
            stream = None;
            let _ = node.send(Network::Unreachable(to));
            // Raft resends what matters once the peer answers again; a snapshot dropped here is
            // reported, or raft-rs would wait for it for good.
            while let Ok(dropped) = rx.try_recv() {
                if dropped.get_msg_type() == MessageType::MsgSnapshot {
                    snapshots.drop_source();
                    let _ = node.send(Network::SnapshotSent {
                        peer: to,
                        ok: false,
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// One `StepStream` call: batches are queued on `tx`; `call` ends only when the stream breaks
/// (or `tx` is dropped).
struct BatchStream {
    tx: mpsc::Sender<pb::RaftBatch>,
    call: JoinHandle<()>,
}

impl BatchStream {
    fn open(mut client: Client) -> Self {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let call = tokio::spawn(async move {
            let result = client
                .step_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await;
            if let Err(status) = result {
                tracing::debug!(%status, "raft stream ended");
            }
        });
        BatchStream { tx, call }
    }

    fn is_broken(&self) -> bool {
        self.call.is_finished()
    }

    async fn send(&self, from: u64, messages: &[Message]) -> bool {
        let batch = pb::RaftBatch {
            from,
            messages: messages.iter().map(|m| m.encode_to_vec()).collect(),
        };
        self.tx.send(batch).await.is_ok()
    }
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        self.call.abort();
    }
}

/// What a sending task needs to stream snapshots to its peer.
struct SnapshotSender {
    from: u64,
    to: u64,
    outbox: Outbox,
    chunk_bytes: usize,
}

impl SnapshotSender {
    /// Drops the source left for a snapshot that is not sent (its read transaction with it).
    fn drop_source(&self) {
        drop(self.outbox.take(self.to));
    }

    /// Streams the snapshot of `message` (taken from the outbox); whether the follower received
    /// it whole and handed it to its node.
    async fn send(&self, mut client: Client, message: &Message) -> bool {
        let index = message.get_snapshot().get_metadata().index;
        let source = match self.outbox.take(self.to) {
            Some(source) if source.index() == index => source,
            _ => {
                tracing::warn!(
                    peer = self.to,
                    index,
                    "no snapshot source for this snapshot"
                );
                return false;
            }
        };
        let started = Instant::now();
        let chunks =
            match snapshot::send(source, self.from, message.encode_to_vec(), self.chunk_bytes) {
                Ok(chunks) => chunks,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the snapshot thread");
                    return false;
                }
            };
        // A receiver that stops taking chunks ends the stream early (`snapshot::STALL`); after
        // the last chunk, the follower's fsync and hand-over are waited for (HTTP/2 keepalive
        // notices a follower that died).
        let result = client
            .install_snapshot(tokio_stream::wrappers::ReceiverStream::new(chunks))
            .await;
        match result {
            Ok(response) => {
                let bytes = response.get_ref().bytes;
                metrics::RAFT_SNAPSHOTS
                    .with_label_values(&["sent", "ok"])
                    .inc();
                metrics::RAFT_SNAPSHOT_BYTES
                    .with_label_values(&["sent"])
                    .inc_by(bytes);
                tracing::info!(
                    peer = self.to,
                    index,
                    bytes,
                    ms = started.elapsed().as_millis() as u64,
                    "snapshot sent"
                );
                true
            }
            Err(status) => {
                metrics::RAFT_SNAPSHOTS
                    .with_label_values(&["sent", "failed"])
                    .inc();
                tracing::warn!(peer = self.to, index, %status, "snapshot not delivered");
                false
            }
        }
    }
}

/// The receiving side: `symcluster.cluster.v1.Peer`.
pub struct PeerService {
    node: Inbox,
    members: Members,
    snapshot_dir: PathBuf,
    /// Mutual TLS: a batch's sender must hold the certificate of the member it names
    /// ([`peer_identity`]).
    bind_certificates: bool,
}

impl PeerService {
    /// Hands received batches to the node's channel; accepts only `members` (as they are when
    /// a batch arrives), and with `bind_certificates` (mutual TLS) only from the member whose
    /// host the client certificate names ([`peer_identity::check`]); writes received
    /// snapshots into `snapshot_dir`.
    pub fn new(
        node: Inbox,
        members: Members,
        snapshot_dir: PathBuf,
        bind_certificates: bool,
    ) -> Self {
        PeerService {
            node,
            members,
            snapshot_dir,
            bind_certificates,
        }
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn step(
        &self,
        request: Request<pb::RaftBatch>,
    ) -> Result<Response<pb::StepResponse>, Status> {
        let certs = request.peer_certs();
        let messages = self.decode(&request.into_inner(), certs.as_deref().map(Vec::as_slice))?;
        self.deliver(messages)?;
        Ok(Response::new(pb::StepResponse {}))
    }

    async fn step_stream(
        &self,
        request: Request<Streaming<pb::RaftBatch>>,
    ) -> Result<Response<pb::StepResponse>, Status> {
        let certs = request.peer_certs();
        let mut stream = request.into_inner();
        while let Some(batch) = stream.message().await? {
            let messages = self.decode(&batch, certs.as_deref().map(Vec::as_slice))?;
            self.deliver(messages)?;
        }
        Ok(Response::new(pb::StepResponse {}))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
        let certs = request.peer_certs();
        let result = self
            .receive_snapshot(request.into_inner(), certs.as_deref().map(Vec::as_slice))
            .await;
        let outcome = if result.is_ok() { "ok" } else { "failed" };
        metrics::RAFT_SNAPSHOTS
            .with_label_values(&["received", outcome])
            .inc();
        if let Err(status) = &result {
            tracing::warn!(%status, "snapshot refused");
        }
        result.map(|bytes| Response::new(pb::InstallSnapshotResponse { bytes }))
    }
}

impl PeerService {
    /// The batch's messages, once its sender is known to be a member (the member its client
    /// certificate names, with mutual TLS) and each message to come from it. PERMISSION_DENIED
    /// otherwise; INVALID_ARGUMENT for a message that does not decode.
    fn decode(
        &self,
        batch: &pb::RaftBatch,
        certs: Option<&[CertificateDer<'_>]>,
    ) -> Result<Vec<Message>, Status> {
        if !self.members.contains(batch.from) {
            return Err(Status::permission_denied(format!(
                "member {} is not in this group",
                batch.from
            )));
        }
        if self.bind_certificates {
            peer_identity::check(certs, &self.members, batch.from)?;
        }
        batch
            .messages
            .iter()
            .map(|bytes| {
                let message = Message::decode(bytes.as_slice()).map_err(|e| {
                    Status::invalid_argument(format!("raft message does not decode: {e}"))
                })?;
                // raft-rs forwards a leadership transfer asked of a follower with the
                // transferee as `from`: the one message a member sends in another's name.
                if message.from != batch.from
                    && message.get_msg_type() != MessageType::MsgTransferLeader
                {
                    return Err(Status::permission_denied(format!(
                        "a message from member {} in a batch from member {}",
                        message.from, batch.from
                    )));
                }
                Ok(message)
            })
            .collect()
    }

    /// Receives a snapshot stream into a file, then hands its `MsgSnapshot` to the node;
    /// the bytes received.
    async fn receive_snapshot(
        &self,
        mut stream: Streaming<pb::SnapshotChunk>,
        certs: Option<&[CertificateDer<'_>]>,
    ) -> Result<u64, Status> {
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("an empty snapshot stream"))?;
        let messages = self.decode(
            &pb::RaftBatch {
                from: first.from,
                messages: vec![first.message.clone()],
            },
            certs,
        )?;
        let message = messages.into_iter().next().unwrap_or_default();
        if message.get_msg_type() != MessageType::MsgSnapshot
            || message.get_snapshot().data.as_slice() != snapshot::MARKER
        {
            return Err(Status::invalid_argument(
                "the first chunk does not carry a streamed MsgSnapshot",
            ));
        }
        let meta = message.get_snapshot().get_metadata();
        let (index, term) = (meta.index, meta.term);
        let dir = self.snapshot_dir.clone();
        let from = first.from;
        let mut receiver =
            tokio::task::spawn_blocking(move || snapshot::Receiver::start(&dir, from))
                .await
                .map_err(|e| Status::internal(e.to_string()))??;
        let mut chunk = first;
        loop {
            let last = chunk.last;
            // File writes and the final fsync off the async threads.
            let (back, written) = tokio::task::spawn_blocking(move || {
                let written = receiver.chunk(&chunk, index, term);
                (receiver, written)
            })
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
            receiver = back;
            written?;
            if last {
                break;
            }
            chunk = stream.message().await?.ok_or_else(|| {
                Status::data_loss("the snapshot stream ended before its last chunk")
            })?;
        }
        self.deliver(vec![message])?;
        Ok(receiver.received())
    }

    fn deliver(&self, messages: Vec<Message>) -> Result<(), Status> {
        self.node
            .send(Network::Step(messages))
            .map_err(|_| Status::unavailable("this master's raft node stopped"))
    }
}

#[cfg(test)]
mod tests {
    use super::with_port;

    #[test]
    fn peer_addresses_take_the_peer_port() {
        assert_eq!(
            with_port("https://symcluster-master-0.peers:7700", 7710).as_deref(),
            Some("https://symcluster-master-0.peers:7710")
        );
        assert_eq!(
            with_port("http://127.0.0.1:7700", 7710).as_deref(),
            Some("http://127.0.0.1:7710")
        );
        assert_eq!(
            with_port("http://[::1]:7700", 7710).as_deref(),
            Some("http://[::1]:7710")
        );
        assert_eq!(with_port("not a uri", 7710), None);
    }
}
