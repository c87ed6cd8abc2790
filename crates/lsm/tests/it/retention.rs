//! Retention: files whose newest span is past the limit are dropped whole;
//! young data stays; a file straddling the limit stays until its newest span
//! expires, its expired spans hidden from reads and dropped when compaction
//! rewrites it; expiring one partition rewrites nothing.

use tracedb_lsm::Engine;

use crate::util::{ids, small_tree, span_at, TestClock, SEC, T0};

#[test]
fn old_files_are_dropped_young_ones_kept_and_a_straddling_one_handled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open"); // 60 s retention
                                                                              // File A: only old spans. File B: only young. File C: both (straddles).
    engine
        .write_blocking(vec![span_at(1, 1, T0 - 120 * SEC)])
        .expect("write");
    engine.flush().expect("flush");
    engine
        .write_blocking(vec![span_at(2, 1, T0 - 10 * SEC)])
        .expect("write");
    engine.flush().expect("flush");
    engine
        .write_blocking(vec![
            span_at(3, 1, T0 - 90 * SEC),
            span_at(3, 2, T0 - 5 * SEC),
        ])
        .expect("write");
    engine.flush().expect("flush");
    assert_eq!(engine.stats().tables, 3);

    assert_eq!(
        engine.apply_retention().expect("retention"),
        1,
        "only A goes"
    );
    let stats = engine.stats();
    assert_eq!((stats.tables, stats.retention_files_dropped), (2, 1));
    assert!(ids(&engine, 1).is_empty());
    assert_eq!(ids(&engine, 2).len(), 1);
    // The straddling file stays, but its expired span is not returned.
    assert_eq!(ids(&engine, 3), vec![(2, T0 - 5 * SEC)]);

    // Once its newest span expires, the straddling file goes too.
    clock.advance(56 * SEC);
    assert_eq!(engine.apply_retention().expect("retention"), 2);
    assert_eq!(engine.stats().tables, 0);
    assert!(ids(&engine, 2).is_empty() && ids(&engine, 3).is_empty());
}

#[test]
fn compaction_drops_expired_spans_of_a_straddling_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
    for round in 0..3u64 {
        engine
            .write_blocking(vec![
                span_at(7, round, T0 - 100 * SEC),
                span_at(8, round, T0 - SEC),
            ])
            .expect("write");
        engine.flush().expect("flush");
    }
    engine.compact().expect("compact");
    let stats = engine.stats();
    assert_eq!(stats.expired_spans_dropped, 3, "{stats:?}");
    assert_eq!(stats.levels[0].files, 0);
    assert_eq!(ids(&engine, 8).len(), 3);
    assert!(ids(&engine, 7).is_empty());
}

#[test]
fn expiring_one_partition_drops_its_files_and_rewrites_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open"); // 10 s partitions
                                                                              // Six partitions' worth of spans, 10 s apart, all young.
    for p in 0..6u64 {
        for t in 0..20u128 {
            let start = T0 - 55 * SEC + p * 10 * SEC;
            engine
                .write_blocking(vec![span_at(t << 8 | u128::from(p), 1, start)])
                .expect("write");
        }
    }
    engine.flush().expect("flush");
    let mut opts_l0 = engine.stats().levels[0].files;
    while opts_l0 > 0 {
        engine.compact().expect("compact");
        // A single flush file may be under the trigger: add two more.
        engine
            .write_blocking(vec![span_at(999, 1, T0)])
            .expect("write");
        engine.flush().expect("flush");
        engine
            .write_blocking(vec![span_at(999, 2, T0)])
            .expect("write");
        engine.flush().expect("flush");
        engine.compact().expect("compact");
        opts_l0 = engine.stats().levels[0].files;
    }
    let before = engine.stats();
    assert!(
        before.levels[1].files >= 6,
        "one file per partition at least: {before:?}"
    );
    // Advance so the first partition (and only it) is past retention.
    clock.advance(10 * SEC);
    let dropped = engine.apply_retention().expect("retention");
    let after = engine.stats();
    assert!(dropped >= 1, "{after:?}");
    assert_eq!(
        after.compaction_bytes_written, before.compaction_bytes_written,
        "nothing rewritten"
    );
    assert_eq!(after.tables, before.tables - dropped);
    for t in 0..20u128 {
        assert!(ids(&engine, t << 8).is_empty(), "partition 0 expired");
        assert_eq!(ids(&engine, t << 8 | 5).len(), 1, "partition 5 kept");
    }
}
