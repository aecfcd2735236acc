//! `symcluster-loadtest`: throughput, latency and the cost per job of each process, on real
//! local clusters (Garage, one or three masters, workers, all processes on this machine), for
//! the whole path: submit → replicate → lease → fetch from S3 → symbolicate → complete → watch.
//!
//! For each combination of `--masters`, `--workers` and `--routing` it starts a fresh cluster,
//! uploads the CrashProbe dSYMs (release and debug builds), then submits `--jobs` CrashProbe
//! reports with `--concurrency` clients at once, each waiting for its result. It prints one
//! Markdown row per run: reports/s, p50/p99 latency (submit to result), the leader's RSS at the
//! end, CPU milliseconds per job of the leader, of the followers (mean) and of the workers
//! (sum), and `CPU ms/report (all)`: every master's and worker's CPU summed per report (Garage's
//! and the load generator's printed apart), from `/proc/PID/stat` over the run, the leader's log entries per fsync, and, with
//! `--kill-leader-after K` (the leader is SIGKILLed after K acknowledged submits), jobs lost,
//! jobs duplicated and the failover time (kill → first submit acknowledged by a new leader).
//!
//! `symcluster-loadtest cold-start [DSYM]` measures instead what a worker starting cold pays for
//! a big dSYM whose SymCache another worker shared, against converting it
//! (`symcluster_loadtest::cold_start`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use symcluster_client::{Client, api};
use symcluster_engine::reports::routing::routing_image;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions, repo};
use symcluster_loadtest::{body_store, builds, cold_start, images, nemesis, procstat, targets};
use symcluster_sources::layout;
use tokio::sync::{Mutex, Semaphore};

/// Load test options.
#[derive(Debug, Parser)]
#[command(name = "symcluster-loadtest", about)]
struct Args {
    /// Master group sizes to measure (1 or 3).
    #[arg(long, value_delimiter = ',', default_values_t = [1])]
    masters: Vec<usize>,
    /// Worker counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1])]
    workers: Vec<usize>,
    /// Routing modes to measure.
    #[arg(long, value_delimiter = ',', value_parser = ["affinity", "random"], default_values = ["affinity"])]
    routing: Vec<String>,
    /// Reports per run.
    #[arg(long, default_value_t = 400)]
    jobs: usize,
    /// Clients submitting at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// How clients submit: `stream`, every client's jobs over one `SubmitStream` call (what an
    /// ingestion service sending many reports does), or `unary`, a `Submit` and a `WatchJob`
    /// call per job.
    #[arg(long, value_parser = ["stream", "unary"], default_value = "stream")]
    submit: String,
    /// How reports travel: `zstd`, compressed once before the run (as the SDK compresses a report
    /// on the device and the ingestion service passes it on), or `plain`, uncompressed.
    #[arg(long, value_parser = ["zstd", "plain"], default_value = "zstd")]
    reports: String,
    /// Which images the reports list: `all`, as the CrashProbe Sentry events do (every image
    /// loaded in the process: 254 to 328, of which 8 to 15 hold a frame), or `referenced`, only
    /// the images the frames are in, as Apple's `.ips` reports do
    /// (`symcluster_loadtest::images`).
    #[arg(long, value_parser = ["all", "referenced"], default_value = "all")]
    images: String,
    /// Which images each result lists (`NativeJob.modules`): `referenced`, the images a frame
    /// is in (the default), or `all`, every image of the report (as every result did before
    /// results listed referenced images only).
    #[arg(long, value_parser = ["referenced", "all"], default_value = "referenced")]
    modules: String,
    /// Who reads each report's cache-affinity key: `sender`, the load generator once per
    /// distinct report before the run (as the client library, symctl or a Kafka producer's
    /// header give it with the job: `NativeJob.routing_key`), or `master`, the leader on every
    /// submit (it decompresses and scans the report).
    #[arg(long, value_parser = ["sender", "master"], default_value = "sender")]
    routing_key: String,
    /// SIGKILL the leader after this many acknowledged submits (and count lost and duplicated
    /// jobs, and the failover time).
    #[arg(long)]
    kill_leader_after: Option<usize>,
    /// SIGKILL a follower after this many acknowledged submits, restart it after
    /// `--follower-down`, and print how long it took to catch up after its restart and whether
    /// it caught up from the log or from a snapshot (and the snapshot's bytes).
    #[arg(long)]
    kill_follower_after: Option<usize>,
    /// Start a new master with `--join` after this many acknowledged submits and add it to the
    /// group (`Admin/AddMember`), and print how long it took to become a voter (it receives a
    /// snapshot of the index, catches up from the log, and the leader promotes it).
    #[arg(long)]
    add_master_after: Option<usize>,
    /// How long a follower killed by `--kill-follower-after` stays down (`10s`, `500ms`).
    #[arg(long, value_parser = symcluster_telemetry::flags::duration, default_value = "10s")]
    follower_down: Duration,
    /// Slots per worker.
    #[arg(long, default_value_t = 2)]
    slots: u32,
    /// Leases a worker holds beyond its slots, waiting for a slot (the worker's `--prefetch`;
    /// default: the worker's own, 2 per slot).
    #[arg(long)]
    prefetch: Option<u32>,
    /// Memory cache per worker (`512MiB`, `200KB`; a bare number is bytes).
    #[arg(long = "memory-cache", alias = "memory-cache-bytes", value_name = "SIZE",
        value_parser = symcluster_telemetry::flags::bytes, default_value = "512MiB")]
    memory_cache_bytes: u64,
    /// Disk cache per worker (`1GiB`, `400KB`; a bare number is bytes).
    #[arg(long = "disk-cache", alias = "disk-cache-bytes", value_name = "SIZE",
        value_parser = symcluster_telemetry::flags::bytes, default_value = "1GiB")]
    disk_cache_bytes: u64,
    /// App builds: with N > 1, the CrashProbe debug files and reports are copied under new
    /// debug ids N − 1 times (as N builds of an app and its libraries), and the jobs pick builds
    /// in a fixed shuffled order, so that the debug files a run needs (15.5 MB per build) can
    /// exceed the workers' caches (`--memory-cache`, `--disk-cache`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    builds: u32,
    /// Whether workers share the SymCaches they convert through the bucket (their
    /// `--share-symcaches`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    share_symcaches: bool,
    /// Print the leader's RSS after every this many completed jobs (0: never).
    #[arg(long, default_value_t = 0)]
    rss_every: usize,
    /// The shared fixtures folder.
    #[arg(long, default_value_os_t = repo().join("../shared/fixtures"))]
    fixtures: std::path::PathBuf,
    /// Log output on stderr (`RUST_LOG` chooses what; default `warn`).
    #[command(flatten)]
    log: symcluster_telemetry::LogArgs,
    /// Another measurement instead of the load runs.
    #[command(subcommand)]
    mode: Option<Mode>,
}

