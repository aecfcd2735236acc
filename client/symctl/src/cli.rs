//! The command-line interface: every subcommand and flag, with its help text.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// symcluster command line: symbolicate crash reports.
#[derive(Debug, Parser)]
#[command(name = "symctl", version, about, after_help = EXIT_STATUS)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log output on stderr (`RUST_LOG` chooses what; default `warn`).
    #[command(flatten)]
    pub log: symcluster_telemetry::LogArgs,
    /// Take `--master`, `--token` (from its token file), `--project` and `--tls-ca` from this
    /// profile of the config file (`$SYMCTL_CONFIG`, else `~/.config/symctl/config.toml`);
    /// flags and `SYMCLUSTER_*` variables given as well win. Default: the file's
    /// `default_profile`, if any.
    #[arg(long, env = "SYMCTL_PROFILE", global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// No progress bars and no informational notes on stderr (warnings and errors are still
    /// printed).
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Symbolicate a native (iOS/macOS/Linux) crash report against local debug files.
    ///
    /// The report format is detected from its content: Apple .crash or .ips, KSCrash JSON,
    /// Sentry event JSON, or a symbolicator request.
    Symbolicate(SymbolicateArgs),
    /// Restore a React Native JavaScript stack (Metro/JSC/V8 text or Hermes crash JSON) to
    /// original source with its source map.
    ///
    /// The stack format is detected from its content. Plain, indexed, RAM bundle, segmented,
    /// Metro function-map and Hermes bytecode source maps are all read.
    #[command(name = "restore-js")]
    RestoreJs(RestoreJsArgs),
    /// Retrace a Java/Kotlin stack trace obfuscated by ProGuard or R8 (Android) with the
    /// build's mapping file: original classes, methods, files and lines, inlined calls
    /// expanded.
    ///
    /// The trace is `printStackTrace` text (also as logcat shows it) or a Sentry event JSON.
    Retrace(RetraceArgs),
    /// Restore a crash that crosses layers (a React Native crash on Android: JavaScript,
    /// Java/Kotlin and native frames in one Sentry event): each frame with its layer's file,
    /// in its place.
    #[command(name = "restore-event")]
    RestoreEvent(RestoreEventArgs),
    /// Upload debug files (dSYMs, Mach-O, ELF: every arch slice by debug id) or a source map
    /// to the cluster's bucket. Files already there are skipped.
    #[command(subcommand)]
    Upload(UploadCommand),
    /// Inspect debug files: what each file holds (`check`), whether the cluster has one
    /// (`find`).
    #[command(subcommand, name = "debug-files")]
    DebugFiles(DebugFilesCommand),
    /// Source map tools: `inject` a debug id into a bundle and its map.
    #[command(subcommand)]
    Sourcemaps(SourcemapsCommand),
    /// Submit a crash report (native), a JS stack or a Java/Kotlin trace to the cluster.
    Submit(SubmitArgs),
    /// Print a job's state and result as JSON.
    Job(JobArgs),
    /// Print the top crash groups.
    Groups(GroupsArgs),
    /// Print the debug files and source maps finished jobs lacked, most affected jobs first.
    ///
    /// Uploading one of them (`symctl upload`) symbolicates those jobs again.
    Missing(MissingArgs),
    /// Print the cluster's state: workers, slots, queue, cache hit rates.
    Status(StatusArgs),
    /// Operators' commands on the master group (admin token).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Print a shell completion script (`symctl completions bash > /etc/bash_completion.d/symctl`).
    Completions(CompletionsArgs),
    /// Print symctl's man page (roff: `symctl man > symctl.1; man ./symctl.1`).
    Man,
}

/// How to reach the master.
#[derive(Debug, Clone, clap::Args)]
pub struct MasterArgs {
    /// The masters' gRPC endpoints, comma-separated (any member of the group: the leader is
    /// found and followed).
    #[arg(
        long,
        env = "SYMCLUSTER_MASTER",
        default_value = "http://127.0.0.1:7700"
    )]
    pub master: String,
    /// Bearer token.
    #[arg(long, env = "SYMCLUSTER_TOKEN", hide_env_values = true)]
    pub token: String,
    /// PEM CA certificate(s) that signed the masters' certificates, for `https://` masters
    /// (default: the public roots).
    #[arg(long, env = "SYMCLUSTER_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
}

