//! `symctl debug-files check` (what the debug files on this machine hold, as `sentry-cli
//! debug-files check` shows it) and `symctl debug-files find` (whether the cluster has one).

use std::path::{Path, PathBuf};

use anyhow::Context;
use symcluster_client::api;
use symcluster_engine::debug_files::describe_objects;

use super::output::table;
use crate::cli::{DebugFilesCommand, Output};

/// One checked object, or a file that could not be used.
#[derive(Debug, Clone)]
struct Checked {
    path: PathBuf,
    /// `dsym`, `macho`, `elf` or `sourcemap`.
    kind: String,
    debug_id: String,
    arch: String,
    /// What it holds: `symtab`, `debug` (files, lines), `inlinees`, `unwind`, `sources`,
    /// `mappings`.
    features: Vec<&'static str>,
    usable: bool,
    /// Why it is not usable, or what it lacks.
    note: String,
}

impl Checked {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "path": self.path.display().to_string(),
            "kind": self.kind,
            "debug_id": self.debug_id,
            "arch": self.arch,
            "features": self.features,
            "usable": self.usable,
            "note": self.note,
        })
    }
}

/// Whether `path` is inside a dSYM bundle's DWARF folder.
fn in_dsym(path: &Path) -> bool {
    path.components()
        .any(|c| c.as_os_str().to_string_lossy().ends_with(".dSYM"))
}

/// Checks one file: its objects, or its source map; `None` for a file that is neither (plists,
/// sources), skipped as `sentry-cli` skips them.
fn check_file(path: &Path) -> Option<Vec<Checked>> {
    let data = match std::fs::read(path) {
        Ok(data) => data,
        Err(e) => {
            return Some(vec![unusable(path, "unknown", format!("cannot read: {e}"))]);
        }
    };
    let is_object = data.starts_with(b"\x7fELF")
        || [
            [0xfe, 0xed, 0xfa, 0xce],
            [0xfe, 0xed, 0xfa, 0xcf],
            [0xce, 0xfa, 0xed, 0xfe],
            [0xcf, 0xfa, 0xed, 0xfe],
            [0xca, 0xfe, 0xba, 0xbe],
        ]
        .iter()
        .any(|magic| data.starts_with(magic));
    if is_object {
        return Some(match describe_objects(&data) {
            Ok(objects) => objects
                .into_iter()
                .map(|o| {
                    let mut features = Vec::new();
                    for (has, name) in [
                        (o.has_symbols, "symtab"),
                        (o.has_debug_info, "debug"),
                        (o.has_inlinees == Some(true), "inlinees"),
                        (o.has_unwind_info, "unwind"),
                        (o.has_sources, "sources"),
                    ] {
                        if has {
                            features.push(name);
                        }
                    }
                    let kind = if o.format == "macho" && (in_dsym(path) || o.kind == "debug") {
                        "dsym"
                    } else {
                        o.format
                    };
                    let (usable, note) = match (o.has_debug_info, o.has_symbols) {
                        (true, _) => (true, String::new()),
                        (false, true) => (
                            true,
                            "no line info: frames get function names only (upload the dSYM or \
                             the unstripped file)"
                                .to_owned(),
                        ),
                        (false, false) => (false, "no symbols and no debug info".to_owned()),
                    };
                    Checked {
                        path: path.to_owned(),
                        kind: kind.to_owned(),
                        debug_id: o.debug_id.to_string(),
                        arch: o.arch.name().to_owned(),
                        features,
                        usable,
                        note,
                    }
                })
                .collect(),
            Err(e) => vec![unusable(path, "object", e)],
        });
    }
    let looks_like_map = path.extension().is_some_and(|e| e == "map")
        || (data.first() == Some(&b'{')
            && data.windows(10).take(4096).any(|w| w == b"\"mappings\""));
    if !looks_like_map {
        return None;
    }
    Some(vec![
        match symcluster_engine::js::JsSourceMap::parse(&data, None) {
            Ok(_) => {
                let debug_id = serde_json::from_slice::<serde_json::Value>(&data)
                    .ok()
                    .and_then(|v| {
                        v.get("debugId")
                            .or_else(|| v.get("debug_id"))
                            .and_then(|id| id.as_str().map(str::to_owned))
                    })
                    .unwrap_or_default();
                Checked {
                    path: path.to_owned(),
                    kind: "sourcemap".into(),
                    note: if debug_id.is_empty() {
                        "no debug id: upload it by release (or `symctl sourcemaps inject`)".into()
                    } else {
                        String::new()
                    },
                    debug_id,
                    arch: String::new(),
                    features: vec!["mappings"],
                    usable: true,
                }
            }
            Err(e) => unusable(path, "sourcemap", format!("{e:#}")),
        },
    ])
}