/// Measurements other than the load runs.
#[derive(Debug, clap::Subcommand)]
enum Mode {
    /// What a worker starting with empty caches pays for a big dSYM whose SymCache another
    /// worker converted and shared, against converting it again (one report, three workers in
    /// turn; `symcluster_loadtest::cold_start`).
    ColdStart {
        /// The dSYM bundle (or its DWARF file); default: BigApp from
        /// `bash scripts/generate-big-dsym.sh`.
        #[arg(default_value_os_t = repo().join("target/big-dsym/BigApp.dSYM"))]
        dsym: std::path::PathBuf,
        /// Run each worker that converts in a memory cgroup of this size (`600MiB`), as a
        /// container's limit, and print the cgroup's peak charge and OOM kills (needs root).
        #[arg(long, value_name = "SIZE", value_parser = symcluster_telemetry::flags::bytes)]
        memory_limit: Option<u64>,
    },
    /// What keeping each job's report and result in the object store would cost: PUT and GET
    /// of CrashProbe report bodies and of result-sized bodies against a real Garage, with the
    /// client's and Garage's CPU per request (`symcluster_loadtest::body_store`). Uses
    /// `--jobs` requests per row and `--concurrency` at a time.
    BodyStore {
        /// Bytes of each result body (a compressed result of the referenced images).
        #[arg(long, default_value_t = 3_000)]
        result_bytes: usize,
    },
    /// Random client calls (submits, repeated submits, reads) while faults are injected into
    /// the masters, every call recorded and the history checked for what a linearizable job
    /// index must never show: lost or doubly created jobs, stale reads, finished jobs that go
    /// back, wrong results, replicas that differ (`symcluster_loadtest::nemesis`). Prints the
    /// faults and every anomaly; exits 1 when there is one.
    Nemesis {
        /// Masters in the group.
        #[arg(long, default_value_t = 3)]
        masters: usize,
        /// Workers (0: only unreadable reports, stored FAILED at once, are submitted).
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// How long the clients and the nemesis run, seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Faults to choose from, one at a time: `kill` (SIGKILL a master, start it again),
        /// `pause` (SIGSTOP, then SIGCONT), `partition` (masters cut from each other while
        /// clients reach them all; each master then runs in a network namespace of its own,
        /// which needs root and iproute2), `disk-full` (a master's data directory filled to
        /// ENOSPC, then freed; each master's data directory is then a tmpfs of its own, which
        /// needs root), `snapshot` (a follower SIGKILLed and started again once the leader's
        /// log no longer holds what it lacks, so it catches up from a streamed snapshot; every
        /// master then keeps a 1 MiB log; every other time the follower first crashes inside
        /// the install), `clock` (a master's wall clock stepped 1 min to 1 h ahead or behind,
        /// then back; every master then runs with libfaketime preloaded, from Debian's
        /// `faketime`), `slow-disk` (every fsync of a master's log and index 20-250 ms late),
        /// `fsync-crash` (a master crashed right before or after one such fsync, then started
        /// again), `membership` (a master replaced by a new one under load, added first or
        /// removed first; then the clients and workers are given the new masters); `none` for
        /// a run without faults. `snapshot`, `slow-disk` and `fsync-crash`
        /// need masters built with their failpoints (`--features symcluster-master/failpoints`,
        /// as scripts/test.sh builds them).
        #[arg(long, value_delimiter = ',', default_values = ["kill", "pause"])]
        faults: Vec<String>,
        /// Seeds every choice of the clients and the nemesis.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Clients calling at once.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Writes the run's history here, as JSON lines
        /// (`symcluster_loadtest::nemesis::history_file`). Without it, a run that found an
        /// anomaly writes `nemesis-seed-<seed>.jsonl` in the working directory.
        #[arg(long)]
        history: Option<std::path::PathBuf>,
        /// Starts no cluster: checks the history in this file (written by a run) again,
        /// prints its anomalies and exits 1 when there is one.
        #[arg(long, conflicts_with = "history")]
        check: Option<std::path::PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The client library's warnings (h2 connection errors, failovers) go to stderr.
    symcluster_telemetry::init_logs_with(args.log.log_format, "warn");
    if let Some(Mode::ColdStart { dsym, memory_limit }) = &args.mode {
        // As below: Ctrl-C drops the cluster, its processes and its data directory.
        return tokio::select! {
            result = cold_start::run(dsym, *memory_limit) => result,
            signal = interrupted() => {
                eprintln!("{signal}: cluster stopped, data directory removed");
                std::process::exit(130);
            }
        };
    }
    if let Some(Mode::Nemesis {
        masters,
        workers,
        seconds,
        faults,
        seed,
        clients,
        history,
        check,
    }) = &args.mode
    {
        if let Some(path) = check {
            let file = nemesis::history_file::read(path)?;
            let anomalies = nemesis::check::check(&file.ops, &file.ends);
            println!(
                "{}: run {}, {} calls, {} fault events, {} jobs, {} anomalies",
                path.display(),
                file.run,
                file.ops.len(),
                file.events.len(),
                file.ends.len(),
                anomalies.len()
            );
            for a in &anomalies {
                println!("  ANOMALY {} {}: {}", a.kind, a.job, a.detail);
            }
            std::process::exit(i32::from(!anomalies.is_empty()));
        }
        let faults = faults
            .iter()
            .filter(|f| f.as_str() != "none")
            .map(|f| f.parse())
            .collect::<Result<Vec<nemesis::faults::Fault>, String>>()
            .map_err(anyhow::Error::msg)?;
        let options = nemesis::Options {
            masters: *masters,
            workers: *workers,
            duration: Duration::from_secs(*seconds),
            faults,
            seed: *seed,
            clients: *clients,
        };
        let report = tokio::select! {
            report = nemesis::run(&options) => report?,
            signal = interrupted() => {
                eprintln!("{signal}: cluster stopped, data directory removed");
                std::process::exit(130);
            }
        };
        print!("{report}");
        let keep = history.clone().or_else(|| {
            (!report.anomalies.is_empty())
                .then(|| std::path::PathBuf::from(format!("nemesis-seed-{seed}.jsonl")))
        });
        if let Some(path) = keep {
            nemesis::history_file::write(&path, &report.history_file(&options))?;
            println!(
                "history: {} (check it again: symcluster-loadtest nemesis --check {}; run it again: --seed {seed})",
                path.display(),
                path.display()
            );
        }
        std::process::exit(i32::from(!report.anomalies.is_empty()));
    }
    let crashprobe = args.fixtures.join("crashprobe");
    if let Some(Mode::BodyStore { result_bytes }) = &args.mode {
        let build = builds::original(
            &[&crashprobe.join("release/dSYMs")],
            &[&crashprobe.join("release/arm64")],
        )?;
        let bodies: Vec<Vec<u8>> = build
            .reports
            .iter()
            .map(|r| symcluster_client::report::compressed_job(r).report_zstd)
            .collect();
        return tokio::select! {
            result = body_store::run(&bodies, args.jobs, args.concurrency, *result_bytes) => result,
            signal = interrupted() => {
                eprintln!("{signal}: Garage stopped, data directory removed");
                std::process::exit(130);
            }
        };
    }
    let original = builds::original(
        &[
            &crashprobe.join("release/dSYMs"),
            &crashprobe.join("debug/dSYMs"),
        ],
        &[
            &crashprobe.join("release/arm64"),
            &crashprobe.join("debug/arm64"),
        ],
    )?;
    let mut derived = Vec::new();
    let mut reports = Vec::new();
    for build in 0..args.builds {
        let copy;
        let build = if build == 0 {
            &original
        } else {
            copy = builds::derive(&original, build)?;
            derived.push(copy);
            derived.last().expect("just pushed")
        };
        for report in &build.reports {
            let trimmed;
            let report = if args.images == "referenced" {
                trimmed = images::referenced_only(report)?;
                &trimmed
            } else {
                report
            };
            let routing_key = if args.routing_key == "sender" {
                routing_image(report)?.map_or_else(
                    || symcluster_client::report::NO_ROUTING_KEY.to_owned(),
                    |id| id.to_string(),
                )
            } else {
                String::new()
            };
            let modules = if args.modules == "all" {
                api::Modules::All
            } else {
                api::Modules::Referenced
            };
            reports.push(if args.reports == "zstd" {
                api::NativeJob {
                    routing_key,
                    modules: modules.into(),
                    ..symcluster_client::report::compressed_job(report)
                }
            } else {
                api::NativeJob {
                    report: report.clone(),
                    report_zstd: Vec::new(),
                    routing_key,
                    modules: modules.into(),
                }
            });
        }
    }
    if args.builds > 1 {
        shuffle(&mut reports);
    }
    let derived = Arc::new(derived);
    let reports = Arc::new(reports);
    println!(
        "{} jobs per run, {} in flight ({} submits), CrashProbe reports ({} distinct, {} build(s), {}, {} images, results list {} images, routing key read by the {}), {} slots per worker, prefetch {}",
        args.jobs,
        args.concurrency,
        args.submit,
        reports.len(),
        args.builds,
        args.reports,
        args.images,
        args.modules,
        args.routing_key,
        args.slots,
        args.prefetch
            .map_or_else(|| "2 per slot".to_owned(), |n| n.to_string())
    );
    println!(
        "| masters | workers | routing | reports/s | p50 ms | p99 ms | master RSS MiB | master CPU ms/job | follower CPU ms/job | worker CPU ms/job | CPU ms/report (all) | Garage CPU ms/job | load generator CPU ms/job | cmds/fsync | lost | duplicated | failover ms | cache hit rate | affine leases | conversions | snapshot MiB sent |"
    );
    println!(
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    // Ctrl-C or SIGTERM drops the run in progress, and with it the cluster: its processes are
    // killed and its data directory (often on tmpfs, so memory) is removed.
    tokio::select! {
        result = sweep(&args, reports, derived) => result,
        signal = interrupted() => {
            eprintln!("{signal}: cluster stopped, data directory removed");
            std::process::exit(130);
        }
    }
}

/// Resolves on SIGINT or SIGTERM, naming the signal.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

/// One run per (masters, workers, routing) combination, one table row each.
async fn sweep(
    args: &Args,
    reports: Arc<Vec<api::NativeJob>>,
    derived: Arc<Vec<builds::Build>>,
) -> anyhow::Result<()> {
    for &masters in &args.masters {
        for &workers in &args.workers {
            for routing in &args.routing {
                let routing: &'static str = if routing == "random" {
                    "random"
                } else {
                    "affinity"
                };
                let line = run(args, masters, workers, routing, reports.clone(), &derived).await?;
                println!("{line}");
            }
        }
    }
    Ok(())
}

/// The value of the sample `name` (with its labels as exposed, e.g. `x_total{a="b"}`) in master
/// `id`'s metrics; 0 when it is down or has none.
async fn master_metric(cluster: &Cluster, id: u64, name: &str) -> f64 {
    cluster.master_metric(id, name).await.unwrap_or(0.0)
}

/// `--kill-follower-after` and `--follower-down`: one follower killed, restarted, and timed
/// until it caught up.
#[derive(Default)]
struct FollowerDown {
    /// The follower and when it was killed.
    killed: Option<(u64, Instant)>,
    /// When it was started again.
    restarted: Option<Instant>,
}

impl FollowerDown {
    /// Kills the first follower once `acknowledged` reaches `--kill-follower-after`, and starts
    /// it again once it was down `--follower-down`.
    fn step(&mut self, cluster: &mut Cluster, followers: &[u64], acknowledged: usize, args: &Args) {
        let Some(after) = args.kill_follower_after else {
            return;
        };
        match (self.killed, self.restarted) {
            (None, _) if acknowledged >= after => {
                if let Some(&follower) = followers.first() {
                    cluster.kill_master(follower);
                    self.killed = Some((follower, Instant::now()));
                }
            }
            (Some((follower, at)), None) if at.elapsed() >= args.follower_down => {
                cluster.start_master(follower);
                self.restarted = Some(Instant::now());
            }
            _ => {}
        }
    }

