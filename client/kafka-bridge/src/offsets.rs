//! Which offsets may be committed: per partition, every message before the commit point is
//! done (its result published, or it went to the dead-letter topic).
//!
//! Messages finish out of order (jobs take different times), but a Kafka commit says "every
//! message before this offset is handled", so the commit point of a partition is its lowest
//! offset still in flight, or one past the highest offset taken when none is. A bridge that
//! stops between two commits makes the next consumer read again from the last commit: those
//! messages are submitted again under the same job ids, which the master keeps once
//! (at-least-once delivery, exactly-once jobs).

use std::collections::{BTreeMap, BTreeSet};

/// A partition: topic and partition number.
pub type Partition = (String, i32);

#[derive(Debug, Default)]
struct State {
    in_flight: BTreeSet<i64>,
    /// One past the highest offset taken.
    next: i64,
    /// The commit point last handed out by [`Offsets::to_commit`].
    committed: Option<i64>,
}

impl State {
    fn point(&self) -> i64 {
        self.in_flight.first().copied().unwrap_or(self.next)
    }
}

/// Offsets taken and done, per partition.
#[derive(Debug, Default)]
pub struct Offsets {
    partitions: BTreeMap<Partition, State>,
}

impl Offsets {
    /// The message at `offset` of `partition` is being handled.
    pub fn take(&mut self, partition: &Partition, offset: i64) {
        let state = self.partitions.entry(partition.clone()).or_default();
        state.in_flight.insert(offset);
        state.next = state.next.max(offset + 1);
    }

    /// The message at `offset` of `partition` is done.
    pub fn done(&mut self, partition: &Partition, offset: i64) {
        if let Some(state) = self.partitions.get_mut(partition) {
            state.in_flight.remove(&offset);
        }
    }

    /// Messages taken and not done yet, over every partition.
    pub fn in_flight(&self) -> usize {
        self.partitions.values().map(|s| s.in_flight.len()).sum()
    }

    /// The commit points (`(partition, offset)`: the next offset to read) that moved since the
    /// last call, marked as handed out.
    pub fn to_commit(&mut self) -> Vec<(Partition, i64)> {
        let mut out = Vec::new();
        for (partition, state) in &mut self.partitions {
            let point = state.point();
            if state.committed != Some(point) {
                state.committed = Some(point);
                out.push((partition.clone(), point));
            }
        }
        out
    }

    /// The commit points of `partitions` (those taken from at all), whether moved or not.
    pub fn points(&self, partitions: &[Partition]) -> Vec<(Partition, i64)> {
        partitions
            .iter()
            .filter_map(|p| self.partitions.get(p).map(|s| (p.clone(), s.point())))
            .collect()
    }

    /// The commit of `partition` failed: hand its point out again at the next
    /// [`Self::to_commit`].
    pub fn retry_commit(&mut self, partition: &Partition) {
        if let Some(state) = self.partitions.get_mut(partition) {
            state.committed = None;
        }
    }

    /// Forgets `partition` (revoked in a rebalance): another consumer reads it from its last
    /// commit.
    pub fn forget(&mut self, partition: &Partition) {
        self.partitions.remove(partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(n: i32) -> Partition {
        ("reports".into(), n)
    }

    #[test]
    fn the_commit_point_waits_for_the_oldest_message_in_flight() {
        let mut offsets = Offsets::default();
        for o in 10..15 {
            offsets.take(&p(0), o);
        }
        offsets.take(&p(1), 0);
        assert_eq!(offsets.to_commit(), [(p(0), 10), (p(1), 0)]);
        offsets.done(&p(0), 12);
        offsets.done(&p(0), 11);
        assert_eq!(offsets.to_commit(), [], "10 is still in flight");
        offsets.done(&p(0), 10);
        assert_eq!(offsets.to_commit(), [(p(0), 13)]);
        offsets.done(&p(0), 13);
        offsets.done(&p(0), 14);
        offsets.done(&p(1), 0);
        assert_eq!(offsets.to_commit(), [(p(0), 15), (p(1), 1)]);
        assert_eq!(offsets.in_flight(), 0);
        offsets.forget(&p(1));
        offsets.take(&p(1), 7);
        assert_eq!(offsets.to_commit(), [(p(1), 7)]);
    }

    proptest! {
        /// Whatever order messages finish in, a commit point never passes a message that is
        /// not done, and once all are done it is one past the last.
        #[test]
        fn commits_never_pass_an_unfinished_message(order in Just((0..40i64).collect::<Vec<_>>()).prop_shuffle()) {
            let mut offsets = Offsets::default();
            for o in 0..40 {
                offsets.take(&p(0), o);
            }
            let mut done = BTreeSet::new();
            for o in order {
                offsets.done(&p(0), o);
                done.insert(o);
                for (_, point) in offsets.to_commit() {
                    prop_assert!((0..point).all(|x| done.contains(&x)));
                }
            }
            offsets.take(&p(0), 40);
            offsets.done(&p(0), 40);
            prop_assert_eq!(offsets.to_commit(), vec![(p(0), 41)]);
        }
    }
}
