//! Source maps prepared for lookups: every kind React Native produces, each turned into
//! SourceMapCaches once.
//!
//! A [`JsSourceMap`] holds one [`Segment`] per bundle segment: segment 0 is the map itself, more
//! come from `x_facebook_segments` (segmented RAM bundles, Hermes segments). A segment is a list
//! of sections, each with its generated offset and a `symbolic-sourcemapcache` SourceMapCache:
//! a plain map is one section at (0, 0); an indexed map (`sections`, also nested, as Metro's RAM
//! bundle maps are) is flattened into its leaf sections, so that each section keeps its own
//! Metro function map (`x_facebook_sources`). Segments also keep Metro's module line offsets
//! (`x_facebook_offsets`) and Hermes' function offsets (`x_hermes_function_offsets`).
//!
//! Before any cache is built, the whole map (every section and every `x_facebook_segments` map)
//! is checked against ECMA-426 ([`super::validate`]); a map that breaks a rule is refused as
//! [`SourceMapError::Malformed`], naming the field and the rule.
//!
//! Lookups take 0-based generated lines and columns and match only on the same generated line,
//! as Mozilla's `source-map` (which metro-symbolicate uses) does.
//!
//! The JSON layout of these fields is Metro's (`metro-source-map`, `metro-symbolicate`'s
//! `Symbolication.js`); the VLQ decoding and function-map lookups are `sourcemap`'s and
//! `symbolic-sourcemapcache`'s.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use symbolic_common::{ByteView, SelfCell};
use symbolic_sourcemapcache::{
    ScopeLookupResult, SourceMapCache, SourceMapCacheWriter, SourcePosition,
};

use super::line_index::LineIndex;
use super::sources::{SourceText, SourceTexts};
use super::validate::{self, Json, MAX_SECTION_DEPTH, MapFields};
use crate::guard::no_panic;

/// Why a source map could not be prepared. One line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceMapError {
    /// Not JSON, or truncated.
    #[error("invalid source map JSON: {0}")]
    InvalidJson(String),
    /// JSON, but not a source map.
    #[error("not a source map: {0}")]
    NotASourceMap(String),
    /// A source map that breaks a rule of ECMA-426 (a field of the wrong type, a bad VLQ, an
    /// out-of-range index, overlapping sections...) or whose fields are otherwise broken. The
    /// message names the field and the rule (see [`super::validate`]).
    #[error("malformed source map: {0}")]
    Malformed(String),
}

/// A source map ready for lookups.
pub struct JsSourceMap {
    segments: HashMap<u32, Segment>,
    legacy_format: bool,
}

impl JsSourceMap {
    /// Bytes held by the prepared caches (a cache weight).
    pub fn size_bytes(&self) -> usize {
        self.segments
            .values()
            .flat_map(|s| &s.sections)
            .map(|s| {
                s.cache.owner().len()
                    + s.index.as_ref().map_or(0, LineIndex::size_bytes)
                    + s.sources.size_bytes()
            })
            .sum()
    }
}

impl std::fmt::Debug for JsSourceMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsSourceMap")
            .field("segments", &self.segments.len())
            .field("legacy_format", &self.legacy_format)
            .finish()
    }
}

/// One bundle segment: its sections and Metro/Hermes offsets.
pub struct Segment {
    /// Leaf sections sorted by generated offset.
    sections: Vec<Section>,
    /// `x_facebook_offsets`: generated line offset of each RAM bundle module, by module id.
    module_offsets: Vec<Option<u32>>,
    /// `x_hermes_function_offsets`: per segment/module key, the bytecode offset of each function.
    hermes_offsets: Option<HashMap<u32, Vec<u32>>>,
    /// Sources listed in `x_google_ignoreList` / `ignoreList` (library code).
    ignored_sources: HashSet<String>,
}

/// One leaf map: its generated offset, its SourceMapCache (built without the map's
/// `sourcesContent`), the cache's [`LineIndex`] (`None`: symbolic's own lookup is used) and the
/// source texts ([`SourceTexts`]).
struct Section {
    line: u32,
    column: u32,
    cache: SelfCell<ByteView<'static>, SourceMapCache<'static>>,
    index: Option<LineIndex>,
    sources: SourceTexts,
}

