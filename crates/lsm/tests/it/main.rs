//! Engine-level tests: the write path, flushes, reads during flushes, restart
//! (here), and in the modules: a model test against a `BTreeMap`, concurrency
//! with compaction, crashes at each compaction step, retention, back-pressure,
//! bounded lookups and the compaction picker.

mod backpressure;
mod cells;
mod cold;
mod concurrency;
mod corruption;
mod crash;
mod faults;
mod index;
mod lookups;
mod model;
mod retention;
mod scale;
mod util;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use tracedb_lsm::{
    test_util::{group, span_with},
    Engine, EngineOptions, Error, MemTableOptions, ScopeGroup, Span, TraceId,
};

/// Span `id` of `trace` (span ID `id + 1`), starting at `id` ns, with a
/// payload of 14 to 63 bytes.
fn span(group: &Arc<ScopeGroup>, trace: u128, id: u64) -> Span {
    span_with(
        group,
        trace,
        id + 1,
        (id, id + 10),
        format!("span {trace:x} {id} {}", "p".repeat((id % 50) as usize)),
    )
}

fn options(dir: &std::path::Path, flush_bytes: usize) -> EngineOptions {
    let mut opts = EngineOptions::new(dir);
    opts.memtable = MemTableOptions {
        shards: 2,
        flush_bytes,
        max_age: Duration::from_secs(3600),
    };
    // These spans have start times near the Unix epoch; keep them.
    opts.retention = None;
    opts
}

fn check_trace(engine: &Engine, trace: u128, spans: u64) {
    let got = engine
        .get_trace(&TraceId(trace.to_be_bytes()))
        .expect("get_trace");
    assert_eq!(got.len() as u64, spans, "trace {trace:x}");
    for (i, s) in got.iter().enumerate() {
        assert_eq!(s.start_unix_nano, i as u64, "ordered by start time");
        assert_eq!(s.payload, span(&s.group, trace, i as u64).payload);
        assert_eq!(
            s.group.resource,
            Some(Bytes::from(format!("resource svc-{}", trace % 3)))
        );
    }
}

/// Spans that share a span ID but differ (a shared client/server span ID,
/// a fixture that resends a span a second later) are all kept: in memory,
/// in files, after compaction and after reopening. Exact repeats collapse.
#[test]
fn spans_sharing_a_span_id_are_all_kept_and_only_exact_repeats_collapse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || {
        let mut opts = options(dir.path(), usize::MAX);
        opts.compaction.l0_trigger_files = 2;
        opts.compaction_threads = 0;
        Engine::open(opts).expect("open")
    };
    let engine = open();
    let (a, b) = (group("svc-a"), group("svc-b"));
    // Span ID 7 four times: two starts, two payloads, two resources.
    let batch = vec![
        span_with(&a, 1, 7, (10, 20), "first"),
        span_with(&a, 1, 7, (11, 21), "a second later"),
        span_with(&a, 1, 7, (10, 20), "same start, other bytes"),
        span_with(&b, 1, 7, (10, 20), "first"),
    ];
    let want = |engine: &Engine, when: &str| {
        let got = engine
            .get_trace(&TraceId(1u128.to_be_bytes()))
            .expect("get_trace");
        let mut got: Vec<(u64, String, Option<Bytes>)> = got
            .iter()
            .map(|s| {
                let text = String::from_utf8_lossy(&s.payload).into_owned();
                (s.start_unix_nano, text, s.group.resource.clone())
            })
            .collect();
        got.sort();
        let resource = |svc: &str| Some(Bytes::from(format!("resource {svc}")));
        assert_eq!(
            got,
            vec![
                (10, "first".to_string(), resource("svc-a")),
                (10, "first".to_string(), resource("svc-b")),
                (10, "same start, other bytes".to_string(), resource("svc-a")),
                (11, "a second later".to_string(), resource("svc-a")),
            ],
            "{when}"
        );
    };
    engine.write_blocking(batch.clone()).expect("write");
    // A retried export in the same buffer.
    engine.write_blocking(batch.clone()).expect("retry");
    want(&engine, "in memory");
    engine.flush().expect("flush");
    want(&engine, "flushed");
    engine
        .write_blocking(batch.clone())
        .expect("retry after flush");
    engine.flush().expect("flush");
    engine
        .write_blocking(batch.clone())
        .expect("retry after two flushes");
    engine.flush().expect("flush");
    engine
        .write_blocking(batch)
        .expect("retry after three flushes");
    engine.flush().expect("flush");
    want(&engine, "in four files");
    engine.compact().expect("compact");
    want(&engine, "compacted");
    let stats = engine.stats();
    assert!(stats.compactions > 0, "{stats:?}");
    // 20 spans written (8 before the first flush), 4 kept.
    assert_eq!(stats.compaction_duplicates, 16, "{stats:?}");
    engine.close().expect("close");
    drop(engine);
    want(&open(), "reopened");
}

#[test]
fn spans_are_found_in_memory_in_files_and_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(options(dir.path(), usize::MAX)).expect("open");
    for t in 0..30u128 {
        let g = group(&format!("svc-{}", t % 3));
        engine
            .write_blocking((0..10).map(|i| span(&g, t, i)).collect())
            .expect("write");
    }
    check_trace(&engine, 5, 10);
    assert_eq!(engine.stats().tables, 0, "nothing flushed yet");

    engine.flush().expect("flush");
    let stats = engine.stats();
    assert!(
        stats.tables >= 1 && stats.memtable_spans == 0 && stats.sealed_buffers == 0,
        "{stats:?}"
    );
    check_trace(&engine, 5, 10);
    assert!(engine
        .get_trace(&TraceId([0xee; 16]))
        .expect("get")
        .is_empty());

    engine.close().expect("close");
    drop(engine);
    let engine = Engine::open(options(dir.path(), usize::MAX)).expect("reopen");
    for t in 0..30u128 {
        check_trace(&engine, t, 10);
    }
}

