//! How the reading commands print: tables for people (comfy-table, no borders, aligned like
//! `kubectl get`) and JSON documents for scripts (`--output json`).

use comfy_table::{CellAlignment, ContentArrangement, Table, presets};
use serde_json::{Value, json};
use symcluster_client::api;

use crate::cli::Output;

/// An empty table with `header`: columns separated by spaces, never wrapped.
pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    table
}

/// Right-aligns the columns at `indexes` (counts).
pub fn align_right(table: &mut Table, indexes: &[usize]) {
    for &i in indexes {
        if let Some(column) = table.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// Prints `table` without the padding comfy-table puts at the start and end of lines.
pub fn print_table(table: &Table) {
    for line in table.lines() {
        println!("{}", line.trim_end().strip_prefix(' ').unwrap_or(&line));
    }
}

/// Prints `value` pretty.
pub fn print_json(value: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SSZ` of milliseconds since the Unix epoch.
pub fn utc(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// A group's breakdown as JSON: `{"top": [{"value", "jobs"}...], "other"}`.
fn breakdown_json(breakdown: &Option<api::FacetBreakdown>) -> Value {
    let b = breakdown.clone().unwrap_or_default();
    let top: Vec<Value> = b
        .top
        .iter()
        .map(|c| json!({"value": c.value, "jobs": c.jobs}))
        .collect();
    json!({"top": top, "other": b.other})
}

/// A group's breakdown in a table cell: its three values with the most jobs, `value (jobs)`.
fn breakdown_cell(breakdown: &Option<api::FacetBreakdown>) -> String {
    let mut top = breakdown.clone().unwrap_or_default().top;
    top.sort_by(|a, b| b.jobs.cmp(&a.jobs).then_with(|| a.value.cmp(&b.value)));
    top.iter()
        .take(3)
        .map(|c| format!("{} ({})", c.value, c.jobs))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Crash groups: `count, project, kind, fingerprint, title, last release, key stack` (one
/// frame per line), and with `facets` (asked with `ListGroupsRequest.facets`) the top releases,
/// OS versions and devices.
pub fn groups(groups: &[api::CrashGroup], output: Output, facets: bool) -> anyhow::Result<()> {
    if output == Output::Json {
        let list: Vec<Value> = groups
            .iter()
            .map(|g| {
                let mut group = json!({
                    "project": g.project,
                    "fingerprint": g.fingerprint,
                    "kind": g.kind,
                    "title": g.title,
                    "count": g.count,
                    "first_seen_ms": g.first_seen_ms,
                    "last_seen_ms": g.last_seen_ms,
                    "last_job_id": g.last_job_id,
                    "key_stack": g.key_stack,
                    "first_release": g.first_release,
                    "last_release": g.last_release,
                });
                if facets {
                    let f = g.facets.clone().unwrap_or_default();
                    let days: Vec<Value> = f
                        .days
                        .iter()
                        .map(|d| json!({"day": &utc(d.day.saturating_mul(86_400_000))[..10], "jobs": d.jobs}))
                        .collect();
                    group["facets"] = json!({
                        "releases": breakdown_json(&f.releases),
                        "dists": breakdown_json(&f.dists),
                        "os": breakdown_json(&f.os),
                        "devices": breakdown_json(&f.devices),
                        "days": days,
                    });
                }
                group
            })
            .collect();
        return print_json(&Value::Array(list));
    }
    let mut header = vec![
        "count",
        "project",
        "kind",
        "fingerprint",
        "title",
        "last release",
        "key stack",
    ];
    if facets {
        header.extend(["releases", "os", "devices"]);
    }
    let mut t = table(&header);
    for g in groups {
        let mut row = vec![
            g.count.to_string(),
            g.project.clone(),
            g.kind.clone(),
            g.fingerprint.clone(),
            g.title.clone(),
            g.last_release.clone(),
            g.key_stack.join("\n"),
        ];
        if facets {
            let f = g.facets.clone().unwrap_or_default();
            row.extend([
                breakdown_cell(&f.releases),
                breakdown_cell(&f.os),
                breakdown_cell(&f.devices),
            ]);
        }
        t.add_row(row);
    }
    align_right(&mut t, &[0]);
    print_table(&t);
    Ok(())
}

/// Missing debug files and source maps, most affected jobs first.
pub fn missing(missing: &[api::MissingEntry], output: Output) -> anyhow::Result<()> {
    if output == Output::Json {
        let list: Vec<Value> = missing
            .iter()
            .map(|m| {
                json!({
                    "project": m.project,
                    "key": m.key,
                    "image": m.image,
                    "arch": m.arch,
                    "jobs": m.jobs,
                    "groups": m.groups,
                    "first_seen_ms": m.first_seen_ms,
                    "last_seen_ms": m.last_seen_ms,
                })
            })
            .collect();
        return print_json(&Value::Array(list));
    }
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    let mut t = table(&[
        "jobs",
        "groups",
        "project",
        "debug id / source map",
        "image",
        "arch",
        "first seen",
        "last seen",
    ]);
    for m in missing {
        t.add_row(vec![
            m.jobs.to_string(),
            m.groups.to_string(),
            m.project.clone(),
            m.key.clone(),
            dash(&m.image),
            dash(&m.arch),
            utc(m.first_seen_ms),
            utc(m.last_seen_ms),
        ]);
    }
    align_right(&mut t, &[0, 1]);
    print_table(&t);
    Ok(())
}

fn percent(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| 100.0 * part as f64 / whole as f64)
}

/// The cluster: a summary line, then the masters and the workers.
pub fn status(s: &api::ClusterStatusResponse, output: Output) -> anyhow::Result<()> {
    let affine = percent(s.affine_leases, s.total_leases);
    if output == Output::Json {
        let masters: Vec<Value> = s
            .masters
            .iter()
            .map(|m| {
                json!({
                    "id": m.id, "address": m.address, "role": m.role, "term": m.term,
                    "commit_index": m.commit_index, "applied_index": m.applied_index, "lag": m.lag,
                })
            })
            .collect();
        let workers: Vec<Value> = s
            .workers
            .iter()
            .map(|w| {
                json!({
                    "worker_id": w.worker_id, "connected": w.connected, "draining": w.draining,
                    "slots": w.slots, "busy": w.busy, "running": w.running,
                    "waiting": w.busy.saturating_sub(w.running), "cache_hits": w.cache_hits,
                    "cache_misses": w.cache_misses,
                    "last_heartbeat_ms_ago": w.last_heartbeat_ms_ago,
                })
            })
            .collect();
        return print_json(&json!({
            "leader": s.leader,
            "from_leader": s.from_leader,
            "queue_depth": s.queue_depth,
            "jobs_running": s.jobs_running,
            "jobs_completed": s.jobs_completed,
            "jobs_failed": s.jobs_failed,
            "total_leases": s.total_leases,
            "affine_leases": s.affine_leases,
            "masters": masters,
            "workers": workers,
        }));
    }
    println!(
        "leader {}  queue {}  running {}  completed {}  failed {}  leases {} ({} to the preferred worker)",
        s.leader,
        s.queue_depth,
        s.jobs_running,
        s.jobs_completed,
        s.jobs_failed,
        s.total_leases,
        affine.map_or("-".to_owned(), |p| format!("{p:.0}%"))
    );
    if !s.masters.is_empty() {
        println!();
        let mut t = table(&[
            "master", "address", "role", "term", "commit", "applied", "lag",
        ]);
        for m in &s.masters {
            t.add_row(vec![
                m.id.to_string(),
                m.address.clone(),
                m.role.clone(),
                m.term.to_string(),
                m.commit_index.to_string(),
                m.applied_index.to_string(),
                m.lag.to_string(),
            ]);
        }
        align_right(&mut t, &[3, 4, 5, 6]);
        print_table(&t);
    }
    if !s.workers.is_empty() {
        println!();
        let mut t = table(&[
            "worker",
            "state",
            "running/slots",
            "waiting",
            "cache hits",
            "heartbeat",
        ]);
        for w in &s.workers {
            let state = match (w.connected, w.draining) {
                (false, _) => "down",
                (true, true) => "draining",
                (true, false) => "up",
            };
            t.add_row(vec![
                w.worker_id.clone(),
                state.to_owned(),
                format!("{}/{}", w.running, w.slots),
                w.busy.saturating_sub(w.running).to_string(),
                percent(w.cache_hits, w.cache_hits + w.cache_misses)
                    .map_or("-".to_owned(), |p| format!("{p:.0}%")),
                format!("{} ms ago", w.last_heartbeat_ms_ago),
            ]);
        }
        print_table(&t);
    }
    Ok(())
}

/// Prints a local command's result as `format` says: pretty JSON of `result`, or the text
/// `text` makes (called only then), on stdout.
pub fn print_stack(
    format: crate::cli::StackOutput,
    result: &impl serde::Serialize,
    text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match format {
        crate::cli::StackOutput::Json => {
            serde_json::to_writer_pretty(&mut out, result)?;
            writeln!(out)?;
        }
        crate::cli::StackOutput::Text => out.write_all(text().as_bytes())?,
    }
    out.flush()?;
    Ok(())
}
