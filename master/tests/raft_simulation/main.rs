//! A seeded simulation of the master's real Raft member: each member is `raft::node::Node` (the
//! ready loop the master runs) over its real storage (segment files) and its real index (redb)
//! in a temporary directory, driven turn by turn (`Node::turn`) over a simulated network that
//! drops, delays, reorders and duplicates messages and cuts partitions, with members crashing
//! (the node and its files dropped without a clean stop, then opened again from disk),
//! snapshots streamed through the real snapshot files, and membership changes (a member added
//! with `--join` and promoted, a member removed).
//!
//! The check, for every seed: every command the leader acknowledged (its proposal answered
//! `Applied::Changed`) is in the index of every member at the end, and every member of the
//! final group holds the same index, byte for byte (the digest of every table, whose
//! `by_sequence` table is the order the submits were applied in).
//!
//! The seed fixes the workload, the network and the faults; raft-rs draws its randomized
//! election timeouts from its own generator, so a run is not replayed exactly. A crash here is
//! a process's: what was written reaches the file system (a machine's loss of unsynced writes
//! is covered by the segment log's torn-tail tests). The directories are on `/dev/shm` when it
//! exists (fsyncs on a disk would make a thousand runs take minutes; durability is not what
//! this checks).
//!
//! The modules: `sim.rs` is the simulated group; this file's seeded run proposes submits with
//! membership changes, and its single-step tests pin the ready loop's rules; `jobs.rs` runs
//! the whole job state machine (leases, requeues, completions, fails, resymbolicates, purges,
//! stale commands, lost answers, crashes at the master's failpoints) and checks every answer
//! and every index against `model.rs`, the job record as a sequential specification.

use raft::prelude::Message;
use symcluster_master::index::apply::Applied;
use symcluster_master::index::command;
use symcluster_master::raft::{Input, MemberChange, ProposeError};
use symcluster_proto::v1;
use tokio::sync::oneshot;

mod jobs;
mod model;
mod sim;

use sim::*;

/// Runs seed `seed` for `steps` turns of faults and load, then heals everything and checks.
fn run(seed: u64, steps: usize) -> Stats {
    let mut sim = Sim::new(seed);
    // Membership: member 4 joins at a third of the run; one of the original three leaves at
    // two thirds.
    let (join_at, leave_at) = (steps / 3, 2 * steps / 3);
    let mut left = None::<u64>;
    let mut last_leader = None;
    for step in 0..steps {
        let tick = step % 2 == 0;
        if sim.rng.chance(40) {
            sim.propose();
        }
        // Faults, one at a time, healed after a while.
        sim.isolate_now_and_then();
        sim.crash_now_and_then(true, |id| Some(id) != left);
        if step == join_at {
            let root = sim._root.path().to_owned();
            sim.members.push(Member::new(&root, 4, true));
        }
        // One change at a time: the last one answered (or lost with its leader) before the
        // next is asked; the group's configuration, as the leader holds it, says what is done.
        let answered = sim.changes.is_empty() || sim.change_done().is_some();
        let conf = sim.conf();
        if step >= join_at && answered && conf.as_ref().is_some_and(|c| !c.contains(&4)) {
            sim.changes.clear();
            sim.change(MemberChange::Add {
                id: 4,
                address: address(4),
            });
        }
        let four_votes = sim.voters().contains(&4);
        if step >= leave_at && four_votes && answered {
            let leader = sim.leader();
            let out = left.unwrap_or_else(|| (1..=3).find(|id| Some(*id) != leader).unwrap());
            if conf.as_ref().is_some_and(|c| c.contains(&out)) && Some(out) != leader {
                sim.changes.clear();
                if sim.change(MemberChange::Remove {
                    ids: vec![out],
                    force: false,
                }) {
                    left = Some(out);
                }
            } else if let Some(out) = left
                && conf.as_ref().is_some_and(|c| !c.contains(&out))
            {
                // Removed: stop it.
                sim.members.retain(|m| m.id != out);
            }
        }
        sim.turn(tick);
        let now = sim.leader();
        if now.is_some() && now != last_leader {
            sim.stats.leader_changes += 1;
            last_leader = now;
        }
    }
    // Heal: everyone up and connected; run until the group agrees.
    sim.isolated.clear();
    for m in &mut sim.members {
        if m.running.is_none() {
            m.start();
        }
    }
    let mut agreed = false;
    for _ in 0..4000 {
        sim.turn(true);
        if sim.pending.is_empty() && sim.agreed() {
            agreed = true;
            break;
        }
    }
    let voters = sim.voters();
    assert!(
        agreed,
        "seed {seed}: the group did not agree after healing (voters {voters:?})"
    );
    assert!(
        voters.contains(&4),
        "seed {seed}: member 4 never became a voter (voters {voters:?})"
    );
    eprintln!(
        "seed {seed}: {} acknowledged of {} proposed, voters {voters:?}, applied {:?}, {:?}",
        sim.acknowledged.len(),
        sim.next_job,
        sim.members
            .iter()
            .filter_map(|m| m.running.as_ref())
            .map(|r| r.index.applied().unwrap().0)
            .collect::<Vec<_>>(),
        sim.stats
    );
    for m in sim.members.iter().filter(|m| voters.contains(&m.id)) {
        let index = &m.running.as_ref().unwrap().index;
        for job in &sim.acknowledged {
            assert!(
                index.job(job, false).unwrap().is_some(),
                "seed {seed}: member {} lost acknowledged job {job}",
                m.id
            );
        }
    }
    sim.stats
}