pub use symcluster_sources::BucketArgs;

/// Which project a command is for.
#[derive(Debug, Clone, clap::Args)]
pub struct ProjectArgs {
    /// The project (tenant) of the jobs: submits go there, `job` and `groups` read there.
    /// Default: the token's project when it serves exactly one, else `default`.
    #[arg(long, env = "SYMCLUSTER_PROJECT")]
    pub project: Option<String>,
}

/// Where uploaded files go: one project's prefix, or the shared prefix every project reads.
#[derive(Debug, Clone, clap::Args)]
pub struct UploadTarget {
    /// The project whose jobs may read the files (default: through the masters, the token's
    /// project when it serves one, else `default`; with `--s3-bucket`, `default`).
    #[arg(long, env = "SYMCLUSTER_PROJECT")]
    pub project: Option<String>,
    /// Upload to the shared prefix that every project reads (system libraries, common
    /// frameworks) instead of one project's.
    #[arg(long)]
    pub shared: bool,
}

/// The masters an upload goes through (without `--s3-bucket`: presigned requests, an `upload`
/// token of the project), or that are told of an upload made with `--s3-bucket`, so that jobs
/// that lacked the files run again (without a token, nobody is told).
#[derive(Debug, Clone, clap::Args)]
pub struct NotifyArgs {
    /// The masters' gRPC endpoints, comma-separated (default `http://127.0.0.1:7700`).
    #[arg(long, env = "SYMCLUSTER_MASTER")]
    pub master: Option<String>,
    /// Bearer token: an upload token of the project (admin for `--shared`); with
    /// `--s3-bucket`, an ingest token of the project.
    #[arg(long, env = "SYMCLUSTER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM CA certificate(s) of `https://` masters.
    #[arg(long, env = "SYMCLUSTER_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
}

