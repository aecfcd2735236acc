//! The simulated group the Raft simulations drive: members that are the master's real Raft
//! node over its real storage and index, a network that drops, duplicates, delays and
//! reorders, partitions and crashes (see `main.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use raft::StateRole;
use raft::prelude::{Message, MessageType};
use symcluster_master::index::apply::Applied;
use symcluster_master::index::{Command, Index, command};
use symcluster_master::raft::node::Node;
use symcluster_master::raft::snapshot::{self, Outbox};
use symcluster_master::raft::{
    self as mraft, Input, MemberChange, Outbound, ProposeError, RaftConfig, RaftHandle,
};
use symcluster_master::replica::{Hooks, IndexMachine};
use symcluster_proto::v1;
use tokio::sync::oneshot;

/// xorshift64*: a tiny deterministic generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The hooks every member runs: nothing, until a test gives it a marker. Then, for each submit
/// a leader applies, it notes whether the marker's bytes are already in the member's Raft log
/// files: whether the apply came before or after the write that holds the marker.
#[derive(Default)]
pub struct LogProbe {
    pub log_dir: PathBuf,
    pub marker: Mutex<Option<Vec<u8>>>,
    /// (job id applied, the marker already in the log)
    pub seen: Mutex<Vec<(String, bool)>>,
}

impl LogProbe {
    /// Whether any file of the member's Raft log holds `marker`. A file that cannot be read
    /// fails the test (it would otherwise read as "not written yet"), except one renamed or
    /// deleted while the directory was listed (a segment made ahead, a compacted one).
    pub fn log_holds(&self, marker: &[u8]) -> bool {
        std::fs::read_dir(&self.log_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|path| path.is_file())
            .filter_map(|path| match std::fs::read(&path) {
                Ok(bytes) => Some(bytes),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => panic!("reading {}: {e}", path.display()),
            })
            .any(|bytes| bytes.windows(marker.len()).any(|w| w == marker))
    }
}

impl Hooks for LogProbe {
    fn applied(&self, changes: &mut [(Command, Applied)], is_leader: bool) {
        let Some(marker) = self.marker.lock().unwrap().clone() else {
            return;
        };
        if !is_leader {
            return;
        }
        for (command, _) in changes.iter() {
            if let Some(symcluster_proto::cluster::v1::command::Kind::Submit(submit)) =
                &command.kind
            {
                let held = self.log_holds(&marker);
                self.seen
                    .lock()
                    .unwrap()
                    .push((submit.job_id.clone(), held));
            }
        }
    }
    fn role_changed(&self, _: bool) {}
    fn restored(&self) {}
}

/// The sending side of a simulated member: messages wait in `sent` for the network.
pub struct SimOutbound {
    pub sent: Arc<Mutex<Vec<Message>>>,
}

impl Outbound for SimOutbound {
    fn send(&mut self, messages: Vec<Message>) {
        self.sent.lock().unwrap().extend(messages);
    }

    fn set_members(&mut self, _: &BTreeMap<u64, String>) {}
}

pub struct Running {
    pub node: Node<IndexMachine>,
    pub handle: RaftHandle<Applied>,
    pub index: Index,
    pub outbox: Outbox,
}

pub struct Member {
    pub id: u64,
    pub dir: PathBuf,
    pub join: bool,
    pub running: Option<Running>,
    pub sent: Arc<Mutex<Vec<Message>>>,
    pub probe: Arc<LogProbe>,
}

/// The failpoint a panic is from (`fail`'s message: "failpoint NAME panic"); any other panic
/// goes on.
fn failpoint_of(panic: Box<dyn std::any::Any + Send>) -> String {
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    match message
        .strip_prefix("failpoint ")
        .and_then(|rest| rest.strip_suffix(" panic"))
    {
        Some(point) => point.to_owned(),
        None => std::panic::resume_unwind(panic),
    }
}

pub fn address(id: u64) -> String {
    format!("http://sim-{id}:7700")
}

impl Member {
    pub fn new(root: &Path, id: u64, join: bool) -> Member {
        let mut member = Member {
            id,
            dir: root.join(format!("member-{id}")),
            join,
            running: None,
            sent: Arc::new(Mutex::new(Vec::new())),
            probe: Arc::new(LogProbe {
                log_dir: root.join(format!("member-{id}")).join("raft-log"),
                ..LogProbe::default()
            }),
        };
        member.start();
        member
    }

    /// Opens the member from its directory (a first start, or after a crash).
    pub fn start(&mut self) {
        std::fs::create_dir_all(&self.dir).unwrap();
        let _ = self.try_start();
    }

