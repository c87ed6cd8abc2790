//! A TCP listener that hands out finished TLS connections.
//!
//! [`TlsIncoming::spawn`] moves the listener into an accept task. For each
//! connection it sets TCP_NODELAY (without it, small unary answers wait out
//! delayed ACKs, ~40 ms) and spawns the handshake in a task of its own, under
//! [`HANDSHAKE_TIMEOUT`]; at most [`MAX_HANDSHAKES`] run at once, beyond that
//! connections wait in the kernel's backlog. Finished connections go down a
//! channel to whoever serves them: tonic takes [`TlsIncoming`] as a stream,
//! axum as a [`Listener`]. A failed or stalled handshake costs its own task
//! only, and is counted and logged by [`HandshakeLog`].
//!
//! Shutdown needs nothing of its own: tonic and axum drop their incoming side
//! when told to stop, the accept task sees the channel close, and dropping the
//! listener closes the port.

use std::{
    convert::Infallible,
    fmt,
    io::{self, IoSlice},
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::serve::Listener;
use rustls::ServerConfig;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{mpsc, Semaphore},
};
use tokio_rustls::{server::TlsStream, TlsAcceptor};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How long a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once, per listener.
pub const MAX_HANDSHAKES: usize = 512;

/// At most one warning about failed handshakes per listener in this period;
/// every failure is logged at debug level.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A connection whose TLS handshake is done.
pub struct TlsConn {
    stream: TlsStream<TcpStream>,
    peer: SocketAddr,
    /// The client's certificate (DER), when it gave one (mutual TLS).
    peer_cert: Option<Arc<[u8]>>,
}

impl TlsConn {
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The client's certificate (DER), when it gave one.
    pub fn peer_cert(&self) -> Option<Arc<[u8]>> {
        self.peer_cert.clone()
    }
}

/// What a request knows of its TLS connection: its TCP addresses and the
/// client's certificate (DER), when it gave one. In the request's
/// extensions on both ports (gRPC: as tonic's connection info; HTTP: as
/// axum's `ConnectInfo<TlsConnectInfo>`), for certificate tenancy.
#[derive(Debug, Clone)]
pub struct TlsConnectInfo {
    pub tcp: Option<TcpConnectInfo>,
    pub peer_cert: Option<Arc<[u8]>>,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsIncoming>>
    for TlsConnectInfo
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsIncoming>) -> Self {
        TlsConnectInfo {
            tcp: None,
            peer_cert: stream.io().peer_cert(),
        }
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The TCP connection's information and the client's certificate.
impl Connected for TlsConn {
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> TlsConnectInfo {
        TlsConnectInfo {
            tcp: Some(self.stream.get_ref().0.connect_info()),
            peer_cert: self.peer_cert.clone(),
        }
    }
}

/// Finished TLS connections of one listener.
pub struct TlsIncoming {
    connections: mpsc::Receiver<TlsConn>,
    local_addr: SocketAddr,
}

impl TlsIncoming {
    /// Starts accepting on `listener` with `config`; must be called inside a
    /// tokio runtime.
    pub fn spawn(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        log: Arc<HandshakeLog>,
    ) -> io::Result<TlsIncoming> {
        let local_addr = listener.local_addr()?;
        let (tx, connections) = mpsc::channel(16);
        tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), tx, log));
        Ok(TlsIncoming {
            connections,
            local_addr,
        })
    }
}

async fn accept_loop(
    mut listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<TlsConn>,
    log: Arc<HandshakeLog>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let permit = tokio::select! {
            permit = handshakes.clone().acquire_owned() => {
                permit.expect("the handshake semaphore is never closed")
            }
            () = tx.closed() => return,
        };
        // axum's accept retries by itself: after connection errors at once,
        // after others (such as EMFILE) with a pause and an error logged.
        let (tcp, peer) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            () = tx.closed() => return,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::trace!(error = %e, "setting TCP_NODELAY");
        }
        let (acceptor, tx, log) = (acceptor.clone(), tx.clone(), log.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let peer_cert = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .map(|cert| Arc::<[u8]>::from(cert.as_ref()));
                    // Fails only once the server stopped serving: drop it.
                    let _ = tx
                        .send(TlsConn {
                            stream,
                            peer,
                            peer_cert,
                        })
                        .await;
                }
                Ok(Err(e)) => log.failed(peer, &e),
                Err(_) => log.failed(
                    peer,
                    &format_args!("no handshake within {}s", HANDSHAKE_TIMEOUT.as_secs()),
                ),
            }
        });
    }
}

impl tokio_stream::Stream for TlsIncoming {
    type Item = Result<TlsConn, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.connections.poll_recv(cx).map(|c| c.map(Ok))
    }
}

impl Listener for TlsIncoming {
    type Io = TlsConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TlsConn, SocketAddr) {
        match self.connections.recv().await {
            Some(conn) => {
                let peer = conn.peer;
                (conn, peer)
            }
            // The accept task is gone only once this side was dropped; never
            // reached, but an accept that cannot fail must not return.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }
}

/// Failed handshakes of one listener: counted for `/metrics`, each logged at
/// debug level, and a warning at most once a `WARN_EVERY` with how many
/// failed since the last one, so a port scan or a misconfigured client does
/// not flood the log.
pub struct HandshakeLog {
    listener: &'static str,
    failures: AtomicU64,
    /// When the last warning was logged, and the failure count then.
    last_warning: Mutex<Option<(Instant, u64)>>,
}

impl HandshakeLog {
    /// `listener`: `grpc` or `http`, as logged and as the metric's label.
    pub fn new(listener: &'static str) -> HandshakeLog {
        HandshakeLog {
            listener,
            failures: AtomicU64::new(0),
            last_warning: Mutex::new(None),
        }
    }

    pub fn listener(&self) -> &'static str {
        self.listener
    }

    /// Handshakes that failed or timed out so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn failed(&self, peer: SocketAddr, error: &dyn fmt::Display) {
        let total = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(listener = self.listener, %peer, %error, "tls handshake failed");
        let mut last = self
            .last_warning
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|(at, _)| at.elapsed() < WARN_EVERY) {
            return;
        }
        let since = total - last.map_or(0, |(_, count)| count);
        *last = Some((Instant::now(), total));
        drop(last);
        tracing::warn!(
            listener = self.listener,
            %peer,
            %error,
            failures_since_last_warning = since,
            "tls handshake failed (a plaintext client, an untrusted certificate?); the next minute's failures are logged at debug level only"
        );
    }
}
