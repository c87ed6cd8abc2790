//! The `tracedb` command: `serve` runs the server, `query` the read tier over
//! many servers, `get` prints a stored
//! trace, `search` lists traces of a service, `check` verifies a data directory
//! offline, `tenant` lists or deletes tenants' stores offline. This file parses the command line, starts logging and calls into
//! the library: [`tracedb_server::run`] for `serve`, [`tracedb_server::cli`]
//! for the rest.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use tracedb_server::{cli, runtime, Config};

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
        /// Check the options (and the files they name: TLS, overrides) and
        /// exit: 0 when the server would start with them, else 1 and every
        /// problem. Binds nothing and opens no data directory.
        #[arg(long)]
        check_config: bool,
        #[command(flatten)]
        settings: Config,
    },
    /// Run the read tier over many storage nodes: every read API of `serve`
    /// (QueryService, Jaeger, Tempo, health, reflection, metrics) answered by
    /// asking every node and merging. It stores nothing; the OpenTelemetry
    /// Collector's load_balancing exporter routes spans to the nodes.
    Query {
        /// A TOML file of options: the long flag names in snake_case, such as
        /// `nodes = ["10.0.0.1:4317,10.0.0.2:4317", "10.0.1.1:4317"]`.
        #[arg(long, env = "TRACEDB_CONFIG")]
        config: Option<PathBuf>,
        /// Check the options and exit (0: they would start; 1: every
        /// problem). Binds nothing.
        #[arg(long)]
        check_config: bool,
        #[command(flatten)]
        settings: tracedb_server::TierConfig,
    },
    /// Print a stored trace as a waterfall: the span tree with bars on a
    /// common time axis, error spans marked `!`, spans whose parent is missing
    /// under a marker.
    Get(cli::GetArgs),
    /// List traces of a service, newest first, from the search index.
    Search(cli::SearchArgs),
    /// Run a TraceQL metrics query (`{ } | rate() by(resource.service.name)`)
    /// and print its series as a table, one column per interval.
    Metrics(cli::MetricsArgs),
    /// Verify every file of a data directory offline, changing nothing; exit
    /// status 1 if a problem is found.
    Check {
        /// The data directory of a stopped server.
        data_dir: PathBuf,
        #[command(flatten)]
        store: cli::ObjectStoreArgs,
    },
    /// The tenants' stores of a data directory (--tenancy), offline.
    #[command(subcommand)]
    Tenant(TenantCommand),
}

#[derive(Subcommand)]
enum TenantCommand {
    /// List the tenants with a store, with their files and bytes.
    List {
        /// The data directory.
        #[arg(long, default_value = tracedb_server::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
    },
    /// Delete a tenant's store and every span in it; returns once its files
    /// are gone from disk, and with --object-store from the bucket. The
    /// server must be stopped (it holds the store).
    Delete {
        /// The tenant.
        tenant: String,
        /// The data directory.
        #[arg(long, default_value = tracedb_server::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        #[command(flatten)]
        store: cli::ObjectStoreArgs,
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

/// Logs to stderr through `filter`.
fn start_logging(filter: &str) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(filter)?)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    Ok(())
}

fn run(cli: Cli, matches: &ArgMatches) -> anyhow::Result<()> {
    let client_runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    match cli.command {
        Command::Serve {
            config,
            check_config,
            settings,
        } => {
            let serve_matches = matches
                .subcommand_matches("serve")
                .context("clap gave no matches for serve")?;
            let config = tracedb_server::config::load(settings, serve_matches, config.as_deref())?;
            if check_config {
                config.cold_options().context("--object-store")?;
                println!(
                    "tracedb serve: the configuration is valid (data directory {})",
                    config.data_dir.display()
                );
                return Ok(());
            }
            start_logging(&config.log_level)?;
            runtime::request_runtime(config.request_slice())?
                .block_on(tracedb_server::run(config, runtime::shutdown_signal()))
        }
        Command::Query {
            config,
            check_config,
            settings,
        } => {
            let query_matches = matches
                .subcommand_matches("query")
                .context("clap gave no matches for query")?;
            let config = tracedb_server::config::load(settings, query_matches, config.as_deref())?;
            if check_config {
                println!("tracedb query: the configuration is valid");
                return Ok(());
            }
            start_logging(&config.log_level)?;
            client_runtime()?.block_on(tracedb_server::tier::run(
                config,
                runtime::shutdown_signal(),
            ))
        }
        Command::Get(args) => client_runtime()?.block_on(cli::get(args)),
        Command::Search(args) => client_runtime()?.block_on(cli::search(args)),
        Command::Metrics(args) => client_runtime()?.block_on(cli::metrics(args)),
        Command::Check { data_dir, store } => cli::check::run(&data_dir, &store),
        Command::Tenant(TenantCommand::List { data_dir }) => cli::tenant::list(&data_dir),
        Command::Tenant(TenantCommand::Delete {
            tenant,
            data_dir,
            store,
        }) => cli::tenant::delete(&data_dir, &tenant, &store),
    }
}
