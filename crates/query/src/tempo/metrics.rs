//! Tempo's TraceQL metrics API: `GET /api/metrics/query_range` and
//! `GET /api/metrics/query` (instant), with Tempo 3.0.3's parameters,
//! defaults, limits and JSON, so Grafana's Tempo data source (and Traces
//! Drilldown through it) draws its panels from tracedb.
//!
//! Parameters (Tempo's `pkg/api/http.go`): `q` (or `query`); `start` and
//! `end` as Unix seconds (10 digits or fewer, a fraction allowed), Unix
//! nanoseconds (more digits) or RFC 3339; `since` (a Prometheus duration,
//! default 1h) when `start` is absent; `step` as seconds or a Go duration,
//! by default the range over 240 rounded down to 1h, 5m, 1m, 15s, 5s or 1s
//! (50 ms steps under a minute); `exemplars` (default and most: 100; the
//! hint `with(exemplars=N)` wins); `maxSeries`. The limits of Tempo's query
//! frontend: a range of at most 24 h, at most 10,000 intervals; each
//! violation is a 400 that says which. tracedb answers the last seconds
//! too: Tempo leaves out the last 30 s (`query_end_cutoff`), which its
//! ingest has not settled yet and tracedb's has.

use std::{
    collections::HashMap,
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{extract::Query, response::Response};
use tracedb_traceql::{ast::Static, Compiled};

use super::{bad, json_body, marked, noted, Scoped};
use crate::{
    error::Result,
    metrics::{instant_grid, range_grid, within_range, MetricsRequest, MAX_SERIES},
};

const SEC: u64 = 1_000_000_000;
/// Tempo's query frontend default (`query_frontend.metrics.max_exemplars`).
const MAX_EXEMPLARS: u64 = 100;

/// `GET /api/metrics/query_range`.
#[tracing::instrument(skip_all)]
pub(super) async fn query_range(
    Scoped(reads): Scoped,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response> {
    let request = range_request(&params, now())?;
    let (eval, partial) = noted(reads.metrics(request).await?, "metrics");
    Ok(answer(json::range(&eval.finish(), &partial), &partial))
}

/// `GET /api/metrics/query`: one value per series over the whole range.
#[tracing::instrument(skip_all)]
pub(super) async fn query_instant(
    Scoped(reads): Scoped,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response> {
    let request = instant_request(&params, now())?;
    let (eval, partial) = noted(reads.metrics(request).await?, "metrics");
    Ok(answer(json::instant(&eval.finish(), &partial), &partial))
}

/// The JSON answer (with Tempo's `status`/`message` when some of it is
/// missing), with tracedb's partial headers.
fn answer(body: String, partial: &[String]) -> Response {
    marked(json_body(body), partial)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The query of `q` (or `query`): parsed, checked as a search's is, and a
/// metrics query.
fn metrics_query(params: &HashMap<String, String>) -> Result<std::sync::Arc<Compiled>> {
    let text = params
        .get("q")
        .or_else(|| params.get("query"))
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| bad("q is required: a TraceQL metrics query such as {} | rate()"))?;
    let query = crate::search::compile_any(text)?;
    if query.query.metrics.is_none() {
        return Err(bad(format!(
            "not a metrics query: {text:?} has no metrics function (such as | rate()); searches go to /api/search"
        )));
    }
    Ok(query)
}

/// `start` and `end` in Unix ns, with `since` (default 1h) for an absent
/// start, as Tempo takes them.
fn bounds(params: &HashMap<String, String>, now: u64) -> Result<(u64, u64)> {
    let get = |name: &str| {
        params
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    let end = match get("end") {
        Some(v) => {
            timestamp(v).map_err(|e| bad(format!("could not parse 'end' parameter: {e}")))?
        }
        None => now,
    };
    let start = match get("start") {
        Some(v) => {
            timestamp(v).map_err(|e| bad(format!("could not parse 'start' parameter: {e}")))?
        }
        None => {
            let since = match get("since") {
                Some(v) => prometheus_duration(v)
                    .map_err(|e| bad(format!("could not parse 'since' parameter: {e}")))?,
                None => 3_600 * SEC,
            };
            end.min(now).saturating_sub(since)
        }
    };
    if start > end {
        return Err(bad("end must be greater than start"));
    }
    Ok((start, end))
}

/// The most exemplars asked for: the hint, else the URL's (0 or absent
/// meaning the default), at most [`MAX_EXEMPLARS`].
fn exemplars(params: &HashMap<String, String>, query: &Compiled) -> usize {
    let asked = match query.query.hint("exemplars") {
        Some(Static::Bool(false)) => 0,
        Some(Static::Int(n)) => (*n).max(0) as u64,
        _ => match params.get("exemplars").and_then(|v| v.parse::<u64>().ok()) {
            Some(0) | None => MAX_EXEMPLARS,
            Some(n) => n,
        },
    };
    asked.min(MAX_EXEMPLARS) as usize
}

fn max_series(params: &HashMap<String, String>) -> usize {
    match params
        .get("maxSeries")
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(n) if n > 0 => n.min(MAX_SERIES),
        _ => MAX_SERIES,
    }
}

fn range_request(params: &HashMap<String, String>, now: u64) -> Result<MetricsRequest> {
    let query = metrics_query(params)?;
    let (start, end) = bounds(params, now)?;
    let step = match params
        .get("step")
        .map(String::as_str)
        .filter(|v| !v.is_empty())
    {
        Some(v) => Some(seconds_or_duration(v)?),
        None => None,
    };
    within_range(
        MetricsRequest {
            max_exemplars: exemplars(params, &query),
            max_series: max_series(params),
            query,
            grid: range_grid(start, end, step)?,
        },
        end.saturating_sub(start),
    )
}

fn instant_request(params: &HashMap<String, String>, now: u64) -> Result<MetricsRequest> {
    let query = metrics_query(params)?;
    let (start, end) = bounds(params, now)?;
    Ok(MetricsRequest {
        query,
        grid: instant_grid(start, end)?,
        max_series: max_series(params),
        // Tempo's instant answers carry no exemplars.
        max_exemplars: 0,
    })
}

/// A time as Tempo's API takes it: see the module docs.
fn timestamp(v: &str) -> std::result::Result<u64, String> {
    if v.contains('.') {
        let secs: f64 = v.parse().map_err(|_| format!("{v:?} is not a number"))?;
        if !(0.0..1e11).contains(&secs) {
            return Err(format!("{v:?} is out of range"));
        }
        // Tempo keeps milliseconds of a fractional time.
        return Ok((secs * 1_000.0).round() as u64 * 1_000_000);
    }
    match v.parse::<i64>() {
        Ok(n) if n < 0 => Err(format!("{v:?} is before 1970")),
        Ok(n) if v.len() <= 10 => Ok(n as u64 * SEC),
        Ok(n) => Ok(n as u64),
        Err(_) => tracedb_proto::time::parse_rfc3339(v).ok_or_else(|| {
            format!("{v:?} is not Unix seconds, Unix nanoseconds or an RFC 3339 time")
        }),
    }
}

/// A step: seconds (`30`, `0.5`) or a Go duration (`30s`, `1m30s`), in ns.
fn seconds_or_duration(v: &str) -> Result<i128> {
    if let Ok(secs) = v.parse::<f64>() {
        let ns = secs * 1e9;
        if !ns.is_finite() || ns.abs() > i64::MAX as f64 {
            return Err(bad(format!(
                "cannot parse {v:?} to a valid duration. It overflows int64"
            )));
        }
        return Ok(ns as i128);
    }
    tracedb_traceql::parse_go_duration(v)
        .map(i128::from)
        .ok_or_else(|| bad(format!("cannot parse {v:?} to a valid duration")))
}

/// A Prometheus duration (`1h30m`, `2d`, `0`) in ns: whole numbers, units
/// `y w d h m s ms` largest first.
fn prometheus_duration(v: &str) -> std::result::Result<u64, String> {
    if v == "0" {
        return Ok(0);
    }
    if v.is_empty() {
        return Err("empty duration string".into());
    }
    const UNITS: &[(&str, u64)] = &[
        ("y", 365 * 86_400 * SEC),
        ("w", 7 * 86_400 * SEC),
        ("d", 86_400 * SEC),
        ("h", 3_600 * SEC),
        ("ms", 1_000_000),
        ("m", 60 * SEC),
        ("s", SEC),
    ];
    // Each unit's rank in Prometheus's order (y w d h m s ms).
    let rank = |u: &str| {
        ["y", "w", "d", "h", "m", "s", "ms"]
            .iter()
            .position(|x| *x == u)
    };
    let invalid = || format!("not a valid duration string: {v:?}");
    let mut rest = v;
    let mut total: u64 = 0;
    let mut last_rank = None;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let (unit, scale) = UNITS
            .iter()
            .find(|(u, _)| rest.starts_with(u))
            .ok_or_else(invalid)?;
        let r = rank(unit);
        if last_rank.is_some_and(|l| r <= l) {
            return Err(invalid());
        }
        last_rank = Some(r);
        rest = &rest[unit.len()..];
        total = n
            .checked_mul(*scale)
            .and_then(|x| total.checked_add(x))
            .ok_or_else(invalid)?;
    }
    Ok(total)
}

mod json;
#[cfg(test)]
mod tests;
