//! A per-line index over a SourceMapCache's mappings, so that a lookup searches the mappings of
//! one generated line instead of all of them.
//!
//! symbolic-sourcemapcache 13.9 looks a position up with one binary search over every mapping of
//! the section (8 bytes each: 1.5 million mappings, 12 MB, in a 40 MB React Native map). On a
//! random position most of its ~21 steps miss the CPU caches, and that search was 43 % of the
//! time of restoring a stack with context. A bundle has one generated line per module (Metro) or
//! a few, so the mappings of one line are few and close together: this index gives, for each
//! generated line, where its mappings start, and a lookup binary searches only those.
//!
//! The index reads the cache's own bytes, in the layout symbolic-sourcemapcache 13.9 writes
//! (format version 2, `raw.rs` and `SourceMapCacheWriter::serialize`, native byte order):
//! a 32-byte header (magic, version, mapping count, file count, line-offset count, string-table
//! size, 8 reserved bytes), then, each starting at a multiple of 8 bytes, the minified positions
//! (`line`, `column`: 2 × u32, 0-based, sorted), the original locations (`file`, `line`,
//! `column`, `name`, `scope`: 5 × u32, same order), the files (`name`, `source`, line-offset
//! range: 4 × u32), the line offsets (u32 each) and the string table (watto's: LEB128 length,
//! then UTF-8 bytes). [`LineIndex::new`] checks the magic, the version, the sizes and the order
//! of the positions, and gives `None` for anything else: the caller then uses symbolic's own
//! lookup, so a future format only loses speed. The answers are symbolic's
//! (`SourceMapCache::lookup`) for every position; a test compares both on every position of
//! generated maps.

use std::ops::Range;

use symbolic_sourcemapcache::ScopeLookupResult;

/// The magic symbolic-sourcemapcache writes (`SMCA`, in native byte order).
const MAGIC: u32 = u32::from_le_bytes(*b"SMCA");
/// The only format version this index reads.
const VERSION: u32 = 2;
const HEADER_BYTES: usize = 32;
const POSITION_BYTES: usize = 8;
const LOCATION_BYTES: usize = 20;
const FILE_BYTES: usize = 16;
const NO_FILE: u32 = u32::MAX;
const NO_NAME: u32 = u32::MAX;
const GLOBAL_SCOPE: u32 = u32::MAX;
const ANONYMOUS_SCOPE: u32 = u32::MAX - 1;

/// Where each table of one cache starts (byte offsets into the cache).
#[derive(Debug, Clone)]
struct Layout {
    positions: usize,
    locations: usize,
    files: Range<usize>,
    line_offsets: u32,
    strings: Range<usize>,
}

/// What a position maps to: the original location, with 0-based `line` and `column`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexedLocation<'a> {
    /// Index of the original file in the cache's file list (`SourceMapCache::files` order).
    pub file: Option<usize>,
    /// The file's name.
    pub file_name: Option<&'a str>,
    /// 0-based original line.
    pub line: u32,
    /// 0-based original column.
    pub column: u32,
    /// The map's `names` entry at the position.
    pub name: Option<&'a str>,
    /// The enclosing function.
    pub scope: ScopeLookupResult<'a>,
}

/// The index of one cache: for each generated line, its first mapping; the generated column of
/// every mapping, and every [`BLOCK`]th of those again, so that a lookup reads a few cache lines
/// of a small array and then one block instead of binary searching 8-byte positions spread
/// over the whole line.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    layout: Layout,
    /// `line_starts[l]`: index of the first mapping on generated line `l` or a later one; one
    /// entry more than there are lines, the last being the mapping count.
    line_starts: Vec<u32>,
    /// The generated column of every mapping, in the cache's order.
    columns: Vec<u32>,
    /// `block_starts[j] = columns[BLOCK * j]`.
    block_starts: Vec<u32>,
}

/// Mappings per block: 16 columns of 4 bytes, 64 bytes (one or two cache lines).
const BLOCK: usize = 16;

