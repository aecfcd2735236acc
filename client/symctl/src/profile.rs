//! Named profiles from symctl's config file, so that a user of several clusters does not type
//! `--master`, `--token`, `--project` and `--tls-ca` each time (as sentry-cli's `.sentryclirc`
//! and kubectl's contexts do).
//!
//! The file is `$SYMCTL_CONFIG`, else `$XDG_CONFIG_HOME/symctl/config.toml`, else
//! `~/.config/symctl/config.toml` (TOML):
//!
//! ```toml
//! default_profile = "prod"          # optional: used when no --profile / SYMCTL_PROFILE
//!
//! [profiles.prod]
//! master = "https://m1.example:7700,https://m2.example:7700"
//! token_file = "~/.config/symctl/prod.token"   # the token, alone in a file (trimmed)
//! project = "ios-app"
//! tls_ca = "/etc/symcluster/ca.pem"
//! ```
//!
//! A profile only fills what is not given otherwise: a flag wins over a `SYMCLUSTER_*`
//! variable (an empty one counts as not given), which wins over the profile. Its values reach the commands as those variables
//! (`SYMCLUSTER_MASTER`, `SYMCLUSTER_TOKEN`, `SYMCLUSTER_PROJECT`, `SYMCLUSTER_TLS_CA`), set
//! before the command line is parsed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The config file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The profile used when none is named.
    pub default_profile: Option<String>,
    /// Profiles by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// One cluster as a user reaches it.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The masters' gRPC endpoints, comma-separated.
    pub master: Option<String>,
    /// A file holding the token (its surrounding whitespace trimmed); `~/` is the home dir.
    pub token_file: Option<PathBuf>,
    /// The project.
    pub project: Option<String>,
    /// PEM CA certificate(s) of `https://` masters; `~/` is the home dir.
    pub tls_ca: Option<PathBuf>,
}

/// Where the config file is looked for.
pub fn config_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SYMCTL_CONFIG") {
        return Some(PathBuf::from(path));
    }
    if let Some(dir) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("symctl/config.toml"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config/symctl/config.toml"))
}

/// The profile named by `--profile NAME` in `args`, else `SYMCTL_PROFILE`.
fn named_profile(args: &[OsString]) -> Option<String> {
    let mut args = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--profile" {
            return args.next().map(|v| v.into_owned());
        }
        if let Some(name) = arg.strip_prefix("--profile=") {
            return Some(name.to_owned());
        }
    }
    std::env::var("SYMCTL_PROFILE")
        .ok()
        .filter(|p| !p.is_empty())
}

/// The variables the chosen profile gives, for those not set already: `(name, value)`.
/// Errors (a message for stderr): a named profile without a config file or not in it, a file
/// that does not parse, an unreadable token file. No profile named and no `default_profile`:
/// nothing.
pub fn variables(args: &[OsString]) -> Result<Vec<(&'static str, OsString)>, String> {
    let named = named_profile(args);
    let Some(path) = config_path() else {
        return match named {
            Some(name) => Err(format!(
                "profile {name:?}: no config file (set SYMCTL_CONFIG or HOME)"
            )),
            None => Ok(Vec::new()),
        };
    };
    let config = match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str::<Config>(&text)
            .map_err(|e| format!("{}: {}", path.display(), e.message()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && named.is_none() => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let by_default = named.is_none();
    let Some(name) = named.or_else(|| config.default_profile.clone()) else {
        return Ok(Vec::new());
    };
    let Some(profile) = config.profiles.get(&name) else {
        let known: Vec<&str> = config.profiles.keys().map(String::as_str).collect();
        return Err(format!(
            "{}: no profile {name:?} (profiles: {})",
            path.display(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    };
    let unset = |var: &str| std::env::var_os(var).is_none_or(|v| v.is_empty());
    let mut out = Vec::new();
    if let Some(master) = &profile.master
        && unset("SYMCLUSTER_MASTER")
    {
        out.push(("SYMCLUSTER_MASTER", OsString::from(master)));
    }
    // (Not read when `--token` is given: the flag wins anyway.)
    if let Some(file) = &profile.token_file
        && unset("SYMCLUSTER_TOKEN")
        && !has_flag(args, "--token")
    {
        let file = expand_home(file);
        match std::fs::read_to_string(&file) {
            Ok(token) => out.push(("SYMCLUSTER_TOKEN", OsString::from(token.trim()))),
            Err(e) => {
                let message = format!(
                    "profile {name:?}: cannot read its token file {}: {e}",
                    file.display()
                );
                // A profile asked for fails; the default one must not stop the commands that
                // need no token (`symbolicate`, `--help`): they go on, and one that needs a
                // token says it has none.
                if !by_default {
                    return Err(message);
                }
                eprintln!("symctl: warning: {message}");
            }
        }
    }
    if let Some(project) = &profile.project
        && unset("SYMCLUSTER_PROJECT")
    {
        out.push(("SYMCLUSTER_PROJECT", OsString::from(project)));
    }
    if let Some(ca) = &profile.tls_ca
        && unset("SYMCLUSTER_TLS_CA")
    {
        out.push(("SYMCLUSTER_TLS_CA", expand_home(ca).into_os_string()));
    }
    Ok(out)
}

/// Whether `flag` (`--flag` or `--flag=value`) is on the command line, before any `--`.
fn has_flag(args: &[OsString], flag: &str) -> bool {
    args.iter()
        .skip(1)
        .map(|a| a.to_string_lossy())
        .take_while(|a| a != "--")
        .any(|a| {
            a == flag
                || a.strip_prefix(flag)
                    .is_some_and(|rest| rest.starts_with('='))
        })
}

/// `~/x` → `$HOME/x`; other paths as they are.
fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_is_found_in_every_spelling() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            named_profile(&args(&["symctl", "--profile", "a", "status"])).as_deref(),
            Some("a")
        );
        assert_eq!(
            named_profile(&args(&["symctl", "status", "--profile=b"])).as_deref(),
            Some("b")
        );
        // After `--`, words are not flags.
        assert_eq!(
            named_profile(&args(&["symctl", "x", "--", "--profile", "c"])),
            std::env::var("SYMCTL_PROFILE")
                .ok()
                .filter(|p| !p.is_empty())
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err =
            toml::from_str::<Config>("[profiles.a]\nmaster = \"x\"\ntoken = \"t\"\n").unwrap_err();
        assert!(err.message().contains("unknown field `token`"), "{err}");
    }
}
