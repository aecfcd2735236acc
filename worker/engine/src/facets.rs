//! Where a report came from: the app's release and dist, the OS and the device, as a report
//! states them. The master counts a crash group's jobs by them (the group's breakdowns by
//! release, OS version and device model); the result carries them for whoever reads a job.
//!
//! The names are Sentry's (`release`, `dist`, and the `os` and `device` contexts,
//! <https://develop.sentry.dev/sdk/data-model/event-payloads/>), and so is the release's shape:
//! `package@version+build` (`com.example.DemoApp@1.0+1`), which orders releases by the semver
//! of `version` and then `build`.

use serde::{Deserialize, Serialize};

/// Longest value kept, in bytes (longer ones are cut at a character boundary): a report cannot
/// make a facet, and so a group's breakdown, as large as it likes.
pub const MAX_VALUE_BYTES: usize = 128;

/// A report's release, dist, OS and device; each `None` when the report does not say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportFacets {
    /// The app's release, `package@version+build` where the report gives those parts
    /// (`com.example.DemoApp@1.0+1`), else the release string it gives (Sentry events, JS jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The distribution within the release (Sentry's `dist`, a JS job's `dist`), e.g. `42`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist: Option<String>,
    /// The OS name and version, with its build when known: `iOS 15.0 (19A346)`,
    /// `macOS 10.14.0 (18A391)`, `Linux 6.1.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// The device model as the OS names it: `iPhone13,2`, `MacBookPro14,3`, `Pixel 7`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl ReportFacets {
    /// Whether the report said nothing of any of them.
    pub fn is_empty(&self) -> bool {
        self.release.is_none() && self.dist.is_none() && self.os.is_none() && self.device.is_none()
    }

    /// The facets with each value trimmed, emptied values dropped and long ones cut to
    /// [`MAX_VALUE_BYTES`].
    pub fn cleaned(self) -> Self {
        ReportFacets {
            release: clean(self.release),
            dist: clean(self.dist),
            os: clean(self.os),
            device: clean(self.device),
        }
    }
}

fn clean(value: Option<String>) -> Option<String> {
    let value = value?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    Some(value[..value.floor_char_boundary(MAX_VALUE_BYTES)].to_owned())
}

/// A release named Sentry's way, `package@version+build`, from a bundle identifier (or app
/// name), its version (`CFBundleShortVersionString`, `1.2.3`) and its build (`CFBundleVersion`,
/// `45`): `+build` is left out when the build is empty or equal to the version, `package@`
/// when there is no package; `None` without a version.
pub fn release(package: &str, version: &str, build: &str) -> Option<String> {
    let (package, version, build) = (package.trim(), version.trim(), build.trim());
    if version.is_empty() {
        return None;
    }
    let mut release = if package.is_empty() {
        version.to_owned()
    } else {
        format!("{package}@{version}")
    };
    if !build.is_empty() && build != version {
        release.push('+');
        release.push_str(build);
    }
    Some(release)
}

/// A version as Apple writes it beside a build in parentheses, `1.2 (34)`, split into the
/// version and the build: `("1.2", "34")`; a version alone gives an empty build.
///
/// `build_first`: the text is `build (version)`, as iOS crash reports write their `Version:`
/// line (`Version: 1 (1.0)`; the `.ips` header of the same crash says `app_version 1.0`,
/// `build_version 1`); macOS reports, and the SDK, write `version (build)`.
pub fn split_apple_version(text: &str, build_first: bool) -> (&str, &str) {
    let text = text.trim();
    match text.strip_suffix(')').and_then(|t| t.split_once(" (")) {
        Some((a, b)) if build_first => (b.trim(), a.trim()),
        Some((a, b)) => (a.trim(), b.trim()),
        None => (text, ""),
    }
}

/// An OS name as reports spell it, in today's names: `iPhone OS 15.0 (19A346)` →
/// `iOS 15.0 (19A346)`, `Mac OS X 10.14.0 (18A391)` → `macOS 10.14.0 (18A391)`; other names
/// unchanged.
pub fn os_name(os: &str) -> String {
    let os = os.trim();
    for (old, new) in [
        ("iPhone OS", "iOS"),
        ("Mac OS X", "macOS"),
        ("OS X", "macOS"),
    ] {
        if let Some(rest) = os.strip_prefix(old) {
            return format!("{new}{rest}");
        }
    }
    os.to_owned()
}