/// Uploads go through the masters (`--token`, an upload token of the project: no bucket
/// credentials on the build machine; files the bucket holds already are not sent again), or
/// straight to the bucket with `--s3-bucket` and AWS credentials (operators).
#[derive(Debug, Subcommand)]
pub enum UploadCommand {
    /// Upload debug files: dSYM bundles, Mach-O or ELF files (Android's unstripped `lib*.so`,
    /// Linux binaries), or directories (recursively). Also `symctl upload debug-files`.
    #[command(visible_alias = "debug-files")]
    Dsym {
        #[command(flatten)]
        bucket: BucketArgs,
        #[command(flatten)]
        target: UploadTarget,
        #[command(flatten)]
        notify: NotifyArgs,
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Upload system libraries to the shared prefix every project reads: an Xcode
    /// `iOS DeviceSupport/<version>/Symbols` tree, or any folder of system Mach-O libraries and
    /// their dSYMs (every arch slice, by UUID). Jobs that lacked them run again.
    #[command(name = "system-symbols")]
    SystemSymbols {
        #[command(flatten)]
        bucket: BucketArgs,
        #[command(flatten)]
        notify: NotifyArgs,
        /// The `Symbols` folder (or any folder of system libraries), searched recursively.
        dir: PathBuf,
    },
    /// Upload a source map (and optionally its minified bundle) to a project.
    Sourcemap {
        #[command(flatten)]
        bucket: BucketArgs,
        /// The project whose JS jobs read the map (default: through the masters, the token's
        /// project when it serves one, else `default`; with `--s3-bucket`, `default`).
        #[arg(long, env = "SYMCLUSTER_PROJECT")]
        project: Option<String>,
        #[command(flatten)]
        notify: NotifyArgs,
        /// The source map file (`--map` is the former spelling, deprecated).
        #[arg(long)]
        sourcemap: PathBuf,
        /// The minified bundle.
        #[arg(long)]
        bundle: Option<PathBuf>,
        /// Store under this debug id (default: the map's `debugId`, as `symctl sourcemaps
        /// inject` writes it)...
        #[arg(long)]
        debug_id: Option<String>,
        /// ...and/or under this release (with `--dist` and `--bundle-name`).
        #[arg(long, requires = "bundle_name")]
        release: Option<String>,
        /// Distribution within the release.
        #[arg(long, default_value = "")]
        dist: String,
        /// The bundle's file name as stacks show it (`index.android.bundle`).
        #[arg(long)]
        bundle_name: Option<String>,
    },
    /// Upload ProGuard/R8 mapping files (`mapping.txt`) to a project, each under its mapping
    /// id (sentry-cli's UUID of the file, printed, or `--mapping-id`), which JVM jobs name.
    /// Jobs that lacked them run again.
    Proguard {
        #[command(flatten)]
        bucket: BucketArgs,
        /// The project whose JVM jobs read the mappings (default: through the masters, the
        /// token's project when it serves one, else `default`; with `--s3-bucket`, `default`).
        #[arg(long, env = "SYMCLUSTER_PROJECT")]
        project: Option<String>,
        #[command(flatten)]
        notify: NotifyArgs,
        /// Store the (one) mapping file under this id instead of the one computed from its
        /// bytes: the id a build wrote into the app, e.g. the `io.sentry.ProguardUuids` that
        /// Sentry's Android Gradle plugin writes into `sentry-debug-meta.properties`, as
        /// `sentry-cli upload-proguard --uuid` does.
        #[arg(long, value_name = "UUID")]
        mapping_id: Option<String>,
        /// The mapping files.
        #[arg(required = true, value_name = "MAPPING_FILE")]
        mappings: Vec<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SourcemapsCommand {
    /// Write one debug id into a JavaScript bundle (a `//# debugId=<id>` comment at its end)
    /// and its source map (`debugId`), as the TC39 debug id proposal says: the id they carry
    /// already, or one derived from the bundle's bytes. `symctl upload sourcemap` then stores
    /// the map under that id, and JS jobs that name it find the map. Run it on the JS bundle
    /// (before `hermesc`) and its final map; running it again changes nothing.
    Inject {
        /// The JavaScript bundle (text).
        bundle: PathBuf,
        /// Its source map (composed with Hermes' map when the app runs Hermes bytecode).
        map: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum DebugFilesCommand {
    /// Print, for each object (arch slice) of the debug files under the paths (dSYM bundles,
    /// Mach-O or ELF files, source maps, or directories searched recursively), its debug id,
    /// arch, kind and what it holds: a symbol table (`symtab`), DWARF (`debug`: files and
    /// lines), inlined calls (`inlinees`), unwind info, sources; and whether it is usable. A file without line info is usable with a
    /// warning (function names only). Exits 1 when nothing usable is found.
    Check {
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// `table` or `json` (an array of objects).
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Whether the cluster's bucket holds a debug file for a debug id: in the project, or in
    /// the shared prefix (an upload token of the project, or admin). Exits 1 when it does not.
    Find {
        #[command(flatten)]
        master: MasterArgs,
        #[command(flatten)]
        project: ProjectArgs,
        /// The debug id (e.g. `4c4c443b-5555-3144-a126-3cc30cf88fdb`).
        debug_id: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub master: MasterArgs,
    #[command(flatten)]
    pub project: ProjectArgs,
    /// Job id (default: the file name plus a timestamp). For a folder: the prefix of every
    /// file's job id, which is its path in the folder (default prefix: the folder's name and
    /// `/`; submitting a folder again makes no new job).
    #[arg(long)]
    pub job_id: Option<String>,
    /// Wait until the job is completed or failed, and print it (a folder: count them).
    #[arg(long)]
    pub wait: bool,
    /// The file is a JS stack (text or Hermes crash JSON); give `--debug-id` or `--release`.
    #[arg(long, conflicts_with_all = ["jvm", "combined"])]
    pub js: bool,
    /// The file is a Sentry event whose frames cross JavaScript, Java and native (a React
    /// Native crash on Android): each layer restored with the files the event names.
    #[arg(long, conflicts_with = "jvm")]
    pub combined: bool,
    /// The file is a Java/Kotlin trace obfuscated by ProGuard or R8 (text, logcat, or a Sentry
    /// event); give `--mapping-id` unless the event names its mapping in `debug_meta`.
    #[arg(long)]
    pub jvm: bool,
    /// JVM: the mapping file's id (as `symctl upload proguard` prints it; sentry-cli's UUID).
    #[arg(long, requires = "jvm")]
    pub mapping_id: Option<String>,
    /// Native: which images the result lists in `modules`, as `symctl symbolicate --modules`.
    #[arg(long, value_enum, default_value_t = ModulesArg::Referenced, conflicts_with_all = ["js", "jvm", "combined"])]
    pub modules: ModulesArg,
    /// JS: the source map's debug id.
    #[arg(long, requires = "js")]
    pub debug_id: Option<String>,
    /// JS: the release.
    #[arg(long, requires = "js")]
    pub release: Option<String>,
    /// JS: the dist.
    #[arg(long, requires = "js", default_value = "")]
    pub dist: String,
    /// JS: the bundle file name.
    #[arg(long, requires = "js")]
    pub bundle_name: Option<String>,
    /// The report or stack file, or a folder of them (every file in it, recursively, with a
    /// progress bar and a `submitted N, duplicates N, refused N` summary line).
    pub file: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct JobArgs {
    #[command(flatten)]
    pub master: MasterArgs,
    #[command(flatten)]
    pub project: ProjectArgs,
    /// `json` (the job with its result); `apple` (a native job's Apple `.crash`/`.ips` report
    /// with its frames symbolicated, byte for byte what `symctl symbolicate --format apple`
    /// prints for the same report and debug files); `text` (a JS job as metro-symbolicate
    /// prints it, as `symctl restore-js --format text` does, a text stack needing the bucket to
    /// read its source map; a JVM job as `symctl retrace --format text` does). `--format` is
    /// the former spelling (deprecated).
    #[arg(short = 'o', long, value_enum, default_value_t = JobFormat::Json)]
    pub output: JobFormat,
    /// With `--output text`: the bucket holding the job's source map.
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// The job id.
    pub job_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobFormat {
    /// The job and its result as one JSON object.
    Json,
    /// A native job's report in its own Apple format, frames symbolicated.
    Apple,
    /// A JS job's stack as metro-symbolicate prints it; a JVM job's trace as Java (and
    /// `retrace`) prints it.
    Text,
}

#[derive(Debug, clap::Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    pub master: MasterArgs,
    /// Only this project's groups (default: every project the token serves).
    #[arg(long, env = "SYMCLUSTER_PROJECT")]
    pub project: Option<String>,
    /// Print the aggregated call tree of the group whose fingerprint starts with this (hang
    /// reports: every sampled path of its jobs, hits summed) instead of the list.
    #[arg(long, value_name = "FINGERPRINT")]
    pub tree: Option<String>,
    /// Only groups of this report kind (default: every kind).
    #[arg(long, value_enum)]
    pub kind: Option<GroupKind>,
    /// How many groups.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// With each group's jobs by release, OS and device (the top three of each in the table;
    /// every kept value, `other` and the jobs per day in JSON: `facets`).
    #[arg(long)]
    pub facets: bool,
    /// The list as a `table` (default) or as `json` (an array of groups); with `--tree`, the
    /// tree as `text` (default: indented, hits first) or `folded` (`outer;inner HITS` per
    /// path, the self hits of its innermost frame, as flame-graph tools read). `--format` is
    /// the former spelling (deprecated).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<GroupsOutput>,
}

/// What `symctl groups` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GroupsOutput {
    /// The list, aligned columns.
    Table,
    /// The list, a JSON array of groups.
    Json,
    /// With `--tree`: one line per node, indented by depth, hits first.
    Text,
    /// With `--tree`: folded stacks (Brendan Gregg's `stackcollapse` format).
    Folded,
}

impl GroupsOutput {
    /// Its name on the command line (`table`, `json`, `text`, `folded`).
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// The report kinds groups are made of (the SDK's `kind`; JS errors are crashes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupKind {
    /// Crashes (signals, Mach exceptions, uncaught exceptions, JS errors).
    Crash,
    /// Main-thread hangs (no answer for the hang threshold).
    Hang,
    /// Slow main run-loop passes, shorter than a hang.
    Jank,
    /// Threads over the CPU threshold for most of a sampling window.
    Cpu,
    /// Runs ended by the system for memory (grouped by app version and breadcrumb).
    Oom,
}

impl GroupKind {
    /// The name the API uses (`ListGroupsRequest.kind`).
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Crash => "crash",
            GroupKind::Hang => "hang",
            GroupKind::Jank => "jank",
            GroupKind::Cpu => "cpu",
            GroupKind::Oom => "oom",
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct MissingArgs {
    #[command(flatten)]
    pub master: MasterArgs,
    /// Only this project's (default: every project the token serves).
    #[arg(long, env = "SYMCLUSTER_PROJECT")]
    pub project: Option<String>,
    /// How many entries.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// `table` or `json` (an array of entries). `--format` is the former spelling
    /// (deprecated).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub master: MasterArgs,
    /// `table` (a summary line, then the masters and the workers) or `json` (one object).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `symctl admin ...`.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Write a consistent copy of a master's index to FILE (what `symcluster-master --restore
    /// FILE` seeds a new group from).
    ///
    /// The master (the leader, as found from `--master`) reads its index in one read
    /// transaction while it goes on, and streams it in chunks; each chunk's CRC-32 and the
    /// whole backup's SHA-256 are checked, the file is written to FILE.part, fsynced, then
    /// renamed to FILE. Prints the backup's applied log index, jobs, bytes and the digest of
    /// the index it holds (`Admin/IndexDigest` of a master restored from it answers the same).
    Backup(BackupArgs),
    /// List the master group's members, or change them (`add`, `remove`).
    ///
    /// Without a subcommand: each member's id, address, role (`voter`, `learner` while it
    /// catches up, `outgoing` while a joint configuration is left), match index, lag behind the
    /// leader's log (entries), and milliseconds since the leader last heard from it; from the
    /// leader. See `docs/operator-guide.md`: "Replace a dead master", "Grow or shrink the group".
    Members(MembersArgs),
}

#[derive(Debug, clap::Args)]
pub struct MembersArgs {
    #[command(subcommand)]
    pub change: Option<MembersChange>,
    #[command(flatten)]
    pub master: MasterArgs,
    /// `table` (aligned columns) or `json` (one object: the members and the leader).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// `symctl admin members add|remove`.
#[derive(Debug, Subcommand)]
pub enum MembersChange {
    /// Add a master to the group: it joins as a learner, receives the index and the log, and
    /// the leader makes it a voter once it has caught up. Start the new master with `--join`
    /// (before or after this command).
    Add {
        /// Its member id: a number from 1 that no member has (never reuse a removed one's
        /// while that master may still run).
        id: u64,
        /// Its gRPC address as the other masters reach it (`host:port`, or with `http://` /
        /// `https://`).
        address: String,
        /// Wait until it is a voter (it caught up), at most this long (`10m`, `90s`).
        #[arg(long, value_name = "DURATION", value_parser = symcluster_telemetry::flags::duration)]
        wait: Option<std::time::Duration>,
    },
    /// Remove masters from the group (several at once go through one joint configuration).
    /// Removing the leader makes it hand leadership over first. Stop the removed masters
    /// afterwards.
    Remove {
        /// Their member ids.
        #[arg(required = true)]
        ids: Vec<u64>,
        /// Remove them even when too few of the masters that stay are up to form a quorum (the
        /// group then stalls until enough are up); refused otherwise.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    #[command(flatten)]
    pub master: MasterArgs,
    /// Where to write the backup (replaced if it exists).
    pub file: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The exit statuses every subcommand uses, shown by `symctl --help`.
pub const EXIT_STATUS: &str = "Exit status:
  0  done (a submitted job that was waited for completed)
  1  failed: a job ended FAILED, a request was refused (bad token, bad input, no such job),
     the cluster or a file could not be reached; the reason is on stderr
  2  usage error: an unknown flag or a bad value (e.g. a size or duration without a unit)";

/// How a reading command (`groups`, `missing`, `status`) prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns with a header, for people.
    #[value(alias = "text")]
    Table,
    /// One JSON document (an array of objects; one object for `status`), for scripts.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct RestoreJsArgs {
    /// The source map of the bundle (or of the Hermes bytecode bundle).
    #[arg(long, value_name = "MAP_FILE")]
    pub sourcemap: PathBuf,

    /// The minified bundle the map belongs to. Optional: when given (and the map has no Metro
    /// function map), enclosing function names come from the bundle's scopes.
    #[arg(long, value_name = "MINIFIED_JS")]
    pub bundle: Option<PathBuf>,

    /// Output: `json` (one object per frame, 1-based lines and columns) or `text` (the stack
    /// rewritten as metro-symbolicate prints it, for diffing).
    #[arg(long, value_enum, default_value_t = StackOutput::Json)]
    pub format: StackOutput,

    /// The base of columns in text stacks: 1 as browsers, Node and Hermes print them, or 0 as
    /// metro-symbolicate reads its input by default.
    #[arg(long, value_name = "0|1", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1))]
    pub input_column_start: u32,

    /// The stack trace file (text, or Hermes crash JSON).
    #[arg(value_name = "STACK_FILE")]
    pub stack: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct RetraceArgs {
    /// The build's ProGuard/R8 mapping file (`mapping.txt`).
    #[arg(long, value_name = "MAPPING_FILE")]
    pub mapping: PathBuf,

    /// Output: `json` (exceptions with their frames, innermost first, 1-based lines, each
    /// frame's status and the frame as given) or `text` (the trace as Java prints it, as
    /// ProGuard's and R8's `retrace` print it, for diffing).
    #[arg(long, value_enum, default_value_t = StackOutput::Json)]
    pub format: StackOutput,

    /// The stack trace file (text or Sentry event JSON).
    #[arg(value_name = "TRACE_FILE")]
    pub trace: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct RestoreEventArgs {
    /// Debug files (dSYMs, ELF, Mach-O) or folders of them for the native frames, found by
    /// the debug ids of the event's `debug_meta.images`.
    #[arg(long = "debug-files", value_name = "PATH")]
    pub debug_files: Vec<PathBuf>,

    /// A source map for the JavaScript frames, as `BUNDLE=MAP` (the bundle's file name as
    /// the frames name it, e.g. `index.android.bundle=index.android.bundle.hbc.map`), or
    /// `MAP` alone for every bundle; repeatable.
    #[arg(long, value_name = "[BUNDLE=]MAP")]
    pub sourcemap: Vec<String>,

    /// The ProGuard/R8 mapping file for the Java/Kotlin frames.
    #[arg(long, value_name = "MAPPING_FILE")]
    pub mapping: Option<PathBuf>,

    /// Output: `json` (exceptions, the thrown one first, frames innermost first, each with
    /// its `layer` and status; then `modules`, `sourcemaps`, `mapping`) or `text` (a line per
    /// frame in its layer's style).
    #[arg(long, value_enum, default_value_t = StackOutput::Json)]
    pub format: StackOutput,

    /// The Sentry event (JSON).
    #[arg(value_name = "EVENT")]
    pub event: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StackOutput {
    /// One JSON object (`restore-js`: `{"frames": [...]}`; `retrace`: `{"exceptions": [...]}`).
    Json,
    /// The text the peer tool prints (metro-symbolicate's; Java's and `retrace`'s).
    Text,
}

#[derive(Debug, clap::Args)]
pub struct SymbolicateArgs {
    /// dSYM bundles, Mach-O or ELF debug files, or directories searched recursively. Files are
    /// matched to the report's images by debug id (Mach-O UUID, ELF build id).
    #[arg(long = "debug-files", value_name = "PATH", required = true)]
    pub debug_files: Vec<PathBuf>,

    /// Output: `json` (the result as JSON) or `apple` (the report itself, each frame
    /// rewritten as Xcode shows it).
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    pub format: OutputFormat,

    /// Which images the JSON result lists in `modules`: `referenced` (those a frame is in; the
    /// others counted in `unreferenced_modules`) or `all` (every image of the report, the
    /// others `unused`). `--format apple` prints the report's own image list either way.
    #[arg(long, value_enum, default_value_t = ModulesArg::Referenced)]
    pub modules: ModulesArg,

    /// The crash report file.
    #[arg(value_name = "REPORT")]
    pub report: PathBuf,
}

/// Which images a native result lists (`symcluster_engine::Modules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModulesArg {
    /// The images a frame (or call-tree node) is in.
    Referenced,
    /// Every image of the report.
    All,
}

impl From<ModulesArg> for symcluster_engine::Modules {
    fn from(arg: ModulesArg) -> Self {
        match arg {
            ModulesArg::Referenced => symcluster_engine::Modules::Referenced,
            ModulesArg::All => symcluster_engine::Modules::All,
        }
    }
}

impl From<ModulesArg> for symcluster_client::api::Modules {
    fn from(arg: ModulesArg) -> Self {
        match arg {
            ModulesArg::Referenced => symcluster_client::api::Modules::Referenced,
            ModulesArg::All => symcluster_client::api::Modules::All,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The symbolication result as one JSON object.
    Json,
    /// The original report with symbolicated frames, in its own Apple format.
    Apple,
}
