//! The kept compilation units: which units a lookup of the addresses needs, and a
//! `.debug_info` in which every other unit is blanked (the module above says how).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use symbolic_debuginfo::dwarf::gimli::{self, EndianSlice, RunTimeEndian};
use symbolic_debuginfo::dwarf::{Dwarf, DwarfSection, Endian};

/// The abbreviation table added after `.debug_abbrev`'s own: code 1, `DW_TAG_compile_unit`,
/// `DW_CHILDREN_no`, no attributes; then the table's end (DWARF 5, §7.5.3).
const BLANK_ABBREVIATION: [u8; 6] = [0x01, 0x11, 0x00, 0x00, 0x00, 0x00];

/// The object's DWARF with every unit but the kept ones blanked.
pub(super) struct Blanked<'a, O> {
    object: &'a O,
    /// `.debug_info` and `.debug_abbrev` as rewritten; each is handed to symbolic once.
    debug_info: RefCell<Option<Vec<u8>>>,
    debug_abbrev: RefCell<Option<Vec<u8>>>,
    /// The kept functions' address ranges (a unit kept whole: the unit's), relative to the
    /// load address, sorted.
    pub(super) kept_ranges: Vec<(u64, u64)>,
}

impl<'a, 'd, D: Dwarf<'d>> Blanked<'a, D> {
    /// `object`'s DWARF with only the units and functions a lookup of `addresses` (relative to
    /// `load_address`) can meet, given the last symbol at or before each (`floors`, relative;
    /// [`super::symbol_floors`]), and those they refer into.
    pub(super) fn new(
        object: &'a D,
        load_address: u64,
        addresses: &[u64],
        floors: &[Option<u64>],
    ) -> Result<Self, String> {
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
        // Each address with the last symbol at or before it (absolute).
        let wanted: Vec<(u64, u64)> = addresses
            .iter()
            .zip(floors)
            .map(|(a, floor)| {
                let floor = floor.map_or(0, |f| f.wrapping_add(load_address));
                (a.wrapping_add(load_address), floor)
            })
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
        // For each address, the units whose ranges meet the span from the last symbol at or
        // before it to it: those holding it, and those whose functions' ends there may be
        // what answers an address no function holds (the full SymCache keys every function
        // end and symbol; the greatest key at or below the address answers; a function end
        // at the symbol itself is overwritten by it).
        let mut kept = BTreeSet::new();
        for &(a, floor) in &wanted {
            let before = ranges.partition_point(|&(begin, _, _)| begin <= a);
            kept.extend(
                ranges[..before]
                    .iter()
                    .filter(|&&(_, end, _)| end > floor)
                    .map(|&(_, _, unit)| unit),
            );
        }
        // Every kept unit read once, with the units they refer into (`functions::walk`).
        let walks =
            super::functions::walk(&dwarf, &headers, &mut kept).map_err(|e| e.to_string())?;

        let info = sections.get("debug_info").map_or(empty, |d| d.as_ref());
        let abbrev = sections.get("debug_abbrev").map_or(empty, |d| d.as_ref());
        let blank_table = abbrev.len() as u64;
        let mut debug_abbrev = Vec::with_capacity(abbrev.len() + BLANK_ABBREVIATION.len());
        debug_abbrev.extend_from_slice(abbrev);
        debug_abbrev.extend_from_slice(&BLANK_ABBREVIATION);
        let mut debug_info = zeroed(info.len());
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
            set_abbrev_offset(&mut debug_info, header, blank_table, endian);
            // The root entry: abbreviation code 1.
            if start + header_size < end {
                debug_info[start + header_size] = 1;
            }
        }
        // Inside the kept units, the functions no address falls in (`functions`); a unit that
        // does not read back as planned stays whole.
        let mut function_ranges: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
        let mut copies = HashMap::new();
        for plan in super::functions::plan(&walks, &wanted) {
            let header = &headers[plan.unit];
            if super::functions::apply(
                &plan,
                header,
                info,
                &mut debug_info,
                &mut debug_abbrev,
                &mut copies,
                endian,
            ) {
                function_ranges.insert(plan.unit, plan.kept_ranges);
            }
        }
        let whole_units: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|(_, _, unit)| kept.contains(unit) && !function_ranges.contains_key(unit))
            .map(|&(begin, end, _)| (begin, end))
            .collect();
        let mut kept_ranges: Vec<(u64, u64)> = whole_units
            .into_iter()
            .chain(function_ranges.into_values().flatten())
            .map(|(begin, end)| {
                (
                    begin.wrapping_sub(load_address),
                    end.wrapping_sub(load_address),
                )
            })
            .collect();
        kept_ranges.sort_unstable();
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
pub(super) fn header_offset(header: &gimli::UnitHeader<EndianSlice<'_, RunTimeEndian>>) -> usize {
    header.offset().0
}

/// Points the unit of `header`, in `debug_info`, at the abbreviation table at `table` in
/// `.debug_abbrev` (the header's `debug_abbrev_offset` field; DWARF 5, §7.5.1.1).
pub(super) fn set_abbrev_offset(
    debug_info: &mut [u8],
    header: &gimli::UnitHeader<EndianSlice<'_, RunTimeEndian>>,
    table: u64,
    endian: RunTimeEndian,
) {
    let start = header_offset(header);
    let encoding = header.encoding();
    let word = encoding.format.word_size() as usize;
    let length_field = if word == 8 { 12 } else { 4 };
    // Version (2 bytes); DWARF 5 then has the unit type and address size (1 each).
    let at = start + length_field + 2 + if encoding.version >= 5 { 2 } else { 0 };
    let field = &mut debug_info[at..at + word];
    match (endian, word) {
        (RunTimeEndian::Little, 8) => field.copy_from_slice(&table.to_le_bytes()),
        (RunTimeEndian::Big, 8) => field.copy_from_slice(&table.to_be_bytes()),
        (RunTimeEndian::Little, _) => field.copy_from_slice(&(table as u32).to_le_bytes()),
        (RunTimeEndian::Big, _) => field.copy_from_slice(&(table as u32).to_be_bytes()),
    }
}

/// `len` zero bytes whose pages are not touched until written: allocated zeroed (calloc), and
/// on Linux kept out of transparent huge pages, which would zero 2 MiB at every header written.
fn zeroed(len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let begin = (bytes.as_mut_ptr() as usize).next_multiple_of(PAGE);
        let end = (bytes.as_mut_ptr() as usize + len) / PAGE * PAGE;
        if end > begin {
            // SAFETY: the range lies inside `bytes`' allocation; the advice changes how its
            // pages are backed, not their contents.
            unsafe {
                libc::madvise(
                    begin as *mut libc::c_void,
                    end - begin,
                    libc::MADV_NOHUGEPAGE,
                );
            }
        }
    }
    bytes
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
