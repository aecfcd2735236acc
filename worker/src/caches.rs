//! The worker's caches: debug files become SymCaches (and, for minidumps, unwind information:
//! `CfiCache`s), source maps become prepared maps, ProGuard/R8 mapping files become prepared
//! mappings (`ProguardCache`s), each kept on disk and in memory.
//!
//! Layers, fastest first:
//! 1. memory: `moka` caches of parsed SymCaches, prepared source maps and prepared mappings,
//!    weighed by bytes (half of `--memory-cache` for SymCaches, 3/16 for source maps and for
//!    mappings, 1/8 for unwind information).
//!    moka also merges concurrent misses for the same key, so ten jobs needing the same dSYM
//!    download and convert it once;
//! 2. a negative cache: a "not found" is remembered for a while (not fetch errors: those are
//!    retried by the next job);
//! 3. disk ([`DiskCache`]): SymCache files (keyed by `SYMCACHE_VERSION`, so a format change never
//!    reads stale files), downloaded source maps and prepared mappings (keyed by their format
//!    version);
//! 4. shared SymCaches: the SymCache another worker derived from the same debug file, put in
//!    the bucket beside it ([`layout::symcache_key`], named by the format version and the
//!    original's ETag and size): a restarted or new worker downloads that small file instead
//!    of the debug file (100 MB to 1 GB for an app) and converting again;
//! 5. the [`Source`]: S3 or a directory. A conversion waits for one of `--max-conversions`
//!    slots (each holds a debug file and its SymCache in memory) and then shares its result.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use moka::future::Cache;
use symbolic_common::DebugId;
use symcluster_engine::ModuleLoad;
use symcluster_engine::js::JsSourceMap;
use symcluster_engine::jvm::JvmMapping;
use symcluster_engine::minidump::{CFICACHE_VERSION, UnwindInfo};
use symcluster_engine::symcache::{
    CONVERSION_REVISION, SYMCACHE_VERSION, SymCacheError, SymCacheFile,
};
use tracing::Instrument as _;

use symcluster_sources::{FetchError, Scope, Source, layout};

use crate::disk_cache::DiskCache;

/// Why a source map or a ProGuard mapping file could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceMapLoadError {
    /// No file under the job's key.
    #[error("no file at {0}")]
    NotFound(String),
    /// The map exists but cannot be read.
    #[error("{0}")]
    Malformed(String),
    /// The source could not be asked.
    #[error(transparent)]
    Fetch(#[from] FetchError),
}

#[derive(Debug, Clone)]
enum SymCacheLoadError {
    Missing,
    Malformed(String),
    Fetch(String),
}

/// Converts the object with `debug_id` in `object` (the debug file at `key`, whose pages are
/// released from the process as it goes) into a temporary file of `disk`, maps it, and stores it as `disk_key` (a SymCache larger than the whole disk
/// cache stays mapped where it was written, removed from the directory): the SymCache is
/// written as it is serialized, never held whole in the heap beside the converter's tables.
/// Errors: `Malformed` for a debug file that does not convert, `Fetch` when the cache disk
/// fails (a full disk: the job may be retried).
fn convert_to_disk(
    disk: &DiskCache,
    disk_key: &str,
    object: &crate::debug_file::DebugFileOnDisk,
    debug_id: DebugId,
    key: &str,
) -> Result<SymCacheFile, SymCacheLoadError> {
    let disk_failed = |e: &dyn std::fmt::Display| {
        SymCacheLoadError::Fetch(format!(
            "{key}: writing its SymCache to the cache disk failed: {e}"
        ))
    };
    let mut file = disk.temporary_file().map_err(|e| disk_failed(&e))?;
    let mut out = WriteWatch {
        inner: std::io::BufWriter::with_capacity(1 << 20, file.as_file_mut()),
        failed: None,
    };
    // The debug file's pages read so far leave the process as the conversion goes on.
    let written = SymCacheFile::write_object_file(&object.bytes, debug_id, &mut out, || {
        object.release_pages()
    });
    // A failed flush is remembered in `out.failed`.
    let _ = std::io::Write::flush(&mut out);
    if let Some(e) = out.failed.take() {
        return Err(disk_failed(&e));
    }
    drop(out);
    match written {
        Ok(()) => {}
        Err(SymCacheError::WrongDebugId(_)) => {
            return Err(SymCacheLoadError::Malformed(format!(
                "{key} holds no object with debug id {debug_id}"
            )));
        }
        Err(e) => return Err(SymCacheLoadError::Malformed(format!("{key}: {e}"))),
    }
    // Mapped before it is stored: the map stays readable whatever the cache does with the file.
    let bytes = symbolic_common::ByteView::open(file.path()).map_err(|e| disk_failed(&e))?;
    let symcache = SymCacheFile::parse(bytes)
        .map_err(|e| SymCacheLoadError::Malformed(format!("{key}: its SymCache: {e}")))?;
    if symcache.size_bytes() as u64 <= disk.budget()
        && let Err(e) = disk.adopt(disk_key, file)
    {
        tracing::warn!(key = disk_key, error = %e, "SymCache not kept in the disk cache");
    }
    Ok(symcache)
}

