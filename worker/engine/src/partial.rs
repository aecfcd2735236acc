//! SymCaches of part of a debug file: only the compilation units that given addresses fall in,
//! for a first answer before the whole file is converted.
//!
//! A production dSYM holds thousands of compilation units; a crash report's frames fall in a
//! few of them. [`SymCacheFile::for_addresses`] converts just those with the same converter as
//! [`SymCacheFile::from_object_file`], so every frame at the given addresses comes out as the
//! full SymCache would give it (names, files, lines, inlinees): symbolic's DWARF reader is run
//! over a `.debug_info` in which every other unit is blanked, and the symbol table is taken
//! whole.
//!
//! How the other units are blanked: each keeps its header (so units keep their offsets, and
//! references between the kept units still land), its abbreviation offset is pointed at one
//! added abbreviation (`DW_TAG_compile_unit`, no attributes, no children), and its root entry
//! uses it. A unit without `DW_AT_low_pc` or `DW_AT_ranges` is one the linker dropped, and
//! symbolic skips it (DWARF 5, §3.1.1 and §7.5.1; `symbolic-debuginfo`'s `DwarfUnit::from_unit`).
//! The blanked section is allocated zeroed and only headers are written into it: its untouched
//! pages take no memory.
//!
//! Which units are kept: those whose address ranges (`DW_AT_ranges`, or `DW_AT_low_pc` and
//! `DW_AT_high_pc`) hold one of the addresses; for an address in no unit's range, the unit of
//! the last range before it (whose last function's end decides whether the symbol before the
//! address answers); and every unit a kept unit refers into (`DW_FORM_ref_addr`, as LTO builds
//! use for inlined functions of other units), until no new one is found.
//!
//! What can differ from the full SymCache: symbolic drops a function range that an earlier
//! unit already covered (the same start and size); an earlier unit that was not kept cannot
//! drop it here. Compilers do not emit such duplicates; the tests found none in any fixture.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use symbolic_common::{ByteView, DebugId};
use symbolic_debuginfo::dwarf::gimli::{self, AttributeValue, EndianSlice, RunTimeEndian};
use symbolic_debuginfo::dwarf::{Dwarf, DwarfDebugSession, DwarfSection, Endian};
use symbolic_debuginfo::{Object, Symbol, SymbolMap};
use symbolic_symcache::SymCacheConverter;

use crate::symcache::{SymCacheError, SymCacheFile, convert_with};

/// The abbreviation table added after `.debug_abbrev`'s own: code 1, `DW_TAG_compile_unit`,
/// `DW_CHILDREN_no`, no attributes; then the table's end (DWARF 5, §7.5.3).
const BLANK_ABBREVIATION: [u8; 6] = [0x01, 0x11, 0x00, 0x00, 0x00, 0x00];

impl SymCacheFile {
    /// A SymCache of the object with `debug_id` inside `object_file` (a thin or fat Mach-O, or
    /// an ELF file, as bytes) holding the compilation units that `addresses` fall in, and the
    /// whole symbol table. `addresses` are relative to the image's load address, as
    /// [`SymCache::lookup`](symbolic_symcache::SymCache::lookup) takes them; a lookup of one of
    /// them gives what the full SymCache gives (the module's documentation says what can
    /// differ).
    ///
    /// Errors: [`SymCacheError::Malformed`] when the container or the DWARF of a kept unit does
    /// not parse (parser panics included), [`SymCacheError::WrongDebugId`] when no slice has
    /// that id.
    pub fn for_addresses(
        object_file: &[u8],
        debug_id: DebugId,
        addresses: &[u64],
    ) -> Result<Self, SymCacheError> {
        let bytes = convert_with(object_file, debug_id, |object| match object {
            Object::MachO(dwarf) => convert_part(object, dwarf, addresses),
            Object::Elf(dwarf) => convert_part(object, dwarf, addresses),
            other => Err(format!(
                "a partial SymCache reads Mach-O and ELF files, not {:?}",
                other.file_format()
            )),
        })?;
        Self::parse(ByteView::from_vec(bytes))
    }
}

