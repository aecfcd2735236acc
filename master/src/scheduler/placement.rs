//! Which worker takes which job: rendezvous hashing on the job's routing key, falling back to
//! the least-loaded worker, or a pseudo-random worker (the baseline affinity is measured against).
//!
//! Each job has a routing key (its main debug id, or its source map key). Among connected
//! workers, the one with the highest rendezvous score `hash(key, worker id)` is the job's
//! preferred worker: the same key lands on the same worker while the set of workers is stable,
//! so its caches already hold the files.

use std::collections::BTreeMap;
use std::hash::Hasher;

use super::workers::WorkerEntry;

/// How jobs pick workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    /// Rendezvous hashing on the routing key, falling back to the least-loaded worker.
    Affinity,
    /// A pseudo-random worker with a free slot (the baseline affinity is measured against).
    Random,
}

/// Rendezvous (highest random weight) score of a worker for a routing key.
pub fn rendezvous_score(key: &str, worker_id: &str) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(key.as_bytes());
    h.write_u8(0);
    h.write(worker_id.as_bytes());
    // FNV mixes the tail weakly; finish with a 64-bit avalanche (splitmix64's finalizer).
    let mut z = h.finish();
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The connected worker with the highest score for `key`.
pub fn preferred<'a>(
    workers: &'a BTreeMap<String, WorkerEntry>,
    key: &str,
) -> Option<(&'a String, &'a WorkerEntry)> {
    workers
        .iter()
        .filter(|(_, w)| w.connected())
        .max_by_key(|(id, _)| rendezvous_score(key, id))
}

/// The worker for a job, first where it starts at once: its preferred worker when that one has
/// a free slot, else the least-loaded worker with a free slot; only when no worker has a free
/// slot, its preferred worker's prefetch, else the least-loaded prefetch with room. Returns
/// `(worker, affine)`.
pub fn pick_worker(workers: &BTreeMap<String, WorkerEntry>, key: &str) -> Option<(String, bool)> {
    let (id, entry) = preferred(workers, key)?;
    for room in [WorkerEntry::has_free_slot, WorkerEntry::free] {
        if room(entry) {
            return Some((id.clone(), true));
        }
        let least_loaded = workers
            .iter()
            .filter(|(_, w)| room(w))
            .min_by(|(a_id, a), (b_id, b)| a.load().total_cmp(&b.load()).then(a_id.cmp(b_id)));
        if let Some((other, _)) = least_loaded {
            return Some((other.clone(), false));
        }
    }
    None
}

/// A pseudo-random worker with a free slot, else with room in its prefetch (seeded by the
/// lease count: deterministic per run). `affine` still reports whether it happens to be the
/// preferred worker.
pub fn pick_random(
    workers: &BTreeMap<String, WorkerEntry>,
    seed: u64,
    key: &str,
) -> Option<(String, bool)> {
    let with = |room: fn(&WorkerEntry) -> bool| -> Vec<&String> {
        workers
            .iter()
            .filter(|(_, w)| room(w))
            .map(|(id, _)| id)
            .collect()
    };
    let mut free = with(WorkerEntry::has_free_slot);
    if free.is_empty() {
        free = with(WorkerEntry::free);
    }
    if free.is_empty() {
        return None;
    }
    let pick = free[(rendezvous_score(&seed.to_string(), "random") % free.len() as u64) as usize];
    let affine = preferred(workers, key).map(|(id, _)| id) == Some(pick);
    Some((pick.clone(), affine))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers `w1`, `w2` with 1 slot and 2 prefetch each, holding `held` leases, and the
    /// receiving ends of their lease streams (they count as connected while those live).
    type Streams = Vec<tokio::sync::mpsc::Receiver<crate::scheduler::OutgoingLease>>;
    fn workers(held: [usize; 2]) -> (BTreeMap<String, WorkerEntry>, Streams) {
        let (mut workers, mut streams) = (BTreeMap::new(), Vec::new());
        for (id, held) in ["w1", "w2"].into_iter().zip(held) {
            let mut worker = WorkerEntry::new(1, 2, "token".into());
            let (sender, receiver) = tokio::sync::mpsc::channel(4);
            streams.push(receiver);
            worker.sender = Some(sender);
            worker.busy = (0..held).map(|i| format!("{id}-{i}")).collect();
            workers.insert(id.to_owned(), worker);
        }
        (workers, streams)
    }

    #[test]
    fn a_free_slot_anywhere_comes_before_a_prefetch() {
        // A key that prefers w1.
        let key = (0..)
            .map(|k| format!("key-{k}"))
            .find(|k| rendezvous_score(k, "w1") > rendezvous_score(k, "w2"))
            .unwrap();
        assert_eq!(
            pick_worker(&workers([0, 0]).0, &key),
            Some(("w1".into(), true))
        );
        // w1's slot is taken: w2's free slot wins over w1's prefetch.
        assert_eq!(
            pick_worker(&workers([1, 0]).0, &key),
            Some(("w2".into(), false))
        );
        // No free slot anywhere: the preferred worker's prefetch, then the other's.
        assert_eq!(
            pick_worker(&workers([1, 1]).0, &key),
            Some(("w1".into(), true))
        );
        assert_eq!(
            pick_worker(&workers([3, 2]).0, &key),
            Some(("w2".into(), false))
        );
        assert_eq!(pick_worker(&workers([3, 3]).0, &key), None);
        // Random routing takes free slots first too.
        for seed in 0..20 {
            let (picked, _) = pick_random(&workers([1, 0]).0, seed, &key).unwrap();
            assert_eq!(picked, "w2");
        }
    }

    #[test]
    fn rendezvous_spreads_keys_and_is_stable() {
        let workers = ["w1", "w2", "w3"];
        let mut counts = [0usize; 3];
        for k in 0..3000 {
            let key = format!("debug-id-{k}");
            let best = (0..3)
                .max_by_key(|&i| rendezvous_score(&key, workers[i]))
                .unwrap();
            counts[best] += 1;
            // Removing a worker that was not chosen never moves the key.
            let other = (best + 1) % 3;
            let remaining: Vec<usize> = (0..3).filter(|&i| i != other).collect();
            let again = *remaining
                .iter()
                .max_by_key(|&&i| rendezvous_score(&key, workers[i]))
                .unwrap();
            assert_eq!(again, best);
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven spread {counts:?}");
        }
    }
}
