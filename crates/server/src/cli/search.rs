//! `tracedb search --query '{ ... }'` (or `--service NAME`): the newest
//! traces a TraceQL query matches, as a table.

use anyhow::Context;

use super::{call_failed, query_client, render, ServerArgs};

// No doc comment: the subcommand's help is the one `main.rs` gives it.
#[derive(clap::Args)]
pub struct SearchArgs {
    /// A TraceQL query, such as `{ status = error && resource.service.name = "cart" }`.
    #[arg(long, conflicts_with_all = ["service", "operation"])]
    query: Option<String>,
    /// Service name: `{ resource.service.name = "NAME" }`.
    #[arg(long)]
    service: Option<String>,
    /// Span name (of that service): `{ name = "NAME" }`.
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
pub(super) fn parse_since(s: &str) -> Result<std::time::Duration, String> {
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

/// A TraceQL string literal.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The TraceQL the arguments ask for.
fn traceql(args: &SearchArgs) -> String {
    if let Some(q) = &args.query {
        return q.clone();
    }
    let mut conds = Vec::new();
    if let Some(s) = &args.service {
        conds.push(format!("resource.service.name = {}", quoted(s)));
    }
    if let Some(o) = &args.operation {
        conds.push(format!("name = {}", quoted(o)));
    }
    format!("{{ {} }}", conds.join(" && "))
}

/// Lists the traces with `SearchTraces` and prints them.
pub async fn search(args: SearchArgs) -> anyhow::Result<()> {
    let server = &args.server;
    let mut client = query_client(server).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("clock before 1970")?;
    let request = tracedb_proto::query::v1::SearchTracesRequest {
        query: traceql(&args),
        start_time_unix_nano: now.saturating_sub(args.since).as_nanos() as u64,
        limit: args.limit,
        ..Default::default()
    };
    let response = client
        .search_traces(args.server.request(request)?)
        .await
        .map_err(|status| call_failed("SearchTraces", status, server))?;
    if let Some(reason) = response
        .metadata()
        .get(tracedb_query::PARTIAL_REASON_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        eprintln!("warning: partial answer: {reason}");
    }
    print!("{}", render::render_search(&response.into_inner().traces));
    Ok(())
}
