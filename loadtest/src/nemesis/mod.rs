//! `symcluster-loadtest nemesis`: random client traffic against a real local cluster while a
//! nemesis injects faults, every call recorded as a history and the history checked, as etcd's
//! robustness tests and Jepsen prove a replicated store.
//!
//! A run: a cluster of `masters` masters and `workers` workers (Garage, real processes); the
//! demo dSYM uploaded; `clients` clients, each one call at a time, for `seconds`: submit a new
//! job (the demo crash, which must complete at [`history::DEMO_FRAME`], or an unreadable
//! report, stored FAILED at once), submit one again (idempotent by id), or read one
//! (`GetJob`): mostly one of the [`RECENT`] jobs any client's submit was last acknowledged
//! for, where a stale read would show, some ([`PINNED_READS`]) from one master whatever it is,
//! each call given [`CALL_TIMEOUT`] ([`history`]). Meanwhile the nemesis injects
//! one fault at a time every 0.5-2 s, lasting 0.5-3 s (a forced snapshot: until the leader's
//! log has passed the stopped follower; [`faults`]); with partitions among
//! the faults, each master runs in a network namespace of its own ([`crate::network`]), and
//! with forced snapshots every master keeps a short log ([`faults::SHORT_LOG`]), and with clock
//! steps every master's wall clock is movable (libfaketime); a slow disk and a crash at an
//! fsync are the masters' failpoints armed over their metrics ports (`crate::failpoints`); a
//! membership change replaces a master by a new one ([`membership`]), and the clients, then
//! the workers (a rolling restart), are moved onto the new list of masters.
//! Then every fault is
//! healed, the jobs are given [`SETTLE_TIMEOUT`] to finish, each is read from the leader, every
//! master's index digest is compared, and the history is checked ([`check`]). The choices
//! (calls, jobs, faults, targets, durations) come from `seed`; the timings are the machine's,
//! so two runs of one seed interleave differently.

pub mod check;
pub mod faults;
pub mod history;
pub mod history_file;
pub mod linearizable;
pub mod membership;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use symcluster_client::{Client, ClientError, api};

use crate::cluster::{Cluster, MasterOptions, TOKEN, repo};
use check::{Anomaly, EndStates};
use faults::Fault;
use history::{Call, Observed, Outcome, Payload, Recorder};

/// How long one client call may take before it is recorded as unknown (the client library
/// follows the leader through a failover within this).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads pick among the jobs whose submits were acknowledged last, this many, across clients.
pub const RECENT: usize = 16;

/// The share of reads sent to one master without following the leader (where a stale read
/// from a deposed leader would show), the rest through the client library, which follows it.
pub const PINNED_READS: f64 = 0.3;

/// How long the healed cluster is given for every job to finish and every master to hold the
/// same index.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a run does.
#[derive(Debug, Clone)]
pub struct Options {
    /// Masters in the group (3 or 5).
    pub masters: usize,
    /// Workers (0: only unreadable reports are submitted, which need none).
    pub workers: usize,
    /// How long the clients and the nemesis run.
    pub duration: Duration,
    /// The faults to choose from (none: a run without faults).
    pub faults: Vec<Fault>,
    /// Seeds every choice of the clients and the nemesis.
    pub seed: u64,
    /// Clients calling at once.
    pub clients: usize,
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    /// Calls made, of which submits acknowledged, reads answered, and unknown outcomes.
    pub calls: usize,
    /// Submits acknowledged.
    pub acknowledged: usize,
    /// Reads answered (found or NOT_FOUND).
    pub reads: usize,
    /// Calls whose outcome is unknown (timeouts, no leader in time).
    pub unknown: usize,
    /// Jobs named by any call.
    pub jobs: usize,
    /// The faults injected and healed, in order, with their times.
    pub events: Vec<history::Event>,
    /// Every anomaly the checker found; with the replicas' digests when they did not agree.
    pub anomalies: Vec<Anomaly>,
    /// The history: every call, and how each job ended.
    pub ops: Vec<history::Op>,
    /// How each job ended, read from the healed cluster.
    pub ends: EndStates,
}

