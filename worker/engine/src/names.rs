//! Function names: demangling Swift, C++, Objective-C and Rust symbols for display.
//!
//! Uses `symbolic-demangle` in the simplified style symbolicator uses (no return types,
//! parameters kept): `_TToFC11CrashLibiOS13CRLCrashSwift5crashfT_T_` →
//! `@objc CRLCrashSwift.crash()`, `_ZN3foo3barEi` → `foo::bar(int)`. Names that are not mangled
//! (`-[Foo bar]`, `main`) are returned as they are.

use std::borrow::Cow;

use symbolic_common::{Language, Name, NameMangling};
use symbolic_demangle::{Demangle, DemangleOptions};

/// The demangling style for `function` fields: no return type, with parameters.
pub const DISPLAY_STYLE: DemangleOptions = DemangleOptions::name_only().parameters(true);

/// Demangles `symbol` for display. A Mach-O symbol with the C-level leading underscore
/// (`__ZN…`, `__T…`, `_$s…`) is tried without it too.
pub fn demangle(symbol: &str, language: Language) -> String {
    if let Some(name) = try_demangle(symbol, language) {
        return name;
    }
    if let Some(stripped) = symbol.strip_prefix('_')
        && let Some(name) = try_demangle(stripped, language)
    {
        return name;
    }
    symbol.to_owned()
}

fn try_demangle(symbol: &str, language: Language) -> Option<String> {
    let name = Name::new(symbol, NameMangling::Unknown, language);
    match name.demangle(DISPLAY_STYLE) {
        Some(demangled) if demangled != symbol => Some(demangled),
        _ => {
            // A wrong language hint (e.g. a C unit calling into Swift) must not block demangling.
            if language == Language::Unknown {
                return None;
            }
            let name = Name::new(symbol, NameMangling::Unknown, Language::Unknown);
            name.demangle(DISPLAY_STYLE).filter(|d| d != symbol)
        }
    }
}

/// `Some(name)` unless the name is empty or symbolic's placeholder `?`.
pub fn known(name: &str) -> Option<Cow<'_, str>> {
    match name {
        "" | "?" => None,
        name => Some(Cow::Borrowed(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swift_mangling() {
        assert_eq!(
            demangle(
                "$s15iOSCrashingTest10CrashClassC06pleaseC0yyFZ",
                Language::Swift
            ),
            "static CrashClass.pleaseCrash()"
        );
        assert_eq!(
            demangle(
                "_$s15iOSCrashingTest10CrashClassC06pleaseC0yyFZ",
                Language::Unknown
            ),
            "static CrashClass.pleaseCrash()"
        );
    }

    /// symbolic-demangle 12.11+ vendors Swift 6's demangler, which dropped the pre-Swift-4 `_T`
    /// mangling (Swift 2/3, 2015-2017). Such names stay mangled rather than being guessed at.
    #[test]
    fn pre_swift4_mangling_stays_mangled() {
        let old = "_TToFC11CrashLibiOS13CRLCrashSwift5crashfT_T_";
        assert_eq!(demangle(old, Language::Unknown), old);
    }

    #[test]
    fn cpp_with_and_without_macho_underscore() {
        assert_eq!(demangle("_ZN3foo3barEi", Language::Cpp), "foo::bar(int)");
        assert_eq!(
            demangle("__ZN3foo3barEi", Language::Unknown),
            "foo::bar(int)"
        );
    }

    #[test]
    fn plain_names_stay() {
        assert_eq!(
            demangle("-[CRLCrashNULL crash]", Language::ObjC),
            "-[CRLCrashNULL crash]"
        );
        assert_eq!(demangle("main", Language::C), "main");
        assert_eq!(demangle("crash", Language::Swift), "crash");
    }
}
