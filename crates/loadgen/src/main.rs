//! `tracedb-bench`: an OTLP load generator that reports what users feel.
//!
//! - `--mode open` (default): requests leave on a fixed timetable for the asked
//!   spans/s, whether or not earlier ones have returned. Each latency is measured
//!   from the request's *scheduled* send time, so a stalled server cannot hide
//!   its stall by slowing the generator down (coordinated omission).
//! - A throttled request (UNAVAILABLE, HTTP 429/503) is sent again after a pause,
//!   as OTLP exporters do (`--retries`); its latency runs to the final answer.
//! - `--mode max`: `--concurrency` closed-loop streams send as fast as the
//!   server answers; reports the accepted spans/s.
//! - After either, `--query-samples N` fetches N traces that were fully
//!   acknowledged (and N absent IDs) with GetTrace, checks every span came back,
//!   and reports query latency.
//! - `--query-searches N` adds N SearchTraces after the GetTraces, each for
//!   one of the workload's services, limit 20, over the time the traces
//!   read back ran in (the last hour without `--query-samples`), and
//!   reports their latency, rows, and how many answered none.
//! - `--mode query --query-passes P` sends nothing: it queries a store loaded
//!   earlier by a run with the same workload options (`--seed`,
//!   `--batch-size`, `--pool-spans`, `--services`) whose first P passes over
//!   the request pool were all acknowledged, e.g. once compaction has caught
//!   up, and as often as wanted (warm).
//! - `--server-pid` and `--data-dir` add the server's CPU time per span, peak
//!   RSS and bytes on disk per span.
//!
//! Requests are generated from `--seed` and encoded before the clock starts
//! (see `workload`). Progress goes to stderr; a table to stdout, and the same
//! figures as JSON to `--json FILE`.

mod client;
mod cost;
mod report;
mod workload;

