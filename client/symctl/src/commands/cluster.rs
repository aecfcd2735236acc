//! `symctl submit`, `job`, `groups`, `status`: talking to a master with the client library.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use symcluster_client::{Client, api};

use crate::cli::{
    GroupsArgs, GroupsOutput, JobArgs, JobFormat, MasterArgs, MissingArgs, ProjectArgs, StatusArgs,
    SubmitArgs,
};

pub(super) async fn connect(args: &MasterArgs) -> anyhow::Result<Client> {
    let tls = symcluster_client::Tls::from_files(args.tls_ca.as_deref(), None, None)?;
    Ok(Client::connect_with(&args.master, &args.token, tls).await?)
}

/// A client for the project `project` names (the master's choice when none).
async fn connect_for(args: &MasterArgs, project: &ProjectArgs) -> anyhow::Result<Client> {
    let client = connect(args).await?;
    Ok(match &project.project {
        Some(p) => client.with_project(p),
        None => client,
    })
}

/// A job as JSON: its fields, with the result parsed.
fn job_json(job: &api::Job) -> serde_json::Value {
    let state = api::JobState::try_from(job.state)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("JOB_STATE_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| "unknown".into());
    let result: serde_json::Value = if job.result_json.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&job.result_json).unwrap_or(serde_json::Value::Null)
    };
    let missing: Vec<serde_json::Value> = job
        .missing
        .iter()
        .map(|m| serde_json::json!({"key": m.key, "image": m.image, "arch": m.arch}))
        .collect();
    serde_json::json!({
        "job_id": job.job_id,
        "project": job.project,
        "revision": job.revision,
        "resymbolicated_at_ms": (job.resymbolicated_at_ms > 0).then_some(job.resymbolicated_at_ms),
        "missing": missing,
        "state": state,
        "attempts": job.attempts,
        "worker_id": job.worker_id,
        "error": (!job.error.is_empty()).then_some(&job.error),
        "fingerprint": (!job.fingerprint.is_empty()).then_some(&job.fingerprint),
        "submitted_at_ms": job.submitted_at_ms,
        "finished_at_ms": job.finished_at_ms,
        "result": result,
    })
}

pub async fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    if args.file.is_dir() {
        let client = connect_for(&args.master, &args.project).await?;
        return super::submit_dir::run(args, client).await;
    }
    let data = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let job_id = args.job_id.clone().unwrap_or_else(|| {
        let name = args
            .file
            .file_name()
            .map_or("job".into(), |n| n.to_string_lossy().into_owned());
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("{name}-{ms}")
    });
    let mut client = connect_for(&args.master, &args.project).await?;
    let spec = super::submit_dir::spec(&args, job_id.clone(), data).map_err(anyhow::Error::msg)?;
    let response = client.submit(spec).await?;
    if !args.wait {
        let job = response.job.unwrap_or_default();
        println!("{}", serde_json::to_string_pretty(&job_json(&job))?);
        return Ok(());
    }
    // Waited for in the project the master put it in (the token's, when none was named).
    let project = response.job.map(|j| j.project).unwrap_or_default();
    let job = client.with_project(&project).wait(&job_id).await?;
    println!("{}", serde_json::to_string_pretty(&job_json(&job))?);
    if job.state != api::JobState::Completed as i32 {
        // Printed above with its error; a script sees the failure in the exit status.
        std::process::exit(1);
    }
    Ok(())
}

