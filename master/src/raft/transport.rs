//! Raft messages between masters, over tonic (`symcluster.cluster.v1.Peer`).
//!
//! Sending: one task per peer, in order, batching whatever is waiting into one `RaftBatch`, sent
//! as one message of a long-lived `StepStream` call (no call set-up, headers or response per
//! batch). A snapshot goes alone in a `Step` call, so that the node learns whether it arrived.
//! A broken stream or a failed call tells the node the peer is unreachable (raft-rs then probes
//! it gently) and drops the messages queued for it: Raft resends what matters. HTTP/2 keepalive
//! (1 s, 2 s timeout) notices a peer cut off by the network. Receiving: [`PeerService`] decodes
//! each message and hands each batch to the node's channel.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::time::Duration;

use prost011::Message as _;
use raft::prelude::{Message, MessageType};
use symcluster_client::BearerToken;
use symcluster_proto::cluster::v1::{self as pb, peer_client::PeerClient, peer_server::Peer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status, Streaming};

use super::{Input, RaftConfig};

/// Largest Raft batch (a snapshot of a big index travels in one message), bytes.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The sending side: a queue per peer.
pub struct Transport {
    peers: HashMap<u64, mpsc::UnboundedSender<Message>>,
}

impl Transport {
    /// Starts one sending task per peer on `runtime`.
    pub fn start(
        config: &RaftConfig,
        node: Sender<Input>,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let mut peers = HashMap::new();
        let token = BearerToken::new(&config.token).ok();
        for (&id, address) in &config.members {
            if id == config.id {
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            peers.insert(id, tx);
            let endpoint = Endpoint::from_shared(address.clone())
                .ok()
                .and_then(|e| config.tls.apply(e, address).ok());
            let (node, token, from) = (node.clone(), token.clone(), config.id);
            match (endpoint, token) {
                (Some(endpoint), Some(token)) => {
                    let _guard = runtime.enter();
                    let channel = endpoint
                        .connect_timeout(Duration::from_millis(500))
                        .tcp_nodelay(true)
                        .http2_keep_alive_interval(Duration::from_secs(1))
                        .keep_alive_timeout(Duration::from_secs(2))
                        .keep_alive_while_idle(true)
                        .connect_lazy();
                    let client = PeerClient::new(InterceptedService::new(channel, token))
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES);
                    runtime.spawn(send_loop(from, id, client, rx, node));
                }
                _ => tracing::error!(
                    peer = id,
                    address,
                    "invalid peer address, TLS settings or token; not sending to it"
                ),
            }
        }
        Transport { peers }
    }

    /// Queues `messages` for their peers.
    pub fn send(&self, messages: Vec<Message>) {
        for m in messages {
            if let Some(peer) = self.peers.get(&m.to) {
                let _ = peer.send(m);
            }
        }
    }
}

type Client = PeerClient<InterceptedService<Channel, BearerToken>>;

/// Batches wanted in flight on a stream before the sender waits (HTTP/2 flow control bounds
/// the bytes).
const STREAM_BUFFER: usize = 64;

async fn send_loop(
    from: u64,
    to: u64,
    client: Client,
    mut rx: mpsc::UnboundedReceiver<Message>,
    node: Sender<Input>,
) {
    let mut stream: Option<BatchStream> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        // Snapshots go alone, by `Step`, after what came before them (by the stream).
        let (snapshots, messages): (Vec<Message>, Vec<Message>) = batch
            .into_iter()
            .partition(|m| m.get_msg_type() == MessageType::MsgSnapshot);
        // A stream whose call ended has lost whatever was queued on it.
        let mut ok = !stream.as_ref().is_some_and(BatchStream::is_broken);
        if ok && !messages.is_empty() {
            let open = stream.get_or_insert_with(|| BatchStream::open(client.clone()));
            ok = open.send(from, &messages).await;
        }
        for snapshot in snapshots {
            if ok {
                ok = send_snapshot(&mut client.clone(), from, &snapshot).await;
            }
            let _ = node.send(Input::SnapshotSent { peer: to, ok });
        }
        if !ok {
            tracing::debug!(peer = to, "raft peer unreachable");
            stream = None;
            let _ = node.send(Input::Unreachable(to));
            // Raft resends what matters once the peer answers again.
            while rx.try_recv().is_ok() {}
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

/// Sends one snapshot by `Step`; whether it arrived (60 s at most).
async fn send_snapshot(client: &mut Client, from: u64, snapshot: &Message) -> bool {
    let timeout = Duration::from_secs(60);
    let mut request = Request::new(pb::RaftBatch {
        from,
        messages: vec![snapshot.encode_to_vec()],
    });
    request.set_timeout(timeout);
    matches!(
        tokio::time::timeout(timeout, client.step(request)).await,
        Ok(Ok(_))
    )
}

/// The receiving side: `symcluster.cluster.v1.Peer`.
pub struct PeerService {
    node: std::sync::Mutex<Sender<Input>>,
    members: Vec<u64>,
}

impl PeerService {
    /// Hands received batches to the node's channel; accepts only `members`.
    pub fn new(node: Sender<Input>, members: Vec<u64>) -> Self {
        PeerService {
            node: std::sync::Mutex::new(node),
            members,
        }
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn step(
        &self,
        request: Request<pb::RaftBatch>,
    ) -> Result<Response<pb::StepResponse>, Status> {
        let messages = self.decode(&request.into_inner())?;
        self.deliver(messages)?;
        Ok(Response::new(pb::StepResponse {}))
    }

    async fn step_stream(
        &self,
        request: Request<Streaming<pb::RaftBatch>>,
    ) -> Result<Response<pb::StepResponse>, Status> {
        let mut stream = request.into_inner();
        while let Some(batch) = stream.message().await? {
            let messages = self.decode(&batch)?;
            self.deliver(messages)?;
        }
        Ok(Response::new(pb::StepResponse {}))
    }
}

impl PeerService {
    /// The batch's messages, once its sender is known to be a member.
    fn decode(&self, batch: &pb::RaftBatch) -> Result<Vec<Message>, Status> {
        if !self.members.contains(&batch.from) {
            return Err(Status::permission_denied(format!(
                "member {} is not in this group",
                batch.from
            )));
        }
        batch
            .messages
            .iter()
            .map(|bytes| {
                Message::decode(bytes.as_slice()).map_err(|e| {
                    Status::invalid_argument(format!("raft message does not decode: {e}"))
                })
            })
            .collect()
    }

    fn deliver(&self, messages: Vec<Message>) -> Result<(), Status> {
        self.node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Input::Step(messages))
            .map_err(|_| Status::unavailable("this master's raft node stopped"))
    }
}
