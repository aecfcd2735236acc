//! `symctl upload`: debug files, source maps and ProGuard mapping files into the bucket, in the layout workers read:
//! through the masters by default ([`upload_cluster`]: an upload token, presigned requests),
//! or straight to the bucket with `--s3-bucket` (operators with bucket credentials).

use std::path::PathBuf;

use anyhow::Context;
use symcluster_client::project;
use symcluster_engine::debug_files::DebugFileIndex;
use symcluster_sources::{S3Settings, Scope, Source, layout};

use symcluster_client::{Client, api, missing};

use super::upload_cluster::{self, FileToUpload};
use crate::cli::{BucketArgs, NotifyArgs, UploadCommand, UploadTarget};

/// Tells the master which files arrived (`Ingest/FilesUploaded`), so that finished jobs that
/// lacked them run again; nothing without a token. An upload the master was not told about is
/// an error (exit 1), saying the files themselves are in the bucket.
async fn notify(args: &NotifyArgs, scope: Scope<'_>, keys: Vec<String>) -> anyhow::Result<()> {
    let Some(token) = &args.token else {
        return Ok(());
    };
    let master = args.master.as_deref().unwrap_or("http://127.0.0.1:7700");
    let (project, shared) = match scope {
        Scope::Project(p) => (p.to_owned(), false),
        Scope::Shared => (String::new(), true),
    };
    let told = async {
        let tls = symcluster_client::Tls::from_files(args.tls_ca.as_deref(), None, None)?;
        let client = Client::connect_with(master, token, tls).await?;
        let request = api::FilesUploadedRequest {
            project,
            shared,
            keys,
        };
        let response = client
            .on_leader(|channel| {
                let request = request.clone();
                async move {
                    api::ingest_client::IngestClient::new(channel)
                        .files_uploaded(request)
                        .await
                        .map(|r| r.into_inner())
                }
            })
            .await?;
        anyhow::Ok(response.requeued)
    };
    match told.await {
        Ok(0) => Ok(()),
        Ok(1) => {
            println!("1 job that lacked these files is being symbolicated again");
            Ok(())
        }
        Ok(n) => {
            println!("{n} jobs that lacked these files are being symbolicated again");
            Ok(())
        }
        Err(e) => Err(e.context(
            "the files are uploaded, but the master was not told (jobs that lacked them run \
             again only when it is: run the upload again)",
        )),
    }
}

/// The scope `target` names (the project's name checked; `default` when none is named).
fn scope(target: &UploadTarget) -> anyhow::Result<Scope<'_>> {
    if target.shared {
        return Ok(Scope::Shared);
    }
    let project = target
        .project
        .as_deref()
        .unwrap_or(project::DEFAULT_PROJECT);
    project::validate(project).map_err(anyhow::Error::msg)?;
    Ok(Scope::Project(project))
}

async fn bucket(args: &BucketArgs) -> anyhow::Result<Source> {
    let Some(bucket) = args.s3_bucket.clone() else {
        anyhow::bail!("give the bucket: --s3-bucket or SYMCLUSTER_S3_BUCKET");
    };
    Ok(Source::s3(&S3Settings {
        bucket,
        endpoint: args.s3_endpoint.clone(),
        region: args.s3_region.clone(),
        attempts: 3,
        timeout_ms: 60_000,
    })
    .await)
}

/// Every debug id of the debug files under `paths`, with its best file, as uploads through the
/// cluster.
fn debug_files(paths: &[PathBuf]) -> anyhow::Result<Vec<FileToUpload>> {
    let index = DebugFileIndex::scan(paths)?;
    for problem in index.unreadable() {
        eprintln!("symctl: warning: skipped unreadable debug file {problem}");
    }
    // The best file of each debug id: its dSYM rather than a stripped binary of the same id.
    let mut files = Vec::new();
    for (debug_id, entry) in index.best() {
        files.push(FileToUpload {
            missing_key: missing::native_key(&debug_id.to_string()),
            label: format!(
                "{debug_id} {:<8} {}",
                entry.arch.name(),
                entry.path.display()
            ),
            kind: api::upload_file::Kind::DebugId(debug_id.to_string()),
            path: entry.path.clone(),
        });
    }
    if files.is_empty() {
        anyhow::bail!("no Mach-O or ELF debug file found in the given paths");
    }
    Ok(files)
}