impl LineIndex {
    /// Indexes `cache`, the bytes of a SourceMapCache. `None` when they are not format version 2
    /// in this machine's byte order, when the tables do not fit the bytes, when the positions
    /// are not sorted, or when the lines are so sparse that the index would outgrow the cache
    /// (more than 4 lines per mapping, plus 4,096).
    pub(crate) fn new(cache: &[u8]) -> Option<Self> {
        if cache.len() < HEADER_BYTES || cache.as_ptr().align_offset(8) != 0 {
            return None;
        }
        let header = |i: usize| u32_at(cache, 4 * i);
        if header(0) != MAGIC || header(1) != VERSION {
            return None;
        }
        let mappings = header(2) as usize;
        let files = header(3) as usize;
        let line_offsets = header(4) as usize;
        let string_bytes = header(5) as usize;
        let positions = HEADER_BYTES;
        let locations = align8(positions.checked_add(mappings.checked_mul(POSITION_BYTES)?)?);
        let files_at = align8(locations.checked_add(mappings.checked_mul(LOCATION_BYTES)?)?);
        let files_end = files_at.checked_add(files.checked_mul(FILE_BYTES)?)?;
        let strings_at = align8(align8(files_end).checked_add(line_offsets.checked_mul(4)?)?);
        let strings_end = strings_at.checked_add(string_bytes)?;
        if strings_end > cache.len() {
            return None;
        }
        let layout = Layout {
            positions,
            locations,
            files: files_at..files_end,
            line_offsets: line_offsets as u32,
            strings: strings_at..strings_end,
        };

        let mut line_starts = Vec::new();
        let mut columns = Vec::with_capacity(mappings);
        let mut previous = (0, 0);
        for i in 0..mappings {
            let position = layout.position(cache, i);
            if position < previous {
                return None;
            }
            previous = position;
            columns.push(position.1);
            let line = position.0 as usize;
            if line >= line_starts.len() {
                if line > 4 * mappings + 4096 {
                    return None;
                }
                line_starts.resize(line + 1, i as u32);
            }
        }
        line_starts.push(mappings as u32);
        line_starts.shrink_to_fit();
        let block_starts = columns.iter().step_by(BLOCK).copied().collect();
        Some(LineIndex {
            layout,
            line_starts,
            columns,
            block_starts,
        })
    }

    /// Looks up the 0-based generated `line` and `column` in `cache` (the bytes given to
    /// [`LineIndex::new`]): the last mapping on that line at or before the column, as
    /// `SourceMapCache::lookup` finds it. `None` when there is none, or when that mapping maps
    /// to nothing. Of several mappings at one position, the last is taken.
    #[cfg(test)]
    pub(crate) fn lookup<'a>(
        &self,
        cache: &'a [u8],
        line: u32,
        column: u32,
    ) -> Option<IndexedLocation<'a>> {
        self.location(cache, self.find(line, column)?)
    }

    /// The first half of a lookup: the index of the last mapping on 0-based generated `line` at
    /// or before `column`, if any.
    pub(crate) fn find(&self, line: u32, column: u32) -> Option<usize> {
        let line = line as usize;
        let first = *self.line_starts.get(line)? as usize;
        let end = *self.line_starts.get(line.checked_add(1)?)? as usize;
        // The blocks that start on this line, then the mappings of the one to search (or of
        // the line's part before its first block), are sorted by column.
        let blocks = first.div_ceil(BLOCK)..end.div_ceil(BLOCK);
        let below = self.block_starts[blocks.clone()].partition_point(|&c| c <= column);
        let (from, to) = match below {
            0 => (first, end.min(blocks.start * BLOCK)),
            n => {
                let block = blocks.start + n - 1;
                (block * BLOCK, end.min((block + 1) * BLOCK))
            }
        };
        let low = from + self.columns[from..to].partition_point(|&c| c <= column);
        (low > first).then(|| low - 1)
    }

    /// The second half of a lookup: where mapping `mapping` (from [`LineIndex::find`]) maps
    /// to, read from `cache`. `None` when it maps to nothing or is out of range.
    pub(crate) fn location<'a>(
        &self,
        cache: &'a [u8],
        mapping: usize,
    ) -> Option<IndexedLocation<'a>> {
        let layout = &self.layout;
        if mapping >= self.columns.len() {
            return None;
        }
        let at = layout.locations + mapping * LOCATION_BYTES;
        let field = |i: usize| u32_at(cache, at + 4 * i);
        let (file, line, column, name, scope) = (field(0), field(1), field(2), field(3), field(4));
        if file == NO_FILE && line == u32::MAX && column == u32::MAX {
            return None;
        }
        // As symbolic: no file when the index or the file's line-offset range is out of bounds.
        let file = (file as usize).checked_mul(FILE_BYTES).and_then(|offset| {
            let at = layout.files.start.checked_add(offset)?;
            if at >= layout.files.end {
                return None;
            }
            let (from, to) = (u32_at(cache, at + 8), u32_at(cache, at + 12));
            (from <= to && to <= layout.line_offsets).then_some((file as usize, at))
        });
        let strings = &cache[layout.strings.clone()];
        Some(IndexedLocation {
            file: file.map(|(index, _)| index),
            file_name: file.and_then(|(_, at)| string(strings, u32_at(cache, at))),
            line,
            column,
            name: match name {
                NO_NAME => None,
                offset => string(strings, offset),
            },
            scope: match scope {
                GLOBAL_SCOPE => ScopeLookupResult::Unknown,
                ANONYMOUS_SCOPE => ScopeLookupResult::AnonymousScope,
                offset => string(strings, offset).map_or(ScopeLookupResult::Unknown, |name| {
                    ScopeLookupResult::NamedScope(name)
                }),
            },
        })
    }

    /// Bytes held by the index.
    pub(crate) fn size_bytes(&self) -> usize {
        4 * (self.line_starts.len() + self.columns.len() + self.block_starts.len())
    }
}