impl Report {
    /// The run's history as [`history_file`] writes it, with `options`.
    pub fn history_file(&self, options: &Options) -> history_file::HistoryFile {
        let faults: Vec<String> = options.faults.iter().map(|f| f.name().to_owned()).collect();
        history_file::HistoryFile {
            run: serde_json::json!({
                "seed": options.seed,
                "masters": options.masters,
                "workers": options.workers,
                "clients": options.clients,
                "seconds": options.duration.as_secs(),
                "faults": faults,
            }),
            ops: self.ops.clone(),
            events: self.events.clone(),
            ends: self.ends.clone(),
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "nemesis: {} calls ({} submits acknowledged, {} reads answered, {} unknown) on {} \
             jobs, {} fault events, {} anomalies",
            self.calls,
            self.acknowledged,
            self.reads,
            self.unknown,
            self.jobs,
            self.events.len(),
            self.anomalies.len()
        )?;
        for event in &self.events {
            writeln!(f, "  {:>8.3} s  {}", event.at.as_secs_f64(), event.what)?;
        }
        for anomaly in &self.anomalies {
            writeln!(
                f,
                "  ANOMALY {} {}: {}",
                anomaly.kind, anomaly.job, anomaly.detail
            )?;
        }
        Ok(())
    }
}

/// Runs the clients and the nemesis against a new cluster, heals it, and checks the history.
/// Errors: the cluster could not be set up or read at the end (not an anomaly: no verdict).
pub async fn run(options: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(
        options.masters >= 2 || !options.faults.contains(&Fault::Snapshot),
        "the snapshot fault needs a follower: run it with 2 masters or more"
    );
    let mut cluster = Cluster::start(
        options.workers,
        MasterOptions {
            masters: options.masters,
            namespaces: options.faults.iter().any(|f| f.needs_namespaces()),
            small_disks: options
                .faults
                .iter()
                .any(|f| f.needs_small_disks())
                .then_some(faults::SMALL_DISK_BYTES),
            movable_clocks: options.faults.iter().any(|f| f.needs_movable_clocks()),
            args: if options.faults.iter().any(|f| f.needs_short_log()) {
                vec!["--raft-log-retain".into(), faults::SHORT_LOG.into()]
            } else {
                Vec::new()
            },
            ..MasterOptions::default()
        },
    )
    .await;
    if let Some(fault) = options.faults.iter().find(|f| f.needs_failpoints()) {
        cluster.armed_failpoints(1).await.map_err(|e| {
            anyhow::anyhow!(
                "the {} fault needs the masters' failpoints: {e}",
                fault.name()
            )
        })?;
    }
    let demo_dsym = repo().join("examples/ios-demo/DemoApp.dSYM");
    if options.workers > 0 {
        let out = tokio::task::block_in_place(|| {
            cluster.symctl(&["upload", "dsym", &demo_dsym.display().to_string()])
        });
        anyhow::ensure!(
            out.status.success(),
            "symctl upload dsym: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let demo = Arc::new(std::fs::read(
        repo().join("examples/ios-demo/DemoApp.crash"),
    )?);
    let recorder = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    let recent = Arc::new(Mutex::new(VecDeque::with_capacity(RECENT)));
    let masters = Arc::new(Mutex::new(Masters {
        version: 0,
        endpoint: cluster.endpoint.clone(),
    }));
    for index in 0..options.clients {
        let client = cluster.client().await;
        let at = &cluster.masters[index % cluster.masters.len()];
        let pinned = Client::connect_with(&at.endpoint(), TOKEN, cluster.tls())
            .await
            .map_err(|e| anyhow::anyhow!("a client pinned to master {}: {e}", at.id))?;
        let generator = Generator {
            index,
            client,
            pinned,
            masters: masters.clone(),
            version: 0,
            tls: cluster.tls(),
            rng: StdRng::seed_from_u64(options.seed ^ ((index as u64 + 1) << 32)),
            recorder: recorder.clone(),
            demo: demo.clone(),
            with_workers: options.workers > 0,
            submitted: Vec::new(),
            recent: recent.clone(),
            next: 0,
        };
        clients.push(tokio::spawn(generator.run(stop.clone())));
    }

    let mut rng = StdRng::seed_from_u64(options.seed);
    let started = Instant::now();
    let mut round = 0;
    let mut crashes = Vec::new();
    let mut workers_endpoint = cluster.endpoint.clone();
    while started.elapsed() < options.duration {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2_000))).await;
        if options.faults.is_empty() || started.elapsed() >= options.duration {
            continue;
        }
        let leader = faults::leader_now(&cluster).await;
        let fault = faults::pick(&options.faults, round, &mut rng);
        round += 1;
        let injected = faults::inject(&mut cluster, fault, leader, &mut rng).await;
        let role = if Some(injected.master) == leader {
            " (the leader)"
        } else {
            ""
        };
        let detail = if injected.detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", injected.detail)
        };
        recorder.event(format!(
            "{:?} master {}{role}{detail} for {} ms",
            injected.fault,
            injected.master,
            injected.lasts.as_millis()
        ));
        moved(&cluster, &masters);
        tokio::time::sleep(injected.lasts).await;
        let seen = faults::heal(&mut cluster, &injected).await;
        recorder.event(match seen {
            Some(seen) => format!("healed master {} ({seen})", injected.master),
            None => format!("healed master {}", injected.master),
        });
        moved(&cluster, &masters);
        if cluster.endpoint != workers_endpoint {
            for (index, status) in cluster.roll_workers(ROLL_DRAIN).await {
                let how = status.map_or(format!("still running after {ROLL_DRAIN:?}"), |s| {
                    s.to_string()
                });
                recorder.event(format!(
                    "worker {index} replaced by one given the masters {} (it ended: {how})",
                    cluster.endpoint
                ));
            }
            workers_endpoint = cluster.endpoint.clone();
        }
        for exited in faults::restart_exited(&mut cluster, &injected) {
            recorder.event(format!(
                "master {} had exited ({}), started again",
                exited.master, exited.status
            ));
            if !exited.expected {
                crashes.push(Anomaly {
                    job: format!("(master {})", exited.master),
                    kind: "master crashed",
                    detail: format!(
                        "it exited by itself ({}) under {:?} of master {}",
                        exited.status, injected.fault, injected.master
                    ),
                });
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await?;
    }

    let ops = recorder.ops();
    let mut jobs: Vec<String> = ops.iter().map(|op| op.job.clone()).collect();
    jobs.sort();
    jobs.dedup();
    let ends = settle(&cluster, &jobs).await?;
    let mut anomalies = crashes;
    anomalies.extend(check::check(&ops, &ends));
    if let Some(differ) = replicas_differ(&cluster).await {
        anomalies.push(Anomaly {
            job: "(every job)".into(),
            kind: "replicas differ",
            detail: differ,
        });
    }
    Ok(Report {
        calls: ops.len(),
        acknowledged: ops
            .iter()
            .filter(|op| matches!(op.outcome, Outcome::Submitted { .. }))
            .count(),
        reads: ops
            .iter()
            .filter(|op| matches!(op.outcome, Outcome::Found(_) | Outcome::Absent))
            .count(),
        unknown: ops
            .iter()
            .filter(|op| matches!(op.outcome, Outcome::Unknown(_)))
            .count(),
        jobs: jobs.len(),
        events: recorder.events(),
        anomalies,
        ops,
        ends,
    })
}

