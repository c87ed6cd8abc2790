//! `tracedb search --service NAME`: the newest traces of a service from the
//! server's search index, as a table.

use anyhow::Context;

use super::{call_failed, query_client, render, ServerArgs};

// No doc comment: the subcommand's help is the one `main.rs` gives it.
#[derive(clap::Args)]
pub struct SearchArgs {
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

/// Lists the traces with `SearchTraces` and prints them.
pub async fn search(args: SearchArgs) -> anyhow::Result<()> {
    let server = &args.server;
    let mut client = query_client(server).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("clock before 1970")?;
    let request = tracedb_proto::query::v1::SearchTracesRequest {
        service: args.service,
        operation: args.operation.unwrap_or_default(),
        start_time_unix_nano: now.saturating_sub(args.since).as_nanos() as u64,
        limit: args.limit,
        ..Default::default()
    };
    let traces = client
        .search_traces(request)
        .await
        .map_err(|status| call_failed("SearchTraces", status, server))?
        .into_inner()
        .traces;
    print!("{}", render::render_search(&traces));
    Ok(())
}