pub async fn run(command: UploadCommand) -> anyhow::Result<()> {
    match command {
        UploadCommand::Dsym {
            bucket: b,
            target,
            notify: n,
            paths,
        } => {
            if b.s3_bucket.is_none() {
                let files = debug_files(&paths)?;
                let project = target.project.as_deref().unwrap_or_default();
                return upload_cluster::upload(&n, project, target.shared, files).await;
            }
            let scope = scope(&target)?;
            let keys = upload_debug_files(&b, scope, &paths).await?;
            notify(&n, scope, keys).await
        }
        UploadCommand::SystemSymbols {
            bucket: b,
            notify: n,
            dir,
        } => {
            if !dir.is_dir() {
                anyhow::bail!("{} is not a directory", dir.display());
            }
            if b.s3_bucket.is_none() {
                let files = debug_files(&[dir])?;
                return upload_cluster::upload(&n, "", true, files).await;
            }
            let keys = upload_debug_files(&b, Scope::Shared, &[dir]).await?;
            notify(&n, Scope::Shared, keys).await
        }
        UploadCommand::Sourcemap {
            bucket: b,
            project,
            notify: n,
            sourcemap: map,
            bundle,
            debug_id,
            release,
            dist,
            bundle_name,
        } => {
            let map_bytes =
                std::fs::read(&map).with_context(|| format!("cannot read {}", map.display()))?;
            // Refuse what workers could not read.
            symcluster_engine::js::JsSourceMap::parse(&map_bytes, None)
                .with_context(|| map.display().to_string())?;
            // By debug id (given, or the map's own) and by release: under each that is named.
            if debug_id.as_deref() == Some("") {
                anyhow::bail!("--debug-id is empty");
            }
            let debug_id = debug_id.or_else(|| {
                let id = serde_json::from_slice(&map_bytes)
                    .ok()
                    .and_then(|json| super::sourcemaps::map_debug_id(&json))?;
                match missing::js_debug_id(&id) {
                    Ok(_) => Some(id),
                    Err(e) => {
                        eprintln!(
                            "symctl: warning: {}: its debugId is not used ({e})",
                            map.display()
                        );
                        None
                    }
                }
            });
            let mut keyings = Vec::new();
            if let Some(id) = &debug_id {
                keyings.push(api::SourceMapFile {
                    debug_id: id.clone(),
                    ..Default::default()
                });
            }
            if let Some(release) = &release {
                keyings.push(api::SourceMapFile {
                    release: release.clone(),
                    dist: dist.clone(),
                    bundle_name: bundle_name.clone().unwrap_or_default(),
                    ..Default::default()
                });
            }
            if keyings.is_empty() {
                anyhow::bail!(
                    "give --debug-id, or --release and --bundle-name, or inject a debug id into \
                     the bundle and map first (symctl sourcemaps inject)"
                );
            }
            let keys: Vec<String> = keyings
                .iter()
                .map(|k| missing::js_key(&k.debug_id, &k.release, &k.dist, &k.bundle_name))
                .collect();
            if b.s3_bucket.is_none() {
                let mut files = Vec::new();
                for (keying, key) in keyings.iter().zip(&keys) {
                    let by = if keying.debug_id.is_empty() {
                        format!("release {}", keying.release)
                    } else {
                        format!("debug id {}", keying.debug_id)
                    };
                    files.push(FileToUpload {
                        label: format!("source map {} by {by}", map.display()),
                        kind: api::upload_file::Kind::SourceMap(keying.clone()),
                        path: map.clone(),
                        missing_key: key.clone(),
                    });
                    if let Some(bundle) = &bundle {
                        files.push(FileToUpload {
                            label: format!("bundle {} by {by}", bundle.display()),
                            kind: api::upload_file::Kind::SourceMap(api::SourceMapFile {
                                bundle: true,
                                ..keying.clone()
                            }),
                            path: bundle.clone(),
                            missing_key: key.clone(),
                        });
                    }
                }
                let project = project.as_deref().unwrap_or_default();
                return upload_cluster::upload(&n, project, false, files).await;
            }
            let project = project.as_deref().unwrap_or(project::DEFAULT_PROJECT);
            project::validate(project).map_err(anyhow::Error::msg)?;
            let prefix = Scope::Project(project).prefix(&b.s3_prefix);
            let source = bucket(&b).await?;
            for keying in &keyings {
                let (map_key, bundle_key) = if keying.debug_id.is_empty() {
                    layout::sourcemap_keys_by_release(
                        &prefix,
                        &keying.release,
                        &keying.dist,
                        &keying.bundle_name,
                    )?
                } else {
                    layout::sourcemap_keys_by_debug_id(&prefix, &keying.debug_id)?
                };
                source.put(&map_key, map_bytes.clone()).await?;
                println!("uploaded {} -> {map_key}", map.display());
                if let Some(bundle) = &bundle {
                    source.put_file(&bundle_key, bundle).await?;
                    println!("uploaded {} -> {bundle_key}", bundle.display());
                }
            }
            notify(&n, Scope::Project(project), keys).await
        }
        UploadCommand::Proguard {
            bucket: b,
            project,
            notify: n,
            mappings,
            mapping_id,
        } => upload_proguard(b, project, n, mappings, mapping_id).await,
    }
}

