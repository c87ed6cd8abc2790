//! Disk full and I/O errors, through the fault-injecting file layer: writes,
//! fsyncs and segment creation of the WAL, flush and compaction outputs, and
//! manifest appends and rewrites fail with `ENOSPC` or `EIO`. Whatever fails:
//! a write that fails gets a retryable error, every acknowledged span stays
//! readable (before and after a restart), no half-written file is ever used,
//! the manifest stays consistent, and the engine carries on by itself once
//! the faults stop.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::{
    check::check_data_dir,
    fault::{FaultInjector, FaultKind, FaultOp, FaultTarget},
    Engine, EngineOptions, Error,
};

use crate::util::{files_in_version, files_on_disk, ids, small_tree, span_at, TestClock, T0};

const TRACES: u128 = 12;

fn faulty(dir: &Path, clock: &TestClock, injector: &Arc<FaultInjector>) -> EngineOptions {
    let mut opts = small_tree(dir, clock);
    opts.hooks.faults = Some(injector.clone());
    opts.hooks.retry_delay = Some(Duration::from_millis(5));
    opts
}

/// Acknowledged spans by trace: span ID -> start.
type Acked = BTreeMap<u128, BTreeMap<u64, u64>>;

/// Writes one batch per trace; records what was acknowledged. Every failure
/// must be the retryable WAL error.
fn write_round(engine: &Engine, round: u64, acked: &mut Acked) -> (u64, u64) {
    let (mut ok, mut failed) = (0, 0);
    for t in 1..=TRACES {
        let spans: Vec<_> = (0..4)
            .map(|i| span_at(t, round * 4 + i, T0 + round * 4 + i))
            .collect();
        match engine.write_blocking(spans.clone()) {
            Ok(()) => {
                ok += 1;
                let entry = acked.entry(t).or_default();
                for s in spans {
                    entry.insert(u64::from_be_bytes(s.span_id.0), s.start_unix_nano);
                }
            }
            Err(Error::WalFailed(reason)) => {
                failed += 1;
                assert!(
                    reason.contains("os error 28") || reason.contains("os error 5"),
                    "{reason}"
                );
            }
            Err(e) => panic!("a write failed with a non-retryable error: {e}"),
        }
    }
    (ok, failed)
}

/// Every acknowledged span is returned, exactly once.
fn check_acked(engine: &Engine, acked: &Acked, context: &str) {
    for (&t, spans) in acked {
        let got = ids(engine, t);
        let want: Vec<(u64, u64)> = {
            let mut v: Vec<_> = spans.iter().map(|(&id, &start)| (id, start)).collect();
            v.sort_by_key(|&(id, start)| (start, id));
            v
        };
        let got_acked: Vec<_> = got
            .iter()
            .copied()
            .filter(|(id, _)| spans.contains_key(id))
            .collect();
        assert_eq!(got_acked, want, "{context}: trace {t}");
        let mut unique = got.clone();
        unique.dedup_by_key(|(id, _)| *id);
        assert_eq!(
            unique.len(),
            got.len(),
            "{context}: duplicates in trace {t}"
        );
    }
}

/// Runs `f` on a thread and waits for it, giving up (and failing) after a
/// minute: a hang is a bug, not a slow machine.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the engine recovers by itself")
}

fn assert_clean(dir: &Path, context: &str) {
    let report = check_data_dir(dir).expect("check");
    assert!(report.is_clean(), "{context}: {report}");
    let tmp: Vec<_> = std::fs::read_dir(dir.join("tables"))
        .expect("tables")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "{context}: leftover {tmp:?}");
}