use std::{
    collections::HashSet,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use rand::{rngs::SmallRng, seq::IndexedRandom, Rng, SeedableRng};
use tokio::sync::{mpsc, Semaphore};

use crate::{
    client::{Exporter, Outcome},
    report::{Latency, Summary},
    workload::{Workload, WorkloadOptions},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Fixed rate on a timetable; latency corrected for coordinated omission.
    Open,
    /// Closed-loop streams as fast as the server answers.
    Max,
    /// No load: GetTrace on a store an earlier run loaded (see --query-passes).
    Query,
}

#[derive(Debug, Parser)]
#[command(
    name = "tracedb-bench",
    version,
    about = "OTLP load generator and trace checker (open-loop, HDR latency)."
)]
struct Args {
    /// OTLP endpoint: host:port of gRPC, or of HTTP with --http.
    #[arg(long, default_value = "127.0.0.1:4317")]
    endpoint: String,
    /// Send OTLP/HTTP protobuf (POST /v1/traces) instead of gRPC.
    #[arg(long)]
    http: bool,
    #[arg(long, value_enum, default_value_t = Mode::Open)]
    mode: Mode,
    /// Offered spans per second (open loop).
    #[arg(long, default_value_t = 50_000)]
    rate: u64,
    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Streams in max mode; most requests in flight in open mode.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Times a throttled request is sent again (pausing 50 ms, doubling up to 1 s).
    #[arg(long, default_value_t = 10)]
    retries: u32,
    /// gRPC connections to spread requests over.
    #[arg(long, default_value_t = 2)]
    connections: usize,
    /// Spans per request.
    #[arg(long, default_value_t = 512)]
    batch_size: usize,
    /// Spans in the pool of pre-encoded requests (reused with fresh trace IDs).
    #[arg(long, default_value_t = 200_000)]
    pool_spans: usize,
    /// Number of services (resources) in the workload.
    #[arg(long, default_value_t = 8)]
    services: usize,
    /// Each pass over the request pool runs this many milliseconds later in
    /// span time than the one before (0: every pass has the same times).
    /// Near the wall time of a pass, the store fills in time as a real one
    /// does, for searches that walk it newest first.
    #[arg(long, default_value_t = 0)]
    pass_shift_ms: u64,
    /// The first trace starts this many seconds before the current minute
    /// (0: at it). With `--pass-shift-ms` as long as a pass's span time, a
    /// load of minutes fills the hour behind now as an hour of traffic
    /// would.
    #[arg(long, default_value_t = 0)]
    start_ago_secs: u64,
    /// How many milliseconds apart the pool's traces start: with a pool of
    /// T traces, a pass covers T times this of span time (with 2 M spans,
    /// about 72.7 k traces: 166 ms and a shift of 12,070,000 ms fill a
    /// week in 50 passes).
    #[arg(long, default_value_t = 1)]
    trace_spacing_ms: u64,
    /// The search workload's cardinalities: hundreds of span names, and on
    /// each root span a `user.id` (up to a million values) and a `tenant`
    /// (five).
    #[arg(long)]
    search_attributes: bool,
    /// The workload's seed: the same seed sends the same trace IDs, so a
    /// second load into one store needs another (or its traces join the
    /// first load's, minutes apart).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Traces to fetch and verify with GetTrace after the load (and as many absent IDs).
    #[arg(long, default_value_t = 0)]
    query_samples: usize,
    /// SearchTraces to send after the GetTraces: each for one service (in
    /// turn), limit 20, from the earliest start to the latest end of the
    /// traces the GetTraces read (the last hour if they read none), after
    /// one uncounted search per service.
    #[arg(long, default_value_t = 0)]
    query_searches: usize,
    /// Jaeger FindTraceSummaries to send after the searches, over the same
    /// window: each for one service (in turn), search depth 20, after one
    /// uncounted call per service; the stream is read to its end.
    #[arg(long, default_value_t = 0)]
    query_summaries: usize,
    /// Rounds of Traces Drilldown's startup metrics queries (its three RED
    /// panels and the breakdown by service, verbatim, over the window the
    /// searches use, with its steps: the range over 64, over 24 for the
    /// duration histogram) to send after the searches, after one uncounted
    /// round.
    #[arg(long, default_value_t = 0)]
    query_metrics: usize,
    /// tracedb's gRPC address for GetTrace [default: --endpoint when it is gRPC].
    #[arg(long)]
    query_endpoint: Option<String>,
    /// Seconds to wait between the load and the queries, e.g. to query a store
    /// whose compaction has caught up.
    #[arg(long, default_value_t = 0)]
    query_delay: u64,
    /// With --mode query: passes over the request pool the earlier run had
    /// acknowledged in full (its requests done / the pool's request count,
    /// rounded down).
    #[arg(long, default_value_t = 0)]
    query_passes: u64,
    /// The server's PID: report its CPU time per span and peak RSS.
    #[arg(long)]
    server_pid: Option<u32>,
    /// With --server-pid: after the load, wait until the server is quiet
    /// (under 0.5 CPU seconds in each 10 s interval for --settle-quiet-secs:
    /// compaction has caught up) and also report its CPU per span up to then,
    /// which counts the compaction debt the load left behind.
    #[arg(long)]
    settle: bool,
    /// With --settle: how long the server must stay quiet, in seconds
    /// (rounded up to 10 s intervals). A server that merges idle files only
    /// after a quiet period needs longer than that period: for tracedb with
    /// its defaults, 100 (level 0 is merged 60 s after the last flush, which
    /// comes up to 30 s after the load).
    #[arg(long, default_value_t = 20)]
    settle_quiet_secs: u64,
    /// Scheduler time slice, in microseconds, that the generator's threads
    /// ask the kernel for (Linux 6.12 or later), so that when they wake they
    /// preempt the server's flush and compaction instead of adding the
    /// generator's own lateness to every latency. 0 keeps the kernel's default.
    #[arg(long, default_value_t = 100)]
    slice_us: u64,
    /// The server's data directory: report bytes on disk per span.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One finished export.
struct Record {
    latency: Duration,
    /// Open loop: how late the request left against its scheduled time (the
    /// generator's own timer and scheduling, already inside `latency`).
    send_lag: Option<Duration>,
    spans: usize,
    outcome: Outcome,
    /// Times the request was sent again after the server throttled it.
    retried: u32,
    /// pass << 32 | request index.
    key: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let slice = Duration::from_micros(args.slice_us);
    if let Err(e) = tracedb_sched::use_short_slice(slice) {
        eprintln!(
            "warning: could not ask for a {slice:?} time slice ({e}); the send lag may be longer"
        );
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || {
            // A failure was reported for the main thread above; it is the same here.
            let _ = tracedb_sched::use_short_slice(slice);
        })
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.rate > 0 && args.duration > 0.0 && args.batch_size > 0,
        "--rate, --duration and --batch-size must be positive"
    );
    let opts = WorkloadOptions {
        seed: args.seed,
        batch_spans: args.batch_size,
        pool_spans: args.pool_spans.max(args.batch_size),
        services: args.services,
        pass_shift_nanos: args.pass_shift_ms * 1_000_000,
        trace_spacing_nanos: args.trace_spacing_ms.max(1) * 1_000_000,
        search_attributes: args.search_attributes,
        start_unix_nano: WorkloadOptions::default()
            .start_unix_nano
            .saturating_sub(args.start_ago_secs.saturating_mul(1_000_000_000)),
        ..WorkloadOptions::default()
    };
    let started = Instant::now();
    let workload = Arc::new(workload::generate(&opts)?);
    eprintln!(
        "encoded {} requests, {} spans, {} traces in {:.1?}",
        workload.requests.len(),
        workload.total_spans(),
        workload.traces.len(),
        started.elapsed()
    );
    if args.mode == Mode::Query {
        anyhow::ensure!(
            args.query_passes > 0
                && (args.query_samples > 0 || args.query_metrics > 0 || args.query_summaries > 0),
            "--mode query needs --query-passes and --query-samples, --query-summaries or --query-metrics"
        );
        let requests = workload.requests.len() as u64;
        let acked: HashSet<u64> = (0..args.query_passes)
            .flat_map(|pass| (0..requests).map(move |r| pass << 32 | r))
            .collect();
        let mut summary = report::Summary::new("query", 0, Duration::ZERO);
        summary.query = Some(query_phase(&args, &workload, &acked).await?);
        print!("{}", summary.table());
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&summary.json())?)?;
        }
        return Ok(());
    }
    anyhow::ensure!(
        !args.settle || args.server_pid.is_some(),
        "--settle needs --server-pid"
    );
    let exporter = Exporter::connect(&args.endpoint, args.http, args.connections)
        .await
        .with_context(|| format!("connecting to {}", args.endpoint))?;

    let before = args.server_pid.map(cost::sample).transpose()?;
    let (records, elapsed) = match args.mode {
        Mode::Open => open_loop(&args, &workload, exporter).await?,
        Mode::Max => max_rate(&args, &workload, exporter).await,
        Mode::Query => unreachable!("answered above"),
    };
    let after = args.server_pid.map(cost::sample).transpose()?;

    let mut summary = summarize(&args, &records, elapsed)?;
    if let (Some(b), Some(a)) = (before, after) {
        let accepted = summary.accepted_spans.max(1) as f64;
        summary.server_cpu_us_per_span = Some((a.cpu_seconds - b.cpu_seconds) * 1e6 / accepted);
        summary.server_peak_rss_bytes = Some(a.peak_rss_bytes);
        if args.settle {
            let pid = args.server_pid.expect("a sample implies a PID");
            let (settled, waited) = cost::wait_until_quiet(pid, args.settle_quiet_secs)?;
            summary.settled = Some(report::Settled {
                waited,
                cpu_us_per_span: (settled.cpu_seconds - b.cpu_seconds) * 1e6 / accepted,
            });
        }
    }
    if let Some(dir) = &args.data_dir {
        summary.disk_bytes_per_span =
            Some(cost::disk_bytes(dir) as f64 / summary.accepted_spans.max(1) as f64);
    }
    if args.query_samples > 0 || args.query_metrics > 0 || args.query_summaries > 0 {
        let acked: HashSet<u64> = records
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Accepted { .. }))
            .map(|r| r.key)
            .collect();
        summary.query = Some(query_phase(&args, &workload, &acked).await?);
    }
    print!("{}", summary.table());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&summary.json())?)?;
    }
    Ok(())
}

