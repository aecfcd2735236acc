//! Which functions a partial SymCache keeps, on the demo's dSYM: two units, `crash.c`
//! (`crash_write_null` at 0x4000..0x4020, then `process_order` at 0x4020..0x4070, which inlines
//! `validate_total`) and `checkout.cpp` (`demo::Checkout::run` at 0x4070..0x40b8, declared in
//! its class, then `main` at 0x40b8..0x4100, which inlines the constructors whose abstract
//! instances are declared in the class). Addresses are relative to `__TEXT` (0x1_0000_0000).

use symbolic_debuginfo::Object;

use super::units::Blanked;

/// The address ranges kept for a lookup of `addresses`: those of the kept functions when
/// the unit was blanked function by function, the unit's when it stayed whole.
fn kept(addresses: &[u64]) -> Vec<(u64, u64)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/ios-demo/DemoApp.dSYM/Contents/Resources/DWARF/DemoApp"
    );
    let bytes = std::fs::read(path).unwrap();
    let object = Object::parse(&bytes).unwrap();
    let Object::MachO(macho) = &object else {
        panic!("not a Mach-O file")
    };
    let floors = super::symbol_floors(&object, addresses);
    Blanked::new(macho, object.load_address(), addresses, &floors)
        .unwrap()
        .kept_ranges
}

#[test]
fn a_lookup_keeps_the_function_its_address_falls_in() {
    // The first function of a unit: the one after it is blanked, though it is the unit's last.
    assert_eq!(kept(&[0x4004]), [(0x4000, 0x4020)]);
    // The unit's last function, with an inlinee whose abstract instance is kept.
    assert_eq!(kept(&[0x4030]), [(0x4020, 0x4070)]);
    // A member function named through DW_AT_specification; `main` blanked.
    assert_eq!(kept(&[0x4074]), [(0x4070, 0x40b8)]);
    // `main`, whose inlinees name abstract instances in the class; `run` blanked.
    assert_eq!(kept(&[0x40c8]), [(0x40b8, 0x4100)]);
    // Both units at once, and two addresses in one function.
    assert_eq!(
        kept(&[0x4004, 0x40c8, 0x40cc]),
        [(0x4000, 0x4020), (0x40b8, 0x4100)]
    );
}

#[test]
fn an_address_past_every_function_keeps_the_last_one_before_it() {
    // Past `main`'s end: the end of the last function before the address decides.
    assert_eq!(kept(&[0x4200]), [(0x40b8, 0x4100)]);
}
