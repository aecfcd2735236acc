//! Flag value parsers every binary shares: durations and sizes in human units, so that
//! operators write `--lease 30s` and `--disk-cache 10GiB` instead of raw milliseconds and bytes.
//!
//! Durations use humantime's syntax (`500ms`, `30s`, `5m`, `2h`, `7d`, combined as `1h30m`);
//! sizes use bytesize's (`900KB` = 900,000 bytes, `512MiB` = 536,870,912 bytes, `10GiB`; the
//! unit's case does not matter). Flags that took a raw number before keep taking one in their
//! old unit, and keep their environment variable (`SYMCLUSTER_LEASE_MS=30000` and
//! `SYMCLUSTER_LEASE_MS=30s` both work), so existing command lines and environments still do. A value that does not
//! parse is a usage error: clap prints the flag, the value and why, and exits with status 2.

use std::time::Duration;

/// A duration; `0` means none.
pub fn duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (write a number and a unit: 500ms, 30s, 5m, 2h, 7d)"))
}

/// A duration in milliseconds: a bare number is milliseconds (the flags' former `-ms`
/// spelling), anything else as [`duration`].
pub fn millis(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(ms) => Ok(ms),
        Err(_) => duration(s).map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64),
    }
}

/// A duration in whole seconds (rounded down): a bare number is seconds (the flags' former
/// `-secs` spelling), anything else as [`duration`].
pub fn secs(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(secs) => Ok(secs),
        Err(_) => duration(s).map(|d| d.as_secs()),
    }
}

/// A size in bytes: `10GiB`, `512MiB`, `900KB`, or a bare number of bytes.
pub fn bytes(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|e| format!("{e} (write a number and a unit: 900KB, 512MiB, 10GiB)"))
}

/// [`bytes`] as a `usize`.
pub fn bytes_usize(s: &str) -> Result<usize, String> {
    bytes(s).and_then(|b| usize::try_from(b).map_err(|_| format!("{b} bytes is too large")))
}

/// Parses the command line and environment as `C::parse()` does, after reading the
/// environment variables some flags were renamed from: for each `(flag, variable, old
/// variable)`, when `variable` is unset, `flag` is not on the command line and `old variable`
/// is set, its value is passed as `flag=value` (through the flag's own parser), with a
/// deprecation warning on stderr. So every service reads one variable per flag
/// (`SYMCLUSTER_METRICS_LISTEN`) and old environments keep working for a release.
pub fn parse_with_renamed_env<C: clap::Parser>(renamed: &[(&str, &str, &str)]) -> C {
    let args = with_renamed_env(std::env::args_os().collect(), renamed, |name| {
        std::env::var_os(name)
    });
    C::parse_from(args)
}

/// The arguments [`parse_with_renamed_env`] parses: `args` with a `flag=value` added for each
/// renamed variable in use (`env` reads the environment).
fn with_renamed_env(
    mut args: Vec<std::ffi::OsString>,
    renamed: &[(&str, &str, &str)],
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    for (flag, variable, old) in renamed {
        if env(variable).is_some() {
            continue;
        }
        let Some(value) = env(old) else {
            continue;
        };
        let prefix = format!("{flag}=");
        let given = args
            .iter()
            .filter_map(|a| a.to_str())
            .any(|a| a == *flag || a.starts_with(&prefix));
        if given {
            continue;
        }
        eprintln!(
            "warning: {old} is deprecated and will be ignored in a later release: set {variable}"
        );
        let mut arg = std::ffi::OsString::from(prefix);
        arg.push(value);
        args.push(arg);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_variable_is_read_when_the_new_one_and_the_flag_are_not_given() {
        let renamed = [("--metrics-listen", "NEW", "OLD")];
        let args = |list: &[&str]| -> Vec<std::ffi::OsString> {
            list.iter().map(std::ffi::OsString::from).collect()
        };
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            with_renamed_env(args(&["w"]), &renamed, env(&[("OLD", "0.0.0.0:1")])),
            args(&["w", "--metrics-listen=0.0.0.0:1"])
        );
        // The new variable, or the flag, wins.
        for (given, vars) in [
            (
                &["w"][..],
                &[("OLD", "0.0.0.0:1"), ("NEW", "0.0.0.0:2")][..],
            ),
            (
                &["w", "--metrics-listen", "0.0.0.0:3"][..],
                &[("OLD", "0.0.0.0:1")][..],
            ),
            (
                &["w", "--metrics-listen=0.0.0.0:3"][..],
                &[("OLD", "0.0.0.0:1")][..],
            ),
            (&["w"][..], &[][..]),
        ] {
            let vars: &'static [(&'static str, &'static str)] = vars;
            assert_eq!(
                with_renamed_env(args(given), &renamed, env(vars)),
                args(given)
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert!(duration("30").unwrap_err().contains("500ms, 30s"));
        assert!(duration("30 parsecs").is_err());
        assert_eq!(millis("30s"), Ok(30_000));
        assert_eq!(millis("30000"), Ok(30_000));
        assert_eq!(millis("250ms"), Ok(250));
        assert_eq!(secs("2m"), Ok(120));
        assert_eq!(secs("60"), Ok(60));
        assert!(millis("-5").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes("10GiB"), Ok(10 << 30));
        assert_eq!(bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(bytes("900KB"), Ok(900_000));
        assert_eq!(bytes("1024"), Ok(1024));
        assert_eq!(bytes("536870912B"), Ok(512 << 20));
        assert_eq!(bytes("2gib"), Ok(2 << 30));
        assert!(bytes("10XB").unwrap_err().contains("900KB, 512MiB"));
        assert!(bytes("lots").is_err());
        assert_eq!(bytes_usize("900KB"), Ok(900_000));
    }
}
