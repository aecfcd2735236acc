//! The workers connected to this master (the leader): slots, the jobs each holds, the lease
//! stream to each, the last heartbeat and cache counters. Leader-local, never replicated:
//! workers register again with a new leader.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use prost::Message;
use symcluster_proto::v1;
use tokio::sync::mpsc;

/// The most leases a worker may hold waiting for a slot, per slot (`RegisterRequest.prefetch`
/// is cut to this).
pub const MAX_PREFETCH_PER_SLOT: u32 = 4;

/// A lease on its way to a worker's stream: the `Lease` without its job, and the job's spec
/// as the index stores it (an encoded `JobSpec`, up to 16 MiB). The spec is decoded by the
/// worker's stream task ([`OutgoingLease::into_lease`]), not under the scheduler's lock on
/// the Raft thread that applies the lease.
#[derive(Debug)]
pub struct OutgoingLease {
    /// The lease, `job` empty.
    pub lease: v1::Lease,
    /// The encoded `JobSpec`; `None` when the index holds none.
    pub spec: Option<Vec<u8>>,
}

impl OutgoingLease {
    /// The lease with its job. A spec that does not decode (which the admission check makes
    /// impossible for a committed job) is logged and sent without a job: the worker fails the
    /// attempt as having no payload, and the job's attempts run out instead of it hanging.
    pub fn into_lease(self) -> v1::Lease {
        let mut lease = self.lease;
        lease.job = self
            .spec
            .and_then(|bytes| match v1::JobSpec::decode(bytes.as_slice()) {
                Ok(spec) => Some(spec),
                Err(error) => {
                    tracing::error!(%error, "a leased job's stored spec does not decode");
                    None
                }
            });
        lease
    }
}

/// A worker as the master sees it.
#[derive(Debug)]
pub struct WorkerEntry {
    /// Job slots.
    pub slots: u32,
    /// Leases it may hold beyond `slots`, waiting for a slot ([`MAX_PREFETCH_PER_SLOT`] per
    /// slot at most).
    pub prefetch: u32,
    /// Jobs leased to it (or being leased).
    pub busy: HashSet<String>,
    /// Its lease stream, while open.
    pub sender: Option<mpsc::Sender<OutgoingLease>>,
    /// When it last sent a heartbeat (or registered).
    pub last_heartbeat: Instant,
    /// Its cache counters, from its last heartbeat.
    pub cache: v1::CacheStats,
    /// The name of the token that registered it: only that token (or an admin's) may act as
    /// this worker.
    pub owner: Arc<str>,
    /// Stopping (`WorkerApi.Drain`): no more leases.
    pub draining: bool,
    /// Jobs running on it (holding a slot), from its last heartbeat.
    pub running: u32,
}

impl WorkerEntry {
    /// A worker with `slots` slots and room for `prefetch` more leases, registered by token
    /// `owner`, and no stream yet.
    pub fn new(slots: u32, prefetch: u32, owner: Arc<str>) -> Self {
        let mut entry = WorkerEntry {
            slots: 1,
            prefetch: 0,
            busy: HashSet::new(),
            sender: None,
            last_heartbeat: Instant::now(),
            cache: v1::CacheStats::default(),
            owner,
            draining: false,
            running: 0,
        };
        entry.set_slots(slots, prefetch);
        entry
    }

    /// Sets its slots (at least 1) and prefetch (at most [`MAX_PREFETCH_PER_SLOT`] per slot).
    pub fn set_slots(&mut self, slots: u32, prefetch: u32) {
        self.slots = slots.max(1);
        self.prefetch = prefetch.min(self.slots.saturating_mul(MAX_PREFETCH_PER_SLOT));
    }

    /// Whether its lease stream is open.
    pub fn connected(&self) -> bool {
        self.sender.as_ref().is_some_and(|s| !s.is_closed())
    }

    /// The leases it may hold: its slots and its prefetch.
    pub fn capacity(&self) -> u32 {
        self.slots.saturating_add(self.prefetch)
    }

    /// Connected, not draining, with room for a lease (a free slot, or room in its prefetch).
    pub fn free(&self) -> bool {
        !self.draining && self.connected() && (self.busy.len() as u32) < self.capacity()
    }

    /// Connected, not draining, with a free slot (fewer leases than slots): a job leased to it
    /// starts at once.
    pub fn has_free_slot(&self) -> bool {
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
            prefetch: self.prefetch,
            last_heartbeat_ms_ago: self.last_heartbeat.elapsed().as_millis() as u64,
            connected: self.connected(),
            cache_hits: self.cache.hits,
            cache_misses: self.cache.misses,
            draining: self.draining,
            running: self.running,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_adds_room_for_leases_up_to_four_per_slot() {
        let mut worker = WorkerEntry::new(2, 3, "token".into());
        assert_eq!(
            (worker.slots, worker.prefetch, worker.capacity()),
            (2, 3, 5)
        );
        worker.set_slots(0, 100);
        assert_eq!(
            (worker.slots, worker.prefetch, worker.capacity()),
            (1, 4, 5)
        );

        let (sender, _receiver) = mpsc::channel(1);
        worker.sender = Some(sender);
        for job in 0..5 {
            assert!(worker.free(), "room for lease {job}");
            worker.busy.insert(job.to_string());
        }
        assert!(!worker.free());
        assert_eq!(worker.status("w").busy, 5);
    }
}
