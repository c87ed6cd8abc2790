//! Optional TLS on both listeners, with rustls and its ring provider.
//!
//! - [`ServerTls::load`] reads `--tls-cert`, `--tls-key` and, for mutual TLS,
//!   `--tls-client-ca` once at start-up and checks them (a certificate in the
//!   certificate file, a usable key in the key file, the key belonging to the
//!   certificate), so a server never starts half-configured. It yields one
//!   rustls configuration per listener, differing only in ALPN: `h2` for gRPC,
//!   `http/1.1` for HTTP.
//! - [`accept`]: a TCP listener turned into a stream of finished TLS
//!   connections. Handshakes run in their own tasks under a timeout, so a slow
//!   or hostile client never holds up the accept loop; tonic and axum are fed
//!   the finished connections and serve them as they serve plain TCP.
//! - The client side, for `tracedb get`/`search` and tests, is
//!   [`crate::cli::connect`]; it reads its files with the checks here.
//!
//! One TLS stack serves both listeners on purpose: tonic's own TLS feature
//! would cover gRPC only, and the HTTP listener would need a second
//! handshake policy, a second set of start-up errors and a second log format.

pub mod accept;

use std::{
    io,
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    sign::CertifiedKey,
    RootCertStore, ServerConfig,
};

pub use accept::{HandshakeLog, TlsConn, TlsConnectInfo, TlsIncoming, HANDSHAKE_TIMEOUT};

/// The ALPN protocol of the gRPC listener.
pub const ALPN_H2: &[u8] = b"h2";
/// The ALPN protocol of the HTTP listener.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The one crypto provider: ring (aws-lc-rs, rustls' default, needs cmake and
/// builds for minutes).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What is wrong with a TLS file. `option` names the setting the file came
/// from, as the user wrote it (`tls_cert`, `--tls-ca`, ...).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{option} {}: cannot read it: {source}", path.display())]
    Read {
        option: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{option} {}: broken PEM ({source}): give the file as written by openssl or your CA", path.display())]
    Pem {
        option: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{option} {}: no certificate in it: it must hold PEM certificates (-----BEGIN CERTIFICATE-----){hint}", path.display())]
    NoCertificate {
        option: &'static str,
        path: PathBuf,
        hint: &'static str,
    },
    #[error("{option} {}: no private key in it: it must hold one unencrypted PEM key: PKCS#8 (-----BEGIN PRIVATE KEY-----), PKCS#1 (-----BEGIN RSA PRIVATE KEY-----) or SEC1 (-----BEGIN EC PRIVATE KEY-----){hint}", path.display())]
    NoKey {
        option: &'static str,
        path: PathBuf,
        hint: &'static str,
    },
    #[error("{option} {}: not a usable certificate ({source})", path.display())]
    BadCertificate {
        option: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("{option} {}: the private key cannot be used ({source}): use an RSA (2048 bits or more), ECDSA P-256 or P-384, or Ed25519 key", path.display())]
    BadKey {
        option: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("{key_option} {} does not belong to the certificate in {cert_option} {}: give the key the certificate was issued for (the first certificate of the file is the server's)", key.display(), cert.display())]
    KeyMismatch {
        cert_option: &'static str,
        cert: PathBuf,
        key_option: &'static str,
        key: PathBuf,
    },
    #[error("setting up TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The server's TLS files.
#[derive(Debug, Clone, Copy)]
pub struct TlsFiles<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    /// Require client certificates signed by one of these CAs.
    pub client_ca: Option<&'a Path>,
}

/// The listeners' TLS configurations, checked and ready.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// ALPN `h2`.
    pub grpc: Arc<ServerConfig>,
    /// ALPN `http/1.1`.
    pub http: Arc<ServerConfig>,
    /// Whether clients must present a certificate.
    pub mutual: bool,
}

impl ServerTls {
    /// Reads and checks the files; the error lists every problem found.
    pub fn load(files: TlsFiles<'_>) -> Result<ServerTls, Vec<TlsError>> {
        let mut problems = Vec::new();
        let certs = read_certs("tls_cert", files.cert)
            .map_err(|e| problems.push(e))
            .ok();
        let key = read_key("tls_key", files.key)
            .map_err(|e| problems.push(e))
            .ok();
        let client_roots = files.client_ca.and_then(|ca| {
            read_roots("tls_client_ca", ca)
                .map_err(|e| problems.push(e))
                .ok()
        });
        let (Some(certs), Some(key)) = (certs, key) else {
            return Err(problems);
        };
        if let Err(e) = check_pair(
            ("tls_cert", files.cert, &certs),
            ("tls_key", files.key, &key),
        ) {
            problems.push(e);
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Self::build(certs, key, client_roots).map_err(|e| vec![e])
    }

    fn build(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        client_roots: Option<RootCertStore>,
    ) -> Result<ServerTls, TlsError> {
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let mutual = client_roots.is_some();
        let builder = match client_roots {
            Some(roots) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| rustls::Error::General(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let base = builder.with_single_cert(certs, key)?;
        let mut grpc = base.clone();
        grpc.alpn_protocols = vec![ALPN_H2.to_vec()];
        let mut http = base;
        http.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(ServerTls {
            grpc: Arc::new(grpc),
            http: Arc::new(http),
            mutual,
        })
    }
}

fn read_file(option: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        option,
        path: path.to_path_buf(),
        source,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every certificate of a PEM file, in order (the end-entity one first).
pub(crate) fn read_certs(
    option: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(option, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            option,
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        let hint = if contains(&pem, b"PRIVATE KEY-----") {
            "; it holds a private key: are the certificate and key files swapped?"
        } else {
            ""
        };
        return Err(TlsError::NoCertificate {
            option,
            path: path.to_path_buf(),
            hint,
        });
    }
    Ok(certs)
}

/// The first private key of a PEM file.
pub(crate) fn read_key(
    option: &'static str,
    path: &Path,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_file(option, path)?;
    let no_key = |hint| TlsError::NoKey {
        option,
        path: path.to_path_buf(),
        hint,
    };
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(key) => Ok(key),
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            Err(no_key(if contains(&pem, b"ENCRYPTED PRIVATE KEY-----") {
                "; this one is encrypted: write it out unencrypted with `openssl pkey -in KEY -out PLAIN_KEY` and keep that file readable by tracedb only"
            } else if contains(&pem, b"CERTIFICATE-----") {
                "; it holds a certificate: are the certificate and key files swapped?"
            } else {
                ""
            }))
        }
        Err(source) => Err(TlsError::Pem {
            option,
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The CAs of a PEM file, as trust anchors.
pub(crate) fn read_roots(option: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(option, path)? {
        roots.add(cert).map_err(|source| TlsError::BadCertificate {
            option,
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(roots)
}

/// Checks that `key` is usable and belongs to the first certificate of `certs`.
pub(crate) fn check_pair(
    (cert_option, cert_path, certs): (&'static str, &Path, &[CertificateDer<'static>]),
    (key_option, key_path, key): (&'static str, &Path, &PrivateKeyDer<'static>),
) -> Result<(), TlsError> {
    let signing_key = provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|source| TlsError::BadKey {
            option: key_option,
            path: key_path.to_path_buf(),
            source,
        })?;
    match CertifiedKey::new(certs.to_vec(), signing_key).keys_match() {
        // Unknown: the provider cannot tell (it can for every key ring loads).
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch {
            cert_option,
            cert: cert_path.to_path_buf(),
            key_option,
            key: key_path.to_path_buf(),
        }),
        Err(source) => Err(TlsError::BadCertificate {
            option: cert_option,
            path: cert_path.to_path_buf(),
            source,
        }),
    }
}