/// What a generated position maps to: the original file, 0-based line and column, name and
/// enclosing function, and the original source text of the file when the map carried it.
pub struct MappedLocation<'a> {
    /// The original file's name, as the map's `sources` gives it.
    pub file_name: Option<&'a str>,
    /// 0-based original line.
    pub line: u32,
    /// 0-based original column.
    pub column: u32,
    /// The map's `names` entry at the position.
    pub name: Option<&'a str>,
    /// The enclosing function (Metro function map, Hermes scopes or the bundle's scopes).
    pub scope: ScopeLookupResult<'a>,
    /// Index of the file in the section's file list, when the lookup gave it.
    file: Option<usize>,
    sources: &'a SourceTexts,
}

impl<'a> MappedLocation<'a> {
    /// The original text of the location's file (`sourcesContent`), if the map has it.
    pub fn source(&self) -> Option<&'a SourceText> {
        match self.file {
            Some(file) => self.sources.by_file(file),
            None => self.sources.get(self.file_name?),
        }
    }
}

/// A mapping found by [`Segment::find`], to be resolved by [`Mapping::resolve`].
pub struct Mapping<'a> {
    section: &'a Section,
    found: Found<'a>,
}

impl<'a> Mapping<'a> {
    /// The second half of [`Segment::lookup`]: where the mapping maps to; `None` when it maps
    /// to nothing.
    pub fn resolve(self) -> Option<MappedLocation<'a>> {
        let section = self.section;
        let index = match self.found {
            Found::Location(location) => return Some(location),
            Found::Indexed(index) => index,
        };
        let found = section
            .index
            .as_ref()?
            .location(section.cache.owner(), index)?;
        Some(MappedLocation {
            file_name: found.file_name,
            line: found.line,
            column: found.column,
            name: found.name,
            scope: found.scope,
            file: found.file,
            sources: &section.sources,
        })
    }
}

enum Found<'a> {
    /// A mapping's index in the section's [`LineIndex`].
    Indexed(usize),
    /// A section without an index: symbolic's lookup, already resolved.
    Location(MappedLocation<'a>),
}

/// Top-level fields read without building a tree of the (possibly huge) mappings: borrowed as
/// raw JSON, for validating a plain map ([`validate::regular_map`]) and so that its text can be
/// given to the cache writer without `sourcesContent` ([`without_sources_content`]).
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    file: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "sourceRoot")]
    source_root: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sources: Option<&'a RawValue>,
    #[serde(borrow, default)]
    names: Option<&'a RawValue>,
    #[serde(borrow, default)]
    mappings: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "ignoreList")]
    ignore_list: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "x_google_ignoreList")]
    x_google_ignore_list: Option<&'a RawValue>,
    #[serde(default)]
    sections: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    x_facebook_segments: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default, rename = "sourcesContent")]
    sources_content: Option<&'a RawValue>,
}

impl<'a> Probe<'a> {
    /// The fields validation reads, as raw JSON.
    fn fields(&self) -> MapFields<'a> {
        MapFields {
            version: self.version.map(Json::Raw),
            file: self.file.map(Json::Raw),
            source_root: self.source_root.map(Json::Raw),
            sources: self.sources.map(Json::Raw),
            sources_content: self.sources_content.map(Json::Raw),
            names: self.names.map(Json::Raw),
            mappings: self.mappings.map(Json::Raw),
            ignore_list: self.ignore_list.map(Json::Raw),
            x_google_ignore_list: self.x_google_ignore_list.map(Json::Raw),
        }
    }
}