/// The OS of a Sentry event's `os` context, from its `name`, `version` and `build`:
/// `iOS 15.0 (19A346)`; `None` when it has neither name nor version.
pub fn sentry_os(name: Option<&str>, version: Option<&str>, build: Option<&str>) -> Option<String> {
    let mut text = [name, version]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    if text.trim().is_empty() {
        return None;
    }
    if let Some(build) = build.filter(|b| !b.trim().is_empty()) {
        text.push_str(&format!(" ({build})"));
    }
    Some(os_name(&text))
}

/// Whether an OS name (as [`os_name`] gives it) or a device model is Apple's mobile family,
/// whose crash reports write `Version: build (version)`.
pub fn is_apple_mobile(os: &str, device: &str) -> bool {
    ["iOS", "iPadOS", "tvOS", "watchOS", "visionOS"]
        .iter()
        .any(|name| os.starts_with(name))
        || ["iPhone", "iPad", "iPod", "AppleTV", "Watch"]
            .iter()
            .any(|family| device.starts_with(family))
}

/// The facets of an Android build fingerprint, as a tombstone gives it
/// (`BRAND/PRODUCT/DEVICE:VERSION.RELEASE/ID/VERSION.INCREMENTAL:TYPE/TAGS`, Android's
/// `Build.FINGERPRINT`): the OS `Android RELEASE (ID)` and the device `BRAND DEVICE`
/// (`google/oriole/oriole:14/UQ1A.240105.004/…` → `Android 14 (UQ1A.240105.004)`,
/// `google oriole`). Nothing for a fingerprint of another shape. A tombstone names no release.
pub fn android_fingerprint(fingerprint: &str) -> ReportFacets {
    let parse = || {
        let (names, rest) = fingerprint.trim().split_once(':')?;
        let mut names = names.split('/');
        let (brand, _product, device) = (names.next()?, names.next()?, names.next()?);
        let mut build = rest.split('/');
        let (release, id) = (build.next()?, build.next()?);
        if [brand, device, release, id]
            .iter()
            .any(|part| part.trim().is_empty())
        {
            return None;
        }
        Some(ReportFacets {
            os: Some(format!("Android {release} ({id})")),
            device: Some(format!("{brand} {device}")),
            ..ReportFacets::default()
        })
    };
    parse().unwrap_or_default().cleaned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_named_the_sentry_way() {
        assert_eq!(
            release("com.example.DemoApp", "1.0", "1").as_deref(),
            Some("com.example.DemoApp@1.0+1")
        );
        assert_eq!(release("app", "2.1", "2.1").as_deref(), Some("app@2.1"));
        assert_eq!(release("", "4.21.1", "").as_deref(), Some("4.21.1"));
        assert_eq!(release("app", " ", "7"), None);
    }

    #[test]
    fn apple_versions_split_in_the_order_the_report_writes() {
        assert_eq!(split_apple_version("1 (1.0)", true), ("1.0", "1"));
        assert_eq!(split_apple_version("1.2 (34)", false), ("1.2", "34"));
        assert_eq!(split_apple_version("512", true), ("512", ""));
    }

    #[test]
    fn old_os_names_read_as_todays() {
        assert_eq!(os_name("iPhone OS 15.0 (19A346)"), "iOS 15.0 (19A346)");
        assert_eq!(os_name("Mac OS X 10.8.5 (12F45)"), "macOS 10.8.5 (12F45)");
        assert_eq!(os_name("Linux 6.1.0"), "Linux 6.1.0");
        assert!(is_apple_mobile("iOS 15.0", ""));
        assert!(is_apple_mobile("", "iPhone13,2"));
        assert!(!is_apple_mobile("macOS 10.14.0", "MacBookPro14,3"));
    }

    #[test]
    fn android_fingerprints_name_the_os_and_device() {
        let facets = android_fingerprint(
            "google/oriole/oriole:14/UQ1A.240105.004/11206848:user/release-keys",
        );
        assert_eq!(facets.os.as_deref(), Some("Android 14 (UQ1A.240105.004)"));
        assert_eq!(facets.device.as_deref(), Some("google oriole"));
        assert_eq!(android_fingerprint("unknown"), ReportFacets::default());
    }

    #[test]
    fn values_are_trimmed_and_bounded() {
        let facets = ReportFacets {
            release: Some(format!("  {}", "é".repeat(100))),
            dist: Some("   ".into()),
            os: None,
            device: Some("iPhone13,2".into()),
        }
        .cleaned();
        let release = facets.release.unwrap();
        assert!(release.len() <= MAX_VALUE_BYTES && release.len() >= MAX_VALUE_BYTES - 1);
        assert!(release.chars().all(|c| c == 'é'));
        assert_eq!(facets.dist, None);
        assert_eq!(facets.device.as_deref(), Some("iPhone13,2"));
    }
}