/// How long a worker replaced after a membership change is given to drain.
const ROLL_DRAIN: Duration = Duration::from_secs(20);

/// The masters' addresses as the clients are to be given them: the group's, updated after each
/// membership change ([`moved`]).
struct Masters {
    /// Bumped at each change.
    version: u64,
    /// [`Cluster::endpoint`] at the last change.
    endpoint: String,
}

/// Publishes `cluster`'s masters to the clients when they changed.
fn moved(cluster: &Cluster, masters: &Mutex<Masters>) {
    let mut masters = masters.lock().unwrap_or_else(|e| e.into_inner());
    if masters.endpoint != cluster.endpoint {
        masters.endpoint.clone_from(&cluster.endpoint);
        masters.version += 1;
    }
}

/// One client: one call at a time until `stop`, each chosen by its seeded generator.
struct Generator {
    index: usize,
    client: Client,
    /// Connected to one master (client `i` to the `i % masters`th), never following the
    /// leader: reads through it ask that master whatever it is, as a client that has not yet
    /// heard of a new leader would ([`PINNED_READS`]).
    pinned: Client,
    /// The masters to connect to, and [`Masters::version`] when [`Self::client`] and
    /// [`Self::pinned`] were connected.
    masters: Arc<Mutex<Masters>>,
    version: u64,
    tls: symcluster_client::Tls,
    rng: StdRng,
    recorder: Arc<Recorder>,
    demo: Arc<Vec<u8>>,
    with_workers: bool,
    /// Jobs this client invoked a submit of, and their reports.
    submitted: Vec<(String, Payload)>,
    /// The jobs whose submits were acknowledged last, by any client ([`RECENT`]).
    recent: Arc<Mutex<VecDeque<String>>>,
    next: usize,
}

