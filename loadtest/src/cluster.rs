//! Real local clusters for tests and load runs: a Garage S3 server, a master and workers, each a
//! real process on loopback, started from the release binaries.
//!
//! Binaries are found in `SYMCLUSTER_BIN_DIR`, else `target/release` of this workspace
//! (`cargo build --release --bins` first); `garage` on PATH (see `deploy/garage.sh`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::network::{Forwarder, Network};
use crate::small_disk::SmallDisk;
use symcluster_client::{Client, api};
use symcluster_sources::{S3Settings, Source};

/// The token every cluster started here uses.
pub const TOKEN: &str = "symcluster-test-token";

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the workspace's release artifacts are: `SYMCLUSTER_BIN_DIR`, else `release` under
/// cargo's target directory (`CARGO_TARGET_DIR`, relative to the workspace when relative, as
/// cargo reads it; else `target`).
pub fn release_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SYMCLUSTER_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| repo().join("target"), |t| repo().join(t));
    target.join("release")
}

/// A release binary of the workspace (in [`release_dir`]); panics when it is not built.
pub fn bin(name: &str) -> PathBuf {
    let path = release_dir().join(name);
    assert!(
        path.exists(),
        "{} not found: run `cargo build --release --bins` (or set SYMCLUSTER_BIN_DIR)",
        path.display()
    );
    path
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A free port `p` such that `p..=p+3` are all free (Garage uses S3, RPC and admin ports).
fn free_port_block() -> u16 {
    loop {
        let p = free_port();
        if p < 65000 && (1..=3).all(|i| TcpListener::bind(("127.0.0.1", p + i)).is_ok()) {
            return p;
        }
    }
}

/// How many times [`Garage::start`] tries (each time on other ports).
pub const GARAGE_STARTS: u32 = 5;

/// A single-node Garage server (real S3), started with `deploy/garage.sh`.
pub struct Garage {
    dir: PathBuf,
    /// The server's pid (from the script's pid file), so that dropping stops it even after its
    /// directory is gone.
    pid: Option<u32>,
    /// The S3 port.
    pub port: u16,
    /// Environment for S3 clients (`AWS_ACCESS_KEY_ID`, `SYMCLUSTER_S3_*`).
    pub env: Vec<(String, String)>,
}

impl Garage {
    /// Starts Garage in `dir` on a free port. A port found free can be taken by another
    /// test's process before Garage binds it: a start that fails is stopped and tried again on
    /// other ports, in a directory beside `dir` (`dir-2`, ...), up to [`GARAGE_STARTS`] times.
    pub fn start(dir: &Path) -> Self {
        Self::start_on(dir, free_port_block)
    }

    /// [`Garage::start`] on the ports `pick` gives (its S3 port; RPC and admin on the next
    /// ones), one per attempt.
    pub fn start_on(dir: &Path, mut pick: impl FnMut() -> u16) -> Self {
        let mut garage = Garage {
            dir: dir.to_owned(),
            pid: None,
            port: 0,
            env: Vec::new(),
        };
        for attempt in 1..=GARAGE_STARTS {
            garage.port = pick();
            if attempt > 1 {
                // A fresh directory: a Garage of the failed attempt may still be stopping.
                let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
                garage.dir = dir.with_file_name(format!(
                    "{}-{attempt}",
                    name.unwrap_or_else(|| "garage".to_owned())
                ));
            }
            match garage.try_script("start") {
                Ok(env) => {
                    garage.env = env;
                    garage.pid = garage.read_pid();
                    return garage;
                }
                Err(stderr) if attempt < GARAGE_STARTS => {
                    eprintln!(
                        "deploy/garage.sh start on port {} failed ({}); trying other ports",
                        garage.port,
                        stderr.trim()
                    );
                    let _ = garage.try_script("stop");
                }
                Err(stderr) => panic!("deploy/garage.sh start failed: {stderr}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    fn read_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("garage.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn run_script(&self, command: &str) -> Vec<(String, String)> {
        self.try_script(command)
            .unwrap_or_else(|stderr| panic!("deploy/garage.sh {command} failed: {stderr}"))
    }

    /// `deploy/garage.sh COMMAND DIR PORT`: the variables it exports, or its stderr.
    fn try_script(&self, command: &str) -> Result<Vec<(String, String)>, String> {
        let out = Command::new("bash")
            .arg(repo().join("deploy/garage.sh"))
            .arg(command)
            .arg(&self.dir)
            .arg(self.port.to_string())
            .output()
            .expect("run deploy/garage.sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprint!("{stderr}");
        if !out.status.success() {
            return Err(stderr.into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }

    /// Stops the server (its data stays).
    pub fn stop(&mut self) {
        self.run_script("stop");
        self.pid = None;
        // Wait until the port is closed.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and requests hang unanswered, as
    /// with an S3 endpoint that stalls. [`Self::resume`] continues it.
    pub fn pause(&self) {
        if let Some(pid) = self.pid {
            // SAFETY: kill(2) on the server's pid, which this guard stops on drop.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        }
    }

    /// Continues a server frozen by [`Self::pause`] (SIGCONT).
    pub fn resume(&self) {
        if let Some(pid) = self.pid {
            // SAFETY: as in `pause`.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        }
    }

    /// Starts it again after [`Self::stop`].
    pub fn restart(&mut self) {
        self.run_script("start");
        self.pid = self.read_pid();
    }

    /// A client of the bucket.
    pub async fn bucket(&self) -> Source {
        for (k, v) in &self.env {
            if k.starts_with("AWS_") {
                // SAFETY: set once per test process before any S3 client reads the environment;
                // every Garage started here uses the same fixed test key.
                unsafe { std::env::set_var(k, v) };
            }
        }
        Source::s3(&S3Settings {
            bucket: "symcluster".into(),
            endpoint: Some(format!("http://127.0.0.1:{}", self.port)),
            region: "garage".into(),
            attempts: 3,
            timeout_ms: 10_000,
        })
        .await
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        let Some(pid) = self.pid.take() else { return };
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        // A paused server must run to handle SIGTERM.
        let _ = Command::new("kill")
            .args(["-CONT", &pid.to_string()])
            .status();
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while proc_dir.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if proc_dir.exists() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// A process that is killed when dropped.
pub struct Proc {
    /// The child process.
    pub child: Child,
    /// Its name in logs.
    pub name: String,
    /// Its log file.
    pub log: PathBuf,
}

impl Proc {
    /// SIGKILL, now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `within` for the exit: its status, or `None` when the
    /// process still runs then (it is SIGKILLed when dropped).
    pub async fn terminate(mut self, within: Duration) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Master settings for a test cluster.
#[derive(Debug, Clone)]
pub struct MasterOptions {
    /// Lease duration, ms.
    pub lease_ms: u64,
    /// Heartbeat interval, ms.
    pub heartbeat_ms: u64,
    /// `affinity` or `random`.
    pub routing: &'static str,
    /// Masters in the Raft group (1 or 3).
    pub masters: usize,
    /// `--tokens-file` for every master (the admin token [`TOKEN`] is always given).
    pub tokens_file: Option<PathBuf>,
    /// Serve over TLS with these files (masters, workers and clients then use `https://`).
    pub tls: Option<TlsFiles>,
    /// Give the masters the bucket and look in it for missing files this often
    /// (`--missing-check-interval`).
    pub missing_check: Option<Duration>,
    /// More flags for every master (e.g. `--log-format json`).
    pub args: Vec<String>,
    /// More environment variables for every master (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// The Raft transport on its own listener (`--peer-listen`) on this port: master N then
    /// listens on `127.0.0.N` (one host per master, as the same peer port on every master
    /// needs; Linux routes all of 127.0.0.0/8 to the loopback interface).
    pub peer_port: Option<u16>,
    /// Each master's data directory on a filesystem of its own of this many bytes
    /// ([`SmallDisk`], a `tmpfs`; root needed), which a test can fill
    /// ([`Cluster::fill_master_disk`]).
    pub small_disks: Option<u64>,
    /// Each master in a network namespace of its own ([`Network`]; root and iproute2 needed,
    /// no TLS), listening on its host's address, so that a test can partition the masters
    /// from each other while clients and workers reach all of them
    /// ([`Cluster::partition_one_way`]). The masters reach Garage through a [`Forwarder`].
    pub namespaces: bool,
    /// Each master's wall clock movable by a test ([`Cluster::step_master_clock`]): the master
    /// runs with [`LIBFAKETIME`] preloaded, reading its offset from a file of its own every
    /// second, its monotonic clock left alone (as an NTP step or a resumed VM moves only the
    /// wall clock). Needs Debian's `faketime`.
    pub movable_clocks: bool,
}

/// Debian's libfaketime (`apt-get install faketime`; `scripts/test.sh` installs it), which
/// [`MasterOptions::movable_clocks`] preloads.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// PEM files for a TLS test cluster.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed every certificate below.
    pub ca: PathBuf,
    /// The masters' certificate (for `127.0.0.1`; also used as their client certificate
    /// towards each other) and key.
    pub master_cert: PathBuf,
    /// Key of `master_cert`.
    pub master_key: PathBuf,
    /// With a client CA, masters require client certificates of workers and masters, and the
    /// workers present this one.
    pub worker_cert: Option<(PathBuf, PathBuf)>,
}

impl MasterOptions {
    /// Master `id`'s address: `127.0.0.<id>` with a peer port, else `127.0.0.1`.
    fn master_host(&self, id: u64) -> String {
        match self.peer_port {
            Some(_) => format!("127.0.0.{id}"),
            None => "127.0.0.1".to_owned(),
        }
    }
}

impl Default for MasterOptions {
    fn default() -> Self {
        MasterOptions {
            lease_ms: 3_000,
            heartbeat_ms: 500,
            routing: "affinity",
            masters: 1,
            tokens_file: None,
            tls: None,
            missing_check: None,
            args: Vec::new(),
            env: Vec::new(),
            peer_port: None,
            small_disks: None,
            namespaces: false,
            movable_clocks: false,
        }
    }
}

/// The gRPC port of a master in a network namespace of its own ([`MasterOptions::namespaces`]);
/// its metrics port is the next.
pub const NAMESPACE_PORT: u16 = 7700;

/// One master of a test cluster: its process (while running) and its ports.
pub struct MasterProc {
    /// Raft member id (1-based).
    pub id: u64,
    /// The process, `None` while killed.
    pub proc: Option<Proc>,
    /// gRPC port.
    pub port: u16,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// Metrics port.
    pub metrics_port: u16,
    /// The address it listens on: `127.0.0.1`, or `127.0.0.N` with a peer port.
    pub host: String,
    /// Whether it is a member of the group as the test sees it (listed in the `--peers` of
    /// masters started from now on).
    pub in_group: bool,
    /// Started with `--join` (a new member of an existing group).
    pub join: bool,
}

impl MasterProc {
    /// Member `id` of the group, not started, on free ports of `host`; `join`: started with
    /// `--join`.
    fn new(id: u64, scheme: &'static str, join: bool, host: String) -> Self {
        let free = |host: &str| {
            TcpListener::bind((host, 0))
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port")
        };
        MasterProc {
            id,
            proc: None,
            scheme,
            port: free(&host),
            metrics_port: free(&host),
            host,
            in_group: true,
            join,
        }
    }

    /// Member `id` of the group, not started, alone in a network namespace whose address is
    /// `host`: every port is free there, so it takes [`NAMESPACE_PORT`] and the next.
    fn in_namespace(id: u64, host: String) -> Self {
        MasterProc {
            id,
            proc: None,
            scheme: "http",
            port: NAMESPACE_PORT,
            metrics_port: NAMESPACE_PORT + 1,
            host,
            in_group: true,
            join: false,
        }
    }

    /// `http://host:port`.
    pub fn endpoint(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }

    /// `host:port` of its `/metrics` and probes.
    pub fn metrics_address(&self) -> String {
        format!("{}:{}", self.host, self.metrics_port)
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.child.id())
    }
}

/// Worker settings for a test cluster.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Job slots.
    pub slots: u32,
    /// Memory cache budget, bytes.
    pub memory_cache_bytes: u64,
    /// Disk cache budget, bytes.
    pub disk_cache_bytes: u64,
    /// Timeout of one S3 request attempt, ms.
    pub s3_timeout_ms: u64,
    /// More flags (e.g. `--drain-timeout 1s`).
    pub args: Vec<String>,
    /// More environment variables (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// Read debug files and source maps from this directory (`--source-dir`) instead of Garage.
    pub source_dir: Option<PathBuf>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            slots: 2,
            memory_cache_bytes: 512 << 20,
            disk_cache_bytes: 1 << 30,
            s3_timeout_ms: 1000,
            args: Vec::new(),
            env: Vec::new(),
            source_dir: None,
        }
    }
}

/// A cluster: Garage, a group of masters, workers.
pub struct Cluster {
    /// The S3 server.
    pub garage: Garage,
    /// The masters, by member id - 1.
    pub masters: Vec<MasterProc>,
    /// The gRPC endpoint of every master in the group, comma-separated (what clients and
    /// workers are given).
    pub endpoint: String,
    /// The first master's metrics address.
    pub metrics: String,
    options: MasterOptions,
    /// Worker processes by index.
    pub workers: Vec<Option<Proc>>,
    /// Each worker's `/metrics` and `/ready` address (`127.0.0.1:port`), by index.
    pub worker_metrics: Vec<String>,
    /// The masters' own filesystems ([`MasterOptions::small_disks`]), by member id - 1;
    /// unmounted after every process is stopped.
    small_disks: Vec<SmallDisk>,
    /// The masters' namespaces and Garage's forwarder into them ([`MasterOptions::namespaces`]);
    /// declared after the masters, so deleted once they are stopped.
    network: Option<(Network, Forwarder)>,
    /// Scratch space (data, caches, logs); declared last, so dropped after every process.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts Garage, `options.masters` masters and `workers` workers (2 slots each), and waits
    /// until a leader is elected and the workers are connected.
    pub async fn start(workers: usize, options: MasterOptions) -> Self {
        let mut cluster = Cluster::prepare(options);
        for id in 1..=cluster.masters.len() as u64 {
            cluster.start_master(id);
        }
        cluster.wait_for_leader().await;
        for _ in 0..workers {
            cluster.add_worker(2).await;
        }
        cluster
    }

    /// Garage and the masters' ports and data directories of `options`, no master started:
    /// for a test that starts each itself ([`Self::start_master_with`]), in its own order.
    pub fn prepare(options: MasterOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let garage = Garage::start(&dir.path().join("garage"));
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let count = options.masters.max(1) as u64;
        let network = options.namespaces.then(|| {
            assert!(
                options.tls.is_none(),
                "namespaces are for clusters without TLS"
            );
            let network = Network::new(count as u32);
            let forwarder = Forwarder::start(&network.bridge_address(), garage.port)
                .expect("a forwarder to Garage on the bridge");
            (network, forwarder)
        });
        let masters: Vec<MasterProc> = (1..=count)
            .map(|id| match &network {
                Some((network, _)) => MasterProc::in_namespace(id, network.address(id as u32)),
                None => MasterProc::new(id, scheme, false, options.master_host(id)),
            })
            .collect();
        let mut cluster = Cluster {
            endpoint: masters
                .iter()
                .map(MasterProc::endpoint)
                .collect::<Vec<_>>()
                .join(","),
            metrics: masters[0].metrics_address(),
            dir,
            garage,
            masters,
            options,
            workers: Vec::new(),
            worker_metrics: Vec::new(),
            small_disks: Vec::new(),
            network,
        };
        if let Some(bytes) = cluster.options.small_disks {
            for id in 1..=cluster.masters.len() as u64 {
                let disk = SmallDisk::mount(&cluster.master_data_dir(id), bytes)
                    .expect("a small disk for a master");
                cluster.small_disks.push(disk);
            }
        }
        cluster
    }

    /// `1=127.0.0.1:p1,2=...` for `--peers`: the masters in the group.
    fn peers(&self) -> String {
        self.masters
            .iter()
            .filter(|m| m.in_group)
            .map(|m| format!("{}={}:{}", m.id, m.host, m.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts master `id` (again) on its data directory and ports.
    pub fn start_master(&mut self, id: u64) {
        self.start_master_with(id, &[]);
    }

    /// [`Self::start_master`] with more flags for this start only (after
    /// [`MasterOptions::args`]), e.g. `--restore FILE`.
    pub fn start_master_with(&mut self, id: u64, args: &[String]) {
        self.start_master_with_env(id, args, &[]);
    }

    /// [`Self::start_master_with`] with more environment variables for this start only (after
    /// [`MasterOptions::env`]), e.g. `FAILPOINTS` ([`Self::start_master_armed`]).
    pub fn start_master_with_env(&mut self, id: u64, args: &[String], env: &[(&str, &str)]) {
        let peers = self.peers();
        let m = &self.masters[id as usize - 1];
        let log = self.master_log_path(id);
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let mut command = match &self.network {
            Some((network, _)) => {
                // `ip netns exec` execs the master: the child's pid is the master's.
                let mut command = Command::new("ip");
                command
                    .args(["netns", "exec", &network.namespace(id as u32)])
                    .arg(bin("symcluster-master"));
                command
            }
            None => Command::new(bin("symcluster-master")),
        };
        command
            .args(["--listen", &format!("{}:{}", m.host, m.port)])
            .args(["--metrics-listen", &m.metrics_address()])
            .arg("--data-dir")
            .arg(self.master_data_dir(id))
            .args(["--token", TOKEN])
            .args(["--lease", &format!("{}ms", self.options.lease_ms)])
            .args(["--heartbeat", &format!("{}ms", self.options.heartbeat_ms)])
            .args(["--routing", self.options.routing])
            .args(["--id", &id.to_string()]);
        if let Some(tokens) = &self.options.tokens_file {
            command.arg("--tokens-file").arg(tokens);
        }
        if let Some(port) = self.options.peer_port {
            command.args(["--peer-listen", &format!("{}:{port}", m.host)]);
        }
        if let Some(tls) = &self.options.tls {
            command
                .arg("--tls-cert")
                .arg(&tls.master_cert)
                .arg("--tls-key")
                .arg(&tls.master_key)
                .arg("--tls-ca")
                .arg(&tls.ca);
            if tls.worker_cert.is_some() {
                command.arg("--tls-client-ca").arg(&tls.ca);
            }
        }
        if self.masters.len() > 1 {
            command.args(["--peers", &peers]);
        }
        if m.join {
            command.arg("--join");
        }
        // Every master knows the bucket (its Uploads service presigns into it); it looks in it
        // for missing files every `missing_check`, or never.
        let every = self.options.missing_check.map_or_else(
            || "0".to_owned(),
            |every| format!("{}ms", every.as_millis()),
        );
        command
            .envs(self.garage.env.iter().cloned())
            .args(["--missing-check-interval", &every]);
        if let Some((_, forwarder)) = &self.network {
            command.env(
                "SYMCLUSTER_S3_ENDPOINT",
                format!("http://{}", forwarder.address),
            );
        }
        if self.options.movable_clocks {
            assert!(
                Path::new(LIBFAKETIME).exists(),
                "{LIBFAKETIME} is missing: apt-get install faketime (scripts/test.sh installs it)"
            );
            let clock = self.master_clock_file(id);
            if !clock.exists() {
                std::fs::write(&clock, "+0").expect("write the master's clock file");
            }
            command
                .env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", &clock)
                .env("FAKETIME_CACHE_DURATION", "1")
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        command
            .args(&self.options.args)
            .args(args)
            .envs(self.options.env.iter().cloned())
            .envs(env.iter().copied());
        let child = command
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start symcluster-master");
        self.masters[id as usize - 1].proc = Some(Proc {
            child,
            name: format!("master-{id}"),
            log,
        });
    }

    /// Starts a new master with `--join` (the next id, new ports, an empty data dir) and adds
    /// it to the clients' endpoints; returns its id. The group takes it in once an operator
    /// runs `symctl admin members add` ([`Self::member_address`]).
    pub fn join_master(&mut self) -> u64 {
        self.new_master(true, &[])
    }

    /// [`Self::join_master`] without `--join` (a mistake: it must be refused).
    pub fn join_master_without_join_flag(&mut self) -> u64 {
        self.new_master(false, &[])
    }

    /// A new master (the next id, new ports, an empty data dir) started without `--join` and
    /// with `args` (e.g. `--restore FILE`); returns its id.
    pub fn new_master_with(&mut self, args: &[String]) -> u64 {
        self.new_master(false, args)
    }

    fn new_master(&mut self, join: bool, args: &[String]) -> u64 {
        let id = self.masters.len() as u64 + 1;
        let scheme = self.masters[0].scheme;
        let master = match &mut self.network {
            Some((network, _)) => {
                network.add_host(id as u32);
                let mut master = MasterProc::in_namespace(id, network.address(id as u32));
                master.join = join;
                master
            }
            None => MasterProc::new(id, scheme, join, self.options.master_host(id)),
        };
        self.masters.push(master);
        if let Some(bytes) = self.options.small_disks {
            let disk = SmallDisk::mount(&self.master_data_dir(id), bytes)
                .expect("a small disk for a master");
            self.small_disks.push(disk);
        }
        self.refresh_endpoint();
        self.start_master_with(id, args);
        id
    }

    /// [`Self::endpoint`] anew: the gRPC addresses of the masters in the group.
    fn refresh_endpoint(&mut self) {
        self.endpoint = self
            .masters
            .iter()
            .filter(|m| m.in_group)
            .map(MasterProc::endpoint)
            .collect::<Vec<_>>()
            .join(",");
    }

    /// The ids of the masters in the group as the test sees it ([`MasterProc::in_group`]),
    /// ascending: every master started, less those [`Self::forget_master`] took out.
    pub fn members(&self) -> Vec<u64> {
        self.masters
            .iter()
            .filter(|m| m.in_group)
            .map(|m| m.id)
            .collect()
    }

    /// Waits up to `within` for master `id` to exit by itself: its exit status, or `None` when
    /// it still runs (it is SIGKILLed when the cluster is dropped).
    pub async fn wait_master_exit(
        &mut self,
        id: u64,
        within: Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let proc = self.masters[id as usize - 1].proc.as_mut()?;
            if let Ok(Some(status)) = proc.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Master `id`'s log file.
    pub fn master_log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("master-{id}.log"))
    }

    /// Master `id`'s gRPC address (`http://127.0.0.1:port`), as `members add` takes it.
    pub fn member_address(&self, id: u64) -> String {
        self.masters[id as usize - 1].endpoint()
    }

    /// Stops master `id` (SIGKILL) and leaves it out of the `--peers` of masters started from
    /// now on and of [`Self::endpoint`] (it was removed from the group).
    pub fn forget_master(&mut self, id: u64) {
        self.kill_master(id);
        self.masters[id as usize - 1].in_group = false;
        self.refresh_endpoint();
    }

    /// Master `id`'s `--data-dir` (its index, Raft log and received snapshots).
    pub fn master_data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("master-{id}-data"))
    }

    /// The file master `id`'s wall-clock offset is read from ([`MasterOptions::movable_clocks`]).
    pub fn master_clock_file(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("master-{id}-clock"))
    }

    /// Sets master `id`'s wall clock to this machine's plus `offset_s` seconds (negative: behind),
    /// as a step: the master sees it within a second ([`MasterOptions::movable_clocks`]).
    pub fn step_master_clock(&self, id: u64, offset_s: i64) {
        std::fs::write(self.master_clock_file(id), format!("{offset_s:+}"))
            .expect("write the master's clock file");
    }

    /// Fills master `id`'s data directory to the last byte ([`SmallDisk::fill`]; the cluster
    /// was started with [`MasterOptions::small_disks`]): its next write that needs space fails
    /// with `ENOSPC`. Returns the bytes the filler took.
    pub fn fill_master_disk(&self, id: u64) -> u64 {
        self.small_disks[id as usize - 1]
            .fill()
            .expect("fill the master's disk")
    }

    /// Frees what [`Self::fill_master_disk`] took from master `id`'s data directory.
    pub fn free_master_disk(&self, id: u64) {
        self.small_disks[id as usize - 1]
            .free()
            .expect("free the master's disk")
    }

    /// How master `id` exited by itself, when it did (it is not waited for); `None` while it
    /// runs, or when it is not running because the test stopped it.
    pub fn master_exited(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        let proc = self.masters[id as usize - 1].proc.as_mut()?;
        proc.child.try_wait().ok().flatten()
    }

    /// Drops whatever master `from` sends to master `to` ([`Network::cut_one_way`]); clients
    /// and workers still reach both. Panics without [`MasterOptions::namespaces`].
    pub fn partition_one_way(&mut self, from: u64, to: u64) {
        self.network_mut().cut_one_way(from as u32, to as u32);
    }

    /// Removes every cut between masters.
    pub fn heal_partitions(&mut self) {
        self.network_mut().heal();
    }

    fn network_mut(&mut self) -> &mut Network {
        &mut self
            .network
            .as_mut()
            .expect("a cluster started with MasterOptions::namespaces")
            .0
    }

    /// SIGKILLs master `id`.
    pub fn kill_master(&mut self, id: u64) {
        if let Some(mut proc) = self.masters[id as usize - 1].proc.take() {
            proc.kill();
        }
    }

    /// Freezes master `id` (SIGSTOP): its connections stay open and nothing answers, as with
    /// a process that stalls. [`Self::resume_master`] continues it; dropped, it is killed.
    pub fn pause_master(&self, id: u64) {
        if let Some(pid) = self.masters[id as usize - 1].pid() {
            // SAFETY: kill(2) on our own child's pid, which is reaped only when it is killed.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        }
    }

    /// The sample `name` (with its labels as the exposition writes them, e.g.
    /// `symcluster_raft_snapshots_total{direction="received",outcome="ok"}`) in master `id`'s
    /// `/metrics`: `None` when the master does not answer or has no such sample.
    pub async fn master_metric(&self, id: u64, name: &str) -> Option<f64> {
        let address = self.masters[id as usize - 1].metrics_address();
        let text = crate::procstat::http_get(&address, "/metrics").await.ok()?;
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
    }

    /// Continues master `id` after [`Self::pause_master`] (SIGCONT).
    pub fn resume_master(&self, id: u64) {
        if let Some(pid) = self.masters[id as usize - 1].pid() {
            // SAFETY: as in `pause_master`.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        }
    }

    /// Stops master `id` with SIGTERM, as an operator would, and waits up to `within` for it to
    /// exit: its exit status, or `None` when it is still running then (it is SIGKILLed).
    pub async fn stop_master(
        &mut self,
        id: u64,
        within: Duration,
    ) -> Option<std::process::ExitStatus> {
        self.masters[id as usize - 1]
            .proc
            .take()?
            .terminate(within)
            .await
    }

    /// Kills the (first) master with SIGKILL and starts it again on the same data and port.
    pub async fn restart_master(&mut self) {
        self.kill_master(1);
        self.start_master(1);
        self.wait_for_leader().await;
    }

    /// Worker `index`'s log so far (empty once it was stopped).
    pub fn worker_log(&self, index: usize) -> String {
        self.workers[index]
            .as_ref()
            .map(Proc::log)
            .unwrap_or_default()
    }

    /// The running masters' processes.
    fn running_masters(&self) -> impl Iterator<Item = &Proc> {
        self.masters.iter().filter_map(|m| m.proc.as_ref())
    }

    /// Every running master's log, concatenated as written (no headers).
    pub fn master_logs_raw(&self) -> String {
        self.running_masters().map(Proc::log).collect()
    }

    /// Every running master's log, for failure messages.
    pub fn master_logs(&self) -> String {
        self.running_masters()
            .map(|p| format!("--- {}\n{}", p.name, p.log()))
            .collect()
    }

    /// Waits until some master leads (and answers as leader); returns its member id.
    pub async fn wait_for_leader(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for m in self.masters.iter().filter(|m| m.proc.is_some()) {
                if let Ok(client) = Client::connect_with(&m.endpoint(), TOKEN, self.tls()).await
                    && let Ok(status) = client
                        .admin()
                        .cluster_status(api::ClusterStatusRequest {})
                        .await
                    && status.get_ref().from_leader
                {
                    return self
                        .masters
                        .iter()
                        .find(|x| x.endpoint() == client.endpoint())
                        .map_or(m.id, |x| x.id);
                }
            }
            assert!(
                Instant::now() < deadline,
                "no master became leader:\n{}",
                self.master_logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts a worker with `slots` slots and default cache budgets; returns its index. Waits
    /// until it is connected.
    pub async fn add_worker(&mut self, slots: u32) -> usize {
        self.add_worker_with(WorkerOptions {
            slots,
            ..WorkerOptions::default()
        })
        .await
    }

    /// Starts a worker with `options`; returns its index. Waits until it is connected.
    pub async fn add_worker_with(&mut self, options: WorkerOptions) -> usize {
        let slots = options.slots;
        let index = self.workers.len();
        let id = format!("worker-{index}");
        let log = self.dir.path().join(format!("{id}.log"));
        let metrics = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(bin("symcluster-worker"));
        command
            .args(["--metrics-listen", &metrics])
            .args(["--master", &self.endpoint])
            .args(["--token", TOKEN])
            .args(["--worker-id", &id])
            .args(["--slots", &slots.to_string()])
            .arg("--cache-dir")
            .arg(self.worker_cache_dir(index))
            .args(["--s3-attempts", "2", "--s3-timeout"])
            .arg(format!("{}ms", options.s3_timeout_ms))
            .args(&options.args)
            .args([
                "--memory-cache",
                &format!("{}B", options.memory_cache_bytes),
            ])
            .args(["--disk-cache", &format!("{}B", options.disk_cache_bytes)]);
        match &options.source_dir {
            Some(dir) => command.arg("--source-dir").arg(dir),
            None => command.envs(self.garage.env.iter().cloned()),
        };
        command
            .envs(options.env.iter().cloned())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        if let Some(tls) = &self.options.tls {
            command.arg("--tls-ca").arg(&tls.ca);
            if let Some((cert, key)) = &tls.worker_cert {
                command
                    .arg("--tls-cert")
                    .arg(cert)
                    .arg("--tls-key")
                    .arg(key);
            }
        }
        let child = command.spawn().expect("start symcluster-worker");
        self.worker_metrics.push(metrics);
        self.workers.push(Some(Proc {
            child,
            name: id.clone(),
            log,
        }));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(client) = Client::connect_with(&self.endpoint, TOKEN, self.tls()).await
                && let Ok(status) = client
                    .admin()
                    .cluster_status(api::ClusterStatusRequest {})
                    .await
                && status
                    .get_ref()
                    .workers
                    .iter()
                    .any(|w| w.worker_id == id && w.connected)
            {
                return index;
            }
            assert!(Instant::now() < deadline, "worker {id} did not connect");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A rolling restart of every running worker onto [`Self::endpoint`] as it is now (as an
    /// operator rolls the workers after replacing masters): for each, a new worker started
    /// (2 slots, a new index and cache directory) and connected, then the old one stopped with
    /// SIGTERM and given `within` to drain. For each old worker, its index and exit status
    /// (`None`: still running after `within`, then SIGKILLed).
    pub async fn roll_workers(
        &mut self,
        within: Duration,
    ) -> Vec<(usize, Option<std::process::ExitStatus>)> {
        let running: Vec<usize> = (0..self.workers.len())
            .filter(|&i| self.workers[i].is_some())
            .collect();
        let mut stopped = Vec::new();
        for index in running {
            self.add_worker(2).await;
            stopped.push((index, self.stop_worker(index, within).await));
        }
        stopped
    }

    /// Stops worker `index` with SIGTERM, as an orchestrator scaling down would, and waits up
    /// to `within` for it to exit: its exit status, or `None` when it is still running then (it
    /// is SIGKILLed).
    pub async fn stop_worker(
        &mut self,
        index: usize,
        within: Duration,
    ) -> Option<std::process::ExitStatus> {
        self.workers[index].take()?.terminate(within).await
    }

    /// Worker `index`'s `--cache-dir`.
    pub fn worker_cache_dir(&self, index: usize) -> PathBuf {
        self.dir.path().join(format!("worker-{index}-cache"))
    }

    /// Worker `index`'s pid, while it runs.
    pub fn worker_pid(&self, index: usize) -> Option<u32> {
        self.workers.get(index)?.as_ref().map(|p| p.child.id())
    }

    /// Freezes worker `index` (SIGSTOP): no heartbeat, no outcome, its connections open.
    /// [`Self::resume_worker`] continues it; dropped, it is killed.
    pub fn pause_worker(&self, index: usize) {
        if let Some(pid) = self.worker_pid(index) {
            // SAFETY: kill(2) on our own child's pid, which is reaped only when it is killed.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        }
    }

    /// Continues worker `index` after [`Self::pause_worker`] (SIGCONT).
    pub fn resume_worker(&self, index: usize) {
        if let Some(pid) = self.worker_pid(index) {
            // SAFETY: as in `pause_worker`.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        }
    }

    /// SIGKILLs worker `index`.
    pub fn kill_worker(&mut self, index: usize) {
        if let Some(mut proc) = self.workers[index].take() {
            proc.kill();
        }
    }

    /// A client of the master.
    pub async fn client(&self) -> Client {
        Client::connect_with(&self.endpoint, TOKEN, self.tls())
            .await
            .expect("connect to master")
    }

    /// What clients need to reach this cluster's masters: the test CA, when it has TLS.
    pub fn tls(&self) -> symcluster_client::Tls {
        match &self.options.tls {
            Some(tls) => symcluster_client::Tls {
                ca_pem: Some(std::fs::read(&tls.ca).expect("CA file")),
                identity: None,
            },
            None => symcluster_client::Tls::default(),
        }
    }

    /// The cluster status, as the leader sees it.
    pub async fn status(&self) -> api::ClusterStatusResponse {
        self.client()
            .await
            .on_leader(|channel| async move {
                api::admin_client::AdminClient::new(channel)
                    .cluster_status(api::ClusterStatusRequest {})
                    .await
                    .map(|r| r.into_inner())
            })
            .await
            .expect("cluster status")
    }

    /// Runs `symctl` as a build machine would: this cluster's masters and `token`, and neither
    /// bucket settings nor AWS credentials in its environment (uploads go through the masters).
    pub fn symctl_as(&self, token: &str, args: &[&str]) -> std::process::Output {
        let mut command = Command::new(bin("symctl"));
        command
            .args(args)
            .env("SYMCLUSTER_MASTER", &self.endpoint)
            .env("SYMCLUSTER_TOKEN", token);
        for (name, _) in &self.garage.env {
            command.env_remove(name);
        }
        for name in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ] {
            command.env_remove(name);
        }
        if let Some(tls) = &self.options.tls {
            command.env("SYMCLUSTER_TLS_CA", &tls.ca);
        }
        command.output().expect("run symctl")
    }

    /// Runs `symctl` with this cluster's master and bucket settings.
    pub fn symctl(&self, args: &[&str]) -> std::process::Output {
        let mut command = Command::new(bin("symctl"));
        command
            .args(args)
            .env("SYMCLUSTER_MASTER", &self.endpoint)
            .env("SYMCLUSTER_TOKEN", TOKEN)
            .envs(self.garage.env.iter().cloned());
        if let Some(tls) = &self.options.tls {
            command.env("SYMCLUSTER_TLS_CA", &tls.ca);
        }
        command.output().expect("run symctl")
    }
}
