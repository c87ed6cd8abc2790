//! A crash at each step of a compaction: outputs written but not durable, a
//! torn manifest append, the edit durable but not installed, the version
//! installed but the inputs not deleted. After reopening, every acknowledged
//! span is readable, the directory holds exactly the files the manifest
//! names, and compaction works again.

use tracedb_lsm::{CrashPoint, Engine, Error};

use crate::util::{files_in_version, files_on_disk, ids, small_tree, span_at, TestClock, T0};

const TRACES: u128 = 40;

fn crash_at(point: CrashPoint) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.compaction.l0_trigger_files = 3;
    opts.hooks.crash_at = Some(point);
    // One WAL segment per record, so flushed records leave the WAL and the
    // reopened engine replays (and flushes) nothing behind the test's back.
    opts.wal_segment_bytes = 1;
    let engine = Engine::open(opts).expect("open");
    // Three flushes, each with every trace, one of them retried (duplicates).
    for round in 0..3u64 {
        for t in 1..=TRACES {
            engine
                .write_blocking((0..3).map(|i| span_at(t, round * 3 + i, T0 + i)).collect())
                .expect("write");
        }
        if round == 1 {
            for t in 1..=TRACES {
                engine
                    .write_blocking(vec![span_at(t, 0, T0)])
                    .expect("retry");
            }
        }
        engine.flush().expect("flush");
    }
    let inputs = files_in_version(&engine);
    assert!(inputs.len() >= 3, "{inputs:?}");
    match engine.compact() {
        Err(Error::SimulatedCrash(p)) => assert_eq!(p, point),
        other => panic!("expected the simulated crash, got {other:?}"),
    }
    engine.abandon();
    let on_disk = files_on_disk(dir.path());
    // What the crash left: the inputs are all still on disk at every step.
    assert!(
        inputs.is_subset(&on_disk),
        "{point:?}: inputs {inputs:?}, disk {on_disk:?}"
    );
    assert!(
        on_disk.len() > inputs.len(),
        "{point:?}: outputs were written"
    );
    drop(engine);

    let mut opts = small_tree(dir.path(), &clock);
    opts.wal_segment_bytes = 1;
    let engine = Engine::open(opts).expect("reopen");
    let live = files_in_version(&engine);
    assert_eq!(
        files_on_disk(dir.path()),
        live,
        "{point:?}: leftovers removed"
    );
    match point {
        // The edit never became durable: the inputs are the truth.
        CrashPoint::BeforeOutputsSynced | CrashPoint::TornManifestAppend => {
            assert_eq!(live, inputs, "{point:?}")
        }
        // The edit is durable: the outputs are, and the inputs are gone.
        CrashPoint::AfterManifestAppend | CrashPoint::BeforeInputsDeleted => {
            assert!(
                live.is_disjoint(&inputs),
                "{point:?}: {live:?} vs {inputs:?}"
            )
        }
    }
    for t in 1..=TRACES {
        let got = ids(&engine, t);
        assert_eq!(got.len(), 9, "{point:?}: trace {t}: {got:?}");
    }
    engine.compact().expect("compaction after recovery");
    assert_eq!(engine.stats().levels[0].files, 0);
    for t in 1..=TRACES {
        assert_eq!(ids(&engine, t).len(), 9);
    }
}

#[test]
fn crash_before_outputs_are_synced() {
    crash_at(CrashPoint::BeforeOutputsSynced);
}

#[test]
fn crash_in_the_middle_of_the_manifest_append() {
    crash_at(CrashPoint::TornManifestAppend);
}

#[test]
fn crash_after_the_manifest_append() {
    crash_at(CrashPoint::AfterManifestAppend);
}

#[test]
fn crash_before_old_files_are_deleted() {
    crash_at(CrashPoint::BeforeInputsDeleted);
}
