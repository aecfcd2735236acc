//! Restoring a [`CombinedReport`]: each layer's frames through that layer's engine, then every
//! frame back in its place ([module docs](super)).

use std::collections::HashMap;

use crate::js::{JsFrame, JsFrameResult, JsFrameStatus, JsSourceMap, RestoreOptions};
use crate::jvm::trace::{JvmException, JvmTrace, JvmTraceFormat, Relation};
use crate::jvm::{JvmFrameStatus, JvmMapping};
use crate::model::{NativeReport, RawFrame, ReportFormat, Thread};
use crate::symbolicate::SymCacheSource;

use super::event::{CombinedReport, FrameIn, SourceMapRef};
use super::result::{
    CombinedException, CombinedFrame, CombinedResult, FileStatus, LoadStatus, OtherFrame,
};

/// A file a layer needs, as the caller found it: its key (what `symctl missing` lists:
/// [`FileStatus::key`]) and the file, or why not.
#[derive(Debug, Clone)]
pub struct FileLoad<T> {
    /// The file's key.
    pub key: String,
    /// The file, or why it is not there: [`LoadStatus::Missing`] or
    /// [`LoadStatus::Malformed`] with a one-line error.
    pub file: Result<T, (LoadStatus, String)>,
}

impl<T> FileLoad<T> {
    fn status(&self) -> FileStatus {
        match &self.file {
            Ok(_) => FileStatus {
                key: self.key.clone(),
                status: LoadStatus::Found,
                error: None,
            },
            Err((status, error)) => FileStatus {
                key: self.key.clone(),
                status: *status,
                error: Some(error.clone()),
            },
        }
    }
}

/// The files a report's layers need, as the caller brought them.
pub struct Sources<'a> {
    /// The native images' SymCaches.
    pub symcaches: &'a dyn SymCacheSource,
    /// The source map of each [`CombinedReport::sourcemaps`] entry (one absent from the map
    /// leaves its frames [`JsFrameStatus::MissingSourceMap`] and is not listed).
    pub sourcemaps: HashMap<SourceMapRef, FileLoad<&'a JsSourceMap>>,
    /// The mapping file and its id, when the report has Java frames and names one.
    pub mapping: Option<FileLoad<(&'a JvmMapping, &'a str)>>,
}

/// Restores every frame of `report` with `sources`. Never fails: a frame whose file is not
/// there is kept as given with its status, and the file is listed in the result.
pub fn restore(report: &CombinedReport, sources: &Sources<'_>) -> CombinedResult {
    // Each exception's frames, a slot per input frame (a frame may expand to several).
    let mut slots: Vec<Vec<Vec<CombinedFrame>>> = report
        .exceptions
        .iter()
        .map(|e| vec![Vec::new(); e.frames.len()])
        .collect();
    let modules = restore_native(report, sources.symcaches, &mut slots);
    restore_js(report, &sources.sourcemaps, &mut slots);
    let classes = restore_jvm(report, sources.mapping.as_ref(), &mut slots);
    for (e, exception) in report.exceptions.iter().enumerate() {
        for (index, frame) in exception.frames.iter().enumerate() {
            if let FrameIn::Other {
                function,
                file,
                line,
            } = frame
            {
                slots[e][index].push(CombinedFrame::Other(OtherFrame {
                    index,
                    function: function.clone(),
                    filename: file.clone(),
                    lineno: *line,
                }));
            }
        }
    }
    let mut sourcemaps: Vec<FileStatus> =
        sources.sourcemaps.values().map(FileLoad::status).collect();
    sourcemaps.sort_by(|a, b| a.key.cmp(&b.key));
    CombinedResult {
        exceptions: report
            .exceptions
            .iter()
            .zip(slots)
            .zip(classes)
            .map(|((exception, frames), class)| CombinedException {
                type_: class.unwrap_or_else(|| exception.class.clone()),
                raw_type: exception.class.clone(),
                value: exception.message.clone(),
                frames: frames.into_iter().flatten().collect(),
            })
            .collect(),
        modules,
        sourcemaps,
        mapping: sources.mapping.as_ref().map(FileLoad::status),
        facets: report.facets.clone(),
    }
}

