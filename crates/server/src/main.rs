//! The `tracedb` command: `serve` runs the server, `get` prints a stored trace,
//! `check` verifies a data directory offline.

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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
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
