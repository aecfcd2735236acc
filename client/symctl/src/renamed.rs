//! Former flag spellings, still read for one release with a note on stderr: they are
//! rewritten to today's before the command line is parsed, so that help and completions show
//! one spelling per concept.

use std::ffi::OsString;

/// `(subcommand path, former flag, flag)`: `--format` of the reading commands became
/// `-o/--output`; `upload sourcemap --map` became `--sourcemap`, as `restore-js` spells it.
pub const RENAMED: &[(&[&str], &str, &str)] = &[
    (&["job"], "--format", "--output"),
    (&["groups"], "--format", "--output"),
    (&["missing"], "--format", "--output"),
    (&["upload", "sourcemap"], "--map", "--sourcemap"),
];

/// Flags of `symctl` itself that take a value (skipped while the subcommand path is read).
const GLOBAL_WITH_VALUE: &[&str] = &["--log-format", "--profile"];

/// Flags of `symctl` itself without a value, which may stand between subcommand words.
const GLOBAL_SWITCHES: &[&str] = &["-q", "--quiet"];

/// `args` with former spellings replaced, and a note per replaced flag (for stderr).
pub fn rewrite(args: Vec<OsString>) -> (Vec<OsString>, Vec<String>) {
    let path = subcommand_path(&args);
    let mut notes = Vec::new();
    let mut out = Vec::with_capacity(args.len());
    let mut rest_is_positional = false;
    for arg in args {
        let text = arg.to_string_lossy().into_owned();
        if rest_is_positional || out.is_empty() {
            out.push(arg);
            continue;
        }
        if text == "--" {
            rest_is_positional = true;
            out.push(arg);
            continue;
        }
        let renamed = RENAMED
            .iter()
            .filter(|(command, _, _)| {
                command.len() <= path.len() && command.iter().zip(&path).all(|(a, b)| a == b)
            })
            .find_map(|&(command, old, new)| {
                if text == old {
                    Some((command, old, new, new.to_owned()))
                } else {
                    text.strip_prefix(old)
                        .and_then(|v| v.strip_prefix('='))
                        .map(|value| (command, old, new, format!("{new}={value}")))
                }
            });
        match renamed {
            Some((command, old, new, replaced)) => {
                notes.push(format!(
                    "symctl: `{old}` of `symctl {}` is deprecated and goes in the next release: \
                     use `{new}`",
                    command.join(" ")
                ));
                out.push(OsString::from(replaced));
            }
            None => out.push(arg),
        }
    }
    (out, notes)
}

/// The subcommand words at the start of `args` (after the program name and symctl's own
/// flags): `symctl --profile p upload sourcemap --map m` → `["upload", "sourcemap"]`.
fn subcommand_path(args: &[OsString]) -> Vec<String> {
    let mut path = Vec::new();
    let mut args = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(arg) = args.next() {
        if GLOBAL_WITH_VALUE.contains(&arg.as_ref()) {
            args.next();
        } else if GLOBAL_SWITCHES.contains(&arg.as_ref())
            || GLOBAL_WITH_VALUE
                .iter()
                .any(|flag| arg.strip_prefix(flag).is_some_and(|v| v.starts_with('=')))
        {
            continue;
        } else if arg.starts_with('-') {
            if !path.is_empty() {
                break;
            }
        } else {
            path.push(arg.into_owned());
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> (Vec<String>, usize) {
        let (out, notes) = rewrite(args.iter().map(OsString::from).collect());
        (
            out.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            notes.len(),
        )
    }

    #[test]
    fn former_spellings_become_todays() {
        assert_eq!(
            run(&["symctl", "job", "--format", "text", "j1"]),
            (
                vec![
                    "symctl".into(),
                    "job".into(),
                    "--output".into(),
                    "text".into(),
                    "j1".into()
                ],
                1
            )
        );
        assert_eq!(
            run(&[
                "symctl",
                "--profile",
                "p",
                "upload",
                "sourcemap",
                "--map=m.map"
            ])
            .0[5],
            "--sourcemap=m.map"
        );
        // `--format` of the local commands is today's spelling (CONTRACT.md).
        assert_eq!(
            run(&["symctl", "symbolicate", "--format", "json", "r.crash"]).1,
            0
        );
        // Global flags between the subcommand's words.
        assert_eq!(
            run(&[
                "symctl",
                "upload",
                "-q",
                "--log-format=json",
                "sourcemap",
                "--map",
                "m"
            ])
            .1,
            1
        );
        // `upload dsym --map` is nobody's flag: left for clap to refuse.
        assert_eq!(run(&["symctl", "upload", "dsym", "--map", "x"]).1, 0);
        // A job id that happens to look like a flag after `--` stays.
        assert_eq!(run(&["symctl", "job", "--", "--format"]).1, 0);
    }
}