#[test]
fn acknowledged_commands_survive_faults_snapshots_and_membership_changes_on_the_real_node() {
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let mut total = Stats::default();
    for seed in 1..=seeds {
        let stats = run(seed, 6000);
        total.snapshots += stats.snapshots;
        total.crashes += stats.crashes;
        total.partitions += stats.partitions;
        total.leader_changes += stats.leader_changes;
    }
    // The faults were exercised (every seed has a member joining, which takes a snapshot).
    assert!(total.snapshots >= seeds, "{total:?}");
    assert!(
        total.crashes >= seeds && total.partitions >= seeds,
        "{total:?}"
    );
    assert!(total.leader_changes > seeds, "{total:?}");
}

/// Every message sent reaches its member, in order, none lost: `rounds` times, each member
/// takes a turn (a tick when `tick`) and what it sent is delivered.
fn lossless(sim: &mut Sim, rounds: usize, tick: bool) {
    for _ in 0..rounds {
        for m in &mut sim.members {
            m.turn(tick);
        }
        deliver_all_but(sim, 0);
        for m in &mut sim.members {
            m.turn(false);
        }
    }
}

/// Lossless rounds with ticks until a member leads; its id.
fn elect(sim: &mut Sim) -> u64 {
    for _ in 0..200 {
        lossless(sim, 1, true);
        if let Some(leader) = sim.leader() {
            return leader;
        }
    }
    panic!("no leader elected");
}

/// A leader asked to remove itself the moment it is elected (before any follower answered its
/// first append, when raft-rs counts no follower as recently active) hands leadership to a
/// member that stays, which makes the change. Reproduces a CI failure of
/// `membership::the_group_grows_from_three_to_five_and_shrinks_back_under_load`, where the
/// leader answered "no member that stays is up" with every other member up.
#[test]
fn a_leader_just_elected_hands_leadership_over_when_asked_to_remove_itself() {
    let mut sim = Sim::new(7);
    let leader = elect(&mut sim);
    // Its first appends are sent and not yet answered: ask it now, and let only it take a turn.
    let (reply, mut answer) = oneshot::channel();
    sim.member(leader).unwrap().deliver(Input::ChangeMembers {
        change: MemberChange::Remove {
            ids: vec![leader],
            force: false,
        },
        reply,
    });
    sim.member(leader).unwrap().turn(false);
    match answer.try_recv() {
        Ok(Err(ProposeError::NotLeader { leader: None })) => {}
        other => panic!("member {leader} did not hand leadership over: {other:?}"),
    }
    // The member it handed over to leads; asked there, the change is made.
    let mut next = None;
    for _ in 0..200 {
        lossless(&mut sim, 1, true);
        next = sim.leader().filter(|l| *l != leader);
        if next.is_some() {
            break;
        }
    }
    let next = next.expect("leadership was not handed over");
    assert!(sim.change(MemberChange::Remove {
        ids: vec![leader],
        force: false,
    }));
    let mut done = None;
    for _ in 0..200 {
        lossless(&mut sim, 1, true);
        done = sim.change_done();
        if done.is_some() {
            break;
        }
    }
    assert_eq!(done, Some(true), "the removal of {leader} asked on {next}");
    let mut want: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    want.sort_unstable();
    assert_eq!(sim.voters(), want, "after removing {leader} on {next}");
}