impl JsSourceMap {
    /// Prepares a source map (`map`: the map file's bytes) for lookups.
    ///
    /// `bundle`, the minified JavaScript the map belongs to, is used to name enclosing functions
    /// from the bundle's scopes when the map has no Metro function map; it applies to
    /// single-section maps only. Errors: [`SourceMapError`], [`SourceMapError::Malformed`] for a
    /// map that breaks a rule of ECMA-426 ([`super::validate`], checked before anything is
    /// built); never panics.
    pub fn parse(map: &[u8], bundle: Option<&str>) -> Result<Self, SourceMapError> {
        let map = strip_xssi_prefix(map);
        if map.first().is_some_and(|&b| b != b'{') {
            return Err(SourceMapError::NotASourceMap(
                "the top level is not a JSON object".into(),
            ));
        }
        let probe: Probe<'_> =
            serde_json::from_slice(map).map_err(|e| SourceMapError::InvalidJson(e.to_string()))?;
        if probe.mappings.is_none() && probe.sections.is_none() {
            return Err(SourceMapError::NotASourceMap(
                "neither `mappings` nor `sections` present".into(),
            ));
        }
        if probe.sections.is_none() && probe.x_facebook_segments.is_none() {
            // The common case, and the one with the biggest maps: one plain map. Build its
            // cache from the original bytes without a second JSON round trip.
            validate::regular_map(&probe.fields(), "")?;
            let value: SmallFields = serde_json::from_slice(map)
                .map_err(|e| SourceMapError::InvalidJson(e.to_string()))?;
            let text =
                std::str::from_utf8(map).map_err(|e| SourceMapError::InvalidJson(e.to_string()))?;
            let (text, contents) = without_sources_content(text, probe.sources_content)?;
            let segment = Segment {
                sections: vec![Section::build(0, 0, &text, contents, bundle)?],
                module_offsets: value.x_facebook_offsets.clone().unwrap_or_default(),
                hermes_offsets: value.hermes_offsets()?,
                ignored_sources: value.ignored_sources(),
            };
            return Ok(JsSourceMap {
                legacy_format: !segment.module_offsets.is_empty(),
                segments: HashMap::from([(0, segment)]),
            });
        }

        let value: Value =
            serde_json::from_slice(map).map_err(|e| SourceMapError::InvalidJson(e.to_string()))?;
        // Every map is validated before any cache is built.
        validate::map_value(&value, "")?;
        let extra = match value.get("x_facebook_segments") {
            None | Some(Value::Null) => None,
            Some(Value::Object(extra)) => Some(extra),
            Some(_) => {
                return Err(SourceMapError::Malformed(
                    "x_facebook_segments is not an object".into(),
                ));
            }
        };
        let mut extra_ids = Vec::new();
        for (key, segment) in extra.into_iter().flatten() {
            let id: u32 = key.parse().map_err(|_| {
                SourceMapError::Malformed(format!(
                    "x_facebook_segments key {key:?} is not a number"
                ))
            })?;
            validate::map_value(segment, &format!("x_facebook_segments[{key:?}]."))?;
            extra_ids.push((id, segment));
        }
        let mut segments = HashMap::new();
        segments.insert(0, Segment::from_value(&value, bundle)?);
        let legacy_format =
            value.get("x_facebook_segments").is_some() || value.get("x_facebook_offsets").is_some();
        for (id, segment) in extra_ids {
            segments.insert(id, Segment::from_value(segment, None)?);
        }
        Ok(JsSourceMap {
            segments,
            legacy_format,
        })
    }

    /// Whether file names select modules and segments (`N.js`, `seg-S.js`, `seg-S_N.js`): only in
    /// maps with `x_facebook_segments` or `x_facebook_offsets`, as in metro-symbolicate.
    pub fn legacy_format(&self) -> bool {
        self.legacy_format
    }

    /// A segment by id (0 = the main bundle).
    pub fn segment(&self, id: u32) -> Option<&Segment> {
        self.segments.get(&id)
    }
}

/// The small top-level fields of a plain map.
#[derive(Deserialize, Default)]
struct SmallFields {
    #[serde(default)]
    x_facebook_offsets: Option<Vec<Option<u32>>>,
    #[serde(default)]
    x_hermes_function_offsets: Option<BTreeMap<String, Vec<u32>>>,
    #[serde(default)]
    sources: Option<Vec<Option<String>>>,
    #[serde(default, rename = "x_google_ignoreList")]
    x_google_ignore_list: Option<Vec<u32>>,
    #[serde(default, rename = "ignoreList")]
    ignore_list: Option<Vec<u32>>,
}

