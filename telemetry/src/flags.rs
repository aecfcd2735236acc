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

#[cfg(test)]
mod tests {
    use super::*;

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