impl Generator {
    async fn run(mut self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            self.follow_membership().await;
            let dice = self.rng.random_range(0..10);
            if dice < 4 || self.submitted.is_empty() {
                let payload = if self.with_workers && self.rng.random_bool(0.7) {
                    Payload::Demo
                } else {
                    Payload::Unreadable
                };
                let job = format!("c{}-{}", self.index, self.next);
                self.next += 1;
                self.submitted.push((job.clone(), payload));
                self.submit(&job, payload).await;
            } else if dice < 5 {
                let (job, payload) =
                    self.submitted[self.rng.random_range(0..self.submitted.len())].clone();
                self.submit(&job, payload).await;
            } else {
                let recent = {
                    let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
                    let at = self.rng.random_range(0..RECENT);
                    recent.get(at % recent.len().max(1)).cloned()
                };
                let job = match recent {
                    Some(job) if self.rng.random_bool(0.7) => job,
                    _ => self.submitted[self.rng.random_range(0..self.submitted.len())]
                        .0
                        .clone(),
                };
                if self.rng.random_bool(PINNED_READS) {
                    self.read_pinned(&job).await;
                } else {
                    self.read(&job).await;
                }
            }
        }
    }

    /// After a membership change, connects [`Self::client`] to the group's masters as they are
    /// now, and [`Self::pinned`] to the `index % masters`th of them (as an ingestion service
    /// is given the new addresses); on a failure (no leader in [`CALL_TIMEOUT`]), tries again
    /// before the next call. Not a call of the history.
    async fn follow_membership(&mut self) {
        let (version, endpoint) = {
            let masters = self.masters.lock().unwrap_or_else(|e| e.into_inner());
            (masters.version, masters.endpoint.clone())
        };
        if version == self.version {
            return;
        }
        let all: Vec<&str> = endpoint.split(',').collect();
        let one = all[self.index % all.len()];
        let connect = async {
            let client = Client::connect_with(&endpoint, TOKEN, self.tls.clone()).await?;
            let pinned = Client::connect_with(one, TOKEN, self.tls.clone()).await?;
            Ok::<_, ClientError>((client, pinned))
        };
        if let Ok(Ok((client, pinned))) = tokio::time::timeout(CALL_TIMEOUT, connect).await {
            self.client = client;
            self.pinned = pinned;
            self.version = version;
        }
    }

    /// A read of `job` from the one master [`Self::pinned`] is connected to: found, NOT_FOUND,
    /// or (from a master that does not lead, or cannot confirm it does) UNAVAILABLE, which the
    /// history records as unknown.
    async fn read_pinned(&mut self, job: &str) {
        let invoked = self.recorder.now();
        let request = api::GetJobRequest {
            job_id: job.to_owned(),
            ..api::GetJobRequest::default()
        };
        let mut ingest = self.pinned.ingest();
        let answer = tokio::time::timeout(CALL_TIMEOUT, ingest.get_job(request)).await;
        let outcome = match answer {
            Ok(answer) => read_outcome(
                answer
                    .map(tonic::Response::into_inner)
                    .map_err(ClientError::from),
            ),
            Err(_) => Outcome::Unknown(format!("no answer in {CALL_TIMEOUT:?}")),
        };
        self.recorder
            .op(self.index, job, Call::Get, invoked, outcome);
    }

    async fn submit(&mut self, job: &str, payload: Payload) {
        let report = match payload {
            Payload::Demo => self.demo.to_vec(),
            Payload::Unreadable => b"not a crash report".to_vec(),
        };
        let invoked = self.recorder.now();
        let answer =
            tokio::time::timeout(CALL_TIMEOUT, self.client.submit_native(job, report)).await;
        let outcome = match answer {
            Ok(Ok(response)) => {
                let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
                if recent.len() == RECENT {
                    recent.pop_front();
                }
                recent.push_back(job.to_owned());
                Outcome::Submitted {
                    created: response.created,
                    same_report: response.same_report,
                }
            }
            Ok(Err(e)) => history::outcome_of_error(&e),
            Err(_) => Outcome::Unknown(format!("no answer in {CALL_TIMEOUT:?}")),
        };
        self.recorder
            .op(self.index, job, Call::Submit(payload), invoked, outcome);
    }

    async fn read(&mut self, job: &str) {
        let invoked = self.recorder.now();
        let answer = tokio::time::timeout(CALL_TIMEOUT, self.client.job(job)).await;
        let outcome = match answer {
            Ok(answer) => read_outcome(answer),
            Err(_) => Outcome::Unknown(format!("no answer in {CALL_TIMEOUT:?}")),
        };
        self.recorder
            .op(self.index, job, Call::Get, invoked, outcome);
    }
}

