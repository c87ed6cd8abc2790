//! `tracedb get TRACE_ID`: one trace from the server, as a waterfall or as
//! OTLP/JSON.

use anyhow::Context;
use tracedb_lsm::TraceId;

use super::{call_failed, query_client, render, ServerArgs};

// No doc comment: the subcommand's help is the one `main.rs` gives it.
#[derive(clap::Args)]
pub struct GetArgs {
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
}

/// Fetches the trace with `GetTrace` and prints it.
pub async fn get(args: GetArgs) -> anyhow::Result<()> {
    let (trace_id, server) = (args.trace_id, &args.server);
    let mut client = query_client(server).await?;
    let request = tracedb_proto::query::v1::GetTraceRequest {
        trace_id: trace_id.0.to_vec().into(),
        ..Default::default()
    };
    let mut stream = match client.get_trace(args.server.request(request)?).await {
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
    if args.json {
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
            render::render_trace(&trace_id, &messages, args.attributes)
        );
    }
    Ok(())
}