fn unusable(path: &Path, kind: &str, why: String) -> Checked {
    Checked {
        path: path.to_owned(),
        kind: kind.to_owned(),
        debug_id: String::new(),
        arch: String::new(),
        features: Vec::new(),
        usable: false,
        note: why,
    }
}

fn check(paths: &[PathBuf], output: Output) -> anyhow::Result<()> {
    let mut checked = Vec::new();
    for root in paths {
        std::fs::metadata(root).with_context(|| format!("cannot read {}", root.display()))?;
        for entry in walkdir::WalkDir::new(root)
            .follow_links(true)
            .sort_by_file_name()
        {
            let entry = entry.with_context(|| format!("cannot list {}", root.display()))?;
            if entry.file_type().is_file()
                && let Some(found) = check_file(entry.path())
            {
                checked.extend(found);
            }
        }
    }
    match output {
        Output::Json => println!(
            "{}",
            serde_json::Value::Array(checked.iter().map(Checked::json).collect())
        ),
        Output::Table => {
            let mut shown = table(&["debug id", "arch", "kind", "features", "usable", "path"]);
            for c in &checked {
                shown.add_row(vec![
                    c.debug_id.clone(),
                    c.arch.clone(),
                    c.kind.clone(),
                    c.features.join(" "),
                    if c.usable { "yes" } else { "no" }.to_owned(),
                    c.path.display().to_string(),
                ]);
            }
            println!("{shown}");
            for c in checked.iter().filter(|c| !c.note.is_empty()) {
                let level = if c.usable { "warning" } else { "error" };
                eprintln!("symctl: {level}: {}: {}", c.path.display(), c.note);
            }
        }
    }
    let usable = checked.iter().filter(|c| c.usable).count();
    if usable == 0 {
        anyhow::bail!(
            "no usable debug file or source map found in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

async fn find(
    master: &crate::cli::MasterArgs,
    project: &crate::cli::ProjectArgs,
    debug_id: &str,
) -> anyhow::Result<()> {
    let client = super::cluster::connect(master).await?;
    let request = api::FindDebugFileRequest {
        project: project.project.clone().unwrap_or_default(),
        debug_id: debug_id.to_owned(),
    };
    let found = client.find_debug_file(request).await?;
    if !found.found {
        anyhow::bail!("the cluster has no debug file for {debug_id}");
    }
    println!(
        "{debug_id}: {} ({} bytes{}){}",
        found.key,
        found.size,
        if found.sha256.is_empty() {
            String::new()
        } else {
            format!(", SHA-256 {}", hex::encode(&found.sha256))
        },
        if found.shared { ", shared" } else { "" }
    );
    Ok(())
}

/// Runs `symctl debug-files`.
pub fn run(command: DebugFilesCommand) -> anyhow::Result<()> {
    match command {
        DebugFilesCommand::Check { paths, output } => check(&paths, output),
        DebugFilesCommand::Find {
            master,
            project,
            debug_id,
        } => super::block_on(find(&master, &project, &debug_id)),
    }
}
