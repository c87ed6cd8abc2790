//! Back-pressure: a write over the memory budget, or with too many level-0
//! files, is refused at once with a retry hint, and taken again once the
//! engine has caught up.

use tracedb_lsm::{Backpressure, Engine, Error};

use crate::util::{small_tree, span_at, TestClock, T0};

#[test]
fn a_write_over_the_memory_budget_is_refused_until_a_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.memtable.flush_bytes = usize::MAX; // nothing seals by itself
    let batch = |t: u128| -> Vec<_> { (1..=50).map(|i| span_at(t, i, T0 + i)).collect() };
    let one: usize = batch(1).iter().map(|s| s.memory_size()).sum();
    opts.memory_budget_bytes = one * 3 / 2;
    let engine = Engine::open(opts).expect("open");

    engine.write_blocking(batch(1)).expect("first write fits");
    match engine.write_blocking(batch(2)) {
        Err(Error::Backpressure {
            reason: Backpressure::MemoryBudget { used, budget },
            retry_after,
        }) => {
            assert_eq!(used, one);
            assert_eq!(budget, one * 3 / 2);
            assert!(!retry_after.is_zero());
        }
        other => panic!("expected back-pressure, got {other:?}"),
    }
    assert_eq!(engine.stats().backpressure_rejections, 1);
    // The refused write left nothing behind.
    assert!(engine
        .get_trace(&crate::util::tid(2))
        .expect("get")
        .is_empty());
    engine.flush().expect("flush");
    assert_eq!(
        engine.stats().memory_bytes,
        0,
        "a flush gives the budget back"
    );
    engine
        .write_blocking(batch(2))
        .expect("taken after the flush");
    assert_eq!(
        engine.get_trace(&crate::util::tid(2)).expect("get").len(),
        50
    );
}

#[test]
fn too_many_level_0_files_refuse_writes_until_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.l0_stop_files = 2;
    opts.compaction.l0_trigger_files = 2;
    let engine = Engine::open(opts).expect("open");
    for t in 1..=2u128 {
        engine
            .write_blocking(vec![span_at(t, 1, T0)])
            .expect("write");
        engine.flush().expect("flush");
    }
    assert!(matches!(
        engine.write_blocking(vec![span_at(3, 1, T0)]),
        Err(Error::Backpressure {
            reason: Backpressure::TooManyL0Files { files: 2, limit: 2 },
            ..
        })
    ));
    assert!(
        matches!(engine.check_pressure(), Err(Error::Backpressure { .. })),
        "the pre-admission check agrees with the write"
    );
    assert!(engine.compact().expect("compact") > 0);
    assert_eq!(engine.stats().levels[0].files, 0);
    engine
        .check_pressure()
        .expect("no pressure after compaction");
    engine
        .write_blocking(vec![span_at(3, 1, T0)])
        .expect("taken after compaction");
}

/// A merge counts what it expects to hold in the memory budget before it
/// starts, so admission makes room for it; while the process leaves no room
/// beside what is buffered, the merge waits for a flush to give some back.
#[test]
fn a_merge_waits_for_room_in_the_memory_budget_before_it_starts() {
    use std::{sync::Arc, time::Duration};

    use tracedb_lsm::MemoryBudget;

    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.compaction.l0_trigger_files = 2;
    // 40 MiB for the process, 32 of it the budget's.
    let budget = MemoryBudget::with_process_limit(32 << 20, 40 << 20, 1 << 20);
    opts.memory_budget = Some(budget.clone());
    let engine = Arc::new(Engine::open(opts).expect("open"));
    for t in 1..=2u128 {
        let spans = (0..100).map(|i| span_at(t * 1000 + i, 1, T0)).collect();
        engine.write_blocking(spans).expect("write");
        engine.flush().expect("flush");
    }
    assert_eq!(engine.stats().levels[0].files, 2);
    // The rest of the process holds 8 MiB and buffered spans the other 32.
    budget.set_resident(8 << 20);
    budget.hold(32 << 20);
    assert!(budget.has_room_for_work(), "nothing more is expected yet");

    let merging = std::thread::spawn({
        let engine = engine.clone();
        move || engine.compact()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while engine.stats().merges_waited_for_memory == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the merge never waited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(budget.work_room() > 0, "admission makes room for the merge");
    assert_eq!(budget.admit_limit(), (32 << 20) - budget.work_room());
    assert_eq!(engine.stats().compactions, 0, "the merge waits");
    // A flush gives the buffered spans' memory back.
    budget.release(32 << 20);
    assert!(merging.join().expect("merge").expect("compact") > 0);
    assert_eq!(engine.stats().compactions, 1);
    assert_eq!(engine.stats().merges_waited_for_memory, 1);
    assert_eq!(budget.work_held(), 0, "the merge gave back what it held");
}