impl SmallFields {
    fn hermes_offsets(&self) -> Result<Option<HashMap<u32, Vec<u32>>>, SourceMapError> {
        let Some(offsets) = &self.x_hermes_function_offsets else {
            return Ok(None);
        };
        let mut out = HashMap::with_capacity(offsets.len());
        for (key, list) in offsets {
            let id: u32 = key.parse().map_err(|_| {
                SourceMapError::Malformed(format!(
                    "x_hermes_function_offsets key {key:?} is not a number"
                ))
            })?;
            out.insert(id, list.clone());
        }
        Ok(Some(out))
    }

    fn ignored_sources(&self) -> HashSet<String> {
        let sources = self.sources.as_deref().unwrap_or_default();
        self.x_google_ignore_list
            .iter()
            .chain(self.ignore_list.iter())
            .flatten()
            .filter_map(|&i| sources.get(i as usize).cloned().flatten())
            .collect()
    }
}

impl Segment {
    fn from_value(value: &Value, bundle: Option<&str>) -> Result<Self, SourceMapError> {
        if !value.is_object() {
            return Err(SourceMapError::NotASourceMap(
                "a segment map is not an object".into(),
            ));
        }
        let small: SmallFields = serde_json::from_value(strip_big_fields(value))
            .map_err(|e| SourceMapError::Malformed(e.to_string()))?;
        let mut leaves = Vec::new();
        collect_leaves(value, 0, 0, &mut leaves, 0)?;
        // The bundle's scopes only line up with a single section at the origin.
        let bundle = if leaves.len() == 1 && leaves[0].0 == 0 && leaves[0].1 == 0 {
            bundle
        } else {
            None
        };
        let mut sections = Vec::with_capacity(leaves.len());
        let mut ignored_sources = small.ignored_sources();
        for (line, column, leaf) in leaves {
            let leaf_small: SmallFields = serde_json::from_value(strip_big_fields(leaf))
                .map_err(|e| SourceMapError::Malformed(e.to_string()))?;
            ignored_sources.extend(leaf_small.ignored_sources());
            let mut leaf = leaf.clone();
            let mut contents = Vec::new();
            if let Some(object) = leaf.as_object_mut()
                && let Some(value) = object.remove("sourcesContent")
            {
                let read: Option<Vec<Option<String>>> = serde_json::from_value(value)
                    .map_err(|e| SourceMapError::Malformed(format!("sourcesContent: {e}")))?;
                contents = read.unwrap_or_default();
            }
            let text = serde_json::to_string(&leaf)
                .map_err(|e| SourceMapError::Malformed(e.to_string()))?;
            sections.push(Section::build(line, column, &text, contents, bundle)?);
        }
        sections.sort_by_key(|s| (s.line, s.column));
        Ok(Segment {
            sections,
            module_offsets: small.x_facebook_offsets.clone().unwrap_or_default(),
            hermes_offsets: small.hermes_offsets()?,
            ignored_sources,
        })
    }

    /// Looks up a 0-based generated position; `None` when nothing maps there (no mapping on
    /// that line at or before the column, or an unmapped segment).
    pub fn lookup(&self, line: u32, column: u32) -> Option<MappedLocation<'_>> {
        self.find(line, column)?.resolve()
    }

    /// The first half of [`Segment::lookup`]: which mapping covers the position. Finding the
    /// mappings of several positions before resolving them lets their memory reads overlap.
    pub fn find(&self, line: u32, column: u32) -> Option<Mapping<'_>> {
        let after = self
            .sections
            .partition_point(|s| (s.line, s.column) <= (line, column));
        let section = self.sections[..after].last()?;
        let local_line = line - section.line;
        let local_column = if local_line == 0 {
            column - section.column
        } else {
            column
        };
        let found = match &section.index {
            Some(index) => Found::Indexed(index.find(local_line, local_column)?),
            None => {
                let location = section
                    .cache
                    .get()
                    .lookup(SourcePosition::new(local_line, local_column))?;
                Found::Location(MappedLocation {
                    file_name: location.file_name(),
                    line: location.line(),
                    column: location.column(),
                    name: location.name(),
                    scope: location.scope(),
                    file: None,
                    sources: &section.sources,
                })
            }
        };
        Some(Mapping { section, found })
    }

    /// The generated line offset of RAM bundle module `id` (`x_facebook_offsets`), if known.
    pub fn module_offset(&self, id: u32) -> Option<u32> {
        self.module_offsets.get(id as usize).copied().flatten()
    }

    /// The bytecode offset of Hermes function `function_id` in segment/module `key`
    /// (`x_hermes_function_offsets[key][function_id]`).
    pub fn hermes_function_offset(&self, key: u32, function_id: u32) -> Option<u32> {
        self.hermes_offsets
            .as_ref()?
            .get(&key)?
            .get(function_id as usize)
            .copied()
    }

    /// Whether this segment has Hermes function offsets at all.
    pub fn has_hermes_offsets(&self) -> bool {
        self.hermes_offsets.is_some()
    }

    /// Whether `source` is on the map's ignore list (library code).
    pub fn is_ignored(&self, source: &str) -> bool {
        self.ignored_sources.contains(source)
    }
}

