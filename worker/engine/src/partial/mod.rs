//! SymCaches of part of a debug file: only the functions that given addresses fall in, for a
//! first answer before the whole file is converted.
//!
//! A production dSYM holds thousands of compilation units and hundreds of thousands of
//! functions; a crash report's frames fall in a few. [`SymCacheFile::for_addresses`] converts
//! just those with the same converter as [`SymCacheFile::from_object_file`], so every frame at
//! the given addresses comes out as the full SymCache would give it (names, files, lines,
//! inlinees): symbolic's DWARF reader is run over a `.debug_info` in which every other unit
//! is blanked ([`units`]), and inside the kept units every other function ([`functions`]); the
//! symbols a lookup can meet are taken from the symbol table.
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
//! use for inlined functions of other units), until no new one is found. Which functions are
//! kept inside them: [`functions`].
//!
//! What can differ from the full SymCache: symbolic drops a function range that an earlier
//! function already covered (the same start and size); an earlier one that was not kept cannot
//! drop it here. Compilers do not emit such duplicates; the tests found none in any fixture.

mod functions;
#[cfg(test)]
mod tests;
mod units;

use std::collections::BTreeSet;

use symbolic_common::{ByteView, DebugId};
use symbolic_debuginfo::dwarf::{Dwarf, DwarfDebugSession};
use symbolic_debuginfo::{Object, Symbol, SymbolMap};
use symbolic_symcache::SymCacheConverter;

use crate::symcache::{SymCacheError, SymCacheFile, convert_with};
use units::Blanked;

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
    let floors = symbol_floors(object, addresses);
    let blanked = Blanked::new(dwarf, object.load_address(), addresses, &floors)?;
    let symbols = symbols_for(object, &blanked.kept_ranges, &floors);
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

/// For each of `addresses`, the address of the last symbol at or before it (`None` when no
/// symbol is): with the ends of the functions between it and the address, what answers a
/// lookup that no function holds (the SymCache writer keys every symbol and function end).
fn symbol_floors(object: &Object<'_>, addresses: &[u64]) -> Vec<Option<u64>> {
    let mut all: Vec<u64> = object.symbols().map(|s| s.address).collect();
    all.sort_unstable();
    all.dedup();
    addresses
        .iter()
        .map(|a| {
            all.partition_point(|s| s <= a)
                .checked_sub(1)
                .map(|i| all[i])
        })
        .collect()
}

/// The symbols a lookup of the addresses can meet, in the symbol table's order: those inside
/// the kept functions' ranges (or the kept units', for a unit kept whole; a function's name
/// when one starts where it does, and a symbol that starts inside a function), and the
/// addresses' `floors` ([`symbol_floors`]: the answer where no function is). An app's symbol
/// table holds hundreds of thousands; sorting and storing all of them took most of a first
/// answer's time.
fn symbols_for<'d>(
    object: &Object<'d>,
    kept_ranges: &[(u64, u64)],
    floors: &[Option<u64>],
) -> Vec<Symbol<'d>> {
    let before: BTreeSet<u64> = floors.iter().flatten().copied().collect();
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