/// The partial SymCache's bytes for `object`, whose DWARF `dwarf` reads.
fn convert_part<'d, D: Dwarf<'d>>(
    object: &Object<'d>,
    dwarf: &D,
    addresses: &[u64],
) -> Result<Vec<u8>, String> {
    let blanked = Blanked::new(dwarf, object.load_address(), addresses)?;
    let symbols = symbols_for(object, &blanked.kept_ranges, addresses);
    let session = DwarfDebugSession::parse(
        &blanked,
        SymbolMap::from(symbols.clone()),
        object.load_address() as i64,
        object.kind(),
    )
    .map_err(|e| e.to_string())?;
    let mut converter = SymCacheConverter::new();
    converter.set_arch(object.arch());
    converter.set_debug_id(object.debug_id());
    for function in session.functions() {
        converter.process_symbolic_function(&function.map_err(|e| e.to_string())?);
    }
    for symbol in &symbols {
        converter.process_symbolic_symbol(symbol);
    }
    let mut bytes = Vec::new();
    converter
        .serialize(&mut std::io::Cursor::new(&mut bytes))
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The symbols a lookup of `addresses` can meet, in the symbol table's order: those inside the
/// kept units' ranges (a function's name when one starts where it does, and a symbol that
/// starts inside a function), and for each address the symbols at the last symbol address at
/// or before it (the answer where no function is). An app's symbol table holds hundreds of
/// thousands; sorting and storing all of them took most of a first answer's time.
fn symbols_for<'d>(
    object: &Object<'d>,
    kept_ranges: &[(u64, u64)],
    addresses: &[u64],
) -> Vec<Symbol<'d>> {
    let mut all: Vec<u64> = object.symbols().map(|s| s.address).collect();
    all.sort_unstable();
    all.dedup();
    let before: BTreeSet<u64> = addresses
        .iter()
        .filter_map(|a| {
            all.partition_point(|s| s <= a)
                .checked_sub(1)
                .map(|i| all[i])
        })
        .collect();
    // By begin: the last range beginning at or before a symbol is the one that may hold it
    // (unit ranges do not overlap; where they do, a symbol in both is kept by either).
    let mut ranges = kept_ranges.to_vec();
    ranges.sort_unstable();
    let mut ends = Vec::with_capacity(ranges.len());
    let mut furthest = 0;
    for (_, end) in &ranges {
        furthest = furthest.max(*end);
        ends.push(furthest);
    }
    let in_kept = |address: u64| {
        ranges
            .partition_point(|(begin, _)| *begin <= address)
            .checked_sub(1)
            .is_some_and(|i| address < ends[i])
    };
    object
        .symbols()
        .filter(|s| before.contains(&s.address) || in_kept(s.address))
        .collect()
}

/// The object's DWARF with every unit but the kept ones blanked.
struct Blanked<'a, O> {
    object: &'a O,
    /// `.debug_info` and `.debug_abbrev` as rewritten; each is handed to symbolic once.
    debug_info: RefCell<Option<Vec<u8>>>,
    debug_abbrev: RefCell<Option<Vec<u8>>>,
    /// The kept units' address ranges, relative to the load address.
    kept_ranges: Vec<(u64, u64)>,
}