impl Section {
    /// `map`: the leaf map's JSON without `sourcesContent`; `contents`: that field, in
    /// `sources` order.
    fn build(
        line: u32,
        column: u32,
        map: &str,
        contents: Vec<Option<String>>,
        bundle: Option<&str>,
    ) -> Result<Self, SourceMapError> {
        let bytes = no_panic(|| {
            let writer =
                SourceMapCacheWriter::new(bundle.unwrap_or(""), map).map_err(|e| e.to_string())?;
            let mut bytes = Vec::new();
            writer.serialize(&mut bytes).map_err(|e| e.to_string())?;
            Ok(bytes)
        })
        .map_err(SourceMapError::Malformed)?;
        let cache = SelfCell::try_new(ByteView::from_vec(bytes), |data| {
            // SAFETY: `data` points into the ByteView owned by the cell.
            SourceMapCache::parse(unsafe { &*data })
        })
        .map_err(|e| SourceMapError::Malformed(format!("source map cache: {e}")))?;
        let sources = SourceTexts::new(cache.get().files().map(|f| f.name()), contents);
        let index = LineIndex::new(cache.owner());
        Ok(Section {
            line,
            column,
            cache,
            index,
            sources,
        })
    }
}

/// Flattens (possibly nested) `sections` into `(line, column, leaf map)` with absolute offsets.
/// The map has been validated ([`validate::map_value`]): the errors here are a second guard.
fn collect_leaves<'a>(
    map: &'a Value,
    line: u32,
    column: u32,
    out: &mut Vec<(u32, u32, &'a Value)>,
    depth: usize,
) -> Result<(), SourceMapError> {
    let Some(sections) = map.get("sections").filter(|s| !s.is_null()) else {
        if map.get("mappings").is_none() {
            return Err(SourceMapError::NotASourceMap(
                "a section map has neither `mappings` nor `sections`".into(),
            ));
        }
        out.push((line, column, map));
        return Ok(());
    };
    if depth >= MAX_SECTION_DEPTH {
        return Err(SourceMapError::Malformed(
            "sections nested too deeply".into(),
        ));
    }
    let sections = sections
        .as_array()
        .ok_or_else(|| SourceMapError::Malformed("`sections` is not an array".into()))?;
    for (i, section) in sections.iter().enumerate() {
        let offset = |key: &str| -> Result<u32, SourceMapError> {
            section
                .pointer(&format!("/offset/{key}"))
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    SourceMapError::Malformed(format!("sections[{i}].offset.{key} is missing"))
                })
        };
        let (l, c) = (offset("line")?, offset("column")?);
        let inner = section
            .get("map")
            .ok_or_else(|| SourceMapError::Malformed(format!("sections[{i}].map is missing")))?;
        let overflow = || SourceMapError::Malformed(format!("sections[{i}]: offset too large"));
        let abs_line = line.checked_add(l).ok_or_else(overflow)?;
        let abs_column = if l == 0 {
            column.checked_add(c).ok_or_else(overflow)?
        } else {
            c
        };
        collect_leaves(inner, abs_line, abs_column, out, depth + 1)?;
    }
    Ok(())
}

