//! Original source texts (a map's `sourcesContent`), kept beside a section's SourceMapCache for
//! context lines.
//!
//! symbolic-sourcemapcache 13.9 keeps the sources in its string table, and every lookup that
//! resolves a file checks that file's whole source text as UTF-8 again (`StringTable::read`),
//! so a lookup cost time in proportion to the size of the original file, context or not. A
//! section's cache is therefore built from its map without `sourcesContent`; the texts live here,
//! checked once when the map is prepared, with the byte offset of every line.
//!
//! Lines are split as symbolic-sourcemapcache splits them (`str::lines`: `\n` or `\r\n` end a
//! line; a text ending in `\n` has one more, empty, last line), so context lines are the same
//! as before the move.

use std::collections::HashMap;

/// The source texts of one section, by the file names its SourceMapCache reports.
///
/// A name the map lists twice with different texts (or once without) has no text here: a
/// lookup reports only the name, so it could not tell which text is meant, and no context is
/// better than another file's.
#[derive(Default)]
pub(crate) struct SourceTexts {
    /// Name → index in `texts`; `None` when the name has no text or an ambiguous one.
    by_name: HashMap<Box<str>, Option<usize>>,
    /// The same, by the file's index in the cache's file order.
    by_file: Vec<Option<usize>>,
    texts: Vec<SourceText>,
}

impl SourceTexts {
    /// `names`: the section's file names in the cache's file order (`SourceMapCache::files`);
    /// `contents`: `sourcesContent` in the map's `sources` order (the same order; missing
    /// entries count as `null`).
    pub(crate) fn new<'a>(
        names: impl Iterator<Item = Option<&'a str>>,
        contents: Vec<Option<String>>,
    ) -> Self {
        let names: Vec<Option<&str>> = names.collect();
        let mut out = SourceTexts::default();
        let mut contents = contents.into_iter();
        for &name in &names {
            let content = contents.next().flatten();
            let Some(name) = name else { continue };
            match out.by_name.get_mut(name) {
                Some(slot) => {
                    let same = match (*slot, &content) {
                        (Some(i), Some(c)) => *out.texts[i].text == **c,
                        (None, None) => true,
                        _ => false,
                    };
                    if !same {
                        *slot = None;
                    }
                }
                None => {
                    let index = content.and_then(SourceText::new).map(|text| {
                        out.texts.push(text);
                        out.texts.len() - 1
                    });
                    out.by_name.insert(name.into(), index);
                }
            }
        }
        out.by_file = names
            .iter()
            .map(|name| out.by_name.get(*name.as_ref()?).copied().flatten())
            .collect();
        out
    }

    /// The text of the file at `index` in the cache's file order (the order of `names` in
    /// [`SourceTexts::new`]), under the same rules as [`SourceTexts::get`].
    pub(crate) fn by_file(&self, index: usize) -> Option<&SourceText> {
        self.by_file
            .get(index)
            .copied()
            .flatten()
            .map(|i| &self.texts[i])
    }

    /// The text of file `name`, if the map carried exactly one.
    pub(crate) fn get(&self, name: &str) -> Option<&SourceText> {
        self.by_name
            .get(name)
            .copied()
            .flatten()
            .map(|i| &self.texts[i])
    }

    /// Bytes held (texts, line offsets and names), for cache weights.
    pub(crate) fn size_bytes(&self) -> usize {
        self.texts
            .iter()
            .map(|t| t.text.len() + 4 * t.line_starts.len())
            .sum::<usize>()
            + self.by_name.keys().map(|k| k.len() + 16).sum::<usize>()
            + 16 * self.by_file.len()
    }
}

/// One original source file and the byte offset at which each of its lines starts.
pub struct SourceText {
    text: Box<str>,
    line_starts: Vec<u32>,
}

impl SourceText {
    /// `None` for a text of 4 GiB or more (offsets are `u32`).
    fn new(text: String) -> Option<Self> {
        u32::try_from(text.len()).ok()?;
        let mut line_starts = Vec::new();
        if text.is_empty() {
            line_starts.push(0);
        } else {
            let base = text.as_ptr() as usize;
            line_starts.extend(text.lines().map(|l| (l.as_ptr() as usize - base) as u32));
            if text.ends_with('\n') {
                line_starts.push(text.len() as u32);
            }
        }
        Some(SourceText {
            text: text.into_boxed_str(),
            line_starts,
        })
    }

    /// Byte offset at which line `line` (0-based) starts; `None` past the last line.
    pub(crate) fn line_start(&self, line: usize) -> Option<usize> {
        self.line_starts.get(line).map(|&o| o as usize)
    }

    /// The byte at `offset` of the text (0 past its end).
    pub(crate) fn byte(&self, offset: usize) -> u8 {
        self.text.as_bytes().get(offset).copied().unwrap_or(0)
    }

    /// Line `line` (0-based) with its line ending removed; `None` past the last line.
    pub fn line(&self, line: usize) -> Option<&str> {
        let from = *self.line_starts.get(line)? as usize;
        let to = self
            .line_starts
            .get(line + 1)
            .map_or(self.text.len(), |&o| o as usize);
        self.text
            .get(from..to)
            .map(|l| l.trim_end_matches(['\n', '\r']))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<Option<String>> {
        let t = SourceText::new(text.to_owned()).unwrap();
        (0..4).map(|n| t.line(n).map(str::to_owned)).collect()
    }

    fn expect(want: [Option<&str>; 4]) -> Vec<Option<String>> {
        want.iter().map(|l| l.map(str::to_owned)).collect()
    }

    #[test]
    fn lines_split_as_the_cache_splits_them() {
        assert_eq!(lines(""), expect([Some(""), None, None, None]));
        assert_eq!(lines("a"), expect([Some("a"), None, None, None]));
        assert_eq!(lines("a\nb"), expect([Some("a"), Some("b"), None, None]));
        assert_eq!(
            lines("a\r\nb\n"),
            expect([Some("a"), Some("b"), Some(""), None])
        );
    }

    #[test]
    fn a_name_with_two_texts_or_none_has_no_text() {
        let texts = SourceTexts::new(
            [
                Some("a.js"),
                Some("b.js"),
                Some("a.js"),
                Some("c.js"),
                Some("c.js"),
                Some("d.js"),
                Some("d.js"),
            ]
            .into_iter(),
            vec![
                Some("one".into()),
                None,
                Some("two".into()),
                Some("same".into()),
                Some("same".into()),
                None,
                Some("late".into()),
            ],
        );
        assert!(texts.get("a.js").is_none());
        assert!(texts.get("b.js").is_none());
        assert_eq!(texts.get("c.js").and_then(|t| t.line(0)), Some("same"));
        assert!(texts.get("d.js").is_none());
        assert!(texts.get("e.js").is_none());
        let by_file: Vec<_> = (0..8)
            .map(|i| texts.by_file(i).and_then(|t| t.line(0)))
            .collect();
        let c = Some("same");
        assert_eq!(by_file, [None, None, None, c, c, None, None, None]);
    }
}
