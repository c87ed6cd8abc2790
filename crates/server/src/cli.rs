//! The command-line clients of the `tracedb` binary, apart from the server
//! they talk to.
//!
//! - [`get`] (`tracedb get`), [`search`] (`tracedb search`) and `metrics`
//!   (`tracedb metrics`, a TraceQL metrics query as a table): gRPC calls to
//!   `tracedb.query.v1.QueryService` at `ServerArgs::addr`, plaintext or,
//!   with `--tls-ca`, over TLS ([`connect`]), printed with [`render`] or as
//!   OTLP/JSON.
//! - [`render`]: a trace as a terminal waterfall, and a search's hits as a
//!   table.
//! - [`connect`]: the client side of TLS ([`ClientTls`]), with the server's
//!   certificate and key checks from [`crate::tls`].
//! - [`check`] (`tracedb check`): offline verification of a data directory.

pub mod check;
pub mod connect;
mod get;
mod metrics;
pub mod render;
mod search;
pub mod tenant;

use std::path::PathBuf;

use anyhow::Context;

pub use connect::ClientTls;
pub use get::{get, GetArgs};
pub use metrics::{metrics, MetricsArgs};
pub use search::{search, SearchArgs};

use crate::DEFAULT_GRPC_ADDR;

/// The object store of a data directory, for the offline commands that
/// reach it (`tracedb check`, `tracedb tenant delete`): as `serve` takes it.
#[derive(clap::Args, Debug, Default)]
pub struct ObjectStoreArgs {
    /// The data directory's object store (s3://BUCKET/PREFIX), as given to
    /// `serve` [default: none: remote files are not reached].
    #[arg(long, env = "TRACEDB_OBJECT_STORE", value_name = "URL")]
    pub object_store: Option<String>,
    /// The address of an S3-compatible server.
    #[arg(long, env = "TRACEDB_S3_ENDPOINT", value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// The bucket's region.
    #[arg(long, env = "TRACEDB_S3_REGION")]
    pub s3_region: Option<String>,
}

impl ObjectStoreArgs {
    /// The bucket, when one was given.
    pub fn bucket(&self) -> anyhow::Result<Option<tracedb_lsm::cold::Bucket>> {
        let Some(url) = &self.object_store else {
            return Ok(None);
        };
        let config = tracedb_lsm::cold::BucketConfig {
            url: url.clone(),
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
        };
        Ok(Some(tracedb_lsm::cold::Bucket::open(&config)?))
    }
}

/// Where `get` and `search` find the server, and how to talk to it.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// The server's gRPC address: HOST:PORT, or a URI (http://, https://).
    #[arg(long, default_value = DEFAULT_GRPC_ADDR)]
    addr: String,
    /// Connect with TLS, trusting the CA certificates in this PEM file (the
    /// server's --tls-cert must be signed by one of them and name the host of
    /// --addr) [default: none: plaintext].
    #[arg(long, value_name = "PATH")]
    tls_ca: Option<PathBuf>,
    /// This client's PEM certificate chain, for a server that asks for one
    /// (--tls-client-ca) [default: none].
    #[arg(long, value_name = "PATH", requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert [default: none].
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The tenant to read, for a server with tenancy ("a|b" reads several)
    /// [default: none].
    #[arg(long, value_name = "TENANT")]
    tenant: Option<String>,
    /// The header that names the tenant, as the server's --tenant-header.
    #[arg(long, value_name = "NAME", default_value = tracedb_proto::tenant::DEFAULT_HEADER_NAME, requires = "tenant")]
    tenant_header: String,
}

impl ServerArgs {
    /// `message` as a call naming `--tenant`, if given.
    fn request<T>(&self, message: T) -> anyhow::Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        if let Some(tenant) = &self.tenant {
            let tenants = tracedb_proto::tenant::Tenants::parse(tenant)
                .with_context(|| format!("--tenant {tenant:?}"))?;
            let key = tonic::metadata::AsciiMetadataKey::from_bytes(
                self.tenant_header.to_ascii_lowercase().as_bytes(),
            )
            .with_context(|| {
                format!(
                    "--tenant-header {:?} is not a header name",
                    self.tenant_header
                )
            })?;
            let value = tenants
                .to_string()
                .parse()
                .context("tenant IDs are ASCII")?;
            request.metadata_mut().insert(key, value);
        }
        Ok(request)
    }
}

type QueryClient =
    tracedb_proto::query::v1::query_service_client::QueryServiceClient<tonic::transport::Channel>;

/// A `QueryService` client connected to `server`, plaintext or TLS as its
/// flags say.
async fn query_client(server: &ServerArgs) -> anyhow::Result<QueryClient> {
    let addr = &server.addr;
    let Some(ca) = &server.tls_ca else {
        if addr.starts_with("https://") {
            anyhow::bail!(
                "--addr {addr} asks for TLS: give --tls-ca with the CA certificate that signed the server's"
            );
        }
        let uri = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        return QueryClient::connect(uri.clone())
            .await
            .with_context(|| format!("connecting to {uri}"));
    };
    let uri = match addr.split_once("://") {
        None => format!("https://{addr}"),
        Some(("https", _)) => addr.to_string(),
        Some(_) => anyhow::bail!(
            "--tls-ca connects with TLS, but --addr {addr} is not https://: leave the scheme out or say https://"
        ),
    };
    let identity = server.tls_cert.as_deref().zip(server.tls_key.as_deref());
    let tls = ClientTls::load(ca, identity)?;
    let channel = tls
        .channel(&uri)
        .await
        .with_context(|| format!("connecting to {uri}"))?;
    Ok(QueryClient::new(channel))
}

/// A failed call, with a hint when it may be a plaintext client at a TLS
/// server (which closes the connection without an answer).
fn call_failed(call: &str, status: tonic::Status, server: &ServerArgs) -> anyhow::Error {
    let transport = matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::Cancelled
            | tonic::Code::Unknown
            | tonic::Code::Internal
    );
    let context = if transport && server.tls_ca.is_none() {
        format!("{call} (if the server runs with --tls-cert, connect with --tls-ca)")
    } else {
        call.to_string()
    };
    anyhow::Error::from(status).context(context)
}