    /// After the load: restarts the follower if it is still down, waits (at most 5 minutes)
    /// until its applied index reaches the leader's commit index, and prints how long that took
    /// after its restart and how it caught up (its log, or a snapshot of how many bytes).
    async fn finish(&mut self, cluster: &mut Cluster, leader: u64) {
        let Some((follower, killed_at)) = self.killed else {
            return;
        };
        let restarted = *self.restarted.get_or_insert_with(|| {
            cluster.start_master(follower);
            Instant::now()
        });
        let commit = master_metric(cluster, leader, "symcluster_raft_commit_index").await;
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut caught_up = None;
        while Instant::now() < deadline {
            if master_metric(cluster, follower, "symcluster_raft_applied_index").await >= commit {
                caught_up = Some(restarted.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let snapshots = master_metric(
            cluster,
            follower,
            "symcluster_raft_snapshots_total{direction=\"received\",outcome=\"ok\"}",
        )
        .await;
        let bytes = master_metric(
            cluster,
            follower,
            "symcluster_raft_snapshot_bytes_total{direction=\"received\"}",
        )
        .await;
        let how = if snapshots > 0.0 {
            format!(
                "from {snapshots} snapshot(s), {:.1} MiB received",
                bytes / f64::from(1 << 20)
            )
        } else {
            "from the log (no snapshot)".to_owned()
        };
        match caught_up {
            Some(took) => eprintln!(
                "follower {follower}: down {:.1} s, caught up with the leader's commit index \
                 {commit} {:.1} s after its restart, {how}",
                (restarted - killed_at).as_secs_f64(),
                took.as_secs_f64()
            ),
            None => eprintln!(
                "follower {follower}: did not reach the leader's commit index {commit} within 5 \
                 minutes of its restart ({how})"
            ),
        }
    }
}

/// `--add-master-after`: a new master joined under load, timed until it votes.
#[derive(Default)]
struct AddMaster {
    /// The new member, and the task that adds it and waits until it is a voter (its time).
    added: Option<(u64, tokio::task::JoinHandle<anyhow::Result<Duration>>)>,
}

impl AddMaster {
    /// Starts the new master and its `AddMember` once `acknowledged` reaches the flag.
    fn step(&mut self, cluster: &mut Cluster, acknowledged: usize, args: &Args, client: &Client) {
        if self.added.is_some() || args.add_master_after.is_none_or(|k| acknowledged < k) {
            return;
        }
        let id = cluster.join_master();
        let address = cluster.member_address(id);
        let client = client.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            client
                .on_leader(|channel| {
                    let request = api::AddMemberRequest {
                        id,
                        address: address.clone(),
                    };
                    async move {
                        api::admin_client::AdminClient::new(channel)
                            .add_member(request)
                            .await
                    }
                })
                .await?;
            loop {
                let members = client
                    .on_leader(|channel| async move {
                        api::admin_client::AdminClient::new(channel)
                            .list_members(api::ListMembersRequest {})
                            .await
                            .map(|r| r.into_inner())
                    })
                    .await?;
                if members
                    .members
                    .iter()
                    .any(|m| m.id == id && m.role == "voter")
                {
                    return Ok(started.elapsed());
                }
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(600),
                    "member {id} is not a voter after 10 minutes"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        self.added = Some((id, task));
    }

    /// After the load: prints how long the new member took to become a voter, and the
    /// snapshot it received.
    async fn finish(&mut self, cluster: &Cluster) {
        let Some((id, task)) = self.added.take() else {
            return;
        };
        let took = task.await;
        let bytes = master_metric(
            cluster,
            id,
            "symcluster_raft_snapshot_bytes_total{direction=\"received\"}",
        )
        .await;
        match took {
            Ok(Ok(took)) => eprintln!(
                "new member {id}: a voter {:.1} s after AddMember, from a snapshot of {:.1} MiB",
                took.as_secs_f64(),
                bytes / f64::from(1 << 20)
            ),
            Ok(Err(e)) => eprintln!("new member {id}: {e}"),
            Err(e) => eprintln!("new member {id}: the task failed: {e}"),
        }
    }
}

/// The fsync histogram's (sum, count) from a master's metrics.
async fn fsync_counts(metrics_port: u16) -> (f64, f64) {
    let text = procstat::http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics")
        .await
        .unwrap_or_default();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        value("symcluster_raft_entries_per_fsync_sum "),
        value("symcluster_raft_entries_per_fsync_count "),
    )
}

async fn run(
    args: &Args,
    masters: usize,
    workers: usize,
    routing: &'static str,
    reports: Arc<Vec<api::NativeJob>>,
    derived: &[builds::Build],
) -> anyhow::Result<String> {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            routing,
            masters,
            ..MasterOptions::default()
        },
    )
    .await;
    let mut worker_args = vec![format!("--share-symcaches={}", args.share_symcaches)];
    if let Some(prefetch) = args.prefetch {
        worker_args.push(format!("--prefetch={prefetch}"));
    }
    for _ in 0..workers {
        cluster
            .add_worker_with(WorkerOptions {
                slots: args.slots,
                memory_cache_bytes: args.memory_cache_bytes,
                disk_cache_bytes: args.disk_cache_bytes,
                args: worker_args.clone(),
                ..WorkerOptions::default()
            })
            .await;
    }
    let crashprobe = args.fixtures.join("crashprobe");
    let out = cluster.symctl(&[
        "upload",
        "dsym",
        &crashprobe.join("release/dSYMs").display().to_string(),
        &crashprobe.join("debug/dSYMs").display().to_string(),
    ]);
    anyhow::ensure!(
        out.status.success(),
        "upload failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The other builds straight into the bucket, where `symctl upload` puts files: the
    // project's prefix, the whole file under each of its debug ids.
    let bucket = cluster.garage.bucket().await;
    for file in derived.iter().flat_map(|b| &b.debug_files) {
        for id in &file.debug_ids {
            let key = layout::debug_file_key(&layout::Scope::Project("default").prefix(""), id);
            bucket.put(&key, file.bytes.clone()).await?;
        }
    }

    let leader = cluster.wait_for_leader().await;
    fn pids(cluster: &Cluster, ids: &[u64]) -> Vec<u32> {
        ids.iter()
            .filter_map(|id| cluster.masters[*id as usize - 1].pid())
            .collect()
    }
    let followers: Vec<u64> = (1..=masters as u64).filter(|&id| id != leader).collect();
    let worker_pids: Vec<u32> = cluster
        .workers
        .iter()
        .flatten()
        .map(|p| p.child.id())
        .collect();
    let master_cpu_before: Vec<u64> = (1..=masters as u64)
        .map(|id| procstat::cpu_ms(&pids(&cluster, &[id])))
        .collect();
    let cpu_before = (
        procstat::cpu_ms(&pids(&cluster, &[leader])),
        procstat::cpu_ms(&pids(&cluster, &followers)),
        procstat::cpu_ms(&worker_pids),
    );
    let fsync_before = fsync_counts(cluster.masters[leader as usize - 1].metrics_port).await;
    // Apart from the cluster's: Garage's and this process's (the load generator's).
    let garage_pids: Vec<u32> = cluster.garage.pid().into_iter().collect();
    let outside_before = (
        procstat::cpu_ms(&garage_pids),
        procstat::cpu_ms(&[std::process::id()]),
    );

    // Every worker's cache directory, watched until the run ends: the disk cache's budget.
    let disk_watch = procstat::DiskWatch::start(
        (0..cluster.workers.len())
            .filter_map(|i| Some((cluster.worker_cache_dir(i), cluster.worker_pid(i)?)))
            .collect(),
        Duration::from_millis(50),
    );

    let client = cluster.client().await;
    let stream = (args.submit == "stream").then(|| client.submit_stream());
    let gate = Arc::new(Semaphore::new(args.concurrency));
    let acknowledged: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.jobs);
    let mut killed_at = None;
    let mut follower_down = FollowerDown::default();
    let mut add_master = AddMaster::default();
    for i in 0..args.jobs {
        let permit = gate.clone().acquire_owned().await?;
        follower_down.step(
            &mut cluster,
            &followers,
            acknowledged.lock().await.len(),
            args,
        );
        add_master.step(&mut cluster, acknowledged.lock().await.len(), args, &client);
        if let Some(k) = args.kill_leader_after
            && killed_at.is_none()
            && acknowledged.lock().await.len() >= k
        {
            cluster.kill_master(leader);
            killed_at = Some(Instant::now());
        }
        if args.rss_every > 0 && i > 0 && i % args.rss_every == 0 {
            let pid = pids(&cluster, &[leader]);
            eprintln!(
                "after {i} jobs submitted ({} done): leader RSS {:.0} MiB",
                done.load(std::sync::atomic::Ordering::Relaxed),
                procstat::rss_mib(pid.first().copied().unwrap_or(0))
            );
        }
        let mut client = client.clone();
        let stream = stream.clone();
        let report = reports[i % reports.len()].clone();
        let (acknowledged, done) = (acknowledged.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let id = format!("load-{i}");
            let limit = Duration::from_secs(120);
            let spec = api::JobSpec {
                job_id: id.clone(),
                payload: Some(api::job_spec::Payload::Native(report)),
                project: String::new(),
            };
            let (created, job) = if let Some(stream) = stream {
                let submitted = stream.submit(spec, true).await?;
                acknowledged.lock().await.push((id.clone(), Instant::now()));
                let created = submitted.response.created;
                (
                    created,
                    tokio::time::timeout(limit, submitted.finished()).await??,
                )
            } else {
                let created = client.submit(spec).await?.created;
                acknowledged.lock().await.push((id.clone(), Instant::now()));
                (
                    created,
                    tokio::time::timeout(limit, client.wait(&id)).await??,
                )
            };
            drop(permit);
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Keep no result: a long run would hold every result in memory.
            let completed = job.state == api::JobState::Completed as i32;
            Ok::<(Duration, bool, bool), anyhow::Error>((t.elapsed(), created, completed))
        }));
    }
    let mut latency = Histogram::<u64>::new(3)?;
    let mut completed = 0u64;
    let mut created_twice = 0u64;
    let mut errors = Vec::new();
    for task in tasks {
        match task.await? {
            Ok((elapsed, created, job_completed)) => {
                latency.record(elapsed.as_micros() as u64)?;
                completed += u64::from(job_completed);
                created_twice += u64::from(!created);
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    let elapsed = started.elapsed();
    let final_leader = cluster.wait_for_leader().await;
    follower_down.finish(&mut cluster, final_leader).await;
    add_master.finish(&cluster).await;
    let live_followers: Vec<u64> = followers
        .iter()
        .copied()
        .filter(|&id| id != final_leader)
        .collect();
    let cpu_after = (
        procstat::cpu_ms(&pids(&cluster, &[final_leader])),
        procstat::cpu_ms(&pids(&cluster, &live_followers)),
        procstat::cpu_ms(&worker_pids),
    );
    // Every master's CPU over the run (a master killed in it counts 0: it is gone), plus the
    // workers': the cluster's whole cost per report.
    let masters_cpu: u64 = (1..=masters as u64)
        .map(|id| {
            procstat::cpu_ms(&pids(&cluster, &[id]))
                .saturating_sub(master_cpu_before[id as usize - 1])
        })
        .sum();
    let outside_after = (
        procstat::cpu_ms(&garage_pids),
        procstat::cpu_ms(&[std::process::id()]),
    );
    let fsync_after = fsync_counts(cluster.masters[final_leader as usize - 1].metrics_port).await;
    let rss = procstat::rss_mib(
        pids(&cluster, &[final_leader])
            .first()
            .copied()
            .unwrap_or(0),
    );
    // Let the workers' next heartbeat carry their final cache counters.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let status = cluster.status().await;
    let (hits, misses) = status
        .workers
        .iter()
        .fold((0, 0), |(h, m), w| (h + w.cache_hits, m + w.cache_misses));
    // SymCache conversions over the run, all workers: what routing and shared SymCaches save.
    let mut conversions = 0.0;
    let (mut evictions, mut evicted_bytes) = (0.0, 0.0);
    for metrics in &cluster.worker_metrics {
        let text = procstat::http_get(metrics, "/metrics")
            .await
            .unwrap_or_default();
        let sum = |prefix: &str, label: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(prefix) && l.contains(label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        conversions += sum("symcluster_worker_step_seconds_count{", "step=\"convert\"");
        evictions += sum("symcluster_worker_disk_cache_evictions_total ", "");
        evicted_bytes += sum("symcluster_worker_disk_cache_evicted_bytes_total ", "");
    }
    let (disk, _) = disk_watch.stop();
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    eprintln!(
        "worker disk, peak of any worker: {:.1} MiB in the disk cache (budget {:.1} MiB), {:.1} MiB \
         temporary (downloads), {:.1} MiB evicted but still mapped; {evictions} evictions of \
         {:.1} MiB, all workers",
        mib(disk.entries),
        mib(args.disk_cache_bytes),
        mib(disk.temporary),
        mib(disk.evicted_mapped),
        evicted_bytes / f64::from(1 << 20),
    );
    // The index on disk (what the operator guide's disk sizing rule is made of): the leader's
    // `master.redb`, its body files and its Raft log, in bytes per job of the run.
    let data_dir = cluster.master_data_dir(final_leader);
    let (redb, bodies, log) = (
        procstat::disk_bytes(&data_dir.join("master.redb")),
        procstat::disk_bytes(&data_dir.join("master.bodies")),
        procstat::log_disk(&data_dir.join("raft-log")),
    );
    eprintln!(
        "index on disk (leader): master.redb {:.1} MiB ({:.0} bytes per job), master.bodies \
         {:.1} MiB ({:.0} bytes per job), raft-log {:.1} MiB ({:.0} bytes per job) and {:.1} MiB \
         of zeros made ahead",
        mib(redb),
        redb as f64 / args.jobs as f64,
        mib(bodies),
        bodies as f64 / args.jobs as f64,
        mib(log.records),
        log.records as f64 / args.jobs as f64,
        mib(log.ahead),
    );
    let jobs = args.jobs as f64;
    let per_job = |before: u64, after: u64| (after.saturating_sub(before)) as f64 / jobs;
    // After a failover: the new leader's CPU over the whole run (a follower, then the leader).
    let master_cpu = per_job(master_cpu_before[final_leader as usize - 1], cpu_after.0);
    // The followers' mean CPU per job (none with one master).
    let follower_ms = (!live_followers.is_empty()).then(|| {
        let before: u64 = live_followers
            .iter()
            .map(|id| master_cpu_before[*id as usize - 1])
            .sum();
        per_job(before, cpu_after.1) / live_followers.len() as f64
    });
    let follower_cpu = follower_ms.map_or_else(|| "-".into(), |ms| format!("{ms:.2}"));
    let (kill_columns, failover) = match killed_at {
        Some(at) => {
            let first_after = acknowledged
                .lock()
                .await
                .iter()
                .filter(|(_, t)| *t > at)
                .map(|(_, t)| (*t - at).as_millis())
                .min();
            let lost = args.jobs as u64 - completed;
            let groups: u64 = client
                .ingest()
                .list_groups(api::ListGroupsRequest {
                    page_size: 1000,
                    project: String::new(),
                    call_trees: false,
                    kind: String::new(),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().groups.iter().map(|g| g.count).sum())
                .unwrap_or(0);
            // A job created twice would be completed or counted in its group twice. A submit
            // answered `created: false` is not one: the client library resubmitted it to the new
            // leader after the old one had committed it but died before answering (submits are
            // idempotent by id), and the index holds it once.
            let duplicated = status.jobs_completed.saturating_sub(completed)
                + groups.saturating_sub(status.jobs_completed);
            if created_twice > 0 {
                eprintln!(
                    "{created_twice} submits resubmitted across the failover found their job \
                     already created (committed by the old leader, not answered before the kill)"
                );
            }
            if duplicated > 0 {
                eprintln!(
                    "duplicated: {} more completed than acknowledged ({} completed in the \
                     index), {} more group counts than completed",
                    status.jobs_completed.saturating_sub(completed),
                    status.jobs_completed,
                    groups.saturating_sub(status.jobs_completed)
                );
            }
            (
                format!("{lost} | {duplicated}"),
                first_after.map_or("none".into(), |ms| ms.to_string()),
            )
        }
        None => ("- | -".into(), "-".into()),
    };
    if !errors.is_empty() {
        eprintln!("{} jobs failed; first: {}", errors.len(), errors[0]);
    }
    let snapshot_mib = master_metric(
        &cluster,
        final_leader,
        "symcluster_raft_snapshot_bytes_total{direction=\"sent\"}",
    )
    .await
        / f64::from(1 << 20);
    let cmds_per_fsync =
        (fsync_after.0 - fsync_before.0) / (fsync_after.1 - fsync_before.1).max(1.0);
    let measured = targets::Measured {
        masters,
        reports_per_s: jobs / elapsed.as_secs_f64(),
        p99_ms: latency.value_at_quantile(0.99) as f64 / 1000.0,
        cpu_all_ms: (masters_cpu + cpu_after.2.saturating_sub(cpu_before.2)) as f64 / jobs,
        leader_ms: master_cpu,
        follower_ms,
        worker_ms: per_job(cpu_before.2, cpu_after.2),
        disk_bytes_per_job: (redb + bodies + log.records) as f64 / jobs,
    };
    for line in targets::lines(&measured) {
        eprintln!("{line}");
    }
    Ok(format!(
        "| {masters} | {workers} | {routing} | {:.1} | {:.1} | {:.1} | {rss:.0} | {master_cpu:.2} | {follower_cpu} | {:.2} | {:.2} | {:.2} | {:.2} | {cmds_per_fsync:.1} | {kill_columns} | {failover} | {:.1}% | {:.0}% | {conversions} | {snapshot_mib:.1} |",
        measured.reports_per_s,
        latency.value_at_quantile(0.5) as f64 / 1000.0,
        measured.p99_ms,
        measured.worker_ms,
        measured.cpu_all_ms,
        per_job(outside_before.0, outside_after.0),
        per_job(outside_before.1, outside_after.1),
        100.0 * hits as f64 / (hits + misses).max(1) as f64,
        100.0 * status.affine_leases as f64 / status.total_leases.max(1) as f64,
    ))
}

/// Shuffles `items` in a fixed order (Fisher–Yates with a fixed xorshift64 seed), so that runs
/// compare the same sequence.
fn shuffle<T>(items: &mut [T]) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}