/// An exception's place in the report, and the place in it of each frame of its thread (`None`
/// for the placeholder below).
type Places = (usize, Vec<Option<usize>>);

/// The native frames as a report to symbolicate: one thread per exception that has any (its
/// native frames only, innermost first; the thread's id is the exception's place), with the
/// event's images. The first exception whose innermost frame is native is the crashed thread.
/// Every thread's first frame is looked up as a PC (the faulting instruction), so a thread whose
/// first native frame is a caller of JavaScript or Java frames (a return address) gets a
/// placeholder frame 0 at address 0 (in no image), dropped from the result. `None` when no
/// frame is native. With each thread, the places of its frames in the exception.
fn native_part(report: &CombinedReport) -> Option<(NativeReport, Vec<Places>)> {
    let mut places: Vec<Places> = Vec::new();
    let mut threads = Vec::new();
    let mut crashed_given = false;
    for (e, exception) in report.exceptions.iter().enumerate() {
        let mut at = Vec::new();
        let mut frames = Vec::new();
        for (index, frame) in exception.frames.iter().enumerate() {
            if let FrameIn::Native(raw) = frame {
                if at.is_empty() && index > 0 {
                    at.push(None);
                    frames.push(RawFrame {
                        instruction_addr: 0,
                        function: None,
                        image_index: None,
                        trust: None,
                    });
                }
                at.push(Some(index));
                frames.push(raw.clone());
            }
        }
        if frames.is_empty() {
            continue;
        }
        let crashed = !crashed_given && at[0] == Some(0);
        crashed_given |= crashed;
        threads.push(Thread {
            id: e as u64,
            name: None,
            crashed,
            ip_register: None,
            frames,
        });
        places.push((e, at));
    }
    if threads.is_empty() {
        return None;
    }
    let arch = std::iter::once(report.arch)
        .chain(report.images.iter().map(|i| i.arch))
        .find(|a| *a != symbolic_common::Arch::Unknown)
        .unwrap_or(symbolic_common::Arch::Unknown);
    let native = NativeReport::crash(
        ReportFormat::SentryEvent,
        arch,
        None,
        None,
        threads,
        report.images.clone(),
    );
    Some((native, places))
}

impl CombinedReport {
    /// The native frames as a report ([`native_part`]): what a worker reads the images to fetch
    /// from ([`crate::image_lookups`]); `None` when no frame is native.
    pub fn native_report(&self) -> Option<NativeReport> {
        native_part(self).map(|(report, _)| report)
    }
}

/// The native frames, symbolicated together (each image loaded once). Returns the modules.
fn restore_native(
    report: &CombinedReport,
    symcaches: &dyn SymCacheSource,
    slots: &mut [Vec<Vec<CombinedFrame>>],
) -> Vec<crate::result::ModuleResult> {
    let Some((native, places)) = native_part(report) else {
        return Vec::new();
    };
    let result = crate::symbolicate::symbolicate_owned(native, symcaches);
    for (thread, (e, at)) in result.threads.into_iter().zip(places) {
        for mut frame in thread.frames {
            let Some(index) = at[frame.index] else {
                continue;
            };
            frame.index = index;
            slots[e][index].push(CombinedFrame::Native(frame));
        }
    }
    result.modules
}

