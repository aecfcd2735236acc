//! Which member sent a Raft batch, when the masters speak mutual TLS (`--tls-client-ca`): the
//! sender's client certificate must be valid for the host of the address the group records
//! for the member the batch says it comes from (`RaftBatch.from`). A master's certificate
//! already names its own host, for the other masters to check it as a server, so a master of
//! the group can speak only for itself, and a stolen peer token without that member's key
//! cannot speak for any.
//!
//! The name check is RFC 6125's, as `rustls-webpki` does it for servers (DNS names with
//! wildcards, IP addresses); the certificate's chain was checked against the client CA by the
//! TLS handshake.

use rustls::pki_types::{CertificateDer, ServerName};
use tonic::Status;

use super::membership::Members;

/// Checks that `certs` (the client's chain, its own certificate first) names the host of
/// member `from`'s address. PERMISSION_DENIED when it does not, when the member's address
/// has no host, or when there is no certificate; the message names the member and host.
pub fn check(
    certs: Option<&[CertificateDer<'_>]>,
    members: &Members,
    from: u64,
) -> Result<(), Status> {
    let Some(address) = members.address(from) else {
        return Err(Status::permission_denied(format!(
            "member {from} is not in this group"
        )));
    };
    let Some(host) = host_of(&address) else {
        return Err(Status::permission_denied(format!(
            "member {from}'s address {address:?} has no host to check a certificate against"
        )));
    };
    let Some(cert) = certs.and_then(<[_]>::first) else {
        return Err(Status::permission_denied(format!(
            "a batch from member {from} needs its client certificate (mutual TLS)"
        )));
    };
    let valid = ServerName::try_from(host.as_str())
        .ok()
        .and_then(|name| {
            let cert = webpki::EndEntityCert::try_from(cert).ok()?;
            cert.verify_is_valid_for_subject_name(&name).ok()
        })
        .is_some();
    if valid {
        Ok(())
    } else {
        Err(Status::permission_denied(format!(
            "the client certificate is not valid for {host}, the host of member {from}: a \
             master speaks only for itself"
        )))
    }
}

/// The host of a member's address (`https://m1.example:7000` → `m1.example`, `[::1]:7000` →
/// `::1`); `None` when it has none.
fn host_of(address: &str) -> Option<String> {
    let uri: http::Uri = address.parse().ok()?;
    let host = uri.host()?;
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A self-signed certificate for `names` (DER).
    fn cert(names: &[&str]) -> CertificateDer<'static> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        rcgen::generate_simple_self_signed(names)
            .unwrap()
            .cert
            .der()
            .clone()
    }

    fn members() -> Members {
        Members::new(BTreeMap::from([
            (1, "https://m1.cluster.example:7000".to_owned()),
            (2, "https://127.0.0.2:7000".to_owned()),
            (3, "http://[::1]:7000".to_owned()),
        ]))
    }

    #[test]
    fn a_certificate_speaks_only_for_the_member_whose_host_it_names() {
        let members = members();
        let m1 = [cert(&["m1.cluster.example"])];
        let m2 = [cert(&["127.0.0.2"])];
        assert!(check(Some(&m1), &members, 1).is_ok());
        assert!(check(Some(&m2), &members, 2).is_ok());
        assert!(check(Some(&[cert(&["::1"])]), &members, 3).is_ok());
        assert!(check(Some(&[cert(&["*.cluster.example"])]), &members, 1).is_ok());
        for (certs, from) in [(&m1[..], 2), (&m2[..], 1), (&m2[..], 3)] {
            let refused = check(Some(certs), &members, from).unwrap_err();
            assert_eq!(refused.code(), tonic::Code::PermissionDenied);
            assert!(
                refused
                    .message()
                    .contains("a master speaks only for itself"),
                "{refused:?}"
            );
        }
        let no_cert = check(None, &members, 1).unwrap_err();
        assert!(no_cert.message().contains("needs its client certificate"));
        let stranger = check(Some(&m1), &members, 9).unwrap_err();
        assert_eq!(stranger.message(), "member 9 is not in this group");
    }

    #[test]
    fn the_host_of_an_address() {
        assert_eq!(
            host_of("https://m1.cluster.example:7000").as_deref(),
            Some("m1.cluster.example")
        );
        assert_eq!(host_of("http://[::1]:7000").as_deref(), Some("::1"));
        assert_eq!(host_of("127.0.0.1:7000").as_deref(), Some("127.0.0.1"));
        assert_eq!(host_of("not an address").as_deref(), None);
    }
}