/// A writer that remembers its first I/O error, to tell a failing disk from a debug file that
/// does not convert.
struct WriteWatch<W> {
    inner: W,
    failed: Option<std::io::Error>,
}

impl<W: std::io::Write> std::io::Write for WriteWatch<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).inspect_err(|e| {
            self.failed
                .get_or_insert_with(|| std::io::Error::new(e.kind(), e.to_string()));
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().inspect_err(|e| {
            self.failed
                .get_or_insert_with(|| std::io::Error::new(e.kind(), e.to_string()));
        })
    }
}

/// The SymCaches' format in cache keys (disk and bucket): symbolic's SymCache format version and
/// the engine's conversion revision, so that a change of either never reads an old SymCache.
fn symcache_format() -> String {
    format!("{SYMCACHE_VERSION}.{CONVERSION_REVISION}")
}

/// Which layer answered a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// The in-memory cache (moka): a prepared SymCache or source map.
    Memory,
    /// The negative cache: known not to be in the bucket (for `--negative-cache`).
    Negative,
    /// The disk cache: a SymCache or downloaded source map from an earlier job.
    Disk,
    /// The SymCache another worker derived and put in the bucket: downloaded, not converted.
    Shared,
    /// None: the bucket was asked (a miss).
    Source,
}

impl Layer {
    fn label(self) -> &'static str {
        match self {
            Layer::Memory => "memory",
            Layer::Negative => "negative",
            Layer::Disk => "disk",
            Layer::Shared => "shared",
            Layer::Source => "source",
        }
    }
}

/// Cache counters.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Lookups served from memory or disk.
    pub hits: AtomicU64,
    /// Lookups that went to the source.
    pub misses: AtomicU64,
}

/// All the worker's caches over one source.
///
/// Every entry is keyed by the object's key in the source, which names its project (or the
/// shared prefix): a job of one project is never served another project's file from a cache.
pub struct Caches {
    source: Source,
    prefix: String,
    disk: Arc<DiskCache>,
    symcaches: Cache<String, Arc<SymCacheFile>>,
    sourcemaps: Cache<String, Arc<JsSourceMap>>,
    mappings: Cache<String, Arc<JvmMapping>>,
    unwind: Cache<String, Arc<UnwindInfo>>,
    missing: Cache<String, ()>,
    /// Debug files on disk while converted, for the jobs answered from partial SymCaches.
    on_disk: crate::first_answer::OnDisk,
    /// Partial SymCaches built at once (`--max-conversions`).
    partials: tokio::sync::Semaphore,
    /// Conversions allowed at once (`--max-conversions`).
    conversions: Arc<tokio::sync::Semaphore>,
    settings: CacheSettings,
    /// Hit and miss counts.
    pub counters: CacheCounters,
}

/// How the caches behave.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// Memory budget for parsed SymCaches and source maps, in bytes.
    pub memory_bytes: u64,
    /// How long a "not found" is remembered.
    pub negative_ttl: Duration,
    /// Debug file conversions at once (at least 1).
    pub max_conversions: usize,
    /// Whether SymCaches are shared through the bucket: read before converting, and uploaded
    /// after converting ([`layout::symcache_key`]).
    pub share_symcaches: bool,
    /// How a debug file's download is bounded and resumed.
    pub download: symcluster_sources::DownloadLimits,
    /// Whether a job whose debug file is being converted is answered from a partial SymCache
    /// of its own addresses ([`crate::first_answer`]) instead of waiting.
    pub partial_symcaches: bool,
}