#[test]
fn reopening_replays_the_wal_of_unflushed_spans() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let engine = Engine::open(options(dir.path(), usize::MAX)).expect("open");
        let g = group("svc-1");
        engine
            .write_blocking((0..7).map(|i| span(&g, 1, i)).collect())
            .expect("write");
        // Closing flushes; to test replay, copy the WAL away before close and put it back after.
        let wal = dir.path().join("wal");
        let saved = dir.path().join("wal-saved");
        copy_dir(&wal, &saved);
        engine.close().expect("close");
        std::fs::remove_dir_all(dir.path().join("tables")).expect("drop files");
        std::fs::remove_file(dir.path().join("MANIFEST")).expect("drop manifest");
        std::fs::remove_dir_all(&wal).expect("drop wal");
        std::fs::rename(&saved, &wal).expect("restore wal");
    }
    let engine = Engine::open(options(dir.path(), usize::MAX)).expect("reopen");
    check_trace(&engine, 1, 7);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

#[test]
fn reads_during_flushes_never_miss_an_acknowledged_span() {
    let dir = tempfile::tempdir().expect("tempdir");
    // ~8 KiB buffers: many seals and flushes while readers run.
    let engine = Arc::new(Engine::open(options(dir.path(), 8 << 10)).expect("open"));
    let writers: Vec<_> = (0..4u128)
        .map(|w| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for t in 0..150u128 {
                    let trace = w * 1_000 + t;
                    let g = group(&format!("svc-{}", trace % 3));
                    engine
                        .write_blocking((0..5).map(|i| span(&g, trace, i)).collect())
                        .expect("write");
                    // Acknowledged: it must be readable now and from now on.
                    check_trace(&engine, trace, 5);
                    if t > 0 {
                        check_trace(&engine, trace - 1, 5);
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    let stats = engine.stats();
    assert!(
        stats.flushes >= 5,
        "expected flushes during the run: {stats:?}"
    );
    engine.flush().expect("flush");
    for w in 0..4u128 {
        for t in 0..150u128 {
            check_trace(&engine, w * 1_000 + t, 5);
        }
    }
    // Everything is in files: only the live WAL segment is left (spare files,
    // flushed segments kept for reuse, are not segments).
    let segments = std::fs::read_dir(dir.path().join("wal"))
        .expect("wal dir")
        .filter(|e| {
            let name = e.as_ref().expect("entry").file_name();
            name.to_string_lossy().ends_with(".wal")
        })
        .count();
    assert_eq!(segments, 1, "flushed WAL segments were not deleted");
}

#[test]
fn deleted_files_pass_through_the_trash_which_close_leaves_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    // What a killed run left half-deleted is deleted at the next open.
    let trash = dir.path().join("trash");
    std::fs::create_dir_all(&trash).expect("mkdir");
    let leftover = trash.join("4242-0-00000000000000000009.sst");
    std::fs::write(&leftover, vec![1u8; 3 << 20]).expect("write leftover");
    let mut opts = options(dir.path(), 8 << 10);
    opts.wal_segment_bytes = 4 << 10;
    let engine = Engine::open(opts).expect("open");
    for t in 0..200u128 {
        let g = group(&format!("svc-{}", t % 3));
        engine
            .write_blocking((0..5).map(|i| span(&g, t, i)).collect())
            .expect("write");
    }
    engine.flush().expect("flush");
    // After a flush the log holds the current segment, at most one the
    // sync thread may still be writing (it goes at the next flush), and
    // the spares kept for reuse; every other flushed segment is gone.
    let names: Vec<String> = std::fs::read_dir(dir.path().join("wal"))
        .expect("wal dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let live = names.iter().filter(|n| n.ends_with(".wal")).count();
    let spares = names.len() - live;
    let created = engine.stats().wal.segments_created;
    assert!(created >= 10, "the test rotated only {created} segments");
    assert!(
        live <= 2 && spares <= tracedb_lsm::wal::MAX_SPARES,
        "flushed WAL segments left their directory: {names:?} after {created} were created"
    );
    engine.close().expect("close");
    let left: Vec<_> = std::fs::read_dir(&trash)
        .expect("trash dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        left.is_empty(),
        "files left in the trash after close: {left:?}"
    );
    drop(engine);
    let engine = Engine::open(options(dir.path(), usize::MAX)).expect("reopen");
    for t in 0..200u128 {
        check_trace(&engine, t, 5);
    }
}

#[test]
fn a_data_directory_opens_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _engine = Engine::open(options(dir.path(), usize::MAX)).expect("open");
    match Engine::open(options(dir.path(), usize::MAX)) {
        Err(Error::Locked(path)) => assert_eq!(path, dir.path()),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("second open of a locked directory succeeded"),
    }
}

#[test]
fn leftovers_of_an_interrupted_flush_are_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("tables")).expect("mkdir");
    let leftover = dir.path().join("tables/00000000000000000003.sst.tmp");
    std::fs::write(&leftover, b"half a file").expect("write");
    let _engine = Engine::open(options(dir.path(), usize::MAX)).expect("open");
    assert!(!leftover.exists());
}

#[test]
fn duplicate_spans_are_returned_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(options(dir.path(), usize::MAX)).expect("open");
    let g = group("svc-1");
    let batch: Vec<Span> = (0..4).map(|i| span(&g, 1, i)).collect();
    engine.write_blocking(batch.clone()).expect("write");
    engine.flush().expect("flush");
    engine.write_blocking(batch).expect("retried write");
    check_trace(&engine, 1, 4);
}