impl Layout {
    /// The generated (line, column) of mapping `i`.
    fn position(&self, cache: &[u8], i: usize) -> (u32, u32) {
        let at = self.positions + i * POSITION_BYTES;
        (u32_at(cache, at), u32_at(cache, at + 4))
    }
}

/// The string at `offset` of a watto string table, as symbolic reads it (`None` when it is not
/// there or not UTF-8).
fn string(strings: &[u8], offset: u32) -> Option<&str> {
    watto::StringTable::read(strings, offset as usize).ok()
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(word)
}

fn align8(n: usize) -> usize {
    n.next_multiple_of(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use symbolic_sourcemapcache::{SourceMapCache, SourceMapCacheWriter, SourcePosition};

    /// Builds a cache from `map` (JSON) and compares the index with symbolic's lookup on every
    /// position of `lines` × `columns`. Returns how many positions mapped, had a name and had a
    /// named scope.
    fn compare(map: &str, bundle: &str, lines: u32, columns: u32) -> (usize, usize, usize) {
        let writer = SourceMapCacheWriter::new(bundle, map).unwrap();
        let mut bytes = Vec::new();
        writer.serialize(&mut bytes).unwrap();
        let cache = SourceMapCache::parse(&bytes).unwrap();
        let index = LineIndex::new(&bytes).expect("a version 2 cache is indexed");
        let files: Vec<_> = cache.files().map(|f| f.name()).collect();
        let (mut found, mut named, mut scoped) = (0, 0, 0);
        for line in 0..lines {
            for column in 0..columns {
                let want = cache.lookup(SourcePosition::new(line, column));
                let got = index.lookup(&bytes, line, column);
                match (&want, &got) {
                    (None, None) => {}
                    (Some(w), Some(g)) => {
                        found += 1;
                        named += usize::from(g.name.is_some());
                        scoped += usize::from(matches!(g.scope, ScopeLookupResult::NamedScope(_)));
                        assert_eq!(w.file_name(), g.file_name, "{line}:{column}");
                        assert_eq!(g.file.map(|i| files[i]), Some(w.file_name()));
                        assert_eq!(w.line(), g.line, "{line}:{column}");
                        assert_eq!(w.column(), g.column, "{line}:{column}");
                        assert_eq!(w.name(), g.name, "{line}:{column}");
                        assert_eq!(w.scope(), g.scope, "{line}:{column}");
                    }
                    _ => panic!("{line}:{column}: symbolic {want:?}, index {got:?}"),
                }
            }
        }
        (found, named, scoped)
    }

    #[test]
    fn the_index_answers_as_symbolic_on_every_position() {
        // Three generated lines with mappings (line 1 has none; line 4 is past the end), names,
        // two files, a mapping without a source (`A` alone: 1-field segment).
        let map = r#"{"version":3,"sources":["a.js","b.js"],"names":["foo","bar"],
            "mappings":"CAAAA,IAAI,MCCEC;;EAAE,A,EDAFA;AAAA,EAAA,EAAA"}"#;
        let (found, named, _) = compare(map, "", 5, 16);
        assert!(
            found > 20 && named > 10,
            "{found} positions mapped, {named} named"
        );
    }

    #[test]
    fn several_mappings_at_one_position_answer_as_symbolic() {
        // Line 0: 20 mappings, those at 15, 16 and 17 (across the first block boundary) at one
        // generated column, each to another original line; line 1: three at column 0.
        let mut segments = vec!["AAAA".to_owned()];
        for i in 1..20 {
            let column_delta = if (16..=17).contains(&i) { "A" } else { "C" };
            segments.push(format!("{column_delta}AAC"));
        }
        let mappings = format!("{};AAAA,AACA,AACA", segments.join(","));
        let map =
            format!(r#"{{"version":3,"sources":["a.js"],"names":[],"mappings":"{mappings}"}}"#);
        let (found, _, _) = compare(&map, "", 3, 45);
        assert!(found > 40, "only {found} positions mapped");
    }

    #[test]
    fn scopes_from_the_bundle_match_symbolic() {
        let bundle = "function outer(){function inner(){throw new Error()}inner()}\nouter();\n";
        // Generated with a mapping every 4 columns of line 0 and at the start of line 1.
        let mut mappings = String::from("AAAA");
        for _ in 0..15 {
            mappings.push_str(",IAAI");
        }
        mappings.push_str(";AACA");
        let map =
            format!(r#"{{"version":3,"sources":["src.js"],"names":[],"mappings":"{mappings}"}}"#);
        let (found, _, scoped) = compare(&map, bundle, 3, 70);
        assert!(
            found > 60 && scoped > 30,
            "{found} positions mapped, {scoped} in named scopes"
        );
    }

    /// Real React Native maps (Metro with function maps, Hermes, Metro's own test maps):
    /// the index and symbolic agree at every mapping's column, one before and one after it,
    /// and one line past the end.
    #[test]
    fn the_index_answers_as_symbolic_on_real_maps() {
        let root = std::env::var_os("SYMCLUSTER_FIXTURES")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../../shared/fixtures")
            });
        for rel in [
            "js/sourcemapcache-hermes-metro/react-native-metro.js.map",
            "js/sourcemapcache-hermes-metro/react-native-hermes.map",
            "js/metro-symbolicate/__fixtures__/with-function-map.js.map",
            "js/metro-symbolicate/__fixtures__/testfile.js.map",
        ] {
            let path = root.join(rel);
            let map = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let writer = SourceMapCacheWriter::new("", &map).unwrap();
            let mut bytes = Vec::new();
            writer.serialize(&mut bytes).unwrap();
            let cache = SourceMapCache::parse(&bytes).unwrap();
            let index = LineIndex::new(&bytes).expect("indexed");
            let lines = index.line_starts.len() as u32;
            let (mut checked, mut found) = (0, 0);
            for line in 0..lines {
                let first = index.line_starts[line as usize] as usize;
                let end = index
                    .line_starts
                    .get(line as usize + 1)
                    .map_or(first, |&e| e as usize);
                let mut columns = vec![0];
                for &c in &index.columns[first..end] {
                    columns.extend([c.saturating_sub(1), c, c + 1]);
                }
                for column in columns {
                    let want = cache.lookup(SourcePosition::new(line, column));
                    let got = index.lookup(&bytes, line, column);
                    checked += 1;
                    match (&want, &got) {
                        (None, None) => {}
                        (Some(w), Some(g)) => {
                            found += 1;
                            let w = (w.file_name(), w.line(), w.column(), w.name(), w.scope());
                            let g = (g.file_name, g.line, g.column, g.name, g.scope);
                            assert_eq!(w, g, "{rel} {line}:{column}");
                        }
                        _ => panic!("{rel} {line}:{column}: symbolic {want:?}, index {got:?}"),
                    }
                }
            }
            assert!(
                found > 100 && found * 2 > checked,
                "{rel}: {found} of {checked} mapped"
            );
        }
    }

    #[test]
    fn anything_but_a_version_2_cache_is_not_indexed() {
        let writer = SourceMapCacheWriter::new(
            "",
            r#"{"version":3,"sources":["a.js"],"names":[],"mappings":"AAAA"}"#,
        )
        .unwrap();
        let mut bytes = Vec::new();
        writer.serialize(&mut bytes).unwrap();
        assert!(LineIndex::new(&bytes).is_some());
        let mut other = bytes.clone();
        other[4] = 3; // version 3
        assert!(LineIndex::new(&other).is_none());
        assert!(LineIndex::new(&bytes[..bytes.len() - 1]).is_none());
        assert!(LineIndex::new(&bytes[..8]).is_none());
    }
}