impl Caches {
    /// Caches over `source` (the layout under `prefix`, the bucket's `--s3-prefix`) and `disk`.
    pub fn new(source: Source, prefix: String, disk: DiskCache, settings: CacheSettings) -> Self {
        let CacheSettings {
            memory_bytes,
            negative_ttl,
            ..
        } = settings;
        let weigh = |bytes: usize| u32::try_from(bytes).unwrap_or(u32::MAX);
        Caches {
            source,
            prefix,
            disk: Arc::new(disk),
            symcaches: Cache::builder()
                .max_capacity(memory_bytes / 2)
                .weigher(move |_, v: &Arc<SymCacheFile>| weigh(v.size_bytes()))
                .build(),
            sourcemaps: Cache::builder()
                .max_capacity(memory_bytes / 16 * 3)
                .weigher(move |_, v: &Arc<JsSourceMap>| weigh(v.size_bytes()))
                .build(),
            mappings: Cache::builder()
                .max_capacity(memory_bytes / 16 * 3)
                .weigher(move |_, v: &Arc<JvmMapping>| weigh(v.size_bytes()))
                .build(),
            unwind: Cache::builder()
                .max_capacity(memory_bytes / 8)
                .weigher(move |_, v: &Arc<UnwindInfo>| weigh(v.size_bytes()))
                .build(),
            missing: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(negative_ttl)
                .build(),
            on_disk: Default::default(),
            partials: tokio::sync::Semaphore::new(settings.max_conversions.max(1)),
            conversions: Arc::new(tokio::sync::Semaphore::new(settings.max_conversions.max(1))),
            settings,
            counters: CacheCounters::default(),
        }
    }

    /// Bytes held in memory (approximate: moka's weighted size).
    pub fn memory_bytes(&self) -> u64 {
        self.symcaches.weighted_size()
            + self.sourcemaps.weighted_size()
            + self.mappings.weighted_size()
            + self.unwind.weighted_size()
    }

