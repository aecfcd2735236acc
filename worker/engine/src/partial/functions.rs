//! The kept functions: inside a kept unit, every function that no address falls in is blanked
//! too, so that symbolic reads only the functions a lookup can meet.
//!
//! A compilation unit of a production binary holds thousands of functions; a report's frames
//! fall in a few. Which are kept: every `DW_TAG_subprogram` whose address ranges hold one of the
//! addresses; for each address, the function whose range is the last to begin at or before it
//! (where no function holds an address, the end of that one decides whether the symbol before it
//! answers); and the function around every entry that a kept entry names by
//! `DW_AT_abstract_origin` or `DW_AT_specification` (what symbolic follows for names and
//! languages), until none is new. A function is blanked whole, with its children (parameters,
//! lexical blocks, inlinees, types declared inside); one that holds a kept function is kept.
//!
//! How a function is blanked: its first bytes become one entry of an abbreviation added to the
//! unit's table (a copy of the table with the added code; the unit header points at the copy):
//! `DW_TAG_lo_user`, no children, one `DW_FORM_block4` attribute whose length covers the rest
//! of the function's entries, up to and with the null entry that ends its children (DWARF 5,
//! §7.5.3, §7.5.5). Every other entry keeps its offset, so references still land. The unit is
//! read again afterwards: when a filler is not followed by the entry that followed the function,
//! at its depth (a producer's padding, say), the unit is put back whole.
//!
//! The units are read once here, with gimli's raw entry reader (attributes are decoded only for
//! functions and for entries that refer to others); the `DW_FORM_ref_addr` references found
//! bring the units they point into ([`walk`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use symbolic_debuginfo::dwarf::gimli::{
    self, AttributeValue, EndianSlice, Reader, RunTimeEndian, UnitHeader,
};

use super::units::header_offset;

type Slice<'a> = EndianSlice<'a, RunTimeEndian>;

/// An added abbreviation's tag: `DW_TAG_lo_user`, which no reader gives a meaning.
const FILLER_TAG: u64 = 0x4080;
/// Its one attribute: `DW_AT_lo_user`, of form `DW_FORM_block4` (a 4-byte length, then bytes).
const FILLER_ATTRIBUTE: u64 = 0x2000;
const DW_FORM_BLOCK4: u64 = 0x04;
const DW_FORM_IMPLICIT_CONST: u64 = 0x21;

/// A `DW_TAG_subprogram` with address ranges, in a kept unit.
struct Function {
    /// Offset in `.debug_info`.
    offset: usize,
    /// Depth in the unit's tree (the root's children are at 1).
    depth: isize,
    /// The innermost function (with ranges) around it, by index.
    parent: Option<usize>,
    /// The entry after its subtree: offset and depth; `None` when no entry follows it in
    /// the unit.
    next: Option<(usize, isize)>,
}

impl Function {
    /// Where its subtree ends: before the null entries that close the levels between it and
    /// the next entry, or, when none follows, the unit's end (at `unit_end`) less the null
    /// entries that close its parents' levels (a unit read back otherwise is put back whole).
    fn end(&self, unit_end: usize) -> usize {
        // Saturating: depths from malformed DWARF give a range `apply` refuses, not a panic.
        let closed = |to: isize| usize::try_from(self.depth - to).unwrap_or(0);
        match self.next {
            Some((offset, depth)) => offset.saturating_sub(closed(depth)),
            None => unit_end.saturating_sub(closed(0)),
        }
    }
}

/// What one read of a kept unit found.
pub(super) struct UnitWalk {
    /// The unit (its index in the unit headers).
    unit: usize,
    /// Where the unit ends in `.debug_info`.
    end: usize,
    functions: Vec<Function>,
    /// Function address ranges `[begin, end)` (absolute, as in the DWARF; those symbolic reads:
    /// begin above 0, not empty), with the function's index.
    ranges: Vec<(u64, u64, usize)>,
    /// `(entry, target)` `.debug_info` offsets of the `DW_AT_abstract_origin` and
    /// `DW_AT_specification` references, in entry order.
    refs: Vec<(usize, usize)>,
}

