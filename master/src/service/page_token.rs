//! Page sizes and page tokens of the List calls, as Google's AIP-158 ("Pagination") describes
//! them: a token is opaque to callers, names the list it belongs to and the other fields of
//! the request that made it, and is refused (INVALID_ARGUMENT) with different ones.
//!
//! A token is the hex of a small JSON object: the list's name, the first 8 bytes of the
//! SHA-256 of the request's filter fields, and the index's cursor ([`crate::index::listing`]).
//! It is not signed: a forged token only moves where a page starts within what the caller may
//! read anyway.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::Status;

/// Longest page token accepted, characters.
pub const MAX_TOKEN_CHARS: usize = 4096;

#[derive(Serialize, serde::Deserialize)]
struct Token<C> {
    /// The list (`jobs`, `groups`, `missing`).
    l: String,
    /// Hex of the first 8 bytes of the SHA-256 of the request's filter fields.
    f: String,
    /// Where the next page starts.
    c: C,
}

fn filter_digest(filter: &str) -> String {
    hex::encode(&crate::auth::sha256(filter.as_bytes())[..8])
}

/// The page token that resumes `list` at `cursor` for a request whose filter fields are
/// `filter` (any string that differs when they differ).
pub fn encode<C: Serialize>(list: &str, filter: &str, cursor: &C) -> String {
    let token = Token {
        l: list.to_owned(),
        f: filter_digest(filter),
        c: cursor,
    };
    // A struct of strings and numbers always serializes.
    hex::encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// The cursor in `token` (`None` for an empty token: the first page). INVALID_ARGUMENT for a
/// token this API did not make, one of another list, or one made for other filter fields.
pub fn decode<C: DeserializeOwned>(
    token: &str,
    list: &str,
    filter: &str,
) -> Result<Option<C>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let invalid = || Status::invalid_argument("page_token is not a token this list gave");
    if token.len() > MAX_TOKEN_CHARS {
        return Err(invalid());
    }
    let bytes = hex::decode(token).map_err(|_| invalid())?;
    let token: Token<C> = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    if token.l != list {
        return Err(invalid());
    }
    if token.f != filter_digest(filter) {
        return Err(Status::invalid_argument(
            "page_token was made for a request with other fields; send the same fields with \
             every page",
        ));
    }
    Ok(Some(token.c))
}

/// The page size of a request: `page_size`, else the deprecated `limit`, else `default`; at
/// most `max` (a larger one is coerced, as AIP-158 says).
pub fn page_size(page_size: u32, limit: u32, default: usize, max: usize) -> usize {
    match (page_size, limit) {
        (0, 0) => default,
        (0, n) | (n, _) => (n as usize).min(max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn a_token_resumes_only_its_own_list_and_filter() {
        let token = encode("jobs", "state=2;project=a", &41u64);
        assert_eq!(
            decode::<u64>(&token, "jobs", "state=2;project=a").unwrap(),
            Some(41)
        );
        assert_eq!(decode::<u64>("", "jobs", "x").unwrap(), None);
        let other_filter = decode::<u64>(&token, "jobs", "state=0;project=a").unwrap_err();
        assert_eq!(other_filter.code(), Code::InvalidArgument);
        assert!(other_filter.message().contains("other fields"));
        for bad in [
            decode::<u64>(&token, "groups", "state=2;project=a"),
            decode::<u64>("zz", "jobs", ""),
            decode::<u64>(&hex::encode("{}"), "jobs", ""),
            decode::<u64>(&"0".repeat(MAX_TOKEN_CHARS + 2), "jobs", ""),
        ] {
            assert_eq!(bad.unwrap_err().code(), Code::InvalidArgument);
        }
    }

    #[test]
    fn page_size_prefers_page_size_then_limit_and_coerces_to_the_maximum() {
        assert_eq!(page_size(0, 0, 100, 1000), 100);
        assert_eq!(page_size(0, 7, 100, 1000), 7);
        assert_eq!(page_size(5, 7, 100, 1000), 5);
        assert_eq!(page_size(5000, 0, 100, 1000), 1000);
    }
}