/// Uploads ProGuard/R8 mapping files, each under its mapping id: through the masters, or with
/// `--s3-bucket` straight to the bucket (then the masters are told, when a token is given).
async fn upload_proguard(
    b: BucketArgs,
    project: Option<String>,
    n: NotifyArgs,
    mappings: Vec<PathBuf>,
    given_id: Option<String>,
) -> anyhow::Result<()> {
    use symcluster_engine::jvm::mapping;
    let given_id = match given_id {
        Some(_) if mappings.len() > 1 => {
            anyhow::bail!(
                "--mapping-id names one mapping file, not {}",
                mappings.len()
            )
        }
        Some(id) => Some(missing::mapping_id(&id).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let mut files = Vec::new();
    for path in mappings {
        // The id is the UUIDv5 of the whole file: read once here (the upload streams it).
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        mapping::check(&bytes).with_context(|| path.display().to_string())?;
        let id = given_id
            .clone()
            .unwrap_or_else(|| mapping::mapping_id(&bytes));
        println!("{} mapping id {id}", path.display());
        files.push((path, id));
    }
    if b.s3_bucket.is_none() {
        let uploads = files
            .into_iter()
            .map(|(path, id)| FileToUpload {
                label: format!("mapping {} ({id})", path.display()),
                missing_key: missing::jvm_key(&id),
                kind: api::upload_file::Kind::ProguardMappingId(id),
                path,
            })
            .collect();
        let project = project.as_deref().unwrap_or_default();
        return upload_cluster::upload(&n, project, false, uploads).await;
    }
    let project = project.as_deref().unwrap_or(project::DEFAULT_PROJECT);
    project::validate(project).map_err(anyhow::Error::msg)?;
    let prefix = Scope::Project(project).prefix(&b.s3_prefix);
    let source = bucket(&b).await?;
    let mut keys = Vec::new();
    for (path, id) in files {
        let key = layout::proguard_key(&prefix, &id)?;
        source.put_file(&key, &path).await?;
        println!("uploaded {} -> {key}", path.display());
        keys.push(missing::jvm_key(&id));
    }
    notify(&n, Scope::Project(project), keys).await
}

/// Uploads every object of the debug files under `paths`; the keys (debug ids) of all of them,
/// uploaded now or there already.
async fn upload_debug_files(
    b: &BucketArgs,
    scope: Scope<'_>,
    paths: &[PathBuf],
) -> anyhow::Result<Vec<String>> {
    let prefix = scope.prefix(&b.s3_prefix);
    let index = DebugFileIndex::scan(paths)?;
    for problem in index.unreadable() {
        eprintln!("symctl: warning: skipped unreadable debug file {problem}");
    }
    // The best file of each debug id (its dSYM rather than a stripped binary of the same id),
    // never read whole into memory.
    let mut uploads = Vec::new();
    for (debug_id, entry) in index.best() {
        let size = std::fs::metadata(&entry.path)
            .with_context(|| format!("cannot read {}", entry.path.display()))?
            .len();
        uploads.push((entry.path.clone(), *debug_id, entry.arch, size));
    }
    if uploads.is_empty() {
        anyhow::bail!("no Mach-O or ELF debug file found in the given paths");
    }
    let source = bucket(b).await?;
    let total: u64 = uploads.iter().map(|u| u.3).sum();
    let bar = super::progress_bar(total, "{bar:40} {bytes}/{total_bytes} {msg}");
    let (mut sent, mut skipped) = (0, 0);
    let mut keys = Vec::new();
    for (path, debug_id, arch, size) in uploads {
        keys.push(missing::native_key(&debug_id.to_string()));
        let key = layout::debug_file_key(&prefix, &debug_id);
        bar.set_message(format!("{debug_id} ({})", arch.name()));
        if source.exists(&key).await? {
            skipped += 1;
        } else {
            source.put_file(&key, &path).await?;
            sent += 1;
        }
        bar.inc(size);
        // On stdout, also when the bar is hidden (not a terminal): scripts log what went where.
        bar.suspend(|| {
            println!("{debug_id} {:<8} {} -> {key}", arch.name(), path.display());
        });
    }
    bar.finish_and_clear();
    println!("{sent} uploaded, {skipped} already there");
    keys.sort();
    keys.dedup();
    Ok(keys)
}