    /// Bytes held on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.disk.total_bytes()
    }

    /// The memory and disk budgets, in bytes.
    pub fn budgets(&self) -> (u64, u64) {
        (self.settings.memory_bytes, self.disk.budget())
    }

    /// Counts one lookup answered by `layer` (the heartbeat's hits and misses, and
    /// `symcluster_worker_cache_lookups_total`).
    fn count(&self, layer: Layer) {
        let counter = if layer == Layer::Source {
            &self.counters.misses
        } else {
            &self.counters.hits
        };
        counter.fetch_add(1, Ordering::Relaxed);
        crate::metrics::cache_lookup(layer.label(), layer != Layer::Source);
    }

    /// `key` from the source, in a `fetch` span, timed and counted
    /// (`symcluster_worker_step_seconds{step="fetch"}`, `symcluster_worker_downloaded_bytes_total`).
    async fn fetch(
        &self,
        key: &str,
        kind: &'static str,
        debug_id: Option<DebugId>,
    ) -> Result<Option<Vec<u8>>, FetchError> {
        let span = match debug_id {
            Some(debug_id) => tracing::info_span!("fetch", %debug_id, key),
            None => tracing::info_span!("fetch", key),
        };
        let started = std::time::Instant::now();
        let fetched = self.source.fetch(key).instrument(span).await;
        crate::metrics::step("fetch", kind, started.elapsed());
        if let Ok(Some(bytes)) = &fetched {
            crate::metrics::downloaded(bytes.len());
        }
        fetched
    }

    /// The SymCache of `debug_id` for a job of `project`, as the engine wants it: found,
    /// missing, malformed, or fetching failed. Looked up in the project's prefix, then in the
    /// shared one ([`layout::native_scopes`]); any answer but "missing" from the project ends
    /// the search. With `recheck`, a file the negative cache remembers as not found is looked
    /// up again (it may have just been uploaded).
    ///
    /// `addresses` are the job's lookups in this debug file (image-relative, as
    /// [`symcluster_engine::image_lookups`] gives them): when the debug file must be converted,
    /// the job is answered from a partial SymCache of them as soon as the file is on disk
    /// ([`crate::first_answer`]), and the conversion goes on in the background. Empty (or
    /// `--partial-symcaches=false`): the job waits for the conversion.
    #[tracing::instrument(name = "debug_file", level = "debug", skip_all, fields(debug_id = %debug_id))]
    pub async fn symcache(
        self: &Arc<Self>,
        project: &str,
        debug_id: DebugId,
        recheck: bool,
        addresses: &[u64],
    ) -> ModuleLoad {
        for scope in layout::native_scopes(project) {
            match self.symcache_in(scope, debug_id, recheck, addresses).await {
                ModuleLoad::Missing => continue,
                found => return found,
            }
        }
        ModuleLoad::Missing
    }

    async fn symcache_in(
        self: &Arc<Self>,
        scope: Scope<'_>,
        debug_id: DebugId,
        recheck: bool,
        addresses: &[u64],
    ) -> ModuleLoad {
        let key = layout::debug_file_key(&scope.prefix(&self.prefix), &debug_id);
        if recheck {
            self.missing.invalidate(&key).await;
        } else if self.missing.contains_key(&key) {
            self.count(Layer::Negative);
            return ModuleLoad::Missing;
        }
        if addresses.is_empty() || !self.settings.partial_symcaches {
            return self.full_symcache(key, debug_id).await;
        }
        if let Some(symcache) = self.symcaches.get(&key).await {
            self.count(Layer::Memory);
            return ModuleLoad::Found(symcache);
        }
        // Followed before the conversion is asked for, so that its file cannot be missed.
        let mut on_disk = self.on_disk.subscribe(&key);
        // In the job's span: the conversion's logs and trace spans stay the first job's.
        let full = tokio::spawn(
            {
                let caches = self.clone();
                let key = key.clone();
                async move {
                    let load = caches.full_symcache(key.clone(), debug_id).await;
                    caches.on_disk.ended(&key);
                    load
                }
            }
            .instrument(tracing::Span::current()),
        );
        let failed = |e: tokio::task::JoinError| {
            ModuleLoad::Malformed(format!("the SymCache task failed: {e}"))
        };
        tokio::pin!(full);
        // The file is taken whenever it was published to this job, even when the conversion
        // ended meanwhile: a job that waited for a download is answered from its partial
        // SymCache; one whose SymCache came from a disk or the bucket gets that.
        let mut ended = None;
        let file = loop {
            if let Some(file) = on_disk.borrow_and_update().clone() {
                break file;
            }
            tokio::select! {
                load = &mut full => {
                    let load = load.unwrap_or_else(failed);
                    match on_disk.borrow().clone() {
                        Some(file) => {
                            ended = Some(load);
                            break file;
                        }
                        None => return load,
                    }
                }
                changed = on_disk.changed() => {
                    if changed.is_err() {
                        // The conversion ended without a file on disk, or after it: the
                        // value, if any, is still there for the next turn.
                        if on_disk.borrow().is_none() {
                            return full.await.unwrap_or_else(failed);
                        }
                    }
                }
            }
        };
        // At most `--max-conversions` partial SymCaches at once too (a burst of jobs for a new
        // release would otherwise build one per image per job, beside the conversions).
        let _permit = self.partials.acquire().await;
        match crate::first_answer::partial(file, debug_id, addresses.to_vec()).await {
            Ok(partial) => {
                crate::metrics::partial_symcache();
                ModuleLoad::Found(Arc::new(partial))
            }
            Err(e) => {
                // The full conversion says what is wrong with the file.
                tracing::debug!(error = %e, "no partial SymCache; waiting for the conversion");
                match ended {
                    Some(load) => load,
                    None => full.await.unwrap_or_else(failed),
                }
            }
        }
    }

    /// The whole SymCache of the debug file at `key`, from the first layer that has it
    /// (single flight per key: concurrent callers share one load).
    async fn full_symcache(&self, key: String, debug_id: DebugId) -> ModuleLoad {
        let entry = self
            .symcaches
            .entry(key.clone())
            .or_try_insert_with(self.load_symcache(debug_id, key.clone()))
            .await;
        match entry {
            Ok(entry) => {
                // A fresh entry was counted by its loader (disk or source).
                if !entry.is_fresh() {
                    self.count(Layer::Memory);
                }
                ModuleLoad::Found(entry.into_value())
            }
            Err(e) => match e.as_ref() {
                SymCacheLoadError::Missing => {
                    self.missing.insert(key, ()).await;
                    ModuleLoad::Missing
                }
                SymCacheLoadError::Malformed(m) => ModuleLoad::Malformed(m.clone()),
                SymCacheLoadError::Fetch(m) => ModuleLoad::FetchingFailed(m.clone()),
            },
        }
    }

    async fn load_symcache(
        &self,
        debug_id: DebugId,
        key: String,
    ) -> Result<Arc<SymCacheFile>, SymCacheLoadError> {
        let disk_key = format!("symcache/{}/{}", symcache_format(), hex_key(&key));
        let disk = self.disk.clone();
        let dk = disk_key.clone();
        let cached = tokio::task::spawn_blocking(move || {
            disk.map(&dk)
                .and_then(|bytes| SymCacheFile::parse(bytes).ok())
                // A file for another debug id (a corrupt or foreign entry) is not used.
                .filter(|symcache| symcache.get().debug_id() == debug_id)
        })
        .await
        .ok()
        .flatten();
        if let Some(symcache) = cached {
            self.count(Layer::Disk);
            tracing::debug!(%key, "SymCache read from the disk cache");
            return Ok(Arc::new(symcache));
        }
        // With sharing, the original's version names the SymCache derived from it, so that a
        // replaced debug file is never served another's SymCache from the bucket. A missing
        // original is a miss, shared SymCache or not.
        let shared_key = if self.settings.share_symcaches {
            let original = match self.source.version(&key).await {
                Ok(Some(version)) => version,
                Ok(None) => {
                    self.count(Layer::Source);
                    tracing::debug!(%key, "debug file not in the bucket");
                    return Err(SymCacheLoadError::Missing);
                }
                Err(e) => {
                    self.count(Layer::Source);
                    tracing::warn!(%key, error = %e, "asking for the debug file failed");
                    return Err(SymCacheLoadError::Fetch(e.to_string()));
                }
            };
            let shared_key = layout::symcache_key(&key, &symcache_format(), &original);
            if let Some(symcache) = self.shared_symcache(&shared_key, debug_id, &disk_key).await {
                self.count(Layer::Shared);
                return Ok(symcache);
            }
            Some(shared_key)
        } else {
            None
        };
        self.count(Layer::Source);
        // At most `--max-conversions` debug files at once, from their download to the end of
        // their conversion: each is on disk, mapped, with its SymCache being built in memory.
        let (permit, fetch_started, fetched) = self
            .bring_debug_file(&key, debug_id)
            .await
            .map_err(|e| SymCacheLoadError::Malformed(format!("conversion slots closed: {e}")))?;
        let object = match fetched {
            Ok(Some(object)) => object,
            Ok(None) => {
                tracing::debug!(%key, "debug file not in the bucket");
                return Err(SymCacheLoadError::Missing);
            }
            Err(e) => {
                tracing::warn!(%key, error = %e, "fetching the debug file failed");
                return Err(SymCacheLoadError::Fetch(e.to_string()));
            }
        };
        tracing::debug!(%key, bytes = object.bytes.len(), resumes = object.resumes,
            ms = fetch_started.elapsed().as_millis() as u64, "debug file fetched");
        let object = Arc::new(object);
        self.on_disk.publish(&key, object.clone());
        let convert_started = std::time::Instant::now();
        let (disk, dk) = (self.disk.clone(), disk_key.clone());
        let span = tracing::info_span!("convert", %debug_id, bytes = object.bytes.len());
        let converted = tokio::task::spawn_blocking(move || {
            let disk_key = dk;
            let _entered = span.enter();
            let _converting = crate::metrics::Converting::start("native");
            let converted = convert_to_disk(&disk, &disk_key, &object, debug_id, &key);
            drop(permit);
            converted.map(Arc::new)
        })
        .await
        .map_err(|e| SymCacheLoadError::Malformed(format!("conversion task failed: {e}")))?;
        match &converted {
            Ok(symcache) => {
                tracing::debug!(
                    bytes = symcache.bytes().len(),
                    ms = convert_started.elapsed().as_millis() as u64,
                    "SymCache converted"
                );
                if let Some(shared_key) = shared_key {
                    self.share(shared_key, &disk_key, symcache);
                }
            }
            Err(e) => tracing::warn!(error = ?e, "SymCache conversion failed"),
        }
        converted
    }

    /// The SymCache another worker shared at `shared_key`, when it is there, parses, and is for
    /// `debug_id` (anything else is ignored: the original is converted again, and the shared
    /// one replaced). Streamed into the disk cache as `disk_key` and mapped from there.
    async fn shared_symcache(
        &self,
        shared_key: &str,
        debug_id: DebugId,
        disk_key: &str,
    ) -> Option<Arc<SymCacheFile>> {
        let skipped = |e: &dyn std::fmt::Display| {
            tracing::debug!(key = shared_key, error = %e, "shared SymCache not read");
        };
        let temporary = self.disk.temporary_file().map_err(|e| skipped(&e)).ok()?;
        let mut file = tokio::fs::File::from_std(
            temporary
                .as_file()
                .try_clone()
                .map_err(|e| skipped(&e))
                .ok()?,
        );
        let span = tracing::info_span!("fetch", %debug_id, key = shared_key);
        let started = std::time::Instant::now();
        let downloading = crate::metrics::Downloading::start();
        let progress = |bytes: u64| downloading.received(bytes);
        let fetched = self
            .source
            .download_to(shared_key, &mut file, &self.settings.download, &progress)
            .instrument(span)
            .await;
        crate::metrics::step("fetch", "native", started.elapsed());
        drop(downloading);
        match fetched {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => {
                skipped(&e);
                return None;
            }
        }
        drop(file);
        let (disk, key) = (self.disk.clone(), disk_key.to_owned());
        let parsed = tokio::task::spawn_blocking(move || {
            let size = temporary.as_file().metadata().ok()?.len();
            let bytes = if size <= disk.budget() {
                disk.adopt(&key, temporary).ok()?;
                disk.map(&key)?
            } else {
                // Larger than the whole disk cache: mapped where it was downloaded (the file
                // is removed when `temporary` drops; the map stays readable).
                symbolic_common::ByteView::open(temporary.path()).ok()?
            };
            let parsed = SymCacheFile::parse(bytes)
                .ok()
                .filter(|symcache| symcache.get().debug_id() == debug_id);
            if parsed.is_none() {
                disk.remove(&key);
            }
            parsed
        })
        .await
        .ok()
        .flatten();
        if parsed.is_none() {
            tracing::warn!(
                key = shared_key,
                "shared SymCache unusable; converting the debug file"
            );
        }
        parsed.map(Arc::new)
    }

    /// Uploads a SymCache this worker converted, for the others, without holding up the job:
    /// streamed from its disk cache file (`disk_key`), or from memory when it is not there. A
    /// bucket that refuses it (read-only credentials), or an entry evicted before its upload
    /// read it (a disk cache smaller than a few SymCaches), costs a warning: it is not shared.
    fn share(&self, shared_key: String, disk_key: &str, symcache: &Arc<SymCacheFile>) {
        let source = self.source.clone();
        let path = self.disk.path(disk_key);
        let symcache = symcache.clone();
        tokio::spawn(async move {
            let shared = match path {
                Some(path) => source.put_file(&shared_key, &path).await,
                None => source.put(&shared_key, symcache.bytes().to_vec()).await,
            };
            match shared {
                Ok(()) => tracing::debug!(key = %shared_key, "SymCache shared"),
                Err(e) => tracing::warn!(error = %e,
                    "cannot share the SymCache (read-only bucket? --share-symcaches=false turns this off)"),
            }
        });
    }

    /// The layout prefix (the bucket's `--s3-prefix`) the caches read under.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prepared source map stored under `(map_key, bundle_key)`; with `recheck`, looked up
    /// again even when the negative cache remembers it as not found.
    pub async fn sourcemap(
        &self,
        map_key: &str,
        bundle_key: &str,
        recheck: bool,
    ) -> Result<Arc<JsSourceMap>, SourceMapLoadError> {
        self.through_memory(
            &self.sourcemaps,
            map_key,
            recheck,
            self.load_sourcemap(map_key, bundle_key),
        )
        .await
    }

    /// `key`'s entry of `memory`, or `load`'s answer (kept in `memory`; a "not found" kept in
    /// the negative cache), moka merging concurrent loads of one key. With `recheck`, a key
    /// the negative cache remembers is loaded again.
    async fn through_memory<T: Send + Sync + 'static>(
        &self,
        memory: &Cache<String, Arc<T>>,
        key: &str,
        recheck: bool,
        load: impl std::future::Future<Output = Result<Arc<T>, SourceMapLoadError>>,
    ) -> Result<Arc<T>, SourceMapLoadError> {
        if recheck {
            self.missing.invalidate(key).await;
        } else if self.missing.contains_key(key) {
            self.count(Layer::Negative);
            return Err(SourceMapLoadError::NotFound(key.to_owned()));
        }
        match memory.entry(key.to_owned()).or_try_insert_with(load).await {
            Ok(entry) => {
                // A fresh entry was counted by its loader (disk or source).
                if !entry.is_fresh() {
                    self.count(Layer::Memory);
                }
                Ok(entry.into_value())
            }
            Err(e) => {
                if matches!(e.as_ref(), SourceMapLoadError::NotFound(_)) {
                    self.missing.insert(key.to_owned(), ()).await;
                }
                Err(e.as_ref().clone())
            }
        }
    }

    async fn load_sourcemap(
        &self,
        map_key: &str,
        bundle_key: &str,
    ) -> Result<Arc<JsSourceMap>, SourceMapLoadError> {
        let disk_map = format!("download/{}", hex_key(map_key));
        let disk_bundle = format!("download/{}", hex_key(bundle_key));
        let map = match self.disk_get(&disk_map).await {
            Some(bytes) => {
                self.count(Layer::Disk);
                bytes
            }
            None => {
                self.count(Layer::Source);
                let bytes = self
                    .fetch(map_key, "js", None)
                    .await?
                    .ok_or_else(|| SourceMapLoadError::NotFound(map_key.to_owned()))?;
                self.disk_put(&disk_map, &bytes).await;
                bytes
            }
        };
        // The bundle is optional: it only adds scope names when the map has no function map.
        let bundle = match self.disk_get(&disk_bundle).await {
            Some(bytes) => Some(bytes),
            None => match self.fetch(bundle_key, "js", None).await {
                Ok(Some(bytes)) => {
                    self.disk_put(&disk_bundle, &bytes).await;
                    Some(bytes)
                }
                Ok(None) => None,
                Err(e) => return Err(e.into()),
            },
        };
        let key = map_key.to_owned();
        let span = tracing::info_span!("convert", key, bytes = map.len());
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let _converting = crate::metrics::Converting::start("js");
            let bundle = bundle.and_then(|b| String::from_utf8(b).ok());
            JsSourceMap::parse(&map, bundle.as_deref())
                .map(Arc::new)
                .map_err(|e| SourceMapLoadError::Malformed(format!("{key}: {e}")))
        })
        .await
        .map_err(|e| SourceMapLoadError::Malformed(format!("preparing the map failed: {e}")))?
    }

    /// The prepared ProGuard/R8 mapping file stored under `key` (a [`layout::proguard_key`]);
    /// with `recheck`, looked up again even when the negative cache remembers it as not found.
    /// The prepared form is kept on disk (by its format version), so a restarted worker does
    /// not convert again.
    pub async fn mapping(
        &self,
        key: &str,
        recheck: bool,
    ) -> Result<Arc<JvmMapping>, SourceMapLoadError> {
        self.through_memory(&self.mappings, key, recheck, self.load_mapping(key))
            .await
    }

    async fn load_mapping(&self, key: &str) -> Result<Arc<JvmMapping>, SourceMapLoadError> {
        let disk_key = format!(
            "proguard-v{}/{}",
            symcluster_engine::jvm::mapping::PREPARED_VERSION,
            hex_key(key)
        );
        if let Some(bytes) = self.disk_get(&disk_key).await {
            // A file that does not read back (damaged) is converted again.
            if let Ok(mapping) = JvmMapping::from_prepared(bytes) {
                self.count(Layer::Disk);
                return Ok(Arc::new(mapping));
            }
        }
        self.count(Layer::Source);
        let text = self
            .fetch(key, "jvm", None)
            .await?
            .ok_or_else(|| SourceMapLoadError::NotFound(key.to_owned()))?;
        let owned_key = key.to_owned();
        let span = tracing::info_span!("convert", key, bytes = text.len());
        // A conversion holds the file and its prepared form (hundreds of MB for a big app):
        // one of `--max-conversions`, as debug files.
        let _slot = self.conversions.acquire().await;
        let mapping = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let _converting = crate::metrics::Converting::start("jvm");
            JvmMapping::from_mapping_file(&text)
                .map_err(|e| SourceMapLoadError::Malformed(format!("{owned_key}: {e}")))
        })
        .await
        .map_err(|e| {
            SourceMapLoadError::Malformed(format!("preparing the mapping failed: {e}"))
        })??;
        self.disk_put(&disk_key, mapping.bytes()).await;
        Ok(Arc::new(mapping))
    }

    /// The unwind information (CFI) of the debug file with `debug_id` for a job of `project`,
    /// looked up as [`Self::symcache`] looks up its SymCache (the project's prefix, then the
    /// shared one): `Ok(None)` when no debug file has it or it does not convert (the walk goes
    /// on without it; the frames' SymCache says what is wrong). Kept on disk as a `CfiCache`
    /// (by its format version), so a restarted worker does not convert again. Errors: the
    /// source could not be asked (the job is retried: a walk without CFI would be wrong).
    pub async fn unwind_info(
        &self,
        project: &str,
        debug_id: DebugId,
        recheck: bool,
    ) -> Result<Option<Arc<UnwindInfo>>, FetchError> {
        for scope in layout::native_scopes(project) {
            let key = layout::debug_file_key(&scope.prefix(&self.prefix), &debug_id);
            let load = self.load_unwind_info(&key, debug_id);
            match self.through_memory(&self.unwind, &key, recheck, load).await {
                Ok(info) => return Ok(Some(info)),
                Err(SourceMapLoadError::NotFound(_)) => continue,
                Err(SourceMapLoadError::Malformed(e)) => {
                    tracing::warn!(%key, error = %e, "no unwind information from the debug file");
                    return Ok(None);
                }
                Err(SourceMapLoadError::Fetch(e)) => return Err(e),
            }
        }
        Ok(None)
    }

    async fn load_unwind_info(
        &self,
        key: &str,
        debug_id: DebugId,
    ) -> Result<Arc<UnwindInfo>, SourceMapLoadError> {
        let disk_key = format!("cficache-v{CFICACHE_VERSION}/{}", hex_key(key));
        if let Some(bytes) = self.disk_get(&disk_key).await {
            // A file that does not read back (damaged) is converted again.
            if let Ok(info) = UnwindInfo::parse(&bytes) {
                self.count(Layer::Disk);
                return Ok(Arc::new(info));
            }
        }
        self.count(Layer::Source);
        // One of `--max-conversions`, from the download to the end of the conversion (the
        // permit goes with the conversion: a job given up does not free it early).
        let (permit, _, fetched) = self
            .bring_debug_file(key, debug_id)
            .await
            .map_err(|e| SourceMapLoadError::Malformed(format!("conversion slots closed: {e}")))?;
        let object = fetched?.ok_or_else(|| SourceMapLoadError::NotFound(key.to_owned()))?;
        let owned_key = key.to_owned();
        let span = tracing::info_span!("convert", %debug_id, bytes = object.bytes.len());
        let converted = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let _converting = crate::metrics::Converting::start("native");
            let converted = UnwindInfo::convert(&object.bytes, debug_id)
                .map_err(|e| SourceMapLoadError::Malformed(format!("{owned_key}: {e}")));
            drop(object);
            drop(permit);
            let bytes = converted?;
            let info = UnwindInfo::parse(&bytes).map_err(|e| {
                SourceMapLoadError::Malformed(format!("{owned_key}: its CFI cache: {e}"))
            })?;
            Ok::<_, SourceMapLoadError>((bytes, info))
        })
        .await
        .map_err(|e| SourceMapLoadError::Malformed(format!("converting the CFI failed: {e}")))?;
        let (bytes, info) = converted?;
        self.disk_put(&disk_key, &bytes).await;
        Ok(Arc::new(info))
    }

    /// The debug file at `key` brought to disk and mapped ([`crate::debug_file::bring`]) in one
    /// of the `--max-conversions` slots, timed as a `fetch` step: the slot (kept by the caller
    /// until its conversion ends), when the download started, and what it brought. Errors: the
    /// slots are closed.
    async fn bring_debug_file(
        &self,
        key: &str,
        debug_id: DebugId,
    ) -> Result<
        (
            tokio::sync::OwnedSemaphorePermit,
            std::time::Instant,
            Result<Option<crate::debug_file::DebugFileOnDisk>, FetchError>,
        ),
        tokio::sync::AcquireError,
    > {
        let permit = self.conversions.clone().acquire_owned().await?;
        let started = std::time::Instant::now();
        let span = tracing::info_span!("fetch", %debug_id, key);
        let fetched =
            crate::debug_file::bring(&self.source, &self.disk, key, &self.settings.download)
                .instrument(span)
                .await;
        crate::metrics::step("fetch", "native", started.elapsed());
        Ok((permit, started, fetched))
    }

    async fn disk_get(&self, key: &str) -> Option<Vec<u8>> {
        let disk = self.disk.clone();
        let key = key.to_owned();
        tokio::task::spawn_blocking(move || disk.get(&key))
            .await
            .ok()
            .flatten()
    }

    async fn disk_put(&self, key: &str, bytes: &[u8]) {
        let disk = self.disk.clone();
        let key = key.to_owned();
        let bytes = bytes.to_vec();
        let _ = tokio::task::spawn_blocking(move || disk.put(&key, &bytes)).await;
    }
}

/// A file-name-safe key: the first 128 bits of the object key's SHA-256 (FIPS 180-4), in hex,
/// plus the key's last component. Collision-resistant, so one project's object can never be
/// read back from disk for another's key.
fn hex_key(key: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let hash: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let tail: String = key
        .rsplit('/')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(64)
        .collect();
    format!("{hash}-{tail}")
}