/// Requests leave on a timetable; latency counts from the scheduled time.
///
/// The timetable is kept by a thread of its own sleeping with the kernel's
/// timer, not by tokio's, whose sleeps end on whole-millisecond ticks and
/// would put the generator's lateness inside every latency
/// (docs/decisions/0025-loadgen-timetable-thread.md). What lateness is left
/// is reported as the send lag.
async fn open_loop(
    args: &Args,
    workload: &Arc<Workload>,
    exporter: Exporter,
) -> anyhow::Result<(Vec<Record>, Duration)> {
    let interval = Duration::from_secs_f64(args.batch_size as f64 / args.rate as f64);
    let retries = args.retries;
    let total = Duration::from_secs_f64(args.duration);
    let in_flight = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let (tx, rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect(rx, total));
    let start = Instant::now();
    let n = workload.requests.len() as u64;
    let runtime = tokio::runtime::Handle::current();
    let workload = workload.clone();
    let slice = Duration::from_micros(args.slice_us);
    let schedule = move || {
        // The timetable's wake-ups are the ones lateness comes from.
        let _ = tracedb_sched::use_short_slice(slice);
        let mut i = 0u64;
        loop {
            let scheduled = start + interval.mul_f64(i as f64);
            if scheduled >= start + total {
                break;
            }
            std::thread::sleep(scheduled.saturating_duration_since(Instant::now()));
            // Waiting for a slot delays the send, not the clock: the wait is part of the latency.
            let Ok(permit) = runtime.block_on(in_flight.clone().acquire_owned()) else {
                break;
            };
            let (workload, exporter, tx) = (workload.clone(), exporter.clone(), tx.clone());
            runtime.spawn(async move {
                let send_lag = Some(scheduled.elapsed());
                let (pass, idx) = (i / n, (i % n) as usize);
                let request = &workload.requests[idx];
                let (outcome, retried) = exporter
                    .export_retrying(request.body_for_pass(pass), i as usize, retries)
                    .await;
                let _ = tx.send(Record {
                    latency: scheduled.elapsed(),
                    send_lag,
                    spans: request.spans,
                    outcome,
                    retried,
                    key: pass << 32 | idx as u64,
                });
                drop(permit);
            });
            i += 1;
        }
    };
    // The thread owns the last sender: the collector ends once it and every
    // request it started are done.
    let scheduler = std::thread::Builder::new()
        .name("schedule".into())
        .spawn(schedule)
        .context("starting the open loop's scheduling thread")?;
    // A schedule that died part way would leave a run that looks whole.
    let joined = tokio::task::spawn_blocking(move || scheduler.join()).await;
    anyhow::ensure!(
        matches!(joined, Ok(Ok(()))),
        "the open loop's scheduling thread panicked"
    );
    let records = collector.await.unwrap_or_default();
    Ok((records, start.elapsed()))
}