#[test]
fn a_full_disk_refuses_writes_retryably_and_the_engine_recovers_when_space_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let injector = FaultInjector::new();
    let engine = Arc::new(Engine::open(faulty(dir.path(), &clock, &injector)).expect("open"));
    let mut acked = Acked::new();
    for round in 0..3 {
        assert_eq!(write_round(&engine, round, &mut acked).1, 0);
    }
    engine.flush().expect("flush");
    // Acknowledged, in memory and in the WAL when the disk fills up.
    assert_eq!(write_round(&engine, 3, &mut acked).1, 0);

    injector.fail_from_nth(None, None, 1, FaultKind::NoSpace);
    let (ok, failed) = write_round(&engine, 4, &mut acked);
    assert_eq!((ok, failed), (0, TRACES as u64), "every write is refused");
    // A flush of what is in memory fails and is retried in the background.
    let flusher = {
        let engine = engine.clone();
        std::thread::spawn(move || engine.flush())
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine.stats().flush_errors < 3 {
        assert!(Instant::now() < deadline, "the flush never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    check_acked(&engine, &acked, "while the disk is full");

    injector.heal();
    flusher
        .join()
        .expect("flusher")
        .expect("the flush succeeds once space returns");
    for round in 5..7 {
        assert_eq!(
            write_round(&engine, round, &mut acked).1,
            0,
            "writes work again"
        );
    }
    engine.flush().expect("flush");
    engine.compact().expect("compact");
    check_acked(&engine, &acked, "after space returned");
    assert_eq!(files_on_disk(dir.path()), files_in_version(&engine));
    engine.close().expect("close");
    drop(engine);
    assert_clean(dir.path(), "after close");

    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("reopen");
    check_acked(&engine, &acked, "after reopen");
}

/// The kinds of operations a seeded case can make fail.
const TARGETS: [Option<FaultTarget>; 4] = [
    None,
    Some(FaultTarget::Wal),
    Some(FaultTarget::Table),
    Some(FaultTarget::Manifest),
];

#[test]
fn seeded_faults_anywhere_lose_no_acknowledged_span() {
    let cases: u64 = std::env::var("TRACEDB_FAULT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let seed: u64 = std::env::var("TRACEDB_FAULT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    println!("fault cases: {cases}, seed {seed} (TRACEDB_FAULT_SEED)");
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut injected, mut refused, mut acked_spans) = (0, 0, 0);
    for case in 0..cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = TestClock::new();
        let injector = FaultInjector::new();
        let target = TARGETS[rng.random_range(0..TARGETS.len())];
        let op = [None, Some(FaultOp::Write), Some(FaultOp::Sync)][rng.random_range(0..3)];
        let kind = [FaultKind::NoSpace, FaultKind::Io][rng.random_range(0..2)];
        let context = format!("case {case}: {target:?} {op:?} {kind:?}");
        let engine = Arc::new(Engine::open(faulty(dir.path(), &clock, &injector)).expect("open"));
        let mut acked = Acked::new();
        // Faults land after some warm-up, anywhere in the next writes,
        // flushes, compactions and manifest edits; some fail several times.
        for _ in 0..rng.random_range(1..4) {
            injector.fail_nth(target, op, rng.random_range(1..60), kind);
        }
        for round in 0..8 {
            refused += write_round(&engine, round, &mut acked).1;
            if round % 2 == 1 {
                let e = engine.clone();
                within_a_minute(move || e.flush()).expect("flush retries until it succeeds");
            }
            if round % 4 == 3 {
                // A compaction that hits a fault fails and leaves the tree as it was.
                let e = engine.clone();
                let first = within_a_minute(move || e.compact());
                if first.is_err() {
                    let e = engine.clone();
                    let mut again = within_a_minute(move || e.compact());
                    for _ in 0..5 {
                        if again.is_ok() {
                            break;
                        }
                        let e = engine.clone();
                        again = within_a_minute(move || e.compact());
                    }
                    again.unwrap_or_else(|e| panic!("{context}: compaction stays broken: {e}"));
                }
            }
            check_acked(&engine, &acked, &context);
        }
        injector.heal();
        injected += injector.injected();
        acked_spans += acked.values().map(|s| s.len() as u64).sum::<u64>();
        let e = engine.clone();
        within_a_minute(move || e.flush()).expect("flush");
        assert_eq!(
            files_on_disk(dir.path()),
            files_in_version(&engine),
            "{context}: a file on disk that is not live, or the reverse"
        );
        engine.close().expect("close");
        drop(engine);
        assert_clean(dir.path(), &context);
        let engine = Engine::open(small_tree(dir.path(), &clock)).expect("reopen");
        check_acked(&engine, &acked, &format!("{context}, after reopen"));
    }
    println!(
        "fault cases: {cases}, faults injected: {injected}, writes refused: {refused}, \
         acknowledged spans: {acked_spans}, lost: 0"
    );
    assert!(injected > 0, "the cases injected no fault");
}
