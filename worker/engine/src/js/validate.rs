//! Refuses source maps that ECMA-426 ("Source map format specification") calls invalid, before
//! any SourceMapCache is built, with a message that names the field and the rule broken.
//!
//! Where the specification only says "optionally report an error", this module reports it: a
//! map that breaks a rule is refused as [`SourceMapError::Malformed`], as the TC39 source map
//! test suite (`tc39/source-map-tests`, the suite browsers run) expects of a strict consumer.
//! The rules, by ECMA-426 section:
//!
//! - § Source map format, § Decoding source maps (`DecodeSourceMap`, `GetOptionalString`,
//!   `GetOptionalListOfStrings`, `GetOptionalListOfOptionalStrings`,
//!   `GetOptionalListOfArrayIndexes`): `version` is the number 3; `file` and `sourceRoot`,
//!   when present, are strings; `sources` is an array of strings and nulls; `sourcesContent`,
//!   when present, an array of strings and nulls; `names`, when present, an array of strings;
//!   `mappings` a string; `ignoreList` (and the older `x_google_ignoreList`, which browsers
//!   read in its place), when present, an array of non-negative integers, each the index of a
//!   source.
//! - § base64 VLQ (`VLQSignedValue`, `VLQUnsignedValue`): only base64 digits; a value ends with
//!   a digit without the continuation bit; its unsigned value is below 2^32 (any number of
//!   zero continuation digits is allowed); a sign bit with no magnitude is -2^31.
//! - § Mappings structure, § Mappings grammar (`DecodeMappingsField`): `;` separates lines and
//!   `,` segments; a segment has 1, 4 or 5 fields; the running generated column, source index,
//!   original line and original column are never negative; the source index is below the
//!   number of `sources` and the name index below the number of `names`.
//! - § Index source map (`DecodeIndexSourceMap`): `sections` is an array of objects, each with
//!   an `offset` object of integer `line` and `column` and an embedded `map` object; the
//!   sections are sorted by offset and do not overlap; an index map carries no `mappings`.
//!
//! Our own bounds, beyond the specification: every running value (generated column, source
//! index, original line and column, name index) and every section offset is at most 2^31 - 1,
//! the largest value one VLQ can give, so that positions fit in the `u32`s of the caches.
//!
//! Deliberately kept from the specification's leniency or beyond it:
//! - `null` for an optional field is read as the field being absent, as most consumers do.
//! - Unknown fields are ignored (§ Extensions): Metro's and Hermes' `x_facebook_sources`,
//!   `x_facebook_offsets`, `x_metro_module_paths`, `x_hermes_function_offsets`,
//!   `x_facebook_segments` (each of whose maps is validated as a map of its own), and `sources`
//!   or `names` on an index map.
//! - A section's `map` may itself be an index map. ECMA-426 decodes a section's map as a
//!   regular map only, but Metro's RAM bundle maps nest index maps (a module group is an index
//!   map inside the bundle's), so nesting is accepted, up to [`MAX_SECTION_DEPTH`] levels, with
//!   every level held to the index map rules.
//!
//! Messages name the field by its path in the map (`sections[1].map.names[2] is not a
//! string`). In `mappings` messages, `line N, segment M` count the generated lines (groups
//! between `;`) and the segments of that line from 1; section offsets and positions are written
//! `(line, column)`, 0-based, as in the map's JSON.
//!
//! Validation is one pass over `mappings` with no allocation per segment: the VLQ decoding is
//! our own because `sourcemap::vlq::parse_vlq_segment` allocates a `Vec` per segment, reads an
//! invalid character as a digit, does not bound values to 32 bits, and overflows on long runs of
//! zero continuation digits that the specification allows.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

use super::sourcemap::SourceMapError;

/// The largest running value or section offset accepted: 2^31 - 1, the largest value one base64
/// VLQ can give (ECMA-426 § base64 VLQ).
pub(crate) const MAX_VALUE: i64 = i32::MAX as i64;

/// How deeply index maps may nest (Metro's RAM bundle maps nest two levels).
pub(crate) const MAX_SECTION_DEPTH: usize = 8;