    /// [`Member::start`], where a failpoint armed with `panic` may fire (the start's repair of
    /// a snapshot install cut short commits the index): the point's name, and the member stays
    /// down. Any other panic fails the test.
    pub fn try_start(&mut self) -> Option<String> {
        let started =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.open_running()));
        match started {
            Ok(()) => None,
            Err(panic) => {
                let point = failpoint_of(panic);
                self.crash();
                Some(point)
            }
        }
    }

    fn open_running(&mut self) {
        let peers: BTreeMap<u64, String> = (1..=3)
            .chain([self.id])
            .map(|id| (id, address(id)))
            .collect();
        let config = RaftConfig {
            id: self.id,
            members: peers,
            join: self.join,
            election_tick: 10,
            heartbeat_tick: 2,
            token: "sim".into(),
            tls: symcluster_client::Tls::default(),
            snapshot_dir: self.dir.join("snapshots"),
            snapshot_chunk_bytes: 64 << 10,
            // A small log: compaction, and snapshots for members that fall behind.
            log_retain_bytes: 256 << 10,
            peer_port: None,
        };
        let index = Index::open_file(&self.dir.join("master.redb")).unwrap();
        let (handle, inputs) = mraft::channel(&config);
        let sent = self.sent.clone();
        let outbox_slot: Arc<Mutex<Option<Outbox>>> = Arc::default();
        let slot = outbox_slot.clone();
        let node = mraft::open(
            &config,
            Arc::new(IndexMachine::new(index.clone(), self.probe.clone())),
            &self.dir.join("raft-log"),
            &handle,
            inputs,
            move |_, outbox| {
                *slot.lock().unwrap() = Some(outbox);
                Box::new(SimOutbound { sent })
            },
        )
        .unwrap();
        let outbox = outbox_slot.lock().unwrap().take().unwrap();
        self.running = Some(Running {
            node,
            handle,
            index,
            outbox,
        });
    }

    /// Drops the node and its files without a clean stop; messages it had not sent are lost.
    pub fn crash(&mut self) {
        self.running = None;
        self.sent.lock().unwrap().clear();
    }

    pub fn deliver(&self, input: Input<Applied>) {
        if let Some(r) = &self.running {
            let _ = r.handle.inputs().send(input);
        }
    }

    /// One turn of the member's ready loop (a tick when `tick`). A failpoint armed with
    /// `panic` that fires inside it crashes the member (as `return` crashes a master): the
    /// point's name. Any other panic, and a turn's error, fail the test.
    pub fn turn(&mut self, tick: bool) -> Option<String> {
        let r = self.running.as_mut()?;
        let turned =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.node.turn(tick).unwrap()));
        match turned {
            Ok(_) => None,
            Err(panic) => {
                let point = failpoint_of(panic);
                self.crash();
                Some(point)
            }
        }
    }

    pub fn is_leader(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.node.raft().state == StateRole::Leader)
    }
}

/// A proposal waiting for its answer.
pub struct Pending {
    pub job_id: String,
    pub reply: oneshot::Receiver<Result<Applied, ProposeError>>,
}

/// A membership change waiting for its answer.
pub type PendingChange = oneshot::Receiver<Result<(), ProposeError>>;

pub struct Sim {
    pub rng: Rng,
    pub members: Vec<Member>,
    /// Messages in flight.
    pub network: Vec<Message>,
    /// Members cut off from every other.
    pub isolated: BTreeSet<u64>,
    pub pending: Vec<Pending>,
    pub acknowledged: Vec<String>,
    pub next_job: u64,
    pub changes: Vec<PendingChange>,
    /// What happened, to check that the faults were exercised: snapshots delivered, crashes,
    /// partitions, leader changes.
    pub stats: Stats,
    /// The failpoints that crashed a member, in order.
    pub fired: Vec<String>,
    /// Held while this simulation runs: shared, unless it is the one that arms failpoints
    /// ([`FAILPOINTS`]).
    pub _failpoints: Option<RwLockReadGuard<'static, ()>>,
    pub _root: tempfile::TempDir,
}

/// The failpoints are one registry for the whole process: a simulation that arms them holds
/// this for writing ([`Sim::armed`]), every other for reading ([`Sim::new`]), so that no
/// point armed for one fires in another running at the same time.
pub static FAILPOINTS: RwLock<()> = RwLock::new(());

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub snapshots: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub leader_changes: u64,
}

