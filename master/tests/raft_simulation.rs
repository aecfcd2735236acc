//! A seeded simulation of the Raft core as the master drives it: three raft-rs members handling
//! each Ready in the master's order (messages → snapshot → append + HardState → persisted
//! messages → advance → light ready → apply the committed entries of both), over a network that
//! drops, reorders and duplicates messages, with members crashing and restarting.
//!
//! A crash loses what the master does not fsync: the applied state, and every commit index not
//! written with a must-sync Ready (the master keeps a commit index alone in memory); it keeps
//! the log and the HardState written with must-sync readies. The check, over many seeds: no two
//! members ever apply different commands at the same log index, and every command the leader
//! applied (acknowledged to a client) is applied, at the same index, by every member at the end.
//!
//! raft-rs's `MemStorage` stands in for the redb store here (the store itself is tested on disk
//! in `raft::storage` and by the end-to-end tests), so that thousands of runs take seconds.

use std::collections::{BTreeMap, HashMap};

use raft::prelude::{ConfState, Entry, EntryType, Message};
use raft::storage::MemStorage;
use raft::{Config, RawNode, StateRole};

/// xorshift64*: a tiny deterministic generator, so a failing seed replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Member {
    id: u64,
    raw: Option<RawNode<MemStorage>>,
    storage: MemStorage,
    /// Commit index as last written with fsync (a crash goes back to it).
    synced_commit: u64,
    /// The state machine: (index, data) applied, in order. Lost on a crash.
    applied: Vec<(u64, Vec<u8>)>,
}

/// The masters' own settings (10 ticks to an election, heartbeats every 2, as by default).
fn config(id: u64) -> Config {
    symcluster_master::raft::raft_settings(id, 10, 2, 0)
}

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

impl Member {
    fn new(id: u64) -> Self {
        let storage = MemStorage::new_with_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
        let raw = RawNode::new(&config(id), storage.clone(), &logger()).unwrap();
        Member {
            id,
            raw: Some(raw),
            storage,
            synced_commit: 0,
            applied: Vec::new(),
        }
    }

    fn crash(&mut self) {
        self.raw = None;
        self.applied.clear();
        let mut core = self.storage.wl();
        let commit = self.synced_commit.min(core.hard_state().commit);
        core.mut_hard_state().commit = commit;
    }

    fn restart(&mut self) {
        self.raw = Some(RawNode::new(&config(self.id), self.storage.clone(), &logger()).unwrap());
    }

    fn is_leader(&self) -> bool {
        self.raw
            .as_ref()
            .is_some_and(|r| r.raft.state == StateRole::Leader)
    }

    fn apply(
        &mut self,
        entries: &[Entry],
        acked: &mut Vec<(u64, Vec<u8>)>,
        global: &mut BTreeMap<u64, Vec<u8>>,
    ) {
        let leader = self.is_leader();
        for e in entries {
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            let data = e.data.to_vec();
            if let Some(last) = self.applied.last() {
                assert!(
                    e.index > last.0,
                    "member {} applied {} after {}",
                    self.id,
                    e.index,
                    last.0
                );
            }
            match global.get(&e.index) {
                Some(existing) => assert_eq!(
                    existing, &data,
                    "member {} applied a different command at index {}",
                    self.id, e.index
                ),
                None => {
                    global.insert(e.index, data.clone());
                }
            }
            if leader && data.starts_with(&self.id.to_le_bytes()) {
                acked.push((e.index, data.clone()));
            }
            self.applied.push((e.index, data));
        }
    }