/// Reads every unit of `kept` and of the units they refer into (`DW_FORM_ref_addr`, as LTO
/// builds use for inlined functions of other units), adding those to `kept`.
pub(super) fn walk(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    headers: &[UnitHeader<Slice<'_>>],
    kept: &mut BTreeSet<usize>,
) -> Result<Vec<UnitWalk>, gimli::Error> {
    let unit_at = |offset: usize| {
        headers
            .partition_point(|h| header_offset(h) <= offset)
            .checked_sub(1)
    };
    let mut walks = Vec::new();
    let mut to_read: Vec<usize> = kept.iter().copied().collect();
    while let Some(i) = to_read.pop() {
        let unit = match dwarf.unit(headers[i]) {
            Ok(unit) => unit,
            Err(gimli::Error::MissingUnitDie) => continue,
            Err(e) => return Err(e),
        };
        let base = header_offset(&headers[i]);
        let end = base + headers[i].length_including_self();
        let (walk, other_units) = walk_unit(dwarf, &unit, i, base, end)?;
        for offset in other_units {
            if let Some(j) = unit_at(offset)
                && kept.insert(j)
            {
                to_read.push(j);
            }
        }
        walks.push(walk);
    }
    walks.sort_by_key(|w| w.unit);
    Ok(walks)
}

/// One read of `unit` (index `index`, from `base` to `end` in `.debug_info`), and the `.debug_info`
/// offsets its `DW_FORM_ref_addr` attributes point at.
fn walk_unit(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    index: usize,
    base: usize,
    end: usize,
) -> Result<(UnitWalk, Vec<usize>), gimli::Error> {
    let mut walk = UnitWalk {
        unit: index,
        end,
        functions: Vec::new(),
        ranges: Vec::new(),
        refs: Vec::new(),
    };
    let mut other_units = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut entries = unit.entries_raw(None)?;
    while !entries.is_empty() {
        let depth = entries.next_depth();
        let offset = base + entries.next_offset().0;
        let Some(abbrev) = entries.read_abbreviation()? else {
            continue;
        };
        while let Some(&f) = open.last() {
            if walk.functions[f].depth < depth {
                break;
            }
            walk.functions[f].next = Some((offset, depth));
            open.pop();
        }
        let subprogram = abbrev.tag() == gimli::DW_TAG_subprogram;
        let interesting = subprogram
            || abbrev.attributes().iter().any(|spec| {
                spec.form() == gimli::DW_FORM_ref_addr
                    || spec.name() == gimli::DW_AT_abstract_origin
                    || spec.name() == gimli::DW_AT_specification
            });
        if !interesting {
            entries.skip_attributes(abbrev.attributes())?;
            continue;
        }
        let (mut low, mut high, mut size, mut list) = (None, None, None, None);
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            let value = attr.value();
            if let AttributeValue::DebugInfoRef(target) = value {
                other_units.push(target.0);
            }
            match attr.name() {
                gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => match value {
                    AttributeValue::UnitRef(target) => walk.refs.push((offset, base + target.0)),
                    AttributeValue::DebugInfoRef(target) => walk.refs.push((offset, target.0)),
                    _ => {}
                },
                gimli::DW_AT_low_pc if subprogram => low = dwarf.attr_address(unit, value)?,
                gimli::DW_AT_high_pc if subprogram => match value {
                    AttributeValue::Udata(n) => size = Some(n),
                    value => high = dwarf.attr_address(unit, value)?,
                },
                gimli::DW_AT_ranges if subprogram => list = dwarf.attr_ranges(unit, value)?,
                _ => {}
            }
        }
        if !subprogram {
            continue;
        }
        let f = walk.functions.len();
        let before = walk.ranges.len();
        let mut add = |begin: u64, end: u64| {
            if begin > 0 && begin < end {
                walk.ranges.push((begin, end, f));
            }
        };
        if let Some(mut list) = list {
            while let Some(range) = list.next()? {
                add(range.begin, range.end);
            }
        } else if let Some(begin) = low
            && let Some(end) = size.map(|n| begin.wrapping_add(n)).or(high)
        {
            add(begin, end);
        }
        if walk.ranges.len() == before {
            continue; // a declaration, an abstract instance: never blanked
        }
        walk.functions.push(Function {
            offset,
            depth,
            parent: open.last().copied(),
            next: None,
        });
        open.push(f);
    }
    Ok((walk, other_units))
}

/// What to blank in one kept unit.
pub(super) struct UnitPlan {
    /// The unit (its index in the unit headers).
    pub(super) unit: usize,
    /// The blanked functions, in order.
    blanked: Vec<Blank>,
    /// The address ranges of the functions kept (absolute).
    pub(super) kept_ranges: Vec<(u64, u64)>,
}

/// One blanked function.
struct Blank {
    /// Its `.debug_info` bytes `[start, end)`: its subtree and its children's null entry.
    start: usize,
    end: usize,
    /// Its depth.
    depth: isize,
    /// The entry that must follow it (offset, depth); `None`: none may.
    next: Option<(usize, isize)>,
}

