//! Upload tickets: what a master hands out with each presigned upload and checks when the upload
//! is confirmed, so that a confirm names only a key some master of this cluster presigned, for
//! the size, SHA-256 and multipart upload it presigned.
//!
//! A ticket is `<issued, ms since the Unix epoch>.<HMAC-SHA256, hex>` over the key, size,
//! SHA-256, upload id, the parts' SHA-256s and issue time (HMAC: RFC 2104, through `ring`). The HMAC key is derived
//! from the admin token (`--token`), which every master of a group shares, so that any master
//! (the leader after a failover) checks any master's ticket. A ticket is good for
//! [`TICKET_LIFETIME`]: long enough for a slow upload, short enough that an old one is useless.

use ring::hmac;
use sha2::{Digest, Sha256};

/// How long a ticket is accepted after it was issued (7 days, ms).
pub const TICKET_LIFETIME_MS: u64 = 7 * 24 * 3600 * 1000;

/// What a ticket binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticketed<'a> {
    /// The object key.
    pub key: &'a str,
    /// Bytes.
    pub size: u64,
    /// SHA-256 of the content.
    pub sha256: &'a [u8; 32],
    /// The multipart upload id; empty for a single PUT.
    pub upload_id: &'a str,
    /// SHA-256 of the parts' SHA-256s, concatenated in order ([`parts_digest`]); of nothing for
    /// a single PUT.
    pub parts: &'a [u8; 32],
}

/// SHA-256 of `part_sha256` concatenated in order: what a ticket binds of a multipart upload's
/// parts.
pub fn parts_digest(part_sha256: &[[u8; 32]]) -> [u8; 32] {
    let mut digest = Sha256::new();
    for part in part_sha256 {
        digest.update(part);
    }
    digest.finalize().into()
}

/// Issues and checks tickets.
#[derive(Clone)]
pub struct Tickets {
    key: hmac::Key,
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tickets")
    }
}

impl Tickets {
    /// Tickets keyed by `admin_token` (its SHA-256 under a domain label: the token itself is
    /// never the HMAC key).
    pub fn new(admin_token: &str) -> Self {
        let mut derived = Sha256::new();
        derived.update(b"symcluster upload tickets v1\0");
        derived.update(admin_token.as_bytes());
        Tickets {
            key: hmac::Key::new(hmac::HMAC_SHA256, &derived.finalize()),
        }
    }

    fn message(what: &Ticketed<'_>, issued_ms: u64) -> Vec<u8> {
        // Every field length-delimited: no two tickets' messages are the same bytes.
        let mut message = Vec::with_capacity(what.key.len() + what.upload_id.len() + 64);
        for field in [what.key.as_bytes(), what.upload_id.as_bytes()] {
            message.extend_from_slice(&(field.len() as u64).to_be_bytes());
            message.extend_from_slice(field);
        }
        message.extend_from_slice(&what.size.to_be_bytes());
        message.extend_from_slice(what.sha256);
        message.extend_from_slice(what.parts);
        message.extend_from_slice(&issued_ms.to_be_bytes());
        message
    }

    /// A ticket for `what`, issued at `now_ms`.
    pub fn issue(&self, what: &Ticketed<'_>, now_ms: u64) -> String {
        let tag = hmac::sign(&self.key, &Self::message(what, now_ms));
        format!("{now_ms}.{}", hex::encode(tag.as_ref()))
    }

    /// Whether `ticket` was issued by a master of this cluster for exactly `what`, and is not
    /// older than [`TICKET_LIFETIME_MS`] at `now_ms`. Errors: one line saying which.
    pub fn check(&self, ticket: &str, what: &Ticketed<'_>, now_ms: u64) -> Result<(), String> {
        let (issued, tag) = ticket
            .split_once('.')
            .ok_or_else(|| "the ticket is malformed".to_owned())?;
        let issued: u64 = issued
            .parse()
            .map_err(|_| "the ticket is malformed".to_owned())?;
        let tag = hex::decode(tag).map_err(|_| "the ticket is malformed".to_owned())?;
        // Constant-time comparison (ring's verify).
        hmac::verify(&self.key, &Self::message(what, issued), &tag).map_err(|_| {
            "no master of this cluster presigned this upload (the ticket does not match its key, \
             size, checksum or upload)"
                .to_owned()
        })?;
        if now_ms.saturating_sub(issued) > TICKET_LIFETIME_MS {
            return Err("the ticket has expired (prepare the upload again)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_holds_for_what_it_was_issued_and_nothing_else() {
        let tickets = Tickets::new("admin-secret");
        let digest = [1u8; 32];
        let no_parts = parts_digest(&[]);
        let what = Ticketed {
            key: "projects/a/4c/4c443b/debuginfo",
            size: 10,
            sha256: &digest,
            upload_id: "",
            parts: &no_parts,
        };
        let ticket = tickets.issue(&what, 1_000);
        assert_eq!(tickets.check(&ticket, &what, 2_000), Ok(()));
        // Another master of the same group checks it too.
        assert_eq!(
            Tickets::new("admin-secret").check(&ticket, &what, 2_000),
            Ok(())
        );
        let other_key = Ticketed {
            key: "projects/b/4c/4c443b/debuginfo",
            ..what
        };
        let other_size = Ticketed { size: 11, ..what };
        let other_digest = [2u8; 32];
        let other_sha = Ticketed {
            sha256: &other_digest,
            ..what
        };
        let other_upload = Ticketed {
            upload_id: "x",
            ..what
        };
        let some_parts = parts_digest(&[[3u8; 32]]);
        let other_parts = Ticketed {
            parts: &some_parts,
            ..what
        };
        for wrong in [other_key, other_size, other_sha, other_upload, other_parts] {
            assert!(
                tickets
                    .check(&ticket, &wrong, 2_000)
                    .unwrap_err()
                    .starts_with("no master of this cluster presigned")
            );
        }
        assert!(
            Tickets::new("another cluster")
                .check(&ticket, &what, 2_000)
                .is_err()
        );
        // A forged issue time does not verify.
        let forged = ticket.replacen("1000.", "999999.", 1);
        assert!(tickets.check(&forged, &what, 2_000).is_err());
        assert_eq!(
            tickets.check(&ticket, &what, 1_000 + TICKET_LIFETIME_MS + 1),
            Err("the ticket has expired (prepare the upload again)".into())
        );
        assert_eq!(
            tickets.check("nonsense", &what, 2_000),
            Err("the ticket is malformed".into())
        );
    }
}
