//! The tokens file (`--tokens-file`, TOML): named tokens, stored as SHA-256 hashes, one role
//! each.
//!
//! ```toml
//! [[tokens]]
//! name = "demo-ios-app"       # shown in logs, never the token
//! sha256 = "<64 hex digits: SHA-256 of the token>"
//! role = "device"             # device | ingest | upload | worker | admin | peer
//! projects = ["demo"]         # device, ingest and upload: the projects it serves (required);
//!                             # worker, admin and peer serve all projects and take none
//! rate = 20                   # optional: calls (and streamed jobs) per second, a float
//! burst = 100                 # optional: calls allowed at once (default: max(rate, 1))
//! bytes_per_second = 1048576  # optional: bytes of submitted jobs per second
//! ```
//!
//! A `device` token without `rate` or `bytes_per_second` gets the master's defaults
//! (`--device-rate`, `--device-bytes-per-second`; [`super::budget`]). Every device token also
//! counts against its projects' rate (`--device-project-rate`), shared by all the device
//! tokens of a project.
//!
//! A token is hashed with `printf %s "$TOKEN" | sha256sum` (SHA-256, FIPS 180-4, of the token's
//! bytes, no newline).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use super::budget::{ByteBudget, DeviceBudgets, ENVELOPE_BYTES};
use super::{Caller, Projects, RateLimit, Role};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    tokens: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    sha256: String,
    role: Role,
    #[serde(default)]
    projects: Option<Vec<String>>,
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    burst: Option<u32>,
    #[serde(default)]
    bytes_per_second: Option<u64>,
}

/// Reads and checks a tokens file: SHA-256 (32 bytes) → caller. Errors name the file and, for a
/// bad entry, its 1-based position and name: unreadable file, TOML syntax, unknown field or
/// role, a `sha256` that is not 64 hex digits, an empty or repeated name, a repeated hash, a
/// `rate` that is not a positive number or a `burst` of 0, a `bytes_per_second` of 0, a `device`,
/// `ingest` or `upload` token without
/// `projects` (or with an empty list, or an invalid project name), a `worker` or `admin` token
/// with `projects`.
/// Device tokens get `devices`' budgets where their entry gives none.
pub fn load(path: &Path, devices: &DeviceBudgets) -> Result<HashMap<[u8; 32], Caller>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the tokens file {}: {e}", path.display()))?;
    parse(&text, devices).map_err(|e| format!("tokens file {}: {e}", path.display()))
}

