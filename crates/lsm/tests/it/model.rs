//! The model test: random interleavings of ingest (with retried and late
//! spans), flush, compaction, retention, clean restart and crash, checked
//! against a `BTreeMap` of trace ID -> span ID -> start time.
//!
//! A crash is simulated with [`Engine::abandon`]: the engine stops as a
//! killed process would (no flush, no file deleted, acknowledged spans only
//! in the WAL), then the directory is opened again. Byte-level damage (torn
//! manifest and WAL tails, half-written files) is covered by the crash tests
//! and the manifest and WAL unit tests.

use std::collections::BTreeMap;

use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::Engine;

use crate::util::{files_in_version, files_on_disk, ids, small_tree, span_at, TestClock, SEC};

const RETENTION: u64 = 60 * SEC;

struct Model {
    /// trace -> span ID -> start time.
    spans: BTreeMap<u128, BTreeMap<u64, u64>>,
    /// trace -> base start time, fixed when the trace first appears.
    base: BTreeMap<u128, u64>,
}

impl Model {
    fn expected(&self, trace: u128, now: u64) -> Vec<(u64, u64)> {
        let cutoff = now.saturating_sub(RETENTION);
        let mut v: Vec<(u64, u64)> = self
            .spans
            .get(&trace)
            .into_iter()
            .flatten()
            .filter(|(_, &start)| start + 1_000 >= cutoff)
            .map(|(&id, &start)| (id, start))
            .collect();
        v.sort_by_key(|&(id, start)| (start, id));
        v
    }
}

fn check(engine: &Engine, model: &Model, clock: &TestClock, traces: impl Iterator<Item = u128>) {
    for t in traces {
        assert_eq!(
            ids(engine, t),
            model.expected(t, clock.now()),
            "trace {t:x} at clock {}",
            clock.now()
        );
    }
}

fn run(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let open = || Engine::open(small_tree(dir.path(), &clock)).expect("open");
    let mut engine = open();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model {
        spans: BTreeMap::new(),
        base: BTreeMap::new(),
    };
    let (mut compactions, mut crashes, mut dropped) = (0, 0, 0);
    for _ in 0..steps {
        match rng.random_range(0..100) {
            0..=49 => {
                // A batch of spans of a few traces; IDs repeat, so some are retries.
                let n = rng.random_range(1..=20);
                let mut batch = Vec::with_capacity(n);
                for _ in 0..n {
                    let trace = rng.random_range(1..=80u128) << 64 | 0x5eed;
                    // Late spans: a trace's base time is set when it first shows up,
                    // up to 30 s in the past; later spans keep it.
                    let now = clock.now();
                    let back = rng.random_range(0..30 * SEC);
                    let base = *model.base.entry(trace).or_insert(now - back);
                    let id = rng.random_range(1..=30u64);
                    let start = base + id * 1_000_000;
                    model.spans.entry(trace).or_default().insert(id, start);
                    batch.push(span_at(trace, id, start));
                }
                engine.write_blocking(batch).expect("write");
            }
            50..=59 => engine.flush().expect("flush"),
            60..=69 => compactions += engine.compact().expect("compact"),
            70..=77 => {
                clock.advance(rng.random_range(0..20 * SEC));
                dropped += engine.apply_retention().expect("retention");
            }
            78..=81 => {
                engine.close().expect("close");
                drop(engine);
                engine = open();
            }
            82..=85 => {
                engine.abandon();
                drop(engine);
                engine = open();
                crashes += 1;
                // Recovery leaves no file the manifest does not name (after the
                // flush of replayed spans, which writes files of its own).
                engine.flush().expect("flush");
                assert_eq!(files_on_disk(dir.path()), files_in_version(&engine));
            }
            _ => {
                let picks: Vec<u128> = (0..8)
                    .map(|_| rng.random_range(1..=80u128) << 64 | 0x5eed)
                    .collect();
                check(&engine, &model, &clock, picks.into_iter());
            }
        }
    }
    check(&engine, &model, &clock, model.spans.keys().copied());
    engine.flush().expect("flush");
    engine.compact().expect("compact");
    check(&engine, &model, &clock, model.spans.keys().copied());
    assert!(
        compactions > 0 && crashes > 0,
        "seed {seed}: the run must compact and crash"
    );
    assert!(dropped > 0, "seed {seed}: retention must drop files");
    engine.apply_retention().expect("retention");
    check(&engine, &model, &clock, model.spans.keys().copied());
    engine.close().expect("close");
    drop(engine);
    let engine = open();
    check(&engine, &model, &clock, model.spans.keys().copied());
}

#[test]
fn model_seed_1() {
    run(1, 600);
}

#[test]
fn model_seed_2() {
    run(2, 600);
}

#[test]
fn model_seed_3() {
    run(3, 600);
}
