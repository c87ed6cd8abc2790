//! `tracedb metrics --query '{ … } | rate() by(…)' --since 1h`: a TraceQL
//! metrics query over `QueryService.QueryMetrics`, as a table of series
//! (one row per series, one column per interval) or as JSON.

use anyhow::Context;
use tracedb_proto::query::v1::{metrics_value::Value, MetricsSeries, QueryMetricsRequest};

use super::{call_failed, query_client, search::parse_since, ServerArgs};

// No doc comment: the subcommand's help is the one `main.rs` gives it.
#[derive(clap::Args)]
pub struct MetricsArgs {
    /// A TraceQL metrics query, such as
    /// `{ status = error } | rate() by(resource.service.name)`.
    #[arg(long)]
    query: String,
    /// The range, back from now: `30s`, `15m`, `1h`, `2d` (at most 24 h).
    #[arg(long, default_value = "1h", value_parser = parse_since)]
    since: std::time::Duration,
    /// The interval: `30s`, `5m`; by default about 240 over the range (as
    /// Tempo does).
    #[arg(long, value_parser = parse_since)]
    step: Option<std::time::Duration>,
    /// One value per series over the whole range.
    #[arg(long)]
    instant: bool,
    /// The series as JSON: `{"series": [{"labels": {…}, "samples": [[ms, value], …]}]}`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: ServerArgs,
}

/// Runs the query with `QueryMetrics` and prints its series.
pub async fn metrics(args: MetricsArgs) -> anyhow::Result<()> {
    let server = &args.server;
    let mut client = query_client(server).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("clock before 1970")?;
    let request = QueryMetricsRequest {
        query: args.query.clone(),
        start_time_unix_nano: now.saturating_sub(args.since).as_nanos() as u64,
        end_time_unix_nano: now.as_nanos() as u64,
        step_nanos: args.step.map_or(0, |s| s.as_nanos() as u64),
        instant: args.instant,
        ..Default::default()
    };
    let response = client
        .query_metrics(args.server.request(request)?)
        .await
        .map_err(|status| call_failed("QueryMetrics", status, server))?
        .into_inner();
    for reason in &response.partial {
        eprintln!("warning: partial answer: {reason}");
    }
    if args.json {
        println!("{}", json(&response.series));
    } else {
        print!("{}", table(&response.series));
    }
    Ok(())
}

fn label_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(f)) => f.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        None => "nil".into(),
    }
}

fn labels(s: &MetricsSeries) -> String {
    let parts: Vec<String> = s
        .labels
        .iter()
        .map(|l| {
            let v = l.value.as_ref().and_then(|v| v.value.as_ref());
            format!("{}={}", l.key, label_text(v))
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// A value as the table shows it: four significant digits.
fn shown(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1000.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
        format!("{v:.digits$}")
    }
}

/// One row per series: its labels, then its values at each timestamp
/// (UTC times as column heads), `-` where it has none.
pub fn table(series: &[MetricsSeries]) -> String {
    if series.is_empty() {
        return "no series\n".into();
    }
    let mut times: Vec<i64> = series
        .iter()
        .flat_map(|s| s.samples.iter().map(|p| p.timestamp_ms))
        .collect();
    times.sort_unstable();
    times.dedup();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut head = vec!["SERIES".to_owned()];
    head.extend(times.iter().map(|&t| {
        let utc = tracedb_proto::time::Utc::from_unix_nanos(t.max(0) as u64 * 1_000_000);
        format!("{:02}:{:02}:{:02}", utc.hour, utc.minute, utc.second)
    }));
    rows.push(head);
    for s in series {
        let mut row = vec![labels(s)];
        row.extend(times.iter().map(|t| {
            s.samples
                .iter()
                .find(|p| p.timestamp_ms == *t)
                .map_or_else(|| "-".to_owned(), |p| shown(p.value))
        }));
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c == 0 {
                    format!("{cell:<w$}", w = widths[c])
                } else {
                    format!("{cell:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The series as JSON: labels as an object, samples as `[ms, value]`.
pub fn json(series: &[MetricsSeries]) -> serde_json::Value {
    let series: Vec<serde_json::Value> = series
        .iter()
        .map(|s| {
            let labels: serde_json::Map<String, serde_json::Value> = s
                .labels
                .iter()
                .map(|l| {
                    let v = match l.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Value::StringValue(s)) => serde_json::json!(s),
                        Some(Value::IntValue(i)) => serde_json::json!(i),
                        Some(Value::DoubleValue(f)) => serde_json::json!(f),
                        Some(Value::BoolValue(b)) => serde_json::json!(b),
                        None => serde_json::Value::Null,
                    };
                    (l.key.clone(), v)
                })
                .collect();
            let samples: Vec<serde_json::Value> = s
                .samples
                .iter()
                .map(|p| serde_json::json!([p.timestamp_ms, p.value]))
                .collect();
            serde_json::json!({ "labels": labels, "samples": samples })
        })
        .collect();
    serde_json::json!({ "series": series })
}