/// A copy of the map object without its large fields, for reading the small ones.
fn strip_big_fields(value: &Value) -> Value {
    match value {
        Value::Object(obj) => Value::Object(
            obj.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "mappings"
                            | "sections"
                            | "sourcesContent"
                            | "names"
                            | "x_facebook_sources"
                            | "x_facebook_segments"
                    )
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A plain map's text with its top-level `sourcesContent` value (`raw`, borrowed from `text`
/// by [`Probe`]) replaced by `null` (the cache writer then stores no source), and that field's
/// strings (`None` for a `null` entry). Errors: a `sourcesContent` that is not an array of
/// strings and nulls.
fn without_sources_content<'t>(
    text: &'t str,
    raw: Option<&RawValue>,
) -> Result<(std::borrow::Cow<'t, str>, Vec<Option<String>>), SourceMapError> {
    let Some(raw) = raw else {
        return Ok((text.into(), Vec::new()));
    };
    let contents: Option<Vec<Option<String>>> = serde_json::from_str(raw.get())
        .map_err(|e| SourceMapError::Malformed(format!("sourcesContent: {e}")))?;
    // `raw` borrows from `text`: its offset there is where the value starts.
    let start = (raw.get().as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
    let end = start.saturating_add(raw.get().len());
    if end > text.len() || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
        return Err(SourceMapError::Malformed(
            "sourcesContent is not part of the map's text".into(),
        ));
    }
    let mut stripped = String::with_capacity(text.len() - (end - start) + 4);
    stripped.push_str(&text[..start]);
    stripped.push_str("null");
    stripped.push_str(&text[end..]);
    Ok((stripped.into(), contents.unwrap_or_default()))
}

/// Strips the `)]}'` anti-XSSI prefix some servers put before JSON.
///
/// Hand-written for a reason: the sourcemap crate's `strip_junk_header` does this, but 9.3
/// keeps it private to its decoder (only `decode_slice`, which builds the whole map, calls
/// it), and this reader looks at the JSON before deciding how to build the map.
fn strip_xssi_prefix(map: &[u8]) -> &[u8] {
    let trimmed = map.trim_ascii_start();
    match trimmed.strip_prefix(b")]}'") {
        Some(rest) => rest,
        None => trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map over two generated lines, two sources with texts, names on every other mapping.
    fn map_text() -> String {
        let mut line0 = vec!["AAAAA".to_owned()];
        for i in 1..60 {
            // Odd: 3 columns on, the other source; even: back, one line and one name on.
            line0.push(if i % 2 == 0 { "GDCAC" } else { "GCAA" }.to_owned());
        }
        let line1 = "AAAA,KAAC,KDAC";
        let text = |file: &str| -> String {
            let lines: Vec<String> = (0..40).map(|i| format!("{file}{i}")).collect();
            lines.join("\n")
        };
        let names: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
        serde_json::json!({
            "version": 3,
            "sources": ["a.js", "b.js"],
            "names": names,
            "mappings": format!("{};{line1}", line0.join(",")),
            "sourcesContent": [text("a"), text("b")],
        })
        .to_string()
    }

    #[test]
    fn a_section_without_its_index_answers_the_same() {
        let indexed = JsSourceMap::parse(map_text().as_bytes(), None).unwrap();
        let mut plain = JsSourceMap::parse(map_text().as_bytes(), None).unwrap();
        for segment in plain.segments.values_mut() {
            for section in &mut segment.sections {
                assert!(section.index.is_some());
                section.index = None;
            }
        }
        fn summary(m: MappedLocation<'_>) -> Summary<'_> {
            let text = m.source().and_then(|s| s.line(m.line as usize));
            (m.file_name, m.line, m.column, m.name, m.scope, text)
        }
        type Summary<'a> = (
            Option<&'a str>,
            u32,
            u32,
            Option<&'a str>,
            ScopeLookupResult<'a>,
            Option<&'a str>,
        );
        let (indexed, plain) = (indexed.segment(0).unwrap(), plain.segment(0).unwrap());
        let mut found = 0;
        for line in 0..3 {
            for column in 0..400 {
                let want = plain.lookup(line, column).map(summary);
                assert_eq!(
                    indexed.lookup(line, column).map(summary),
                    want,
                    "{line}:{column}"
                );
                found += usize::from(want.is_some_and(|w| w.5.is_some() && w.3.is_some()));
            }
        }
        assert!(found >= 90, "only {found} positions with a name and a text");
    }
}