/// Member `i` takes a turn (a tick when `tick`), then what was sent is delivered, except what
/// goes to or comes from member `cut`.
fn one_turn(sim: &mut Sim, i: usize, tick: bool, cut: u64) {
    sim.members[i].turn(tick);
    deliver_all_but(sim, cut);
}

/// Delivers every message sent, in order, except what goes to or comes from member `cut`
/// (0: none is cut).
fn deliver_all_but(sim: &mut Sim, cut: u64) {
    let sent: Vec<Message> = sim
        .members
        .iter()
        .flat_map(|m| std::mem::take(&mut *m.sent.lock().unwrap()))
        .collect();
    for m in sent {
        if m.from == cut || m.to == cut {
            continue;
        }
        if let Some(to) = sim.member(m.to) {
            to.deliver(Input::Step(vec![m]));
        }
    }
}

/// A leader asked for a membership change the moment it is elected under load (raft-rs then
/// counts a change as pending until the leader applied every entry before its term's first
/// one) makes the change once that clears, instead of refusing it as "in progress".
/// Reproduces a CI failure of
/// `membership::the_group_grows_from_three_to_five_and_shrinks_back_under_load`: the member a
/// removed leader handed leadership to refused the operator's retry.
#[test]
fn a_change_asked_of_a_leader_just_elected_is_made_once_its_term_begins() {
    let mut sim = Sim::new(11);
    let old = elect(&mut sim);
    // The leader's last entries reach the followers, but not their answers: then it is cut off
    // and the others elect a leader whose log ends in entries it does not know committed.
    for _ in 0..5 {
        sim.propose();
    }
    let i = sim.members.iter().position(|m| m.id == old).unwrap();
    one_turn(&mut sim, i, false, 0);
    for m in sim.members.iter_mut().filter(|m| m.id != old) {
        m.turn(false);
    }
    let mut leader = None;
    'elect: for _ in 0..400 {
        for i in 0..sim.members.len() {
            if sim.members[i].id == old {
                continue;
            }
            one_turn(&mut sim, i, true, old);
            if sim.members[i].is_leader() {
                leader = Some(sim.members[i].id);
                break 'elect;
            }
        }
    }
    let leader = leader.expect("no leader elected without the old one");
    let raft = sim
        .member(leader)
        .unwrap()
        .running
        .as_ref()
        .unwrap()
        .node
        .raft();
    assert!(
        raft.has_pending_conf(),
        "member {leader} just elected counts a change as pending: last index {}, applied {}",
        raft.raft_log.last_index(),
        raft.raft_log.applied
    );
    let removed = old;
    let (reply, mut answer) = oneshot::channel();
    sim.member(leader).unwrap().deliver(Input::ChangeMembers {
        change: MemberChange::Remove {
            ids: vec![removed],
            force: false,
        },
        reply,
    });
    let mut done = Err(oneshot::error::TryRecvError::Empty);
    for _ in 0..200 {
        lossless(&mut sim, 1, true);
        done = answer.try_recv();
        if !matches!(done, Err(oneshot::error::TryRecvError::Empty)) {
            break;
        }
    }
    assert!(
        matches!(done, Ok(Ok(()))),
        "the removal of {removed} asked on {leader}: {done:?}"
    );
    let want: Vec<u64> = (1..=3).filter(|id| *id != removed).collect();
    assert_eq!(sim.voters(), want);
}

/// Whether `leader` counts member `id` up ([`mraft::node::Node::is_up`]).
fn is_up(sim: &Sim, leader: u64, id: u64) -> bool {
    sim.members
        .iter()
        .find(|m| m.id == leader)
        .and_then(|m| m.running.as_ref())
        .is_some_and(|r| r.node.is_up(id))
}

