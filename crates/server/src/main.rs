//! The `tracedb` command: `serve` runs the server, `get` prints a stored
//! trace, `search` lists traces of a service, `check` verifies a data directory
//! offline.

mod check;

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use tracedb_lsm::TraceId;
use tracedb_server::{Config, DEFAULT_GRPC_ADDR};

#[derive(Parser)]
#[command(
    name = "tracedb",
    version,
    about = "A storage server for distributed traces (OTLP in, traces by ID out)."
)]
#[command(arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server: OTLP/gRPC and OTLP/HTTP ingest, the query API, health,
    /// reflection and metrics. Options come from flags, then TRACEDB_*
    /// environment variables, then the --config file, then the defaults shown.
    Serve {
        /// A TOML file of options: the long flag names in snake_case, such as
        /// `max_memory = "512MiB"`. Unknown keys are an error.
        #[arg(long, env = "TRACEDB_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        settings: Config,
    },
    /// Print a stored trace as a waterfall: the span tree with bars on a
    /// common time axis, error spans marked `!`, spans whose parent is missing
    /// under a marker.
    Get {
        /// The trace ID: 32 hex digits.
        trace_id: TraceId,
        #[command(flatten)]
        server: ServerArgs,
        /// Also print each span's attributes, events and links.
        #[arg(long)]
        attributes: bool,
        /// Print the trace as OTLP/JSON (`{"resourceSpans": [...]}`) instead.
        #[arg(long, conflicts_with = "attributes")]
        json: bool,
    },
    /// List traces of a service, newest first, from the search index.
    Search {
        /// Service name.
        #[arg(long)]
        service: String,
        /// Span name (of that service).
        #[arg(long)]
        operation: Option<String>,
        /// How far back traces may start: `30s`, `15m`, `1h`, `2d`.
        #[arg(long, default_value = "1h", value_parser = parse_since)]
        since: std::time::Duration,
        /// Most traces listed.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Verify every file of a data directory offline, changing nothing; exit
    /// status 1 if a problem is found.
    Check {
        /// The data directory of a stopped server.
        data_dir: PathBuf,
    },
}

/// Where `get` and `search` find the server, and how to talk to it.
#[derive(clap::Args)]
struct ServerArgs {
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
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let result = Cli::from_arg_matches(&matches)
        .map_err(anyhow::Error::from)
        .and_then(|cli| run(cli, &matches));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, matches: &ArgMatches) -> anyhow::Result<()> {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    match cli.command {
        Command::Serve { config, settings } => {
            let serve_matches = matches
                .subcommand_matches("serve")
                .context("clap gave no matches for serve")?;
            let config = tracedb_server::config::load(settings, serve_matches, config.as_deref())?;
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::try_new(&config.log_level)?)
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init();
            // Every thread of the runtime handles requests (or work they
            // wait on): each asks for the short slice as it starts.
            let slice = config.request_slice();
            let warned = std::sync::atomic::AtomicBool::new(false);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .on_thread_start(move || {
                    if let Err(e) = tracedb_sched::use_short_slice(slice) {
                        if !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                            tracing::warn!(error = %e, "could not shorten the request threads' time slice");
                        }
                    }
                })
                .build()?;
            runtime.block_on(tracedb_server::run(config, shutdown_signal()))
        }
        Command::Get {
            trace_id,
            server,
            attributes,
            json,
        } => runtime()?.block_on(get(trace_id, &server, attributes, json)),
        Command::Search {
            service,
            operation,
            since,
            limit,
            server,
        } => runtime()?.block_on(search(service, operation, since, limit, &server)),
        Command::Check { data_dir } => check::run(&data_dir),
    }
}

type QueryClient =
    tracedb_proto::query::v1::query_service_client::QueryServiceClient<tonic::transport::Channel>;

async fn connect(server: &ServerArgs) -> anyhow::Result<QueryClient> {
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
    let tls = tracedb_server::tls::ClientTls::load(ca, identity)?;
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

/// `30s`, `15m`, `1h`, `2d`.
fn parse_since(s: &str) -> Result<std::time::Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a number and s, m, h or d"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{s:?}: unit must be s, m, h or d")),
    };
    Ok(std::time::Duration::from_secs(secs))
}

async fn search(
    service: String,
    operation: Option<String>,
    since: std::time::Duration,
    limit: u32,
    server: &ServerArgs,
) -> anyhow::Result<()> {
    let mut client = connect(server).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("clock before 1970")?;
    let request = tracedb_proto::query::v1::SearchTracesRequest {
        service,
        operation: operation.unwrap_or_default(),
        start_time_unix_nano: now.saturating_sub(since).as_nanos() as u64,
        limit,
        ..Default::default()
    };
    let traces = client
        .search_traces(request)
        .await
        .map_err(|status| call_failed("SearchTraces", status, server))?
        .into_inner()
        .traces;
    print!("{}", tracedb_server::render::render_search(&traces));
    Ok(())
}

async fn get(
    trace_id: TraceId,
    server: &ServerArgs,
    attributes: bool,
    json: bool,
) -> anyhow::Result<()> {
    let mut client = connect(server).await?;
    let request = tracedb_proto::query::v1::GetTraceRequest {
        trace_id: trace_id.0.to_vec().into(),
        ..Default::default()
    };
    let mut stream = match client.get_trace(request).await {
        Ok(response) => response.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => {
            anyhow::bail!("trace {trace_id} not found");
        }
        Err(status) => return Err(call_failed("GetTrace", status, server)),
    };
    let mut messages = Vec::new();
    while let Some(message) = stream.message().await.context("reading the trace")? {
        messages.push(message);
    }
    if json {
        let merged = tracedb_proto::trace::v1::TracesData {
            resource_spans: messages
                .into_iter()
                .flat_map(|m| m.resource_spans)
                .collect(),
        };
        println!("{}", tracedb_query::otlp_json::traces_data(&merged));
    } else {
        print!(
            "{}",
            tracedb_server::render::render_trace(&trace_id, &messages, attributes)
        );
    }
    Ok(())
}

/// Resolves on ctrl-c or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "listening for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "listening for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
