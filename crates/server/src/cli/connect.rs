//! The client side of TLS: gRPC channels to a TLS server, for `tracedb get`
//! and `tracedb search` (and the tests). The files are read and checked with
//! the server's own helpers in [`crate::tls`].
//!
//! The channel is tonic's, with a connector of ours that dials TCP and does
//! the handshake with tokio-rustls, so tonic's TLS feature (a second copy of
//! the same stack, configured differently) is not needed. Only the given CA is
//! trusted: the server's certificate must be signed by it and name the host
//! of the address (an IP address or a DNS name).

use std::{
    future::Future,
    io,
    path::Path,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper_util::rt::TokioIo;
use rustls::{pki_types::ServerName, ClientConfig};
use tokio::net::TcpStream;
use tokio_rustls::{client::TlsStream, TlsConnector};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::tls::{check_pair, provider, read_certs, read_key, read_roots, TlsError, ALPN_H2};

/// A client's TLS settings: the CA it trusts and, for servers that want one,
/// its own certificate.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
}

impl ClientTls {
    /// Trusts the CAs in `ca` (PEM); presents `identity` (PEM certificate
    /// chain, PEM key) if given. Errors name the options `--tls-ca`,
    /// `--tls-cert` and `--tls-key`.
    pub fn load(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientTls, TlsError> {
        Self::load_as(["--tls-ca", "--tls-cert", "--tls-key"], ca, identity)
    }

    /// [`ClientTls::load`] for options of other names (errors name `flags`:
    /// the CA, certificate and key options).
    pub fn load_as(
        flags: [&'static str; 3],
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Result<ClientTls, TlsError> {
        let [ca_flag, cert_flag, key_flag] = flags;
        let roots = read_roots(ca_flag, ca)?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert_path, key_path)) => {
                let certs = read_certs(cert_flag, cert_path)?;
                let key = read_key(key_flag, key_path)?;
                check_pair((cert_flag, cert_path, &certs), (key_flag, key_path, &key))?;
                builder.with_client_auth_cert(certs, key)?
            }
        };
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// The rustls configuration offering `alpn` (e.g. `http/1.1` for the
    /// HTTP port).
    pub fn config(&self, alpn: &[u8]) -> Arc<ClientConfig> {
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(config)
    }

    /// A gRPC channel to `uri` (`https://HOST:PORT`), connected.
    pub async fn channel(&self, uri: &str) -> Result<Channel, tonic::transport::Error> {
        Endpoint::from_shared(uri.to_string())?
            .connect_with_connector(self.connector())
            .await
    }

    /// A gRPC channel to `uri` that connects on first use, each attempt
    /// bounded by `timeout`. The server's certificate is checked against
    /// `name`, or against the URI's host when `name` is `None` (a node found
    /// by resolving a name is dialled by address but certified by name).
    pub fn lazy_channel(
        &self,
        uri: &str,
        name: Option<&str>,
        timeout: std::time::Duration,
    ) -> Result<Channel, tonic::transport::Error> {
        let mut connector = self.connector();
        connector.name = name.map(str::to_owned);
        Ok(Endpoint::from_shared(uri.to_string())?
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .connect_with_connector_lazy(connector))
    }

    fn connector(&self) -> Connector {
        Connector {
            tls: TlsConnector::from(self.config(ALPN_H2)),
            name: None,
        }
    }
}

/// Dials the URI's host and port and does the TLS handshake.
#[derive(Clone)]
struct Connector {
    tls: TlsConnector,
    /// The name to check the certificate against, if not the URI's host.
    name: Option<String>,
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let tls = self.tls.clone();
        let name = self.name.clone();
        Box::pin(async move {
            let invalid =
                |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: {what}"));
            let host = uri
                .host()
                .ok_or_else(|| invalid("no host"))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(443);
            let name = ServerName::try_from(name.unwrap_or_else(|| host.clone()))
                .map_err(|_| invalid("the host is neither an IP address nor a DNS name"))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tls.connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