    /// One Ready, in the master's order.
    fn on_ready(
        &mut self,
        network: &mut Vec<Message>,
        acked: &mut Vec<(u64, Vec<u8>)>,
        global: &mut BTreeMap<u64, Vec<u8>>,
    ) {
        let Some(raw) = self.raw.as_mut() else { return };
        if !raw.has_ready() {
            return;
        }
        let mut ready = raw.ready();
        network.extend(ready.take_messages());
        assert!(
            ready.snapshot().is_empty(),
            "no compaction in this simulation"
        );
        let mut committed = ready.take_committed_entries();
        let must_sync = ready.must_sync();
        let entries = ready.take_entries();
        let hard_state = ready.hs().cloned();
        let mut core = self.storage.wl();
        core.append(&entries).unwrap();
        if let Some(hs) = hard_state {
            // Written (and fsynced) only with a must-sync Ready; a commit alone is not.
            if must_sync || !entries.is_empty() {
                self.synced_commit = hs.commit;
            }
            core.set_hardstate(hs);
        }
        drop(core);
        let raw = self.raw.as_mut().unwrap();
        network.extend(ready.take_persisted_messages());
        let mut light = raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            // Kept in memory only.
            self.storage.wl().mut_hard_state().set_commit(commit);
        }
        network.extend(light.take_messages());
        committed.extend(light.take_committed_entries());
        self.apply(&committed, acked, global);
        self.raw.as_mut().unwrap().advance_apply();
    }
}

fn run(seed: u64, steps: usize) -> (usize, usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut members: Vec<Member> = (1..=3).map(Member::new).collect();
    let mut network: Vec<Message> = Vec::new();
    let mut acked: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut global: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut proposals = 0u64;
    let mut crashes = 0;
    let mut down_since: HashMap<usize, usize> = HashMap::new();

    for step in 0..steps + 3000 {
        let faults = step < steps;
        // Once the faults stop, no new proposals: the network drains and members catch up.
        let roll = if faults {
            rng.below(100)
        } else {
            rng.below(65)
        };
        match roll {
            0..=44 if !network.is_empty() => {
                let m = network.swap_remove(rng.below(network.len() as u64) as usize);
                if faults && rng.chance(10) {
                    continue; // dropped
                }
                if faults && rng.chance(3) {
                    network.push(m.clone()); // duplicated
                }
                if let Some(raw) = members[m.to as usize - 1].raw.as_mut() {
                    let _ = raw.step(m);
                }
            }
            45..=64 => {
                for member in members.iter_mut() {
                    if let Some(raw) = member.raw.as_mut() {
                        raw.tick();
                    }
                }
            }
            65..=84 => {
                let i = rng.below(3) as usize;
                if members[i].is_leader() {
                    proposals += 1;
                    let mut data = members[i].id.to_le_bytes().to_vec();
                    data.extend(proposals.to_le_bytes());
                    let _ = members[i].raw.as_mut().unwrap().propose(vec![], data);
                }
            }
            85..=86 if faults && down_since.is_empty() => {
                let i = rng.below(3) as usize;
                members[i].crash();
                down_since.insert(i, step);
                crashes += 1;
                // Messages to the crashed member are lost with it.
                network.retain(|m| m.to != members[i].id);
            }
            _ => {}
        }
        // Restart crashed members after a while (and always once the faults stop).
        let restart: Vec<usize> = down_since
            .iter()
            .filter(|(_, since)| !faults || step - **since > 200)
            .map(|(i, _)| *i)
            .collect();
        for i in restart {
            members[i].restart();
            down_since.remove(&i);
        }
        for member in members.iter_mut() {
            member.on_ready(&mut network, &mut acked, &mut global);
        }
    }

    // Healed and quiet: every acknowledged command is applied by every member at its index.
    for member in &members {
        let applied: BTreeMap<u64, &Vec<u8>> =
            member.applied.iter().map(|(i, d)| (*i, d)).collect();
        for (index, data) in &acked {
            assert_eq!(
                applied.get(index),
                Some(&data),
                "seed {seed}: member {} lost acknowledged command at index {index}",
                member.id
            );
        }
    }
    (acked.len(), crashes)
}

#[test]
fn committed_commands_are_never_lost_or_reordered() {
    let mut total_acked = 0;
    let mut total_crashes = 0;
    for seed in 0..300 {
        let (acked, crashes) = run(seed, 3000);
        total_acked += acked;
        total_crashes += crashes;
    }
    eprintln!("300 seeds: {total_acked} acknowledged commands, {total_crashes} crashes");
    // The runs did make progress through faults, or the checks above checked nothing.
    assert!(
        total_acked > 10_000,
        "only {total_acked} commands acknowledged"
    );
    assert!(total_crashes > 100, "only {total_crashes} crashes");
}