pub async fn job(args: JobArgs) -> anyhow::Result<()> {
    let mut client = connect_for(&args.master, &args.project).await?;
    match args.output {
        JobFormat::Json => {
            let job = client.job(&args.job_id).await?;
            println!("{}", serde_json::to_string_pretty(&job_json(&job))?);
        }
        JobFormat::Apple | JobFormat::Text => {
            let job = client.job_with_spec(&args.job_id).await?;
            let payload = job.spec.as_ref().and_then(|s| s.payload.as_ref());
            let jvm = matches!(payload, Some(api::job_spec::Payload::Jvm(_)));
            let combined = matches!(payload, Some(api::job_spec::Payload::Combined(_)));
            let text = if args.output == JobFormat::Apple {
                render_apple(&job)?
            } else if combined {
                render_combined(&job)?
            } else if jvm {
                render_java(&job)?
            } else {
                render_metro(&job, &args.bucket).await?
            };
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(())
}

/// Fails unless `job` completed (its state and error otherwise).
fn require_completed(job: &api::Job) -> anyhow::Result<()> {
    if job.state == api::JobState::Completed as i32 {
        return Ok(());
    }
    let state = api::JobState::try_from(job.state)
        .map_or("unknown", |s| s.as_str_name())
        .trim_start_matches("JOB_STATE_")
        .to_ascii_lowercase();
    match job.error.as_str() {
        "" => anyhow::bail!("job {} is {state}: it has no result yet", job.job_id),
        error => anyhow::bail!("job {} is {state}: {error}", job.job_id),
    }
}

/// A completed JVM job as `symctl retrace --format text` prints it (from the stored result).
fn render_java(job: &api::Job) -> anyhow::Result<String> {
    require_completed(job)?;
    let result: symcluster_engine::jvm::JvmRetraceResult =
        serde_json::from_slice(&job.result_json).context("the stored result")?;
    Ok(symcluster_engine::jvm::render::java_text(&result))
}

/// A completed combined job as text ([`symcluster_engine::combined::render::text`]).
fn render_combined(job: &api::Job) -> anyhow::Result<String> {
    require_completed(job)?;
    let result: symcluster_engine::combined::CombinedResult =
        serde_json::from_slice(&job.result_json).context("the stored result")?;
    Ok(symcluster_engine::combined::render::text(&result))
}

/// A completed JS job as `symctl restore-js --format text` prints it: a Hermes crash JSON from
/// the stored result; a text stack rewritten line by line with metro-symbolicate's pattern,
/// which reads every position through the job's source map (from `bucket`, under the job's
/// project, as the worker found it), so its lines match restore-js's byte for byte.
async fn render_metro(
    job: &api::Job,
    bucket: &symcluster_sources::BucketArgs,
) -> anyhow::Result<String> {
    use symcluster_engine::js::stack::JsStackKind;
    use symcluster_engine::js::{JsSourceMap, parse_stack, render};
    require_completed(job)?;
    let Some(api::job_spec::Payload::Js(js)) = job.spec.as_ref().and_then(|s| s.payload.as_ref())
    else {
        anyhow::bail!(
            "job {} is not a JS job (or its stack was purged): --format text renders JS jobs",
            job.job_id
        );
    };
    // The worker reads stacks with 1-based columns.
    let stack = parse_stack(&js.stack, 1)?;
    let result: symcluster_engine::js::JsRestoreResult =
        serde_json::from_slice(&job.result_json).context("the stored result")?;
    if stack.kind == JsStackKind::HermesCrash {
        return Ok(render::hermes_crash_json(&result));
    }
    let map = {
        let Some(bucket_name) = bucket.s3_bucket.clone() else {
            anyhow::bail!(
                "--format text of a JS text stack reads its source map from the bucket: give --s3-bucket (SYMCLUSTER_S3_BUCKET)"
            );
        };
        let source = symcluster_sources::Source::s3(&symcluster_sources::S3Settings {
            bucket: bucket_name,
            endpoint: bucket.s3_endpoint.clone(),
            region: bucket.s3_region.clone(),
            attempts: 3,
            timeout_ms: 60_000,
        })
        .await;
        let prefix = symcluster_sources::Scope::Project(&job.project).prefix(&bucket.s3_prefix);
        let (map_key, bundle_key) = if js.debug_id.is_empty() {
            symcluster_sources::layout::sourcemap_keys_by_release(
                &prefix,
                &js.release,
                &js.dist,
                &js.bundle,
            )
        } else {
            symcluster_sources::layout::sourcemap_keys_by_debug_id(&prefix, &js.debug_id)
        }?;
        let map = source
            .fetch(&map_key)
            .await?
            .with_context(|| format!("the source map {map_key} is not in the bucket"))?;
        let bundle = source
            .fetch(&bundle_key)
            .await?
            .and_then(|b| String::from_utf8(b).ok());
        JsSourceMap::parse(&map, bundle.as_deref()).context(map_key)?
    };
    let input = String::from_utf8_lossy(&js.stack);
    Ok(render::metro_text(&input, &stack, &result, &map, 1))
}

/// A completed native job's report rendered with its stored result, as `symctl symbolicate
/// --format apple` renders a report with the result it computes.
fn render_apple(job: &api::Job) -> anyhow::Result<String> {
    require_completed(job)?;
    let Some(api::job_spec::Payload::Native(native)) =
        job.spec.as_ref().and_then(|s| s.payload.as_ref())
    else {
        anyhow::bail!(
            "job {} is not a native crash report (or its report was purged): --format apple renders native jobs",
            job.job_id
        );
    };
    let data = symcluster_client::report::report_bytes(native)?;
    let report = symcluster_engine::parse_report(&data)?;
    let result: symcluster_engine::result::SymbolicationResult =
        serde_json::from_slice(&job.result_json).context("the stored result")?;
    Ok(symcluster_engine::render::apple(&data, &report, &result)?)
}

pub async fn groups(args: GroupsArgs) -> anyhow::Result<()> {
    let mut ingest = connect(&args.master).await?.ingest();
    let mut request = api::ListGroupsRequest {
        project: args.project.unwrap_or_default(),
        call_trees: args.tree.is_some(),
        facets: args.facets,
        kind: args.kind.map(|k| k.name().to_owned()).unwrap_or_default(),
        // A group picked by fingerprint: two answers say the prefix is ambiguous.
        fingerprint_prefix: args.tree.clone().unwrap_or_default(),
        ..Default::default()
    };
    let wanted = if args.tree.is_some() {
        2
    } else {
        args.limit as usize
    };
    let (mut groups, mut seen) = (Vec::new(), std::collections::HashSet::new());
    // Page by page (the master sends at most 1,000 groups per page) until `wanted`.
    while groups.len() < wanted {
        request.page_size = (wanted - groups.len()).min(1000) as u32;
        let page = ingest.list_groups(request.clone()).await?.into_inner();
        // A group whose count changed between pages may come again: listed once.
        for group in page.groups {
            if seen.insert((group.project.clone(), group.fingerprint.clone())) {
                groups.push(group);
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    if let Some(prefix) = &args.tree {
        let found: Vec<&api::CrashGroup> = groups
            .iter()
            .filter(|g| g.fingerprint.starts_with(prefix.as_str()))
            .collect();
        let group = match found.as_slice() {
            [one] => *one,
            [] => anyhow::bail!("no crash group's fingerprint starts with {prefix:?}"),
            _ => anyhow::bail!(
                "{} crash groups' fingerprints start with {prefix:?}",
                found.len()
            ),
        };
        if group.call_tree.is_empty() {
            anyhow::bail!(
                "crash group {} has no call tree (hang, jank and cpu reports have one)",
                group.fingerprint
            );
        }
        let folded = match args.output {
            None | Some(GroupsOutput::Text) => false,
            Some(GroupsOutput::Folded) => true,
            Some(other) => {
                anyhow::bail!("--tree prints `text` or `folded`, not `{}`", other.name())
            }
        };
        if folded {
            print_folded(&group.call_tree);
        } else {
            print_tree(&group.call_tree);
        }
        // The master keeps a group's heaviest paths only (2,000 nodes). Their callers' hits
        // include the samples left out, so folded stacks (self hits) count them already; the
        // text says how many there were.
        if group.call_tree_other_hits > 0 && !folded {
            println!(
                "{}  {OTHER_PATHS} (samples of the lightest paths, left out; included in their callers' hits)",
                group.call_tree_other_hits
            );
        }
        return Ok(());
    }
    let output = match args.output {
        None | Some(GroupsOutput::Table) => crate::cli::Output::Table,
        Some(GroupsOutput::Json) => crate::cli::Output::Json,
        Some(other) => anyhow::bail!(
            "the list of groups prints as `table` or `json`; `{}` is for --tree",
            other.name()
        ),
    };
    super::output::groups(&groups, output, args.facets)
}

/// The name under which a group tree's left-out paths are printed (`CrashGroup.call_tree_other_hits`).
const OTHER_PATHS: &str = "(other)";

/// One line per node, parents first and children in order, indented two spaces per level:
/// `HITS  name`.
fn print_tree(tree: &[api::CallTreeNode]) {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); tree.len()];
    let mut roots = Vec::new();
    for (i, node) in tree.iter().enumerate() {
        match usize::try_from(node.parent) {
            Ok(p) if p < i => children[p].push(i),
            _ => roots.push(i),
        }
    }
    let width = tree
        .iter()
        .map(|n| n.hits)
        .max()
        .unwrap_or(0)
        .to_string()
        .len();
    let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|&r| (r, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        println!(
            "{:>width$}  {}{}",
            tree[i].hits,
            "  ".repeat(depth),
            tree[i].name
        );
        stack.extend(children[i].iter().rev().map(|&c| (c, depth + 1)));
    }
}

/// Folded stacks: `outermost;...;innermost SELF` for every node whose own hits (its hits minus
/// its children's) are more than 0.
fn print_folded(tree: &[api::CallTreeNode]) {
    let mut paths: Vec<String> = Vec::with_capacity(tree.len());
    let mut self_hits: Vec<u64> = tree.iter().map(|n| n.hits).collect();
    for (i, node) in tree.iter().enumerate() {
        let name = node.name.replace(';', ":");
        match usize::try_from(node.parent) {
            Ok(p) if p < i => {
                self_hits[p] = self_hits[p].saturating_sub(node.hits);
                paths.push(format!("{};{name}", paths[p]));
            }
            _ => paths.push(name),
        }
    }
    for (path, hits) in paths.iter().zip(self_hits) {
        if hits > 0 {
            println!("{path} {hits}");
        }
    }
}

pub async fn missing(args: MissingArgs) -> anyhow::Result<()> {
    let mut ingest = connect(&args.master).await?.ingest();
    let mut request = api::ListMissingRequest {
        project: args.project.unwrap_or_default(),
        ..Default::default()
    };
    let wanted = args.limit as usize;
    let (mut missing, mut seen) = (Vec::new(), std::collections::HashSet::new());
    // Page by page (the master sends at most 1,000 entries per page) until `wanted`.
    while missing.len() < wanted {
        request.page_size = (wanted - missing.len()).min(1000) as u32;
        let page = ingest.list_missing(request.clone()).await?.into_inner();
        // An entry whose count changed between pages may come again: listed once.
        for entry in page.missing {
            if seen.insert((entry.project.clone(), entry.key.clone())) {
                missing.push(entry);
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    super::output::missing(&missing, args.output)
}

pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let s = connect(&args.master)
        .await?
        .admin()
        .cluster_status(api::ClusterStatusRequest {})
        .await?
        .into_inner();
    super::output::status(&s, args.output)
}