/// `--concurrency` streams, each sending its next request when the last returns.
async fn max_rate(
    args: &Args,
    workload: &Arc<Workload>,
    exporter: Exporter,
) -> (Vec<Record>, Duration) {
    let total = Duration::from_secs_f64(args.duration);
    let retries = args.retries;
    let next = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect(rx, total));
    let start = Instant::now();
    let n = workload.requests.len() as u64;
    let streams: Vec<_> = (0..args.concurrency.max(1))
        .map(|stream| {
            let (workload, exporter, tx, next) =
                (workload.clone(), exporter.clone(), tx.clone(), next.clone());
            tokio::spawn(async move {
                while start.elapsed() < total {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let (pass, idx) = (i / n, (i % n) as usize);
                    let request = &workload.requests[idx];
                    let sent = Instant::now();
                    let (outcome, retried) = exporter
                        .export_retrying(request.body_for_pass(pass), stream, retries)
                        .await;
                    let _ = tx.send(Record {
                        latency: sent.elapsed(),
                        send_lag: None,
                        spans: request.spans,
                        outcome,
                        retried,
                        key: pass << 32 | idx as u64,
                    });
                }
            })
        })
        .collect();
    drop(tx);
    for s in streams {
        let _ = s.await;
    }
    let elapsed = start.elapsed();
    (collector.await.unwrap_or_default(), elapsed)
}

/// Gathers records, printing progress to stderr every second.
async fn collect(mut rx: mpsc::UnboundedReceiver<Record>, total: Duration) -> Vec<Record> {
    let mut records = Vec::new();
    let start = Instant::now();
    let mut last_report = Instant::now();
    let mut spans_since = 0usize;
    while let Some(r) = rx.recv().await {
        spans_since += r.spans;
        records.push(r);
        if last_report.elapsed() >= Duration::from_secs(1) {
            eprintln!(
                "  {:>5.1}s / {:.0}s: {:>9.0} spans/s acknowledged or failed, {} requests done",
                start.elapsed().as_secs_f64(),
                total.as_secs_f64(),
                spans_since as f64 / last_report.elapsed().as_secs_f64(),
                records.len()
            );
            spans_since = 0;
            last_report = Instant::now();
        }
    }
    records
}

