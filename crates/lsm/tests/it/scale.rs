//! The closing figure of issue 3: ingest 20 million synthetic spans through
//! `Engine::write_blocking` with default options (4 writer threads, batches
//! of 1,000 spans from interleaved traces of 5-50 spans), then print the
//! files per level and the trace-by-ID latency percentiles. Ignored in CI:
//!
//! `cargo test --release -p tracedb-lsm --test it -- --ignored --nocapture ingest_20_million`
//!
//! `TRACEDB_SCALE_SPANS` overrides the span count.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::{Engine, EngineOptions, Error, Span, SpanId, TraceId};

use crate::util::group;

const WRITERS: u64 = 4;
const BATCH: usize = 1_000;

fn trace_id(writer: u64, n: u64) -> TraceId {
    // Spread over the ID space like random IDs, but reproducible.
    let x = (u128::from(writer) << 64 | u128::from(n))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    TraceId(x.to_be_bytes())
}

#[test]
#[ignore = "takes minutes; run by hand for the closing figure"]
fn ingest_20_million_spans_and_measure_lookups() {
    let total: u64 = std::env::var("TRACEDB_SCALE_SPANS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000_000);
    let dir = tempfile::tempdir_in(std::env::var("TRACEDB_SCALE_DIR").unwrap_or("/tmp".into()))
        .expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.retention = None;
    let engine = Arc::new(Engine::open(opts).expect("open"));
    let started = Instant::now();
    let traces_per_writer: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let engine = engine.clone();
                s.spawn(move || {
                    let g = group(w);
                    let mut rng = SmallRng::seed_from_u64(w);
                    let mut open: Vec<(u64, u32, u32)> = Vec::new(); // (trace n, next span, spans)
                    let mut next_trace = 0u64;
                    let mut written = 0u64;
                    let mut now = 1_700_000_000_000_000_000u64 + w;
                    while written < total / WRITERS {
                        let mut batch: Vec<Span> = Vec::with_capacity(BATCH);
                        while batch.len() < BATCH {
                            if open.len() < 32 {
                                open.push((next_trace, 0, rng.random_range(5..=50)));
                                next_trace += 1;
                            }
                            let k = rng.random_range(0..open.len());
                            let (n, i, len) = &mut open[k];
                            now += 1_000;
                            let mut payload = vec![0u8; 120];
                            rng.fill(&mut payload[..40]);
                            batch.push(Span {
                                trace_id: trace_id(w, *n),
                                span_id: SpanId((u64::from(*i) + 1).to_be_bytes()),
                                start_unix_nano: now,
                                end_unix_nano: now + 50_000,
                                group: g.clone(),
                                payload: Bytes::from(payload),
                            });
                            *i += 1;
                            if *i == *len {
                                open.swap_remove(k);
                            }
                        }
                        written += batch.len() as u64;
                        loop {
                            match engine.write_blocking(batch.clone()) {
                                Ok(()) => break,
                                Err(Error::Backpressure { retry_after, .. }) => {
                                    std::thread::sleep(retry_after.min(Duration::from_millis(50)))
                                }
                                Err(e) => panic!("write: {e}"),
                            }
                        }
                    }
                    // Traces whose spans were all written.
                    next_trace - open.len() as u64
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer"))
            .collect()
    });
    let ingest = started.elapsed();
    engine.flush().expect("flush");
    let s = engine.stats();
    println!(
        "ingested {total} spans in {:.1} s ({:.0} spans/s); back-pressure rejections {}",
        ingest.as_secs_f64(),
        total as f64 / ingest.as_secs_f64(),
        s.backpressure_rejections
    );
    print_levels("after ingest", &engine);
    let settle = Instant::now();
    engine.compact().expect("compact");
    println!(
        "compaction settled in {:.1} s",
        settle.elapsed().as_secs_f64()
    );
    print_levels("after compaction", &engine);

    let mut rng = SmallRng::seed_from_u64(99);
    for (label, present) in [("present", true), ("absent", false)] {
        let blocks_before = engine.stats().blocks_read;
        let mut lat = Vec::with_capacity(10_000);
        for _ in 0..10_000 {
            let w = rng.random_range(0..WRITERS);
            let id = if present {
                trace_id(w, rng.random_range(0..traces_per_writer[w as usize]))
            } else {
                TraceId(rng.random::<u128>().to_be_bytes())
            };
            let t = Instant::now();
            let spans = engine.get_trace(&id).expect("get");
            lat.push(t.elapsed());
            assert_eq!(!spans.is_empty(), present);
        }
        lat.sort();
        let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
        println!(
            "lookup {label}: p50 {:?} p90 {:?} p99 {:?} max {:?}; blocks read per lookup {:.2}",
            p(0.5),
            p(0.9),
            p(0.99),
            lat[lat.len() - 1],
            (engine.stats().blocks_read - blocks_before) as f64 / 10_000.0
        );
    }
    let s = engine.stats();
    println!(
        "flushes {} compactions {} moves {}; flushed {} MB, compaction read {} MB wrote {} MB; wal fsyncs {} mean {:?}",
        s.flushes,
        s.compactions,
        s.compaction_moves,
        s.flush_bytes_written >> 20,
        s.compaction_bytes_read >> 20,
        s.compaction_bytes_written >> 20,
        s.wal.data_syncs,
        Duration::from_nanos(s.wal.data_sync_nanos / s.wal.data_syncs.max(1)),
    );
}

fn print_levels(label: &str, engine: &Engine) {
    let s = engine.stats();
    let levels: Vec<String> = s
        .levels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "L{i}: {} files {} runs {} MB",
                l.files,
                l.runs,
                l.bytes >> 20
            )
        })
        .collect();
    println!("{label}: {}", levels.join(", "));
}
