//! Projects (tenants): every job, debug file, source map and crash group belongs to one.
//!
//! A project name is 1 to [`MAX_NAME_BYTES`] bytes of `a-z`, `0-9`, `.`, `_` and `-`, starting
//! with a letter or a digit, so that it is safe as a bucket key segment and never contains the
//! `/` that separates it from a job id in the master's index. Jobs submitted without a project
//! by a token that serves every project (`admin`, or a tokens-file entry without `projects`) go
//! to [`DEFAULT_PROJECT`]; a token of several projects must name one.

/// The project of jobs and files that name none.
pub const DEFAULT_PROJECT: &str = "default";

/// Longest project name, bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Checks a project name; `Err` holds a one-line reason naming it.
pub fn validate(name: &str) -> Result<(), String> {
    let well_formed = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if well_formed {
        Ok(())
    } else {
        Err(format!(
            "project {name:?} is not a valid name: 1 to {MAX_NAME_BYTES} bytes of a-z, 0-9, '.', \
             '_' and '-', starting with a letter or digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["default", "demo-ios", "a", "app.v2_x", "0abc"] {
            assert_eq!(validate(good), Ok(()), "{good}");
        }
        for bad in ["", "Demo", "a/b", "-a", ".a", "a b", &"x".repeat(65), "é"] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
        assert!(validate(&"x".repeat(64)).is_ok());
    }
}