fn summarize(args: &Args, records: &[Record], elapsed: Duration) -> anyhow::Result<Summary> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let mut lag = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let mut summary = Summary::new(
        if args.mode == Mode::Open {
            "open"
        } else {
            "max"
        },
        args.rate,
        elapsed,
    );
    for r in records {
        histogram.saturating_record(r.latency.as_micros() as u64);
        if let Some(l) = r.send_lag {
            lag.saturating_record(l.as_micros() as u64);
        }
        summary.retried_spans += u64::from(r.retried) * r.spans as u64;
        match &r.outcome {
            Outcome::Accepted { rejected } => {
                summary.accepted_spans += r.spans as u64 - rejected;
                summary.rejected_spans += rejected;
            }
            Outcome::Throttled => summary.throttled_spans += r.spans as u64,
            Outcome::Failed(why) => {
                summary.failed_spans += r.spans as u64;
                summary.first_error.get_or_insert_with(|| why.clone());
            }
        }
    }
    summary.requests = records.len() as u64;
    summary.export_latency = Some(Latency::from_histogram(&histogram));
    summary.send_lag = (!lag.is_empty()).then(|| Latency::from_histogram(&lag));
    Ok(summary)
}

/// Seconds from `unix_nano` to now.
fn seconds_ago(unix_nano: u64) -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now.saturating_sub(unix_nano) as f64 / 1e9
}

/// GetTrace for sampled acknowledged traces (all spans must come back) and for absent IDs.
async fn query_phase(
    args: &Args,
    workload: &Workload,
    acked: &HashSet<u64>,
) -> anyhow::Result<report::QueryResult> {
    let endpoint = match (&args.query_endpoint, args.http) {
        (Some(e), _) => e.clone(),
        (None, false) => args.endpoint.clone(),
        (None, true) => anyhow::bail!("--query-endpoint is needed with --http"),
    };
    let uri = if endpoint.contains("://") {
        endpoint
    } else {
        format!("http://{endpoint}")
    };
    if args.query_delay > 0 {
        eprintln!("waiting {} s before querying", args.query_delay);
        tokio::time::sleep(Duration::from_secs(args.query_delay)).await;
    }
    let mut client =
        tracedb_proto::query::v1::query_service_client::QueryServiceClient::connect(uri.clone())
            .await?
            .max_decoding_message_size(64 << 20);
    let passes = acked.iter().map(|k| k >> 32).max().map_or(0, |p| p + 1);
    let mut complete: Vec<(u128, u32)> = Vec::new();
    for pass in 0..passes {
        for t in &workload.traces {
            if t.requests
                .iter()
                .all(|&r| acked.contains(&(pass << 32 | u64::from(r))))
            {
                complete.push((t.id_in_pass(pass), t.spans));
            }
        }
    }
    let mut rng = SmallRng::seed_from_u64(args.seed ^ 0x5eed);
    let sample: Vec<(u128, u32)> = complete
        .choose_multiple(&mut rng, args.query_samples)
        .copied()
        .collect();
    let mut present = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut absent = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut result = report::QueryResult::default();
    // When the traces read back ran (earliest start, latest end).
    let mut written: Option<(u64, u64)> = None;
    for (id, spans) in &sample {
        let t = Instant::now();
        let got = client::get_trace(&mut client, *id).await?;
        present.saturating_record(t.elapsed().as_micros() as u64);
        match got {
            Some(f) => {
                if f.spans == *spans as usize {
                    result.complete += 1;
                } else {
                    result.incomplete += 1;
                }
                if f.spans > 0 {
                    let (start, end) = written.unwrap_or((u64::MAX, 0));
                    written = Some((start.min(f.start_unix_nano), end.max(f.end_unix_nano)));
                }
            }
            None => result.missing += 1,
        }
    }
    for _ in 0..sample.len() {
        let id: u128 = rng.random();
        let t = Instant::now();
        let got = client::get_trace(&mut client, id).await?;
        absent.saturating_record(t.elapsed().as_micros() as u64);
        if got.is_none() {
            result.absent_not_found += 1;
        }
    }
    result.present_latency = Some(Latency::from_histogram(&present));
    result.absent_latency = Some(Latency::from_histogram(&absent));
    // The window the sampled traces ran in, so a store loaded hours ago is
    // searched where its spans are (a window without them answers nothing,
    // fast); without samples, the last hour.
    let (start, end) = match written {
        Some((start, end)) => (start, end),
        None => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos() as u64;
            (now.saturating_sub(3_600_000_000_000), now)
        }
    };
    if args.query_searches > 0 {
        let mut searches = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let services = args.services.max(1);
        eprintln!(
            "searching spans that started {:.0} s to {:.0} s ago",
            seconds_ago(start),
            seconds_ago(end)
        );
        // One search per service first, not counted: the store's first
        // search of a service loads its summaries (warm reads are measured).
        for i in 0..services + args.query_searches {
            let service = format!("service-{}", i % services);
            let t = Instant::now();
            let rows = client::search(&mut client, &service, start, end, 20).await?;
            if i >= services {
                searches.saturating_record(t.elapsed().as_micros() as u64);
                result.search_rows += rows as u64;
                result.searches += 1;
                result.empty_searches += u64::from(rows == 0);
            }
        }
        result.search_latency = Some(Latency::from_histogram(&searches));
    }
    if args.query_summaries > 0 {
        let mut reader =
            tracedb_proto::jaeger::storage::v2::trace_reader_client::TraceReaderClient::connect(
                uri.clone(),
            )
            .await?
            .max_decoding_message_size(64 << 20);
        let mut calls = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let services = args.services.max(1);
        for i in 0..services + args.query_summaries {
            let service = format!("service-{}", i % services);
            let t = Instant::now();
            let rows = client::find_trace_summaries(&mut reader, &service, start, end, 20).await?;
            if i >= services {
                calls.saturating_record(t.elapsed().as_micros() as u64);
                result.summary_rows += rows as u64;
                result.summary_calls += 1;
            }
        }
        result.summary_latency = Some(Latency::from_histogram(&calls));
    }
    if args.query_metrics > 0 {
        metrics_phase(args, &mut client, (start, end), &mut result).await?;
    }
    Ok(result)
}