/// The functions to blank in each walked unit for lookups of `wanted`: absolute addresses,
/// each with the last symbol at or before it (0: none).
pub(super) fn plan(walks: &[UnitWalk], wanted: &[(u64, u64)]) -> Vec<UnitPlan> {
    // Every function range, by begin: for each address, the functions whose ranges meet the
    // span from its symbol to it (those holding it, and those whose ends there may answer an
    // address no function holds: the SymCache keys every function end and symbol, and the
    // greatest key at or below an address answers), and the one whose range is the last to
    // begin at or before it.
    let mut ranges: Vec<(u64, u64, usize, usize)> = walks
        .iter()
        .enumerate()
        .flat_map(|(w, walk)| walk.ranges.iter().map(move |&(b, e, f)| (b, e, w, f)))
        .collect();
    ranges.sort_unstable();
    let mut holds: Vec<Vec<bool>> = walks
        .iter()
        .map(|w| vec![false; w.functions.len()])
        .collect();
    for &(a, floor) in wanted {
        let before = ranges.partition_point(|&(begin, ..)| begin <= a);
        if let Some(&(_, _, w, f)) = before.checked_sub(1).map(|i| &ranges[i]) {
            holds[w][f] = true;
        }
        for &(_, end, w, f) in &ranges[..before] {
            if end > floor {
                holds[w][f] = true;
            }
        }
    }
    // A function holding a kept one is kept (parents come before their children).
    for (w, walk) in walks.iter().enumerate() {
        for f in (0..walk.functions.len()).rev() {
            if holds[w][f]
                && let Some(p) = walk.functions[f].parent
            {
                holds[w][p] = true;
            }
        }
    }
    // The outermost functions that hold none: start -> (end, walk, function).
    let mut blanked: BTreeMap<usize, (usize, usize, usize)> = BTreeMap::new();
    for (w, walk) in walks.iter().enumerate() {
        let mut covered = vec![false; walk.functions.len()];
        for (f, function) in walk.functions.iter().enumerate() {
            let inside = function.parent.is_some_and(|p| covered[p]);
            covered[f] = inside;
            if !inside && !holds[w][f] {
                blanked.insert(function.offset, (function.end(walk.end), w, f));
                covered[f] = true;
            }
        }
    }
    // Entries named by kept entries bring their functions back, until none is new.
    let mut refs: Vec<(usize, usize)> = walks.iter().flat_map(|w| w.refs.iter().copied()).collect();
    refs.sort_unstable();
    let inside = |blanked: &BTreeMap<usize, (usize, usize, usize)>, offset: usize| {
        blanked
            .range(..=offset)
            .next_back()
            .filter(|(_, (end, ..))| offset < *end)
            .map(|(start, (end, ..))| (*start, *end))
    };
    let mut to_check: Vec<(usize, usize)> = refs
        .iter()
        .copied()
        .filter(|(source, _)| inside(&blanked, *source).is_none())
        .collect();
    while let Some((_, target)) = to_check.pop() {
        if let Some((start, end)) = inside(&blanked, target) {
            blanked.remove(&start);
            let from = refs.partition_point(|(source, _)| *source < start);
            let to = refs.partition_point(|(source, _)| *source < end);
            to_check.extend(&refs[from..to]);
        }
    }

    walks
        .iter()
        .enumerate()
        .map(|(w, walk)| {
            let mut plan = UnitPlan {
                unit: walk.unit,
                blanked: Vec::new(),
                kept_ranges: Vec::new(),
            };
            for (f, function) in walk.functions.iter().enumerate() {
                match inside(&blanked, function.offset) {
                    Some((start, end)) => {
                        if start == function.offset
                            && blanked.get(&start).is_some_and(|b| b.1 == w && b.2 == f)
                        {
                            plan.blanked.push(Blank {
                                start,
                                end,
                                depth: function.depth,
                                next: function.next,
                            });
                        }
                    }
                    None => {
                        // Ranges are in function order.
                        let from = walk.ranges.partition_point(|r| r.2 < f);
                        plan.kept_ranges.extend(
                            walk.ranges[from..]
                                .iter()
                                .take_while(|r| r.2 == f)
                                .map(|r| (r.0, r.1)),
                        );
                    }
                }
            }
            plan
        })
        .collect()
}