/// A read's answer as the history records it: found, NOT_FOUND, or an error.
fn read_outcome(answer: Result<api::Job, ClientError>) -> Outcome {
    match answer {
        Ok(job) => Outcome::Found(Observed::of(&job)),
        Err(ClientError::Status(status)) if status.code() == tonic::Code::NotFound => {
            Outcome::Absent
        }
        Err(e) => history::outcome_of_error(&e),
    }
}

/// Reads every job in `jobs` from the healed cluster's leader until each is finished or
/// absent, for at most [`SETTLE_TIMEOUT`]: how each ended (`None`: absent). Errors: a job could
/// not be read at all in that time.
async fn settle(cluster: &Cluster, jobs: &[String]) -> anyhow::Result<EndStates> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut client = cluster.client().await;
    let mut ends = EndStates::new();
    let mut open: Vec<&String> = jobs.iter().collect();
    loop {
        let mut still = Vec::new();
        for job in open {
            match read_outcome(client.job(job).await) {
                Outcome::Found(seen) => {
                    if !seen.finished() {
                        still.push(job);
                    }
                    ends.insert(job.clone(), Some(seen));
                }
                Outcome::Absent => {
                    ends.insert(job.clone(), None);
                }
                // Not answered yet (a leader still being elected): asked again.
                _ if Instant::now() < deadline => still.push(job),
                other => anyhow::bail!("job {job} could not be read at the end: {other:?}"),
            }
        }
        if still.is_empty() || Instant::now() >= deadline {
            return Ok(ends);
        }
        open = still;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `None` when every master answers the same index digest within [`SETTLE_TIMEOUT`]; else the
/// digests last seen, one line.
async fn replicas_differ(cluster: &Cluster) -> Option<String> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let mut digests = Vec::new();
        for m in cluster.masters.iter().filter(|m| m.in_group) {
            let digest = match Client::connect_with(&m.endpoint(), TOKEN, cluster.tls()).await {
                Ok(client) => client
                    .admin()
                    .index_digest(api::IndexDigestRequest {})
                    .await
                    .map(|d| {
                        let d = d.into_inner();
                        let hex: String = d.sha256.iter().map(|b| format!("{b:02x}")).collect();
                        format!("{} jobs, {}", d.jobs, &hex[..16.min(hex.len())])
                    })
                    .unwrap_or_else(|e| format!("error {}", e.code())),
                Err(e) => format!("error {e}"),
            };
            digests.push(format!("master {}: {digest}", m.id));
        }
        let first = digests[0].split_once(": ").map(|(_, d)| d.to_owned());
        let same = digests
            .iter()
            .all(|d| d.split_once(": ").map(|(_, d)| d.to_owned()) == first);
        if same && !first.as_deref().unwrap_or("error").starts_with("error") {
            return None;
        }
        if Instant::now() >= deadline {
            return Some(digests.join("; "));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