/// A JSON value as validation reads it: from a parsed tree ([`Value`], for index maps and
/// segment maps) or as raw text borrowed from the map ([`RawValue`], for a plain map, whose
/// large fields are never copied).
#[derive(Clone, Copy)]
pub(crate) enum Json<'a> {
    /// A value of a parsed tree.
    Tree(&'a Value),
    /// A value's JSON text, exactly (no surrounding whitespace).
    Raw(&'a RawValue),
}

impl<'a> Json<'a> {
    fn first_byte(self) -> Option<u8> {
        match self {
            Json::Tree(_) => None,
            Json::Raw(raw) => raw.get().as_bytes().first().copied(),
        }
    }

    fn is_string(self) -> bool {
        match self {
            Json::Tree(v) => v.is_string(),
            Json::Raw(_) => self.first_byte() == Some(b'"'),
        }
    }

    fn is_null(self) -> bool {
        match self {
            Json::Tree(v) => v.is_null(),
            Json::Raw(_) => self.first_byte() == Some(b'n'),
        }
    }

    /// The value as a tree; copies raw text, so only for small values.
    fn to_value(self) -> Cow<'a, Value> {
        match self {
            Json::Tree(v) => Cow::Borrowed(v),
            Json::Raw(raw) => Cow::Owned(serde_json::from_str(raw.get()).unwrap_or(Value::Null)),
        }
    }

    /// The items of an array; `None` when the value is not an array.
    fn items(self) -> Option<Vec<Json<'a>>> {
        match self {
            Json::Tree(v) => Some(v.as_array()?.iter().map(Json::Tree).collect()),
            Json::Raw(raw) => {
                if self.first_byte() != Some(b'[') {
                    return None;
                }
                let items: Vec<&'a RawValue> = serde_json::from_str(raw.get()).ok()?;
                Some(items.into_iter().map(Json::Raw).collect())
            }
        }
    }

    /// The string; `None` when the value is not a string. Borrowed unless the raw text has
    /// escapes.
    fn as_str(self) -> Option<Cow<'a, str>> {
        match self {
            Json::Tree(v) => v.as_str().map(Cow::Borrowed),
            Json::Raw(raw) => {
                let text = raw.get();
                let inner = text.strip_prefix('"')?.strip_suffix('"')?;
                if inner.contains('\\') {
                    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
                } else {
                    Some(Cow::Borrowed(inner))
                }
            }
        }
    }
}

/// The fields of one map that validation reads; `None` for an absent (or `null`) field.
#[derive(Default, Clone, Copy)]
pub(crate) struct MapFields<'a> {
    /// `version`.
    pub(crate) version: Option<Json<'a>>,
    /// `file`.
    pub(crate) file: Option<Json<'a>>,
    /// `sourceRoot`.
    pub(crate) source_root: Option<Json<'a>>,
    /// `sources`.
    pub(crate) sources: Option<Json<'a>>,
    /// `sourcesContent`.
    pub(crate) sources_content: Option<Json<'a>>,
    /// `names`.
    pub(crate) names: Option<Json<'a>>,
    /// `mappings`.
    pub(crate) mappings: Option<Json<'a>>,
    /// `ignoreList`.
    pub(crate) ignore_list: Option<Json<'a>>,
    /// `x_google_ignoreList`.
    pub(crate) x_google_ignore_list: Option<Json<'a>>,
}

impl<'a> MapFields<'a> {
    /// The fields of a map object of a parsed tree.
    pub(crate) fn from_value(map: &'a Value) -> Self {
        let get = |key: &str| map.get(key).filter(|v| !v.is_null()).map(Json::Tree);
        MapFields {
            version: get("version"),
            file: get("file"),
            source_root: get("sourceRoot"),
            sources: get("sources"),
            sources_content: get("sourcesContent"),
            names: get("names"),
            mappings: get("mappings"),
            ignore_list: get("ignoreList"),
            x_google_ignore_list: get("x_google_ignoreList"),
        }
    }
}

fn malformed(message: String) -> SourceMapError {
    SourceMapError::Malformed(message)
}