/// Writes `plan`'s fillers into `debug_info` (a copy of `.debug_info` with the unit whole, as
/// it is in `original`, the section it was copied from),
/// after adding the filler abbreviation to a copy of the unit's abbreviation table at the end
/// of `debug_abbrev` (one copy per original table, remembered in `copies`). Reads the unit back:
/// `false` (and the unit put back whole, from `original`) when it does not read as planned.
pub(super) fn apply(
    plan: &UnitPlan,
    header: &UnitHeader<Slice<'_>>,
    original_info: &[u8],
    debug_info: &mut [u8],
    debug_abbrev: &mut Vec<u8>,
    copies: &mut HashMap<usize, (usize, u64)>,
    endian: RunTimeEndian,
) -> bool {
    if plan.blanked.is_empty() {
        return true;
    }
    let original = header.debug_abbrev_offset().0;
    let (table, code) = match copies.get(&original) {
        Some(&copy) => copy,
        None => {
            let Some((end, max_code)) = table_end(debug_abbrev, original, endian) else {
                return false;
            };
            let copy = (debug_abbrev.len(), max_code + 1);
            debug_abbrev.extend_from_within(original..end);
            uleb(debug_abbrev, copy.1);
            uleb(debug_abbrev, FILLER_TAG);
            debug_abbrev.push(0); // DW_CHILDREN_no
            uleb(debug_abbrev, FILLER_ATTRIBUTE);
            uleb(debug_abbrev, DW_FORM_BLOCK4);
            debug_abbrev.extend_from_slice(&[0, 0, 0]); // the attributes' end, the table's end
            copies.insert(original, copy);
            copy
        }
    };
    let start = header_offset(header);
    let end = start + header.length_including_self();
    super::units::set_abbrev_offset(debug_info, header, table as u64, endian);
    let mut code_bytes = Vec::new();
    uleb(&mut code_bytes, code);
    for &Blank {
        start: from,
        end: to,
        ..
    } in &plan.blanked
    {
        let length = to
            .checked_sub(from)
            .and_then(|n| n.checked_sub(code_bytes.len() + 4))
            .and_then(|n| u32::try_from(n).ok());
        let Some(length) = length.filter(|_| start <= from && to <= end) else {
            debug_info[start..end].copy_from_slice(&original_info[start..end]);
            return false;
        };
        let at = from + code_bytes.len();
        debug_info[from..at].copy_from_slice(&code_bytes);
        debug_info[at..at + 4].copy_from_slice(&match endian {
            RunTimeEndian::Little => length.to_le_bytes(),
            RunTimeEndian::Big => length.to_be_bytes(),
        });
    }
    if reads_as(plan, code, start, debug_info, debug_abbrev, endian) {
        true
    } else {
        debug_info[start..end].copy_from_slice(&original_info[start..end]);
        false
    }
}

/// Whether the unit at `start` of `debug_info` reads as `plan` expects: every filler (code
/// `code`) where a blanked function was, at its depth, followed by the entry that followed it,
/// and the whole unit read without error.
fn reads_as(
    plan: &UnitPlan,
    code: u64,
    start: usize,
    debug_info: &[u8],
    debug_abbrev: &[u8],
    endian: RunTimeEndian,
) -> bool {
    let read = || -> Result<bool, gimli::Error> {
        let info = gimli::DebugInfo::new(debug_info, endian);
        let header = info.header_from_offset(gimli::DebugInfoOffset(start))?;
        let abbreviations = header.abbreviations(&gimli::DebugAbbrev::new(debug_abbrev, endian))?;
        let mut entries = header.entries_raw(&abbreviations, None)?;
        let mut fillers = plan.blanked.iter().peekable();
        // After a filler: the entry that must follow it (`Some(None)`: none may).
        let mut expected_next: Option<Option<(usize, isize)>> = None;
        while !entries.is_empty() {
            let depth = entries.next_depth();
            let offset = start + entries.next_offset().0;
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            if let Some(next) = expected_next.take()
                && next != Some((offset, depth))
            {
                return Ok(false);
            }
            if let Some(blank) = fillers.peek()
                && blank.start == offset
            {
                let next = blank.next;
                if abbrev.code() != code || depth != blank.depth {
                    return Ok(false);
                }
                expected_next = Some(next);
                fillers.next();
            } else if abbrev.code() == code {
                return Ok(false);
            }
            entries.skip_attributes(abbrev.attributes())?;
        }
        Ok(fillers.next().is_none() && expected_next.is_none_or(|next| next.is_none()))
    };
    read().unwrap_or(false)
}

/// The offset of the null code that ends the abbreviation table at `start`, and the table's
/// largest code (DWARF 5, §7.5.3). `None` when it does not parse.
fn table_end(abbrev: &[u8], start: usize, endian: RunTimeEndian) -> Option<(usize, u64)> {
    let mut input = EndianSlice::new(abbrev.get(start..)?, endian);
    let at = |input: &Slice<'_>| abbrev.len() - input.len();
    let mut max_code = 0;
    loop {
        let before = at(&input);
        let code = input.read_uleb128().ok()?;
        if code == 0 {
            return Some((before, max_code));
        }
        max_code = max_code.max(code);
        input.read_uleb128().ok()?; // tag
        input.read_u8().ok()?; // children
        loop {
            let name = input.read_uleb128().ok()?;
            let form = input.read_uleb128().ok()?;
            if form == DW_FORM_IMPLICIT_CONST {
                input.read_sleb128().ok()?;
            }
            if name == 0 && form == 0 {
                break;
            }
        }
    }
}

/// Appends `value` as ULEB128 (DWARF 5, §7.6).
fn uleb(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
