//! Building and running the crasher.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use symcluster_engine::result::SymbolicationResult;
use symcluster_engine::{LocalSymCaches, parse_report, symbolicate};

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn crasher_source() -> PathBuf {
    crate_dir().join("tests/crasher.c")
}

/// The 1-based line of `[sdk-frame NAME]` in the crasher's source.
pub fn marker_line(name: &str) -> u32 {
    let source = std::fs::read_to_string(crasher_source()).unwrap();
    let marker = format!("[sdk-frame {name}]");
    source
        .lines()
        .position(|l| l.contains(&marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no marker {marker}"))
}

/// Compiles the crasher against the release static library (once per test run).
pub fn crasher() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let release = symcluster_loadtest::cluster::release_dir();
        let lib = release.join("libsymcluster_sdk.a");
        assert!(
            lib.exists(),
            "{} not found: run `cargo build --release -p symcluster-sdk-ios`",
            lib.display()
        );
        let out_dir = release.join("../sdk-test");
        std::fs::create_dir_all(&out_dir).unwrap();
        let exe = out_dir.join("crasher");
        // The C compiler the build uses (`CC`, as the cc crate reads it), else `cc`.
        let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
        let status = Command::new(cc)
            .args([
                "-g",
                "-O0",
                "-fno-omit-frame-pointer",
                "-Wl,--build-id=sha1",
            ])
            .arg("-I")
            .arg(crate_dir().join("include"))
            .arg(crasher_source())
            .arg(&lib)
            .args([
                "-lgcc_s",
                "-lutil",
                "-lrt",
                "-lpthread",
                "-lm",
                "-ldl",
                "-lc",
            ])
            .arg("-o")
            .arg(&exe)
            .status()
            .expect("run cc");
        assert!(status.success(), "compiling the crasher failed");
        exe
    })
}

/// Runs the crasher with `args`.
pub fn run(dir: &Path, mode: &str) -> Output {
    output(Command::new(crasher()).arg(dir).arg(mode))
}

/// How long one run of the crasher may take before the test kills it and fails.
pub const CRASHER_LIMIT: Duration = Duration::from_secs(60);

/// A child process killed and reaped when dropped, so that a test that fails (or a run that
/// hangs) leaves no crasher behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Runs `command` to its end, its output captured (read while it runs, so a chatty child never
/// blocks on a full pipe), within `limit`; `None` when it had to be killed.
pub fn output_within(command: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the crasher");
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait for the crasher") {
            break status;
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Some(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// [`output_within`] [`CRASHER_LIMIT`]: fails the test when the run does not end.
pub fn output(command: &mut Command) -> Output {
    output_within(command, CRASHER_LIMIT).unwrap_or_else(|| {
        panic!(
            "{command:?} did not end within {} s (killed)",
            CRASHER_LIMIT.as_secs()
        )
    })
}

/// The one report file of `kind` (`crash` or `hang`) in `dir`.
pub fn report(dir: &Path, kind: &str) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with(kind) && name.ends_with(".json")
        })
        .collect();
    assert_eq!(
        files.len(),
        1,
        "expected one {kind} report in {}: {files:?}",
        dir.display()
    );
    files[0].clone()
}

/// Symbolicates a report against the crasher's own debug info.
pub fn symbolicate_report(path: &Path) -> SymbolicationResult {
    let data = std::fs::read(path).unwrap();
    let report = parse_report(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let sources = LocalSymCaches::scan(&[crasher()]).unwrap();
    symbolicate(&report, &sources)
}

/// A local cluster (Garage, a master, a worker) with the crasher's debug file uploaded.
pub async fn cluster_with_crasher() -> symcluster_loadtest::cluster::Cluster {
    use symcluster_loadtest::cluster::{Cluster, MasterOptions};
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    let upload = cluster.symctl(&["upload", "dsym", &crasher().display().to_string()]);
    assert!(
        upload.status.success(),
        "{}",
        String::from_utf8_lossy(&upload.stderr)
    );
    cluster
}

/// Sends the reports pending in `dir` to `endpoint` through the C API, as the app's next
/// launch does; returns the number the crasher printed (reports sent).
pub fn send(dir: &Path, endpoint: &str) -> String {
    let sent = output(Command::new(crasher()).arg(dir).args([
        "send",
        endpoint,
        symcluster_loadtest::cluster::TOKEN,
    ]));
    String::from_utf8_lossy(&sent.stdout).trim().to_owned()
}

/// The job id the crasher sends report file `name` of report directory `dir` under (the SDK's
/// [`symcluster_sdk::send::job_id`] with the directory's install id).
pub fn job_of(dir: &Path, name: &str) -> String {
    job_id_in(dir, "crasher", name)
}

/// [`job_of`] for an app named `prefix`.
pub fn job_id_in(dir: &Path, prefix: &str, name: &str) -> String {
    let install = symcluster_sdk::send::install_id(dir).expect("an install id");
    symcluster_sdk::send::job_id(prefix, &install, name)
}

/// The result JSON of job `job_id` once it completes (at most 60 s).
pub async fn result_of(
    cluster: &symcluster_loadtest::cluster::Cluster,
    job_id: &str,
) -> serde_json::Value {
    let mut client = cluster.client().await;
    let job = tokio::time::timeout(std::time::Duration::from_secs(60), client.wait(job_id))
        .await
        .unwrap_or_else(|_| panic!("job {job_id} not done within 60 s"))
        .unwrap();
    serde_json::from_slice(&job.result_json).unwrap()
}

/// Starts the crasher in `wait` mode as app version `version`, waits until it is ready, and
/// SIGKILLs it (a run the system ended without a crash report).
pub fn killed_while_running(dir: &Path, version: &str) {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(crasher())
        .arg(dir)
        .arg("wait")
        .env("CRASHER_APP_VERSION", version)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    child.kill().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
}