impl<'a, 'd, D: Dwarf<'d>> Blanked<'a, D> {
    /// `object`'s DWARF with only the units that hold one of `addresses` (relative to
    /// `load_address`) and those they refer into.
    fn new(object: &'a D, load_address: u64, addresses: &[u64]) -> Result<Self, String> {
        let sections: HashMap<&'static str, Cow<'d, [u8]>> = [
            "debug_abbrev",
            "debug_addr",
            "debug_info",
            "debug_line",
            "debug_line_str",
            "debug_ranges",
            "debug_rnglists",
            "debug_str",
            "debug_str_offsets",
        ]
        .into_iter()
        .filter_map(|name| object.section(name).map(|s| (name, s.data)))
        .collect();
        let endian = match object.endianity() {
            Endian::Little => RunTimeEndian::Little,
            Endian::Big => RunTimeEndian::Big,
        };
        let empty: &[u8] = &[];
        let dwarf = gimli::Dwarf::load(|id| {
            let name = id.name().trim_start_matches('.');
            let data = sections.get(name).map_or(empty, |d| d.as_ref());
            Ok::<_, gimli::Error>(EndianSlice::new(data, endian))
        })
        .map_err(|e| e.to_string())?;
        let wanted: Vec<u64> = addresses
            .iter()
            .map(|a| a.wrapping_add(load_address))
            .collect();

        let mut headers = Vec::new();
        let mut iter = dwarf.units();
        while let Some(header) = iter.next().map_err(|e| e.to_string())? {
            headers.push(header);
        }
        // Every unit's address ranges: `(begin, end, unit)`, by begin.
        let mut ranges = Vec::new();
        for (i, header) in headers.iter().enumerate() {
            // A unit with no entry at all (older toolchains write some): symbolic skips it.
            let unit = match dwarf.unit(*header) {
                Ok(unit) => unit,
                Err(gimli::Error::MissingUnitDie) => continue,
                Err(e) => return Err(e.to_string()),
            };
            let mut unit_ranges = dwarf.unit_ranges(&unit).map_err(|e| e.to_string())?;
            while let Some(range) = unit_ranges.next().map_err(|e| e.to_string())? {
                ranges.push((range.begin, range.end, i));
            }
        }
        ranges.sort_unstable();
        // For each address, the units whose ranges hold it, and the unit of the last range
        // that begins at or before it: when the address is past that range's end, the end of
        // that unit's last function there decides whether the symbol before the address
        // answers (the full SymCache marks function ends).
        let mut kept = BTreeSet::new();
        for a in &wanted {
            let before = ranges.partition_point(|(begin, _, _)| begin <= a);
            if let Some((_, _, unit)) = before.checked_sub(1).map(|i| ranges[i]) {
                kept.insert(unit);
            }
            kept.extend(
                ranges[..before]
                    .iter()
                    .filter(|(begin, end, _)| begin <= a && a < end)
                    .map(|(_, _, unit)| *unit),
            );
        }
        // The units kept units refer into, until none is new.
        let unit_at = |offset: usize| {
            headers
                .partition_point(|h| header_offset(h) <= offset)
                .checked_sub(1)
        };
        let mut to_scan: Vec<usize> = kept.iter().copied().collect();
        while let Some(i) = to_scan.pop() {
            let unit = dwarf.unit(headers[i]).map_err(|e| e.to_string())?;
            let mut entries = unit.entries();
            while let Some(entry) = entries.next_dfs().map_err(|e| e.to_string())? {
                for attr in entry.attrs() {
                    if let AttributeValue::DebugInfoRef(offset) = attr.value()
                        && let Some(j) = unit_at(offset.0)
                        && kept.insert(j)
                    {
                        to_scan.push(j);
                    }
                }
            }
        }

        let info = sections.get("debug_info").map_or(empty, |d| d.as_ref());
        let abbrev = sections.get("debug_abbrev").map_or(empty, |d| d.as_ref());
        let blank_table = abbrev.len() as u64;
        let mut debug_abbrev = Vec::with_capacity(abbrev.len() + BLANK_ABBREVIATION.len());
        debug_abbrev.extend_from_slice(abbrev);
        debug_abbrev.extend_from_slice(&BLANK_ABBREVIATION);
        // Zeroed (calloc): the pages no header is written to are never touched.
        let mut debug_info = vec![0u8; info.len()];
        for (i, header) in headers.iter().enumerate() {
            let start = header_offset(header);
            let end = start + header.length_including_self();
            if kept.contains(&i) {
                debug_info[start..end].copy_from_slice(&info[start..end]);
                continue;
            }
            let header_size = header.size_of_header();
            debug_info[start..start + header_size]
                .copy_from_slice(&info[start..start + header_size]);
            let encoding = header.encoding();
            let word = encoding.format.word_size() as usize;
            let length_field = if word == 8 { 12 } else { 4 };
            // Version (2 bytes); DWARF 5 then has the unit type and address size (1 each).
            let abbrev_at = start + length_field + 2 + if encoding.version >= 5 { 2 } else { 0 };
            let field = &mut debug_info[abbrev_at..abbrev_at + word];
            match (endian, word) {
                (RunTimeEndian::Little, 8) => field.copy_from_slice(&blank_table.to_le_bytes()),
                (RunTimeEndian::Big, 8) => field.copy_from_slice(&blank_table.to_be_bytes()),
                (RunTimeEndian::Little, _) => {
                    field.copy_from_slice(&(blank_table as u32).to_le_bytes())
                }
                (RunTimeEndian::Big, _) => {
                    field.copy_from_slice(&(blank_table as u32).to_be_bytes())
                }
            }
            // The root entry: abbreviation code 1.
            if start + header_size < end {
                debug_info[start + header_size] = 1;
            }
        }
        let kept_ranges = ranges
            .iter()
            .filter(|(_, _, unit)| kept.contains(unit))
            .map(|(begin, end, _)| {
                (
                    begin.wrapping_sub(load_address),
                    end.wrapping_sub(load_address),
                )
            })
            .collect();
        Ok(Blanked {
            object,
            kept_ranges,
            debug_info: RefCell::new(Some(debug_info)),
            debug_abbrev: RefCell::new(Some(debug_abbrev)),
        })
    }

    /// `Some` for the rewritten sections: the rewritten bytes the first time (symbolic loads
    /// each section once), nothing after (never the original, whose units are all there).
    fn rewritten(&self, name: &str) -> Option<Option<DwarfSection<'d>>> {
        let cell = match name {
            "debug_info" => &self.debug_info,
            "debug_abbrev" => &self.debug_abbrev,
            _ => return None,
        };
        let data = cell.borrow_mut().take();
        Some(data.and_then(|data| {
            let original = self.object.raw_section(name)?;
            Some(DwarfSection {
                data: Cow::Owned(data),
                ..original
            })
        }))
    }
}

/// A unit header's offset in `.debug_info`.
fn header_offset(header: &gimli::UnitHeader<EndianSlice<'_, RunTimeEndian>>) -> usize {
    header.offset().0
}

impl<'a, 'd, D: Dwarf<'d>> Dwarf<'d> for Blanked<'a, D> {
    fn endianity(&self) -> Endian {
        self.object.endianity()
    }

    fn raw_section(&self, name: &str) -> Option<DwarfSection<'d>> {
        self.rewritten(name)
            .unwrap_or_else(|| self.object.raw_section(name))
    }

    fn section(&self, name: &str) -> Option<DwarfSection<'d>> {
        self.rewritten(name)
            .unwrap_or_else(|| self.object.section(name))
    }

    fn has_section(&self, name: &str) -> bool {
        self.object.has_section(name)
    }
}