/// Turns with ticks, every message to or from `down` dropped, until `leader` no longer counts
/// it up (an election timeout of ticks, and of time since it last heard from it; at most 30 s).
fn cut_until_down(sim: &mut Sim, leader: u64, down: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while is_up(sim, leader, down) {
        assert!(
            std::time::Instant::now() < deadline,
            "member {down} still counts as up"
        );
        for i in 0..sim.members.len() {
            one_turn(sim, i, true, down);
        }
    }
}

/// Issue 54, item 5: with one follower down, removing the only other member that is up would
/// leave a configuration whose quorum cannot be reached (the group stalls in the joint
/// configuration, committing nothing). The leader refuses it and says which members are up;
/// `force` makes it anyway; removing the member that is down is made, and the group goes on.
#[test]
fn a_removal_that_leaves_no_quorum_up_is_refused_unless_forced() {
    let mut sim = Sim::new(21);
    let leader = elect(&mut sim);
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (up, down) = (followers[0], followers[1]);
    cut_until_down(&mut sim, leader, down);
    assert!(is_up(&sim, leader, up) && sim.leader() == Some(leader));

    let ask = |sim: &mut Sim, ids: Vec<u64>, force: bool| {
        let (reply, answer) = oneshot::channel();
        sim.member(leader).unwrap().deliver(Input::ChangeMembers {
            change: MemberChange::Remove { ids, force },
            reply,
        });
        let i = sim.members.iter().position(|m| m.id == leader).unwrap();
        sim.members[i].turn(false);
        answer
    };
    let mut refused = ask(&mut sim, vec![up], false);
    match refused.try_recv() {
        Ok(Err(ProposeError::Membership(reason))) => {
            let want = format!(
                "removing [{up}] leaves 1 voters up of the 2 that stay ([{leader}] of {:?}); \
                 the group needs 2 to commit anything",
                {
                    let mut staying = vec![leader, down];
                    staying.sort_unstable();
                    staying
                }
            );
            assert!(reason.starts_with(&want), "{reason}");
        }
        other => {
            panic!("the removal of {up}, the only other member up, was not refused: {other:?}")
        }
    }
    let raft = |sim: &Sim| {
        sim.members
            .iter()
            .find(|m| m.id == leader)
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .node
            .raft()
            .has_pending_conf()
    };
    assert!(!raft(&sim), "nothing was proposed");

    // Forced, it is proposed (and waits: the joint configuration cannot commit without `down`).
    let mut forced = ask(&mut sim, vec![up], true);
    assert!(
        matches!(forced.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
        "the forced removal was answered at once"
    );
    assert!(raft(&sim), "the forced removal was proposed");
}

/// With one follower down, removing that one is made: the two that stay are up.
#[test]
fn removing_the_member_that_is_down_is_made() {
    let mut sim = Sim::new(23);
    let leader = elect(&mut sim);
    let down = (1..=3).find(|id| *id != leader).unwrap();
    cut_until_down(&mut sim, leader, down);
    let (reply, mut answer) = oneshot::channel();
    sim.member(leader).unwrap().deliver(Input::ChangeMembers {
        change: MemberChange::Remove {
            ids: vec![down],
            force: false,
        },
        reply,
    });
    let mut done = Err(oneshot::error::TryRecvError::Empty);
    for _ in 0..400 {
        for i in 0..sim.members.len() {
            one_turn(&mut sim, i, true, down);
        }
        done = answer.try_recv();
        if !matches!(done, Err(oneshot::error::TryRecvError::Empty)) {
            break;
        }
    }
    assert!(
        matches!(done, Ok(Ok(()))),
        "the removal of {down}: {done:?}"
    );
    let want: Vec<u64> = (1..=3).filter(|id| *id != down).collect();
    assert_eq!(sim.voters(), want);
}

/// A read on the leader (raft-rs's ReadIndex) is answered once a quorum confirmed it leads; on
/// a leader cut off from the others it is never answered as servable, while the others elect a
/// leader and commit without it, and it fails with NotLeader once the old leader steps down.
#[test]
fn a_read_on_a_leader_cut_off_waits_and_fails_once_it_steps_down() {
    let mut sim = Sim::new(11);
    let leader = elect(&mut sim);
    let read = |sim: &mut Sim, on: u64| {
        let (reply, answer) = oneshot::channel();
        sim.member(on).unwrap().deliver(Input::ReadIndex { reply });
        answer
    };
    // All links up: answered within a few rounds.
    let mut healthy = read(&mut sim, leader);
    for _ in 0..10 {
        lossless(&mut sim, 1, false);
        if !healthy.is_empty() {
            break;
        }
    }
    assert!(
        matches!(healthy.try_recv(), Ok(Ok(()))),
        "a read on a healthy leader"
    );

    // Cut off: the read waits while the others elect a leader and commit a submit.
    let mut cut_off = read(&mut sim, leader);
    let mut new_leader = None;
    let mut committed = false;
    let mut refused = false;
    for _ in 0..400 {
        if refused && committed {
            break;
        }
        for i in 0..sim.members.len() {
            one_turn(&mut sim, i, true, leader);
        }
        if !refused {
            match cut_off.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => {}
                Ok(Err(ProposeError::NotLeader { .. })) => refused = true,
                other => panic!("the cut-off leader {leader} answered its read with {other:?}"),
            }
        }
        let other = sim
            .members
            .iter()
            .find(|m| m.id != leader && m.is_leader())
            .map(|m| m.id);
        if let (Some(other), false) = (other, committed) {
            new_leader = Some(other);
            let cmd = command::submit_unreadable(
                "default/during-the-cut",
                v1::JobKind::Native,
                Vec::new(),
                "sim",
                1,
            );
            sim.member(other).unwrap().deliver(Input::Propose {
                command: command::encode(&cmd),
                reply: None,
                then: Vec::new(),
                bounded: false,
            });
            committed = true;
        }
    }
    assert!(new_leader.is_some(), "the majority elected no leader");
    assert!(
        refused,
        "the read on the cut-off leader {leader} was never refused"
    );
    assert!(
        !sim.member(leader).unwrap().is_leader(),
        "the cut-off leader {leader} still leads"
    );
}