/// Traces Drilldown's first page, verbatim: its RED panels (root spans'
/// rate, error rate and duration histogram) and its breakdown by service.
const DRILLDOWN_STARTUP: [(&str, u64); 4] = [
    ("{nestedSetParent<0 && true} | rate()  with(sample=true)", 64),
    (
        "{nestedSetParent<0 && true && status=error} | rate()  with(sample=true)",
        64,
    ),
    (
        "{nestedSetParent<0 && true} | histogram_over_time(duration) with(sample=true)",
        24,
    ),
    (
        "{nestedSetParent<0 && true && resource.service.name != nil} | rate() by(resource.service.name)",
        64,
    ),
];

/// Rounds of [`DRILLDOWN_STARTUP`] over `window`: each query's latency, and
/// each round's (the four asked one after another, as a page that waits for
/// all of them).
async fn metrics_phase(
    args: &Args,
    client: &mut tracedb_proto::query::v1::query_service_client::QueryServiceClient<
        tonic::transport::Channel,
    >,
    (start, end): (u64, u64),
    result: &mut report::QueryResult,
) -> anyhow::Result<()> {
    let mut each = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut rounds = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let range = end.saturating_sub(start).max(1_000_000_000);
    eprintln!(
        "asking Drilldown's startup metrics over spans that started {:.0} s to {:.0} s ago",
        seconds_ago(start),
        seconds_ago(end)
    );
    for round in 0..=args.query_metrics {
        let began = Instant::now();
        for (query, parts) in DRILLDOWN_STARTUP {
            // Drilldown's step: the range over `parts`, whole seconds.
            let step = (range / parts).max(1_000_000_000) / 1_000_000_000 * 1_000_000_000;
            let t = Instant::now();
            let (series, partial) = client::query_metrics(client, query, start, end, step).await?;
            if round > 0 {
                each.saturating_record(t.elapsed().as_micros() as u64);
                result.metrics_queries += 1;
                result.metrics_series += series as u64;
                result.metrics_partial += u64::from(partial);
            }
        }
        if round > 0 {
            rounds.saturating_record(began.elapsed().as_micros() as u64);
        }
    }
    result.metrics_latency = Some(Latency::from_histogram(&each));
    result.metrics_round_latency = Some(Latency::from_histogram(&rounds));
    Ok(())
}
