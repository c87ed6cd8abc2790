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