/// The JavaScript frames, each through its bundle's source map.
fn restore_js(
    report: &CombinedReport,
    maps: &HashMap<SourceMapRef, FileLoad<&JsSourceMap>>,
    slots: &mut [Vec<Vec<CombinedFrame>>],
) {
    for (e, exception) in report.exceptions.iter().enumerate() {
        for (index, frame) in exception.frames.iter().enumerate() {
            let FrameIn::Js { frame, file } = frame else {
                continue;
            };
            let map = report
                .sourcemap_for(file.as_deref())
                .and_then(|r| maps.get(&r))
                .and_then(|load| load.file.as_ref().ok());
            let restored = match (frame, map) {
                (
                    JsFrame::Position {
                        function,
                        file,
                        line,
                        column,
                    },
                    Some(map),
                ) => {
                    let restored =
                        crate::js::restore_frame(index, frame, map, RestoreOptions::default())
                            .into_owned();
                    if restored.status == JsFrameStatus::MissingMapping {
                        // Nothing in the map: the frame as given.
                        JsFrameResult {
                            function: function.clone().map(Into::into),
                            filename: file.clone().map(Into::into),
                            lineno: Some(*line),
                            colno: Some(*column),
                            ..restored
                        }
                    } else {
                        restored
                    }
                }
                (
                    JsFrame::Position {
                        function,
                        file,
                        line,
                        column,
                    },
                    None,
                ) => JsFrameResult {
                    function: function.clone().map(Into::into),
                    filename: file.clone().map(Into::into),
                    lineno: Some(*line),
                    colno: Some(*column),
                    ..JsFrameResult::empty(index, JsFrameStatus::MissingSourceMap)
                },
                (JsFrame::Native { function }, _) => JsFrameResult {
                    function: function.clone().map(Into::into),
                    ..JsFrameResult::empty(index, JsFrameStatus::Native)
                },
                // Not made from an event.
                (JsFrame::Hermes { .. }, _) => {
                    JsFrameResult::empty(index, JsFrameStatus::MissingMapping)
                }
            };
            slots[e][index].push(CombinedFrame::Js(restored));
        }
    }
}

/// The Java frames: each exception (with its Java frames only) retraced through the mapping
/// file, as a trace whose exceptions cause one another in order. Returns each exception's
/// original class when the mapping file was had.
fn restore_jvm(
    report: &CombinedReport,
    mapping: Option<&FileLoad<(&JvmMapping, &str)>>,
    slots: &mut [Vec<Vec<CombinedFrame>>],
) -> Vec<Option<String>> {
    let mut places: Vec<Vec<usize>> = Vec::new();
    let exceptions = report
        .exceptions
        .iter()
        .enumerate()
        .map(|(e, exception)| {
            let mut at = Vec::new();
            let mut frames = Vec::new();
            for (index, frame) in exception.frames.iter().enumerate() {
                if let FrameIn::Jvm(frame) = frame {
                    at.push(index);
                    frames.push(frame.clone());
                }
            }
            places.push(at);
            JvmException {
                relation: if e == 0 {
                    Relation::Thrown
                } else {
                    Relation::CausedBy
                },
                depth: 0,
                class: exception.class.clone(),
                message: exception.message.clone(),
                frames,
                omitted_frames: 0,
            }
        })
        .collect();
    let trace = JvmTrace {
        format: JvmTraceFormat::Sentry,
        exceptions,
        mapping_ids: Vec::new(),
    };
    let loaded = mapping.and_then(|m| m.file.as_ref().ok());
    let retraced = match loaded {
        Some((mapping, id)) => crate::jvm::retrace(&trace, mapping, Some(id)),
        None => {
            let mut unmapped = crate::jvm::unmapped(&trace);
            for frame in unmapped.exceptions.iter_mut().flat_map(|e| &mut e.frames) {
                frame.status = JvmFrameStatus::MissingMapping;
            }
            unmapped
        }
    };
    retraced
        .exceptions
        .into_iter()
        .zip(places)
        .enumerate()
        .map(|(e, (exception, at))| {
            for mut frame in exception.frames {
                let index = at[frame.index];
                frame.index = index;
                slots[e][index].push(CombinedFrame::Jvm(frame));
            }
            loaded.is_some().then_some(exception.class)
        })
        .collect()
}