/// A value for a message: its compact JSON, cut to 40 characters.
fn show(value: Json<'_>) -> String {
    let text = match value {
        Json::Tree(v) => v.to_string(),
        Json::Raw(raw) => raw.get().to_owned(),
    };
    match text.char_indices().nth(40) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

/// An integral JSON number (`3`, `3.0`, `3e0`), as `f64`.
fn integer(value: &Value) -> Option<f64> {
    let number = value.as_f64()?;
    (number.fract() == 0.0).then_some(number)
}

/// `version` must be the number 3 (ECMA-426 § Source map format, `DecodeSourceMap` step 1,
/// `DecodeIndexSourceMap` step 4).
fn check_version(version: Option<Json<'_>>, path: &str) -> Result<(), SourceMapError> {
    let Some(version) = version else {
        return Err(malformed(format!(
            "{path}version is missing (must be the number 3)"
        )));
    };
    if integer(&version.to_value()) != Some(3.0) {
        return Err(malformed(format!(
            "{path}version must be the number 3, not {}",
            show(version)
        )));
    }
    Ok(())
}

/// An optional field that must be a string when present: `file`, `sourceRoot` (ECMA-426
/// § Source map format, `GetOptionalString`).
fn check_optional_string(
    value: Option<Json<'_>>,
    path: &str,
    name: &str,
) -> Result<(), SourceMapError> {
    match value {
        Some(v) if !v.is_string() => Err(malformed(format!("{path}{name} is not a string"))),
        _ => Ok(()),
    }
}

/// An array of strings, or of strings and nulls when `nulls`; returns its length (ECMA-426
/// `GetOptionalListOfStrings`, `GetOptionalListOfOptionalStrings`).
fn check_strings(
    value: Json<'_>,
    path: &str,
    name: &str,
    nulls: bool,
) -> Result<usize, SourceMapError> {
    let items = value
        .items()
        .ok_or_else(|| malformed(format!("{path}{name} is not an array")))?;
    for (i, item) in items.iter().enumerate() {
        if !(item.is_string() || (nulls && item.is_null())) {
            let what = if nulls {
                "a string or null"
            } else {
                "a string"
            };
            return Err(malformed(format!("{path}{name}[{i}] is not {what}")));
        }
    }
    Ok(items.len())
}

/// `ignoreList` / `x_google_ignoreList`: an array of non-negative integers, each the index of
/// one of `sources` sources (ECMA-426 § Source map format, `GetOptionalListOfArrayIndexes`).
fn check_ignore_list(
    value: Option<Json<'_>>,
    path: &str,
    name: &str,
    sources: usize,
) -> Result<(), SourceMapError> {
    let Some(value) = value else {
        return Ok(());
    };
    let items = value
        .items()
        .ok_or_else(|| malformed(format!("{path}{name} is not an array")))?;
    for (i, item) in items.into_iter().enumerate() {
        let index = integer(&item.to_value()).filter(|&n| n >= 0.0);
        let Some(index) = index else {
            return Err(malformed(format!(
                "{path}{name}[{i}] is not a non-negative integer: {}",
                show(item)
            )));
        };
        if index >= sources as f64 {
            return Err(malformed(format!(
                "{path}{name}[{i}]: {index} is not the index of a source ({sources} sources)"
            )));
        }
    }
    Ok(())
}

/// Validates a regular (not index) map: every rule of the module docs but those of index maps.
/// `path`: the map's place in the whole map, `""` or ending in `.` (`sections[0].map.`).
/// Returns the greatest generated position `(line, column)` of its mappings, `None` when it has
/// none.
pub(crate) fn regular_map(
    fields: &MapFields<'_>,
    path: &str,
) -> Result<Option<(u64, u64)>, SourceMapError> {
    check_version(fields.version, path)?;
    check_optional_string(fields.file, path, "file")?;
    check_optional_string(fields.source_root, path, "sourceRoot")?;
    let sources = fields.sources.ok_or_else(|| {
        malformed(format!(
            "{path}sources is missing (must be an array of strings and nulls)"
        ))
    })?;
    let sources = check_strings(sources, path, "sources", true)?;
    if let Some(contents) = fields.sources_content {
        check_strings(contents, path, "sourcesContent", true)?;
    }
    let names = match fields.names {
        Some(names) => check_strings(names, path, "names", false)?,
        None => 0,
    };
    check_ignore_list(fields.ignore_list, path, "ignoreList", sources)?;
    check_ignore_list(
        fields.x_google_ignore_list,
        path,
        "x_google_ignoreList",
        sources,
    )?;
    let mappings = fields
        .mappings
        .ok_or_else(|| malformed(format!("{path}mappings is missing")))?;
    let mappings = mappings
        .as_str()
        .ok_or_else(|| malformed(format!("{path}mappings is not a string")))?;
    check_mappings(&mappings, sources, names, path)
}

/// Validates a map given as a parsed tree, regular or index (nested index maps included, see
/// the module docs). `path`: as for [`regular_map`].
pub(crate) fn map_value(map: &Value, path: &str) -> Result<(), SourceMapError> {
    walk(map, path, (0, 0), 0).map(|_| ())
}

/// Validates `map` (at absolute generated position `origin`); returns the greatest generated
/// position of its mappings relative to `origin`.
fn walk(
    map: &Value,
    path: &str,
    origin: (u64, u64),
    depth: usize,
) -> Result<Option<(u64, u64)>, SourceMapError> {
    if !map.is_object() {
        let name = path.strip_suffix('.').unwrap_or(path);
        let name = if name.is_empty() { "the map" } else { name };
        return Err(malformed(format!("{name} is not an object")));
    }
    match map.get("sections") {
        None | Some(Value::Null) => regular_map(&MapFields::from_value(map), path),
        Some(sections) => index_map(map, sections, path, origin, depth),
    }
}

/// The index map rules (ECMA-426 § Index source map, `DecodeIndexSourceMap`).
fn index_map(
    map: &Value,
    sections: &Value,
    path: &str,
    origin: (u64, u64),
    depth: usize,
) -> Result<Option<(u64, u64)>, SourceMapError> {
    if depth >= MAX_SECTION_DEPTH {
        return Err(malformed(format!(
            "{path}sections nested too deeply (more than {MAX_SECTION_DEPTH} levels)"
        )));
    }
    let fields = MapFields::from_value(map);
    check_version(fields.version, path)?;
    check_optional_string(fields.file, path, "file")?;
    if fields.mappings.is_some() {
        return Err(malformed(format!(
            "{path}mappings must not be present in an index map (one with sections)"
        )));
    }
    let sections = sections
        .as_array()
        .ok_or_else(|| malformed(format!("{path}sections is not an array")))?;
    // The offset of the previous section, and the greatest position mapped by the sections so
    // far (with the index of the section that maps it), both relative to this map.
    let mut previous_offset: Option<(u64, u64)> = None;
    let mut previous_last: Option<((u64, u64), usize)> = None;
    for (i, section) in sections.iter().enumerate() {
        let here = format!("{path}sections[{i}]");
        if !section.is_object() {
            return Err(malformed(format!("{here} is not an object")));
        }
        let offset = match section.get("offset") {
            None | Some(Value::Null) => {
                return Err(malformed(format!("{here}.offset is missing")));
            }
            Some(offset) if !offset.is_object() => {
                return Err(malformed(format!("{here}.offset is not an object")));
            }
            Some(offset) => offset,
        };
        let coordinate = |key: &str| -> Result<u64, SourceMapError> {
            let value = match offset.get(key) {
                None | Some(Value::Null) => {
                    return Err(malformed(format!("{here}.offset.{key} is missing")));
                }
                Some(value) => value,
            };
            integer(value)
                .filter(|&n| (0.0..=MAX_VALUE as f64).contains(&n))
                .map(|n| n as u64)
                .ok_or_else(|| {
                    malformed(format!(
                        "{here}.offset.{key} must be an integer from 0 to {MAX_VALUE}, not {}",
                        show(Json::Tree(value))
                    ))
                })
        };
        let (line, column) = (coordinate("line")?, coordinate("column")?);
        let absolute = if line == 0 {
            (origin.0, origin.1 + column)
        } else {
            (origin.0 + line, column)
        };
        if absolute.0 > MAX_VALUE as u64 || absolute.1 > MAX_VALUE as u64 {
            return Err(malformed(format!(
                "{here}: offset ({line}, {column}) is past {MAX_VALUE} with the offsets of the \
                 sections around it"
            )));
        }
        if let Some(previous) = previous_offset
            && (line, column) < previous
        {
            return Err(malformed(format!(
                "{here}: offset ({line}, {column}) is before the offset ({}, {}) of \
                 {path}sections[{}] (sections must be sorted)",
                previous.0,
                previous.1,
                i - 1
            )));
        }
        // The suite counts a section starting at the previous one's last mapping as
        // overlapping it: the offset must be strictly after.
        if let Some((last, at)) = previous_last
            && (line, column) <= last
        {
            return Err(malformed(format!(
                "{here}: offset ({line}, {column}) is not after the last mapping of \
                 {path}sections[{at}], at ({}, {}) (sections must not overlap)",
                last.0, last.1
            )));
        }
        let inner = match section.get("map") {
            Some(inner) if !inner.is_null() => inner,
            _ if section.get("url").is_some() => {
                return Err(malformed(format!(
                    "{here} refers to a map by `url`, which is not supported: the map must be \
                     embedded as `map`"
                )));
            }
            _ => return Err(malformed(format!("{here}.map is missing"))),
        };
        if !inner.is_object() {
            return Err(malformed(format!("{here}.map is not an object")));
        }
        let last = walk(inner, &format!("{here}.map."), absolute, depth + 1)?;
        if let Some(last) = last {
            let last = if last.0 == 0 {
                (line, column + last.1)
            } else {
                (line + last.0, last.1)
            };
            if previous_last.is_none_or(|(previous, _)| last > previous) {
                previous_last = Some((last, i));
            }
        }
        previous_offset = Some((line, column));
    }
    Ok(previous_last.map(|(last, _)| last))
}

/// Base64 digit values (RFC 4648), [`NOT_BASE64`] for any other byte.
const BASE64: [u8; 256] = {
    let mut table = [NOT_BASE64; 256];
    let digits = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < digits.len() {
        table[digits[i] as usize] = i as u8;
        i += 1;
    }
    table
};
const NOT_BASE64: u8 = 0xff;

/// The names of a segment's fields, for messages.
const FIELDS: [&str; 5] = [
    "generated column",
    "source index",
    "original line",
    "original column",
    "name index",
];

/// Validates `mappings` (ECMA-426 § base64 VLQ, § Mappings structure, § Mappings grammar,
/// `DecodeMappingsField`) of a map with `sources` sources and `names` names, in one pass with
/// no allocation. Returns the greatest generated position `(line, column)` mapped.
pub(crate) fn check_mappings(
    mappings: &str,
    sources: usize,
    names: usize,
    path: &str,
) -> Result<Option<(u64, u64)>, SourceMapError> {
    let mut decoder = Decoder {
        sources: sources as i64,
        names: names as i64,
        state: [0; 5],
        fields: [0; 5],
        count: 0,
        line: 0,
        segment: 0,
        last: None,
    };
    let (mut value, mut shift, mut in_value) = (0u64, 0u32, false);
    let bytes = mappings.as_bytes();
    for (at, &byte) in bytes.iter().enumerate() {
        if byte == b',' || byte == b';' {
            if in_value {
                return Err(decoder.error(path, "a VLQ value ends on a continuation digit"));
            }
            // `;` right after a line's start ends an empty line (allowed); anything else ends
            // a segment.
            if byte == b',' || decoder.count > 0 || decoder.segment > 0 {
                decoder.end_segment(path)?;
            }
            if byte == b';' {
                decoder.line += 1;
                decoder.segment = 0;
                decoder.state[0] = 0;
            }
            continue;
        }
        let digit = BASE64[byte as usize];
        if digit == NOT_BASE64 {
            let c = mappings[at..].chars().next().unwrap_or('\u{fffd}');
            return Err(decoder.error(
                path,
                &format!("invalid character {c:?} (only base64 digits, ',' and ';' are allowed)"),
            ));
        }
        // VLQUnsignedValue: digits least significant first, 5 bits each, below 2^32.
        let bits = u64::from(digit & 0b1_1111);
        if shift < 32 {
            value |= bits << shift;
        } else if bits != 0 {
            value = u64::MAX;
        }
        if value >= 1 << 32 {
            return Err(decoder.error(
                path,
                &format!(
                    "{} VLQ value does not fit in 32 bits",
                    FIELDS.get(decoder.count).copied().unwrap_or("a")
                ),
            ));
        }
        shift = shift.saturating_add(5);
        in_value = digit & 0b10_0000 != 0;
        if !in_value {
            // VLQSignedValue: the lowest bit is the sign; a sign without magnitude is -2^31.
            let magnitude = (value >> 1) as i64;
            let signed = match (value & 1, magnitude) {
                (0, m) => m,
                (_, 0) => i64::from(i32::MIN),
                (_, m) => -m,
            };
            if decoder.count == 5 {
                return Err(
                    decoder.error(path, "segment has more than 5 fields (must have 1, 4 or 5)")
                );
            }
            decoder.fields[decoder.count] = signed;
            decoder.count += 1;
            value = 0;
            shift = 0;
        }
    }
    if in_value {
        return Err(decoder.error(path, "a VLQ value ends on a continuation digit"));
    }
    if decoder.count > 0 || decoder.segment > 0 {
        decoder.end_segment(path)?;
    }
    Ok(decoder.last)
}

/// The state of [`check_mappings`]: `DecodeMappingsField`'s running values and the segment
/// being read.
struct Decoder {
    sources: i64,
    names: i64,
    /// Running generated column, source index, original line, original column, name index.
    state: [i64; 5],
    /// The fields of the segment being read.
    fields: [i64; 5],
    count: usize,
    /// 0-based generated line and segment in the line.
    line: u64,
    segment: u64,
    last: Option<(u64, u64)>,
}

impl Decoder {
    fn error(&self, path: &str, rule: &str) -> SourceMapError {
        malformed(format!(
            "{path}mappings: line {}, segment {}: {rule}",
            self.line + 1,
            self.segment + 1
        ))
    }

    /// Applies the segment just read to the running values and checks them.
    fn end_segment(&mut self, path: &str) -> Result<(), SourceMapError> {
        match self.count {
            0 => return Err(self.error(path, "empty segment (a segment has 1, 4 or 5 fields)")),
            1 | 4 | 5 => {}
            n => {
                return Err(self.error(
                    path,
                    &format!("segment has {n} fields (must have 1, 4 or 5)"),
                ));
            }
        }
        for (field, name) in FIELDS.iter().enumerate().take(self.count) {
            let value = self.state[field] + self.fields[field];
            if value < 0 {
                return Err(self.error(path, &format!("{name} {value} is negative")));
            }
            if value > MAX_VALUE {
                return Err(self.error(path, &format!("{name} {value} is more than {MAX_VALUE}")));
            }
            let (limit, what) = match field {
                1 => (self.sources, "sources"),
                4 => (self.names, "names"),
                _ => (i64::MAX, ""),
            };
            if value >= limit {
                return Err(self.error(
                    path,
                    &format!("{name} {value} is out of range ({limit} {what})"),
                ));
            }
            self.state[field] = value;
        }
        let position = (self.line, self.state[0] as u64);
        if self.last.is_none_or(|last| position > last) {
            self.last = Some(position);
        }
        self.count = 0;
        self.segment += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(mappings: &str) -> Result<Option<(u64, u64)>, String> {
        check_mappings(mappings, 2, 2, "").map_err(|e| e.to_string())
    }

    #[test]
    fn vlq_bounds_follow_the_specification() {
        // 2^31 - 1 in every field: "+/////D" (the largest 7-digit value).
        assert_eq!(check("+/////D"), Ok(Some((0, i32::MAX as u64))));
        // Zero continuation digits may run on past 32 bits.
        assert_eq!(check(&format!("i{}A", "g".repeat(50))), Ok(Some((0, 1))));
        // 2^32 as an unsigned value (digit 4 at bit 30) is one too many.
        assert_eq!(
            check("ggggggE"),
            Err(
                "malformed source map: mappings: line 1, segment 1: generated column VLQ value \
                 does not fit in 32 bits"
                    .into()
            )
        );
        // A set bit past bit 31 after zero digits.
        assert!(check(&format!("{}B", "g".repeat(8))).is_err());
        // "B": sign without magnitude is -2^31.
        assert_eq!(
            check("B"),
            Err(
                "malformed source map: mappings: line 1, segment 1: generated column -2147483648 \
                 is negative"
                    .into()
            )
        );
    }

    #[test]
    fn last_position_is_the_greatest() {
        assert_eq!(check(""), Ok(None));
        assert_eq!(check(";;"), Ok(None));
        assert_eq!(check("K,D;;E,F"), Ok(Some((2, 2))));
        assert_eq!(check("AAAA,KACA;"), Ok(Some((0, 5))));
    }
}