/// A leader applies what a Ready committed before it writes the Ready's new entries: a submit
/// whose append the followers acknowledged while another was proposed is answered before that
/// other one's write and fsync, not after (raft-rs hands over only entries this member has
/// persisted, so nothing unwritten is applied).
#[test]
fn a_leader_applies_what_is_committed_before_it_writes_what_is_new() {
    let mut sim = Sim::new(13);
    let leader = elect(&mut sim);
    lossless(&mut sim, 5, false);
    let at = sim.members.iter().position(|m| m.id == leader).unwrap();
    let submit = |sim: &mut Sim, job_id: &str| {
        let cmd = command::submit_unreadable(job_id, v1::JobKind::Native, Vec::new(), "sim", 1);
        let (reply, answer) = oneshot::channel();
        sim.members[at].deliver(Input::Propose {
            command: command::encode(&cmd),
            reply: Some(reply),
            then: Vec::new(),
            bounded: true,
        });
        answer
    };
    *sim.members[at].probe.marker.lock().unwrap() = Some(b"default/written-second".to_vec());

    // The first submit is written by the leader and the followers, who answer.
    let mut first = submit(&mut sim, "default/written-first");
    one_turn(&mut sim, at, false, 0);
    for i in (0..sim.members.len()).filter(|i| *i != at) {
        sim.members[i].turn(false);
    }
    assert!(
        first.try_recv().is_err(),
        "committed before a follower answered"
    );
    // The second is proposed as their answers arrive: one Ready commits the first and holds
    // the second.
    let mut second = submit(&mut sim, "default/written-second");
    deliver_all_but(&mut sim, 0);
    sim.members[at].turn(false);

    assert!(
        matches!(first.try_recv(), Ok(Ok(Applied::Changed { .. }))),
        "the first submit was not answered in the turn that committed it"
    );
    assert_eq!(
        *sim.members[at].probe.seen.lock().unwrap(),
        vec![("default/written-first".to_string(), false)],
        "the first submit was applied after the second was written"
    );
    assert!(sim.members[at].probe.log_holds(b"default/written-second"));
    lossless(&mut sim, 5, false);
    assert!(matches!(second.try_recv(), Ok(Ok(Applied::Changed { .. }))));
}
