//! The workers connected to this master (the leader): slots, the jobs each holds, the lease
//! stream to each, the last heartbeat and cache counters. Leader-local, never replicated:
//! workers register again with a new leader.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use symcluster_proto::v1;
use tokio::sync::mpsc;

/// A worker as the master sees it.
#[derive(Debug)]
pub struct WorkerEntry {
    /// Job slots.
    pub slots: u32,
    /// Jobs leased to it (or being leased).
    pub busy: HashSet<String>,
    /// Its lease stream, while open.
    pub sender: Option<mpsc::Sender<v1::Lease>>,
    /// When it last sent a heartbeat (or registered).
    pub last_heartbeat: Instant,
    /// Its cache counters, from its last heartbeat.
    pub cache: v1::CacheStats,
    /// The name of the token that registered it: only that token (or an admin's) may act as
    /// this worker.
    pub owner: Arc<str>,
    /// Stopping (`WorkerApi.Drain`): no more leases.
    pub draining: bool,
}

impl WorkerEntry {
    /// A worker with `slots` slots, registered by token `owner`, and no stream yet.
    pub fn new(slots: u32, owner: Arc<str>) -> Self {
        WorkerEntry {
            slots: slots.max(1),
            busy: HashSet::new(),
            sender: None,
            last_heartbeat: Instant::now(),
            cache: v1::CacheStats::default(),
            owner,
            draining: false,
        }
    }

    /// Whether its lease stream is open.
    pub fn connected(&self) -> bool {
        self.sender.as_ref().is_some_and(|s| !s.is_closed())
    }

    /// Connected, not draining, with a free slot.
    pub fn free(&self) -> bool {
        !self.draining && self.connected() && (self.busy.len() as u32) < self.slots
    }

    /// Busy slots over slots.
    pub fn load(&self) -> f64 {
        self.busy.len() as f64 / self.slots as f64
    }

    /// The API view.
    pub fn status(&self, worker_id: &str) -> v1::WorkerStatus {
        v1::WorkerStatus {
            worker_id: worker_id.to_owned(),
            slots: self.slots,
            busy: self.busy.len() as u32,
            last_heartbeat_ms_ago: self.last_heartbeat.elapsed().as_millis() as u64,
            connected: self.connected(),
            cache_hits: self.cache.hits,
            cache_misses: self.cache.misses,
            draining: self.draining,
        }
    }
}