impl Sim {
    pub fn new(seed: u64) -> Sim {
        let shared = FAILPOINTS.read().unwrap_or_else(|e| e.into_inner());
        Sim::open(seed, Some(shared))
    }

    /// A simulation that may arm failpoints: the caller holds [`FAILPOINTS`] for writing.
    pub fn armed(seed: u64, _alone: &RwLockWriteGuard<'static, ()>) -> Sim {
        Sim::open(seed, None)
    }

    fn open(seed: u64, failpoints: Option<RwLockReadGuard<'static, ()>>) -> Sim {
        let root = match Path::new("/dev/shm").is_dir() {
            true => tempfile::tempdir_in("/dev/shm").unwrap(),
            false => tempfile::tempdir().unwrap(),
        };
        let members = (1..=3)
            .map(|id| Member::new(root.path(), id, false))
            .collect();
        Sim {
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            members,
            network: Vec::new(),
            isolated: BTreeSet::new(),
            pending: Vec::new(),
            acknowledged: Vec::new(),
            next_job: 0,
            changes: Vec::new(),
            stats: Stats::default(),
            fired: Vec::new(),
            _failpoints: failpoints,
            _root: root,
        }
    }

    pub fn member(&mut self, id: u64) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.id == id)
    }

    pub fn leader(&self) -> Option<u64> {
        self.members.iter().find(|m| m.is_leader()).map(|m| m.id)
    }

    pub fn propose(&mut self) {
        let Some(leader) = self.leader() else {
            return;
        };
        self.next_job += 1;
        let job_id = format!("default/sim-{}", self.next_job);
        // Reports of 0.5-4 KiB: the log passes its retention and is compacted.
        let padding = vec![b'x'; 512 + self.rng.below(3584) as usize];
        let cmd = command::submit_unreadable(&job_id, v1::JobKind::Native, padding, "sim", 1);
        let (reply, rx) = oneshot::channel();
        self.member(leader).unwrap().deliver(Input::Propose {
            command: command::encode(&cmd),
            reply: Some(reply),
            then: Vec::new(),
            bounded: true,
        });
        self.pending.push(Pending { job_id, reply: rx });
    }

    pub fn change(&mut self, change: MemberChange) -> bool {
        let Some(leader) = self.leader() else {
            return false;
        };
        let (reply, rx) = oneshot::channel();
        self.member(leader)
            .unwrap()
            .deliver(Input::ChangeMembers { change, reply });
        self.changes.push(rx);
        true
    }

    /// Collects what every member sent into the network (dropping, duplicating).
    pub fn collect(&mut self) {
        for m in &self.members {
            let sent = std::mem::take(&mut *m.sent.lock().unwrap());
            for message in sent {
                let snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
                if !snapshot && self.rng.chance(3) {
                    continue;
                }
                if !snapshot && self.rng.chance(2) {
                    self.network.push(message.clone());
                }
                self.network.push(message);
            }
        }
    }

    /// Delivers a random part of the network's messages, in a random order.
    pub fn deliver(&mut self) {
        let mut later = Vec::new();
        let mut now = Vec::new();
        for m in std::mem::take(&mut self.network) {
            if self.rng.chance(25) {
                later.push(m);
            } else {
                now.push(m);
            }
        }
        // Reorder.
        for i in (1..now.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            now.swap(i, j);
        }
        for m in now {
            self.deliver_one(m);
        }
        self.network = later;
    }

    pub fn deliver_one(&mut self, m: Message) {
        let (from, to) = (m.from, m.to);
        let cut = self.isolated.contains(&from) || self.isolated.contains(&to);
        let up = self
            .members
            .iter()
            .any(|x| x.id == to && x.running.is_some());
        if m.get_msg_type() != MessageType::MsgSnapshot {
            if !cut && up {
                self.member(to).unwrap().deliver(Input::Step(vec![m]));
            }
            return;
        }
        // A snapshot: its index travels from the sender's outbox into the receiver's file, as
        // `Peer/InstallSnapshot` puts it there, then its message; the sender learns the outcome.
        let source = self
            .members
            .iter()
            .find(|x| x.id == from)
            .and_then(|x| x.running.as_ref())
            .and_then(|r| r.outbox.take(to));
        let meta = m.get_snapshot().get_metadata();
        let delivered = match source {
            Some(source) if !cut && up && source.index() == meta.index => {
                let dir = self.member(to).unwrap().dir.join("snapshots");
                std::fs::create_dir_all(&dir).unwrap();
                let path = snapshot::ready_path(&dir, meta.index, meta.term);
                let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
                source.write_to(&mut file).unwrap();
                drop(file);
                self.member(to).unwrap().deliver(Input::Step(vec![m]));
                self.stats.snapshots += 1;
                true
            }
            _ => false,
        };
        if let Some(sender) = self.member(from) {
            sender.deliver(Input::SnapshotSent {
                peer: to,
                ok: delivered,
            });
        }
    }

    pub fn turn(&mut self, tick: bool) {
        for m in &mut self.members {
            self.fired.extend(m.turn(tick));
        }
        self.collect();
        self.deliver();
        for m in &mut self.members {
            self.fired.extend(m.turn(false));
        }
        self.collect();
        let mut still = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            match p.reply.try_recv() {
                Ok(Ok(Applied::Changed { .. })) => self.acknowledged.push(p.job_id),
                Ok(_) => {}
                Err(oneshot::error::TryRecvError::Empty) => still.push(p),
                Err(oneshot::error::TryRecvError::Closed) => {}
            }
        }
        self.pending = still;
    }

    /// Whether the change waited for was applied (`None`: no answer yet).
    pub fn change_done(&mut self) -> Option<bool> {
        let rx = self.changes.last_mut()?;
        match rx.try_recv() {
            Ok(Ok(())) => Some(true),
            Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => Some(false),
            Err(oneshot::error::TryRecvError::Empty) => None,
        }
    }

    /// Every member of the leader's configuration (voters, learners, outgoing voters).
    pub fn conf(&self) -> Option<Vec<u64>> {
        let leader = self
            .members
            .iter()
            .filter_map(|m| m.running.as_ref())
            .find(|r| r.node.raft().state == StateRole::Leader)?;
        let cs = leader.node.raft().prs().conf().to_conf_state();
        Some(
            cs.voters
                .iter()
                .chain(&cs.learners)
                .chain(&cs.voters_outgoing)
                .copied()
                .collect(),
        )
    }

    /// The partition fault, one at a time: now and then (1 % of calls) one member cut off
    /// from every other; healed after a while (3 % of calls).
    pub fn isolate_now_and_then(&mut self) {
        if self.isolated.is_empty() && self.rng.chance(1) {
            let id = 1 + self.rng.below(self.members.len() as u64);
            self.isolated.insert(id);
            self.stats.partitions += 1;
        } else if !self.isolated.is_empty() && self.rng.chance(3) {
            self.isolated.clear();
        }
    }

    /// The crash fault, one at a time: when every member runs, now and then (1 % of calls) one
    /// crashes, and this says so; else, when `restart` and 4 % of calls, every member down that
    /// `may_start` allows is started again (a failpoint that fires in a start keeps it down).
    pub fn crash_now_and_then(&mut self, restart: bool, may_start: impl Fn(u64) -> bool) -> bool {
        let down = self.members.iter().filter(|m| m.running.is_none()).count();
        if down == 0 && self.rng.chance(1) {
            let i = self.rng.below(self.members.len() as u64) as usize;
            self.members[i].crash();
            self.stats.crashes += 1;
            return true;
        }
        if down > 0 && restart && self.rng.chance(4) {
            for m in &mut self.members {
                if m.running.is_none() && may_start(m.id) {
                    self.fired.extend(m.try_start());
                }
            }
        }
        false
    }

    /// Whether a leader leads and every voter runs, has applied everything the leader knows
    /// committed, and holds the same index (digest of every table) at the same applied index.
    pub fn agreed(&self) -> bool {
        let Some(leader) = self.leader() else {
            return false;
        };
        let voters = self.voters();
        let commit = self
            .members
            .iter()
            .find(|m| m.id == leader)
            .and_then(|m| m.running.as_ref())
            .map(|r| r.node.raft().raft_log.committed)
            .unwrap_or(0);
        let digests: Vec<_> = self
            .members
            .iter()
            .filter(|m| voters.contains(&m.id))
            .filter_map(|m| m.running.as_ref())
            .map(|r| r.index.digest().unwrap())
            .collect();
        digests.len() == voters.len()
            && digests.iter().all(|d| d.applied_index == commit)
            && digests.iter().all(|d| {
                (d.sha256, d.applied_index) == (digests[0].sha256, digests[0].applied_index)
            })
    }

    pub fn voters(&self) -> Vec<u64> {
        let mut voters: Vec<u64> = self
            .members
            .iter()
            .filter_map(|m| m.running.as_ref())
            .find(|r| r.node.raft().state == StateRole::Leader)
            .map(|r| r.node.raft().prs().conf().to_conf_state().voters)
            .unwrap_or_default();
        voters.sort_unstable();
        voters
    }
}
