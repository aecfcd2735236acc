//! Reports that list only the images their frames are in: the `--images referenced` workload.
//!
//! A CrashProbe Sentry event lists every image loaded in the process (254 to 328, of which 8 to
//! 15 hold a frame). A result lists only those 8 to 15, but the worker still scans the whole
//! list and reads each image's address range, and the masters store and replicate the larger
//! report. Apple's own `.ips` reports list only the images the backtraces use (`usedImages`),
//! and so do the reports our SDK sends. This module cuts a CrashProbe event down to that shape,
//! so that a load run shows what the cluster does with such reports, beside the default
//! `--images all`.

use std::collections::HashSet;

use anyhow::Context;
use symcluster_engine::parse_report;
use symcluster_engine::reports::parse_addr;
use symcluster_engine::symbolicate::referenced_images;

/// `report` (a Sentry event, JSON) with `debug_meta.images` cut to the images that at least one
/// frame is in, in their order, written as compact JSON; everything else is kept.
///
/// Which images those are is the engine's own answer ([`referenced_images`] on the report as
/// [`parse_report`] reads it); an image of the list is kept when its `image_addr` (read as the
/// engine reads it, [`parse_addr`]: bytes) is the address of one of them.
///
/// Errors: the report does not parse, is not a JSON object with a `debug_meta.images` array,
/// or no image of the list would be kept (the report would lose its frames' images).
pub fn referenced_only(report: &[u8]) -> anyhow::Result<Vec<u8>> {
    let parsed = parse_report(report).context("the report does not parse")?;
    let used: HashSet<u64> = referenced_images(&parsed)
        .into_iter()
        .map(|i| parsed.images[i].image_addr)
        .collect();
    let mut event: serde_json::Value =
        serde_json::from_slice(report).context("the report is not JSON")?;
    let images = event
        .pointer_mut("/debug_meta/images")
        .and_then(serde_json::Value::as_array_mut)
        .context("the report has no debug_meta.images array")?;
    images.retain(|image| {
        image
            .get("image_addr")
            .and_then(parse_addr)
            .is_some_and(|addr| used.contains(&addr))
    });
    anyhow::ensure!(
        !images.is_empty(),
        "no image of debug_meta.images holds a frame"
    );
    Ok(serde_json::to_vec(&event)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CrashProbe event keeps exactly the images its frames are in, and symbolicates to the
    /// same frames as the whole event.
    #[test]
    fn keeps_the_images_frames_are_in() {
        let dir = crate::cluster::repo().join("../shared/fixtures/crashprobe/release/arm64");
        let path = dir.join("Call abort().json");
        let report = std::fs::read(&path).expect("CrashProbe fixture");
        let whole = parse_report(&report).unwrap();
        let cut = referenced_only(&report).unwrap();
        let trimmed = parse_report(&cut).unwrap();
        assert_eq!(whole.images.len(), 327);
        let used = referenced_images(&whole);
        // The images of the event's 108 frames (counted apart from the engine).
        assert_eq!(used.len(), 15);
        assert_eq!(trimmed.images.len(), used.len());
        let kept: Vec<u64> = trimmed.images.iter().map(|i| i.image_addr).collect();
        let expected: Vec<u64> = used.iter().map(|&i| whole.images[i].image_addr).collect();
        assert_eq!(kept, expected);
        // Every frame still finds its image, and the frames are unchanged.
        assert_eq!(referenced_images(&trimmed).len(), used.len());
        let addresses = |r: &symcluster_engine::NativeReport| -> Vec<Vec<u64>> {
            r.threads
                .iter()
                .map(|t| t.frames.iter().map(|f| f.instruction_addr).collect())
                .collect()
        };
        assert_eq!(addresses(&trimmed), addresses(&whole));
        assert!(
            cut.len() * 3 < report.len(),
            "{} of {}",
            cut.len(),
            report.len()
        );
    }

    #[test]
    fn refuses_what_it_cannot_cut() {
        let err = referenced_only(b"[]").unwrap_err();
        assert_eq!(err.to_string(), "the report does not parse");

        let path = crate::cluster::repo()
            .join("../shared/fixtures/crashprobe/release/arm64/Call abort().json");
        let event: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("CrashProbe fixture")).unwrap();

        // An event the engine reads (its frames have no images then) without an image list.
        let mut no_list = event.clone();
        no_list["debug_meta"] = serde_json::json!({});
        let err = referenced_only(&serde_json::to_vec(&no_list).unwrap()).unwrap_err();
        assert_eq!(err.to_string(), "the report has no debug_meta.images array");

        // Images that no frame is in: cutting would leave none.
        let mut elsewhere = event;
        for image in elsewhere["debug_meta"]["images"].as_array_mut().unwrap() {
            image["image_addr"] = serde_json::json!("0x1000");
        }
        let err = referenced_only(&serde_json::to_vec(&elsewhere).unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no image of debug_meta.images holds a frame"
        );
    }
}
