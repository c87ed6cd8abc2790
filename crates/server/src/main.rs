//! The `tracedb` command: `serve` runs the server, `get` prints a stored trace,
//! `check` verifies a data directory offline.

mod check;

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracedb_lsm::TraceId;
use tracedb_server::{Config, DEFAULT_DATA_DIR, DEFAULT_GRPC_ADDR, DEFAULT_HTTP_ADDR};

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
    /// Run the server: OTLP/gRPC ingest, the query API, health and reflection.
    Serve {
        /// Where files and the write-ahead log live; created if missing.
        #[arg(long, env = "TRACEDB_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// gRPC address: OTLP TraceService, tracedb.query.v1.QueryService, health, reflection.
        #[arg(long, env = "TRACEDB_GRPC_ADDR", default_value = DEFAULT_GRPC_ADDR)]
        grpc_addr: SocketAddr,
        /// HTTP address, reserved for OTLP/HTTP (accepted, not served yet).
        #[arg(long, env = "TRACEDB_HTTP_ADDR", default_value = DEFAULT_HTTP_ADDR)]
        http_addr: SocketAddr,
        /// Largest accepted gRPC message in bytes, after decompression.
        #[arg(long, env = "TRACEDB_MAX_MESSAGE_BYTES", default_value_t = 64 << 20)]
        max_message_bytes: usize,
        /// Number of in-memory buffer shards [default: number of cores].
        #[arg(long, env = "TRACEDB_SHARDS")]
        shards: Option<usize>,
        /// A shard's buffer is flushed to a file once it holds this many bytes.
        #[arg(long, env = "TRACEDB_FLUSH_BYTES", default_value_t = 32 << 20)]
        flush_bytes: usize,
        /// ... or once its oldest span has waited this many seconds.
        #[arg(long, env = "TRACEDB_FLUSH_AGE_SECS", default_value_t = 30)]
        flush_age_secs: u64,
        /// Log filter (error, warn, info, debug, trace, or a RUST_LOG-style directive).
        #[arg(long, env = "RUST_LOG", default_value = "info")]
        log_level: String,
    },
    /// Print a stored trace as an indented span tree.
    Get {
        /// The trace ID: 32 hex digits.
        trace_id: TraceId,
        /// The server's gRPC address.
        #[arg(long, default_value = DEFAULT_GRPC_ADDR)]
        addr: String,
    },
    /// Verify every file of a data directory offline, changing nothing; exit
    /// status 1 if a problem is found.
    Check {
        /// The data directory of a stopped server.
        data_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Serve {
            data_dir,
            grpc_addr,
            http_addr,
            max_message_bytes,
            shards,
            flush_bytes,
            flush_age_secs,
            log_level,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::try_new(&log_level)?)
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init();
            let mut config = Config::new(data_dir);
            config.grpc_addr = grpc_addr;
            config.http_addr = http_addr;
            config.max_message_bytes = max_message_bytes;
            if let Some(shards) = shards {
                anyhow::ensure!(shards > 0, "--shards must be at least 1");
                config.memtable.shards = shards;
            }
            config.memtable.flush_bytes = flush_bytes;
            config.memtable.max_age = Duration::from_secs(flush_age_secs);
            runtime.block_on(tracedb_server::run(config, shutdown_signal()))
        }
        Command::Get { trace_id, addr } => runtime.block_on(get(trace_id, &addr)),
        Command::Check { data_dir } => check::run(&data_dir),
    }
}

async fn get(trace_id: TraceId, addr: &str) -> anyhow::Result<()> {
    let uri = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let mut client =
        tracedb_proto::query::v1::query_service_client::QueryServiceClient::connect(uri.clone())
            .await
            .with_context(|| format!("connecting to {uri}"))?;
    let request = tracedb_proto::query::v1::GetTraceRequest {
        trace_id: trace_id.0.to_vec().into(),
        ..Default::default()
    };
    let mut stream = match client.get_trace(request).await {
        Ok(response) => response.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => {
            anyhow::bail!("trace {trace_id} not found");
        }
        Err(status) => return Err(status).context("GetTrace"),
    };
    let mut messages = Vec::new();
    while let Some(message) = stream.message().await.context("reading the trace")? {
        messages.push(message);
    }
    print!(
        "{}",
        tracedb_server::render::render_trace(&trace_id, &messages)
    );
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
