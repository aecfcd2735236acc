//! Raft messages between masters, over tonic (`symcluster.cluster.v1.Peer/Step`).
//!
//! Sending: one task per peer, in order, batching whatever is waiting into one `Step` call.
//! A failed call tells the node the peer is unreachable (raft-rs then probes it gently) and drops
//! the messages queued for it: Raft resends what matters. Receiving: [`PeerService`] decodes
//! each message and hands the batch to the node's channel.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::time::Duration;

use prost011::Message as _;
use raft::prelude::{Message, MessageType};
use symcluster_client::BearerToken;
use symcluster_proto::cluster::v1::{self as pb, peer_client::PeerClient, peer_server::Peer};
use tokio::sync::mpsc;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

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
            let endpoint = Endpoint::from_shared(address.clone());
            let (node, token, from) = (node.clone(), token.clone(), config.id);
            match (endpoint, token) {
                (Ok(endpoint), Some(token)) => {
                    let _guard = runtime.enter();
                    let channel = endpoint
                        .connect_timeout(Duration::from_millis(500))
                        .tcp_nodelay(true)
                        .connect_lazy();
                    let client = PeerClient::new(InterceptedService::new(channel, token))
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES);
                    runtime.spawn(send_loop(from, id, client, rx, node));
                }
                _ => tracing::error!(
                    peer = id,
                    address,
                    "invalid peer address or token; not sending to it"
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

async fn send_loop(
    from: u64,
    to: u64,
    mut client: Client,
    mut rx: mpsc::UnboundedReceiver<Message>,
    node: Sender<Input>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let snapshot = batch
            .iter()
            .any(|m| m.get_msg_type() == MessageType::MsgSnapshot);
        let request = pb::RaftBatch {
            from,
            messages: batch.iter().map(|m| m.encode_to_vec()).collect(),
        };
        let timeout = if snapshot {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(2)
        };
        let mut request = Request::new(request);
        request.set_timeout(timeout);
        let result = tokio::time::timeout(timeout, client.step(request)).await;
        let ok = matches!(result, Ok(Ok(_)));
        if !ok {
            tracing::debug!(peer = to, "raft peer unreachable");
            let _ = node.send(Input::Unreachable(to));
            // Raft resends what matters once the peer answers again.
            while rx.try_recv().is_ok() {}
        }
        if snapshot {
            let _ = node.send(Input::SnapshotSent { peer: to, ok });
        }
        if !ok {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
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
        let batch = request.into_inner();
        if !self.members.contains(&batch.from) {
            return Err(Status::permission_denied(format!(
                "member {} is not in this group",
                batch.from
            )));
        }
        let mut messages = Vec::with_capacity(batch.messages.len());
        for bytes in &batch.messages {
            let m = Message::decode(bytes.as_slice()).map_err(|e| {
                Status::invalid_argument(format!("raft message does not decode: {e}"))
            })?;
            messages.push(m);
        }
        self.node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Input::Step(messages))
            .map_err(|_| Status::unavailable("this master's raft node stopped"))?;
        Ok(Response::new(pb::StepResponse {}))
    }
}
