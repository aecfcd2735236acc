//! TLS to the masters (rustls, through tonic): which CA to trust, and the certificate to
//! present when the masters ask for one (mutual TLS, e.g. for workers).
//!
//! A master address `https://host:port` is reached over TLS (TLS 1.2/1.3, the server name
//! checked against `host`); `http://` stays plaintext. Without a CA, the Mozilla root
//! certificates (webpki-roots) are trusted, as for a master behind a public certificate.

use std::path::Path;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::ClientError;

/// TLS settings for connections to masters; the default trusts the public roots and presents
/// no certificate.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// PEM certificate(s) of the CA that signed the masters' certificates; `None`: the public
    /// roots.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM certificate chain and PEM private key to present (mutual TLS), when given.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// Reads the CA (`--tls-ca`) and, when both are given, the client certificate and key
    /// (`--tls-cert`, `--tls-key`). `Connect` naming the file when one cannot be read, or when
    /// only one of the certificate and the key is given.
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Self, ClientError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| ClientError::Connect {
                endpoint: String::new(),
                message: format!("cannot read {}: {e}", path.display()),
            })
        };
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            (None, None) => None,
            _ => {
                return Err(ClientError::Connect {
                    endpoint: String::new(),
                    message: "a client certificate needs both --tls-cert and --tls-key".into(),
                });
            }
        };
        Ok(Tls {
            ca_pem: ca.map(read).transpose()?,
            identity,
        })
    }

    /// `endpoint` (for `uri`) with these settings when `uri` is `https://`, unchanged
    /// otherwise. `Connect` when tonic refuses the configuration.
    pub fn apply(&self, endpoint: Endpoint, uri: &str) -> Result<Endpoint, ClientError> {
        if !uri.starts_with("https://") {
            return Ok(endpoint);
        }
        install_crypto_provider();
        let mut config = ClientTlsConfig::new();
        config = match &self.ca_pem {
            Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
            None => config.with_webpki_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        endpoint
            .tls_config(config)
            .map_err(|e| ClientError::Connect {
                endpoint: uri.to_owned(),
                message: format!("TLS configuration: {e}"),
            })
    }
}

/// Makes *ring* the process's rustls crypto provider, once, explicitly (tonic and the S3
/// client both use *ring*), so that a dependency that later enables aws-lc-rs too cannot make
/// rustls's automatic choice ambiguous, which panics at the first TLS configuration. Called
/// before any TLS configuration is built (here and by the master).
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only when a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