fn parse(text: &str, devices: &DeviceBudgets) -> Result<HashMap<[u8; 32], Caller>, String> {
    let file: TokensFile = toml::from_str(text).map_err(|e| e.message().to_owned())?;
    let mut table = HashMap::new();
    let mut names = std::collections::HashSet::new();
    // One rate per project, shared by all its device tokens.
    let mut project_limits: HashMap<String, (Arc<str>, RateLimit)> = HashMap::new();
    for (i, entry) in file.tokens.into_iter().enumerate() {
        let at = format!("token {} ({:?})", i + 1, entry.name);
        if entry.name.trim().is_empty() {
            return Err(format!("token {}: `name` is empty", i + 1));
        }
        if !names.insert(entry.name.clone()) {
            return Err(format!("{at}: the name is used twice"));
        }
        let mut hash = [0u8; 32];
        hex::decode_to_slice(entry.sha256.trim(), &mut hash)
            .map_err(|_| format!("{at}: `sha256` must be 64 hex digits"))?;
        let device = entry.role == Role::Device;
        let limit = match (entry.rate, entry.burst) {
            (None, None) if device => RateLimit::new(devices.rate, Some((devices.rate * 2.0).ceil() as u32)),
            (None, None) => None,
            (None, Some(_)) => return Err(format!("{at}: `burst` needs a `rate`")),
            (Some(rate), burst) => Some(
                RateLimit::new(rate, burst).ok_or_else(|| {
                    format!("{at}: `rate` must be a positive number of calls per second and `burst` at least 1")
                })?,
            ),
        };
        let max_report_bytes = device.then_some(devices.max_report_bytes);
        // The largest request the token may send fits its burst.
        let largest =
            max_report_bytes.unwrap_or(symcluster_proto::report::MAX_REPORT_BYTES) + ENVELOPE_BYTES;
        let bytes = match entry.bytes_per_second {
            Some(per_second) => Some(
                ByteBudget::new(per_second, largest)
                    .ok_or_else(|| format!("{at}: `bytes_per_second` must be at least 1"))?,
            ),
            None if device => ByteBudget::new(devices.bytes_per_second, largest),
            None => None,
        };
        let projects = match (entry.role, entry.projects) {
            (Role::Device | Role::Ingest | Role::Upload, None) => {
                return Err(format!(
                    "{at}: {} tokens need `projects` (the projects they serve)",
                    entry.role.as_str()
                ));
            }
            (Role::Device | Role::Ingest | Role::Upload, Some(list)) if list.is_empty() => {
                return Err(format!("{at}: `projects` is empty"));
            }
            (Role::Device | Role::Ingest | Role::Upload, Some(list)) => {
                for project in &list {
                    symcluster_proto::project::validate(project)
                        .map_err(|e| format!("{at}: {e}"))?;
                }
                Some(Projects::from(list))
            }
            (Role::Worker | Role::Admin | Role::Peer, Some(_)) => {
                return Err(format!(
                    "{at}: {} tokens serve every project; remove `projects`",
                    entry.role.as_str()
                ));
            }
            (Role::Worker | Role::Admin | Role::Peer, None) => None,
        };
        let shared: Vec<(Arc<str>, RateLimit)> = match (&projects, device) {
            (Some(list), true) => list
                .iter()
                .filter_map(|project| {
                    let limit = match project_limits.get(project) {
                        Some(shared) => shared.clone(),
                        None => {
                            let burst = (devices.project_rate * 2.0).ceil() as u32;
                            let limit = RateLimit::new(devices.project_rate, Some(burst))?;
                            let shared = (Arc::from(project.as_str()), limit);
                            project_limits.insert(project.clone(), shared.clone());
                            shared
                        }
                    };
                    Some(limit)
                })
                .collect(),
            _ => Vec::new(),
        };
        let caller = Caller {
            name: Arc::from(entry.name),
            role: entry.role,
            projects,
            limit,
            bytes,
            project_limits: shared.into(),
            max_report_bytes,
        };
        if table.insert(hash, caller).is_some() {
            return Err(format!("{at}: the same token hash is listed twice"));
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_default(text: &str) -> Result<HashMap<[u8; 32], Caller>, String> {
        parse(text, &DeviceBudgets::default())
    }
    use crate::auth::sha256;

    #[test]
    fn a_file_maps_hashes_to_named_roles() {
        let text = format!(
            "[[tokens]]\nname = \"app\"\nsha256 = \"{}\"\nrole = \"device\"\nprojects = [\"demo\"]\n\n\
             [[tokens]]\nname = \"w\"\nsha256 = \"{}\"\nrole = \"worker\"\n",
            hex::encode(sha256(b"device-secret")),
            hex::encode(sha256(b"worker-secret")).to_uppercase()
        );
        let table = parse_default(&text).unwrap();
        assert_eq!(table.len(), 2);
        let app = &table[&sha256(b"device-secret")];
        assert_eq!((&*app.name, app.role), ("app", Role::Device));
        assert!(app.serves("demo") && !app.serves("other"));
        let worker = &table[&sha256(b"worker-secret")];
        assert_eq!(worker.role, Role::Worker);
        assert!(worker.serves("demo") && worker.serves("other"));
        assert!(parse_default("").unwrap().is_empty());
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let entry = |name: &str, hash: &str, role: &str| {
            let projects = if matches!(role, "device" | "ingest") {
                "projects = [\"demo\"]\n"
            } else {
                ""
            };
            format!(
                "[[tokens]]\nname = \"{name}\"\nsha256 = \"{hash}\"\nrole = \"{role}\"\n{projects}"
            )
        };
        let good = hex::encode(sha256(b"t"));
        assert_eq!(
            parse_default(&entry("a", "abc", "device")).unwrap_err(),
            "token 1 (\"a\"): `sha256` must be 64 hex digits"
        );
        let err = parse_default(&entry("a", &good, "root")).unwrap_err();
        assert!(err.starts_with("unknown variant `root`"), "{err}");
        assert_eq!(
            parse_default(&(entry("a", &good, "admin") + entry("b", &good, "device").as_str()))
                .unwrap_err(),
            "token 2 (\"b\"): the same token hash is listed twice"
        );
        assert_eq!(
            parse_default(
                &(entry("a", &good, "admin")
                    + entry("a", &hex::encode(sha256(b"u")), "device").as_str())
            )
            .unwrap_err(),
            "token 2 (\"a\"): the name is used twice"
        );
        // A device token has budgets even when its entry gives none; an ingest token has none.
        let plain = parse_default(
            &(entry("d", &good, "device")
                + entry("i", &hex::encode(sha256(b"u")), "ingest").as_str()),
        )
        .unwrap();
        let device = &plain[&sha256(b"t")];
        assert_eq!(
            device.limit.as_ref().map(|l| (l.rate, l.burst)),
            Some((100.0, 200))
        );
        assert_eq!(
            device.bytes.as_ref().map(|b| (b.per_second, b.burst)),
            Some((16 << 20, 64 << 20))
        );
        assert_eq!(device.max_report_bytes, Some(2 << 20));
        let ingest = &plain[&sha256(b"u")];
        assert!(
            ingest.limit.is_none() && ingest.bytes.is_none() && ingest.max_report_bytes.is_none()
        );
        let own =
            parse_default(&(entry("d", &good, "device") + "bytes_per_second = 1000\n")).unwrap();
        assert_eq!(
            own[&sha256(b"t")]
                .bytes
                .as_ref()
                .map(|b| (b.per_second, b.burst)),
            Some((1000, (2 << 20) + (64 << 10)))
        );
        assert_eq!(
            parse_default(&(entry("d", &good, "device") + "bytes_per_second = 0\n")).unwrap_err(),
            "token 1 (\"d\"): `bytes_per_second` must be at least 1"
        );
        let limited = entry("a", &good, "device") + "rate = 0.5\nburst = 3\n";
        let table = parse_default(&limited).unwrap();
        assert_eq!(
            table[&sha256(b"t")]
                .limit
                .as_ref()
                .map(|l| (l.rate, l.burst)),
            Some((0.5, 3))
        );
        assert_eq!(
            parse_default(&(entry("a", &good, "device") + "rate = -1\n")).unwrap_err(),
            "token 1 (\"a\"): `rate` must be a positive number of calls per second and `burst` at least 1"
        );
        assert_eq!(
            parse_default(&(entry("a", &good, "device") + "burst = 2\n")).unwrap_err(),
            "token 1 (\"a\"): `burst` needs a `rate`"
        );
        let unscoped =
            format!("[[tokens]]\nname = \"a\"\nsha256 = \"{good}\"\nrole = \"ingest\"\n");
        assert_eq!(
            parse_default(&unscoped).unwrap_err(),
            "token 1 (\"a\"): ingest tokens need `projects` (the projects they serve)"
        );
        assert_eq!(
            parse_default(&(unscoped.clone() + "projects = []\n")).unwrap_err(),
            "token 1 (\"a\"): `projects` is empty"
        );
        let err = parse_default(&(unscoped + "projects = [\"Demo/x\"]\n")).unwrap_err();
        assert!(
            err.starts_with("token 1 (\"a\"): project \"Demo/x\" is not a valid name"),
            "{err}"
        );
        assert_eq!(
            parse_default(&(entry("w", &good, "worker") + "projects = [\"demo\"]\n")).unwrap_err(),
            "token 1 (\"w\"): worker tokens serve every project; remove `projects`"
        );
    }

    #[test]
    fn the_device_tokens_of_a_project_share_its_rate() {
        let device = |name: &str, project: &str| {
            format!(
                "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nrole = \"device\"\n\
                 projects = [\"{project}\"]\nrate = 1000\n",
                hex::encode(sha256(name.as_bytes()))
            )
        };
        let budgets = DeviceBudgets {
            project_rate: 0.001,
            ..DeviceBudgets::default()
        };
        let text = [
            device("ios", "demo"),
            device("tvos", "demo"),
            device("other", "else"),
        ]
        .concat();
        let table = parse(&text, &budgets).unwrap();
        let (ios, tvos) = (&table[&sha256(b"ios")], &table[&sha256(b"tvos")]);
        // A burst of 1 (twice 0.001, rounded up) for the two tokens of `demo` together.
        assert!(ios.take().is_ok());
        let refused = tvos.take().unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            refused.message(),
            "the device tokens of project \"demo\" are over their rate limit of 0.001 calls per \
             second (burst 1)"
        );
        assert!(ios.take().is_err());
        // Another project's device tokens have their own.
        assert!(table[&sha256(b"other")].take().is_ok());
    }
}
