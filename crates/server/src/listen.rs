//! The two listeners, each plaintext or TLS as configured. Whether a
//! listener speaks TLS is decided once, in [`Incoming::grpc`] and
//! [`Incoming::http`]; each protocol's server then serves whichever kind of
//! connection it is given.

use std::{future::Future, io, net::SocketAddr, sync::Arc};

use rustls::ServerConfig;
use tokio::{net::TcpListener, task::JoinHandle};

use crate::{
    config::ConfigError,
    tls::{HandshakeLog, ServerTls, TlsConnectInfo, TlsFiles, TlsIncoming},
};

/// The two listeners, bound before [`crate::serve`] is called.
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: TcpListener,
}

impl Listeners {
    /// Binds `--grpc-addr` and `--http-addr`, saying which one failed.
    pub async fn bind(grpc: SocketAddr, http: SocketAddr) -> anyhow::Result<Listeners> {
        use anyhow::Context as _;
        Ok(Listeners {
            grpc: TcpListener::bind(grpc)
                .await
                .with_context(|| format!("binding the gRPC address {grpc} (--grpc-addr)"))?,
            http: TcpListener::bind(http)
                .await
                .with_context(|| format!("binding the HTTP address {http} (--http-addr)"))?,
        })
    }
}

/// TLS as configured: the checked configuration and each listener's
/// handshake log.
pub(crate) struct Tls {
    config: ServerTls,
    grpc_log: Arc<HandshakeLog>,
    http_log: Arc<HandshakeLog>,
}

impl Tls {
    /// `None` without `--tls-cert` and `--tls-key`; otherwise the files,
    /// checked, or every problem found with them.
    pub(crate) fn load(files: Option<TlsFiles<'_>>) -> Result<Option<Tls>, ConfigError> {
        let Some(files) = files else {
            return Ok(None);
        };
        let tls = ServerTls::load(files).map_err(|problems| {
            ConfigError::Invalid(problems.iter().map(ToString::to_string).collect())
        })?;
        let log = |listener| Arc::new(HandshakeLog::new(listener));
        Ok(Some(Tls {
            config: tls,
            grpc_log: log("grpc"),
            http_log: log("http"),
        }))
    }

    /// `off`, `on` or `mutual`, for the start-up log.
    pub(crate) fn mode(tls: Option<&Tls>) -> &'static str {
        match tls {
            None => "off",
            Some(tls) if tls.config.mutual => "mutual",
            Some(_) => "on",
        }
    }

    /// Both listeners' handshake logs (none without TLS), for `/metrics`.
    pub(crate) fn handshake_logs(tls: Option<&Tls>) -> Vec<Arc<HandshakeLog>> {
        tls.iter()
            .flat_map(|tls| [tls.grpc_log.clone(), tls.http_log.clone()])
            .collect()
    }
}

/// What a server accepts connections from.
pub(crate) enum Incoming {
    Tcp(TcpListener),
    Tls(TlsIncoming),
}

impl Incoming {
    /// The gRPC listener, handshaking TLS (ALPN `h2`) if configured.
    pub(crate) fn grpc(listener: TcpListener, tls: Option<&Tls>) -> io::Result<Incoming> {
        Incoming::new(listener, tls.map(|t| (&t.config.grpc, &t.grpc_log)))
    }

    /// The HTTP listener, handshaking TLS (ALPN `http/1.1`) if configured.
    pub(crate) fn http(listener: TcpListener, tls: Option<&Tls>) -> io::Result<Incoming> {
        Incoming::new(listener, tls.map(|t| (&t.config.http, &t.http_log)))
    }

    /// `listener` as it is, or with its TLS handshakes running in their own
    /// tasks (started here).
    fn new(
        listener: TcpListener,
        tls: Option<(&Arc<ServerConfig>, &Arc<HandshakeLog>)>,
    ) -> io::Result<Incoming> {
        Ok(match tls {
            None => Incoming::Tcp(listener),
            Some((config, log)) => {
                Incoming::Tls(TlsIncoming::spawn(listener, config.clone(), log.clone())?)
            }
        })
    }

    /// Serves `router` on these connections until `stop` resolves.
    pub(crate) fn serve_grpc(
        self,
        router: tonic::transport::server::Router,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<Result<(), tonic::transport::Error>> {
        match self {
            Incoming::Tcp(listener) => {
                // Without TCP_NODELAY, small unary answers wait out delayed ACKs
                // (~40 ms). TlsIncoming sets it too.
                let incoming =
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
                tokio::spawn(router.serve_with_incoming_shutdown(incoming, stop))
            }
            Incoming::Tls(incoming) => {
                tokio::spawn(router.serve_with_incoming_shutdown(incoming, stop))
            }
        }
    }

    /// Serves `router` on these connections until `stop` resolves.
    pub(crate) fn serve_http(
        self,
        router: axum::Router,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<io::Result<()>> {
        match self {
            Incoming::Tcp(listener) => {
                let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::trace!(error = %e, "setting TCP_NODELAY");
                    }
                });
                tokio::spawn(async move {
                    axum::serve(listener, router)
                        .with_graceful_shutdown(stop)
                        .await
                })
            }
            Incoming::Tls(incoming) => tokio::spawn(async move {
                // Each request knows its client's certificate.
                let service = router.into_make_service_with_connect_info::<TlsConnectInfo>();
                axum::serve(incoming, service)
                    .with_graceful_shutdown(stop)
                    .await
            }),
        }
    }
}
