//! `symctl restore-event`: a Sentry event whose frames cross JavaScript, Java and native, and
//! the files of each layer, in; every frame restored in its place out.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use symcluster_engine::LocalSymCaches;
use symcluster_engine::combined::{FileLoad, LoadStatus, Sources, parse_event, render, restore};
use symcluster_engine::js::JsSourceMap;
use symcluster_engine::jvm::{JvmMapping, mapping_id};

use crate::cli::RestoreEventArgs;

pub fn run(args: &RestoreEventArgs) -> anyhow::Result<()> {
    let data = std::fs::read(&args.event)
        .with_context(|| format!("cannot read {}", args.event.display()))?;
    let report = parse_event(&data).with_context(|| args.event.display().to_string())?;
    let symcaches = LocalSymCaches::scan(&args.debug_files)?;

    // `BUNDLE=MAP` for that bundle, `MAP` for any.
    let mut maps: Vec<(Option<String>, PathBuf, JsSourceMap)> = Vec::new();
    for given in &args.sourcemap {
        let (bundle, path) = match given.split_once('=') {
            Some((bundle, path)) => (Some(bundle.to_owned()), PathBuf::from(path)),
            None => (None, PathBuf::from(given)),
        };
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let map = JsSourceMap::parse(&bytes, None).with_context(|| path.display().to_string())?;
        maps.push((bundle, path, map));
    }
    let mut sourcemaps = HashMap::new();
    for wanted in report.sourcemaps() {
        let found = maps
            .iter()
            .find(|(bundle, ..)| bundle.as_deref() == Some(wanted.bundle.as_str()))
            .or_else(|| maps.iter().find(|(bundle, ..)| bundle.is_none()));
        let load = match found {
            Some((_, path, map)) => FileLoad {
                key: path.display().to_string(),
                file: Ok(map),
            },
            None => FileLoad {
                key: wanted.bundle.clone(),
                file: Err((
                    LoadStatus::Missing,
                    format!("no --sourcemap for {}", wanted.bundle),
                )),
            },
        };
        sourcemaps.insert(wanted, load);
    }

    let mapping_file = match &args.mapping {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let mapping = JvmMapping::from_mapping_file(&bytes)
                .with_context(|| path.display().to_string())?;
            let id = mapping_id(&bytes);
            if !report.mapping_ids.is_empty() && !report.mapping_ids.contains(&id) {
                eprintln!(
                    "symctl: warning: the event names mapping {} but {} is {id}",
                    report.mapping_ids.join(", "),
                    path.display()
                );
            }
            Some((mapping, id))
        }
        None => None,
    };
    let mapping = match &mapping_file {
        Some((mapping, id)) => Some(FileLoad {
            key: format!("proguard:{id}"),
            file: Ok((mapping, id.as_str())),
        }),
        None => report.mapping_ids.first().map(|id| FileLoad {
            key: format!("proguard:{id}"),
            file: Err((LoadStatus::Missing, "no --mapping given".to_owned())),
        }),
    };
    let result = restore(
        &report,
        &Sources {
            symcaches: &symcaches,
            sourcemaps,
            mapping,
        },
    );

    super::output::print_stack(args.format, &result, || render::text(&result))
}
