//! Queries and ingest while background compaction replaces files: a reader
//! never sees an acknowledged span missing or a span twice, and ingest and
//! queries make progress while a merge is held half done.

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc, Arc, Mutex,
    },
    time::Duration,
};

use tracedb_lsm::Engine;

use crate::util::{ids, small_tree, span_at, TestClock, T0};

const WRITERS: u128 = 3;
const TRACES: u64 = 120;

#[test]
fn readers_never_see_missing_or_doubled_spans_while_compaction_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.compaction_threads = 2;
    let engine = Arc::new(Engine::open(opts).expect("open"));
    // Per writer: traces whose both halves are acknowledged.
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (engine, done) = (engine.clone(), done.clone());
            std::thread::spawn(move || {
                for t in 0..TRACES {
                    let trace = w << 32 | u128::from(t);
                    // First half now; the second half of the previous trace arrives
                    // late, after this trace's first half; every third batch is retried.
                    let first: Vec<_> = (0..4).map(|i| span_at(trace, i, T0 + i)).collect();
                    engine.write_blocking(first.clone()).expect("write");
                    if t % 3 == 0 {
                        engine.write_blocking(first).expect("retry");
                    }
                    if t > 0 {
                        let prev = w << 32 | u128::from(t - 1);
                        let late: Vec<_> = (4..8).map(|i| span_at(prev, i, T0 + i)).collect();
                        engine.write_blocking(late).expect("write");
                        done[w as usize].store(t, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    let checks = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (engine, done, stop, checks) =
                (engine.clone(), done.clone(), stop.clone(), checks.clone());
            std::thread::spawn(move || {
                let mut i = r;
                while !stop.load(Ordering::SeqCst) {
                    for w in 0..WRITERS {
                        let upto = done[w as usize].load(Ordering::SeqCst);
                        if upto == 0 {
                            continue;
                        }
                        let t = i % upto;
                        let got = ids(&engine, w << 32 | u128::from(t));
                        let want: Vec<(u64, u64)> = (0..8).map(|i| (i, T0 + i)).collect();
                        assert_eq!(got, want, "writer {w} trace {t}");
                        checks.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 7;
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    engine.flush().expect("flush");
    // Let compaction catch up while the readers go on.
    engine.compact().expect("compact");
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().expect("reader");
    }
    let stats = engine.stats();
    assert!(stats.compactions > 0, "{stats:?}");
    assert!(checks.load(Ordering::Relaxed) > 0);
    for w in 0..WRITERS {
        for t in 0..TRACES - 1 {
            assert_eq!(ids(&engine, w << 32 | u128::from(t)).len(), 8);
        }
    }
}

#[test]
fn ingest_and_queries_go_on_while_a_merge_is_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.compaction_threads = 1;
    // The first merge stops after its first trace until the test lets it go.
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let gate = Mutex::new(Some((entered_tx, release_rx)));
    opts.hooks.after_first_trace = Some(Arc::new(move || {
        if let Some((entered, release)) = gate.lock().expect("gate").take() {
            entered.send(()).expect("test is waiting");
            release.recv().expect("test releases");
        }
    }));
    let engine = Engine::open(opts).expect("open");
    for round in 0..3u64 {
        for t in 0..20u128 {
            engine
                .write_blocking(vec![span_at(t, round, T0)])
                .expect("write");
        }
        engine.flush().expect("flush");
    }
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a merge started");
    // The merge is held. Writes, flushes and reads must all complete.
    let before = engine.stats();
    for t in 100..140u128 {
        engine
            .write_blocking(vec![span_at(t, 1, T0)])
            .expect("write while merging");
        assert_eq!(ids(&engine, t).len(), 1);
    }
    engine.flush().expect("flush while merging");
    for t in 0..20u128 {
        assert_eq!(ids(&engine, t).len(), 3, "inputs still readable");
    }
    let during = engine.stats();
    assert!(during.flushes > before.flushes);
    assert_eq!(
        during.compactions, before.compactions,
        "the merge is still held"
    );
    release_tx.send(()).expect("release");
    engine.compact().expect("compact");
    assert!(engine.stats().compactions > before.compactions);
    for t in 0..20u128 {
        assert_eq!(ids(&engine, t).len(), 3);
    }
    // Once the threads are joined, every replaced input has been deleted and no
    // half-done output is left.
    engine.close().expect("close");
    let files: BTreeSet<u64> = crate::util::files_in_version(&engine);
    assert_eq!(files, crate::util::files_on_disk(dir.path()));
}

/// An engine with one compaction thread, whose level 1 is merging four
/// overlapping runs of 750 traces down, slowly (5 ms a trace while `slow`
/// is set), and has been for at least 10 traces; the count of that merge's
/// traces so far.
fn a_slow_deeper_merge(
    dir: &std::path::Path,
    clock: &TestClock,
    slow: &Arc<AtomicBool>,
) -> (Engine, Arc<AtomicU64>) {
    let mut opts = small_tree(dir, clock);
    opts.compaction_threads = 1;
    // Level 1 merges down when it holds `size_ratio` runs, not by size.
    opts.compaction.level_base_bytes = u64::MAX / 4;
    let deeper_traces = Arc::new(AtomicU64::new(0));
    let (s, d) = (slow.clone(), deeper_traces.clone());
    opts.hooks.between_deeper_traces = Some(Arc::new(move || {
        d.fetch_add(1, Ordering::SeqCst);
        if s.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }));
    let engine = Engine::open(opts).expect("open");

    // Four overlapping sorted runs of 750 traces in level 1 (one level-0
    // merge each, of trace IDs round, round + 4, ...); the fourth makes
    // level 1 merge its runs down, slowly.
    for round in 0..4u128 {
        engine.pause_compaction();
        for batch in 0..3u128 {
            let first = batch * 250;
            let spans = (first..first + 250)
                .map(|i| i * 4 + round)
                .map(|t| span_at(t, 1, T0 + (t / 100) as u64))
                .collect();
            engine.write_blocking(spans).expect("write");
        }
        engine.flush().expect("flush");
        if round == 3 {
            slow.store(true, Ordering::SeqCst);
        }
        engine.resume_compaction();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while engine.stats().levels[0].files > 0 {
            assert!(std::time::Instant::now() < deadline, "level 0 not merged");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while deeper_traces.load(Ordering::SeqCst) < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "no deeper merge started: {:?}",
            engine.stats().levels
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    (engine, deeper_traces)
}

#[test]
fn level_0_is_merged_while_a_long_merge_of_deeper_runs_holds_the_only_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let slow = Arc::new(AtomicBool::new(false));
    let (engine, deeper_traces) = a_slow_deeper_merge(dir.path(), &clock, &slow);
    let trigger = small_tree(dir.path(), &clock).compaction.l0_trigger_files;

    // New level-0 files while that merge runs (it needs 15 s at this pace).
    for batch in 0..(2 * trigger as u128) {
        let spans = (0..20u128)
            .map(|t| span_at((1 << 40) | (batch * 20 + t), 1, T0))
            .collect();
        engine.write_blocking(spans).expect("write");
        engine.flush().expect("flush");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stats = engine.stats();
        if stats.levels[0].files < trigger {
            assert!(stats.merges_run_first > 0, "{stats:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "level 0 still holds {} files behind the deeper merge",
            stats.levels[0].files
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The deeper merge is still under way: it goes on to another trace.
    let seen = deeper_traces.load(Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while deeper_traces.load(Ordering::SeqCst) == seen {
        assert!(
            std::time::Instant::now() < deadline,
            "the deeper merge ended early"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    slow.store(false, Ordering::SeqCst);
    engine.compact().expect("compact");
    for t in [0u128, 1_234, 2_999, 1 << 40, (1 << 40) | 7] {
        assert_eq!(
            ids(&engine, t),
            vec![(1, if t < 3_000 { T0 + (t / 100) as u64 } else { T0 })],
            "trace {t}"
        );
    }
}

#[test]
fn level_0_below_its_trigger_is_merged_once_no_flush_has_come_for_a_while() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.compaction_threads = 1;
    opts.compaction.l0_trigger_files = 100;
    opts.compaction.l0_quiet = Duration::from_secs(1);
    let engine = Engine::open(opts).expect("open");
    for round in 0..2u64 {
        for t in 0..20u128 {
            engine
                .write_blocking(vec![span_at(t, round, T0)])
                .expect("write");
        }
        engine.flush().expect("flush");
    }
    let flushed = engine.stats().levels[0].files;
    assert!(
        (2..100).contains(&flushed),
        "{flushed} files: below the trigger"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while engine.stats().levels[0].files > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "level 0 not merged though quiet"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = engine.stats();
    assert!(stats.compactions >= 1);
    assert!(stats.levels[1].files > 0);
    for t in 0..20u128 {
        assert_eq!(ids(&engine, t).len(), 2, "trace {t}");
    }
}

#[test]
fn a_merge_stopped_by_close_removes_the_files_it_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let slow = Arc::new(AtomicBool::new(false));
    let (engine, _) = a_slow_deeper_merge(dir.path(), &clock, &slow);
    // Outputs fill at 4 KiB: wait until the merge has finished some.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let written = crate::util::files_on_disk(dir.path())
            .difference(&crate::util::files_in_version(&engine))
            .count();
        if written >= 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the merge wrote no output"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = crate::util::files_in_version(&engine);
    // Still merging (15 s at this pace): close stops it between two traces.
    engine.close().expect("close");
    assert_eq!(crate::util::files_in_version(&engine), before);
    assert_eq!(crate::util::files_on_disk(dir.path()), before);
}
