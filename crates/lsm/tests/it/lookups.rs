//! Bounded lookups: an absent ID reads almost no data block; time hints skip
//! files; the compaction picker keeps levels in shape.

use std::collections::HashSet;

use tracedb_lsm::{compaction::pick, Engine, TimeRange};

use crate::util::{ids, small_tree, span_at, tid, TestClock, SEC, T0};

#[test]
fn an_absent_trace_reads_no_data_block_in_the_common_case() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
    for t in 0..400u128 {
        engine
            .write_blocking((0..3).map(|i| span_at(t * 2, i, T0 + i)).collect())
            .expect("write");
    }
    engine.flush().expect("flush");
    engine.compact().expect("compact");
    let before = engine.stats();
    assert!(before.tables > 5, "{before:?}");
    // Odd IDs inside the stored range are absent.
    for t in 0..1000u128 {
        assert!(engine.get_trace(&tid(t * 2 + 1)).expect("get").is_empty());
    }
    let after = engine.stats();
    let blocks = after.blocks_read - before.blocks_read;
    assert!(blocks < 50, "{blocks} blocks read for 1000 absent lookups");
    // A present trace reads at most a block or two per level.
    let present_before = after.blocks_read;
    assert_eq!(engine.get_trace(&tid(10)).expect("get").len(), 3);
    let read = engine.stats().blocks_read - present_before;
    assert!(
        (1..=2 * after.levels.len() as u64).contains(&read),
        "{read}"
    );
}

#[test]
fn time_hints_skip_files_outside_the_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
    let early = T0 - 50 * SEC;
    engine
        .write_blocking(vec![span_at(5, 1, early)])
        .expect("write");
    engine.flush().expect("flush");
    engine
        .write_blocking(vec![span_at(5, 2, T0)])
        .expect("write");
    engine.flush().expect("flush");
    assert_eq!(engine.get_trace(&tid(5)).expect("get").len(), 2);
    let late_only = engine
        .get_trace_in(&tid(5), TimeRange::new(T0 - SEC, T0 + SEC))
        .expect("get");
    assert_eq!(late_only.len(), 1);
    assert_eq!(late_only[0].start_unix_nano, T0);
    let early_only = engine
        .get_trace_in(&tid(5), TimeRange::new(0, early + SEC))
        .expect("get");
    assert_eq!(early_only.len(), 1);
    assert_eq!(early_only[0].start_unix_nano, early);
}

#[test]
fn the_picker_empties_level_0_and_keeps_deeper_levels_in_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let opts = small_tree(dir.path(), &clock);
    let copts = opts.compaction.clone();
    let engine = Engine::open(opts).expect("open");
    assert!(pick(&engine.snapshot().version, &copts, &HashSet::new()).is_none());
    for t in 0..3000u128 {
        engine
            .write_blocking(vec![span_at(t.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1, T0)])
            .expect("write");
    }
    engine.flush().expect("flush");
    let version = engine.snapshot().version.clone();
    let task = pick(&version, &copts, &HashSet::new()).expect("level 0 is over the trigger");
    assert_eq!((task.input_level, task.output_level), (0, 1));
    // Level 0 is merged alone: level 1 is never read back and rewritten.
    assert_eq!(task.inputs.len(), version.l0.len());
    assert!(task.inputs.iter().all(|f| f.level == 0));
    // Busy files are not picked again.
    let busy = task.input_ids();
    assert!(pick(&version, &copts, &busy).is_none_or(|t| t.input_level > 0));

    engine.compact().expect("compact");
    let version = engine.snapshot().version.clone();
    assert!(
        pick(&version, &copts, &HashSet::new()).is_none(),
        "compact runs to a fixed point"
    );
    assert!(version.l0.is_empty());
    // Every non-last level partition holds fewer runs than the size ratio and
    // is within its byte target, and the files of each sorted run have
    // disjoint, sorted trace-ID ranges.
    for (i, parts) in version.deeper.iter().enumerate() {
        for runs in parts.values() {
            if i + 2 < version.levels() {
                assert!(
                    (runs.run_count() as u64) < copts.size_ratio,
                    "level {} {} runs",
                    i + 1,
                    runs.run_count()
                );
                assert!(
                    runs.bytes() <= copts.level_target(i + 1),
                    "level {} {}",
                    i + 1,
                    runs.bytes()
                );
            }
            for run in runs.runs() {
                for w in run.windows(2) {
                    assert!(w[0].table().meta().max_trace_id < w[1].table().meta().min_trace_id);
                }
            }
        }
    }
    assert!(
        version.deeper.iter().skip(1).any(|p| !p.is_empty()),
        "data reached level 2+"
    );
    for t in (0..3000u128).step_by(97) {
        assert_eq!(
            engine
                .get_trace(&tid(t.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                .expect("get")
                .len(),
            1
        );
    }
}

#[test]
fn compaction_rewrites_a_span_about_once_per_level() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let opts = small_tree(dir.path(), &clock);
    let levels = opts.compaction.levels as u64;
    let engine = Engine::open(opts).expect("open");
    // Random IDs in one partition: every flushed file overlaps every run.
    let id = |n: u128| n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    for batch in 0..60u128 {
        let spans = (0..50u128)
            .map(|i| span_at(id(batch * 50 + i), 1, T0))
            .collect();
        engine.write_blocking(spans).expect("write");
        engine.flush().expect("flush");
        engine.compact().expect("compact");
    }
    let s = engine.stats();
    assert!(s.levels[2..].iter().any(|l| l.files > 0), "{:?}", s.levels);
    // Below level 0 there are `levels - 1` levels; the last one is written
    // into, never out of. A leveled tree rewrote all of level 1 on every
    // level-0 merge: 10.6 times the flushed bytes here.
    let per_flushed = s.compaction_bytes_written as f64 / s.flush_bytes_written as f64;
    assert!(
        per_flushed <= (levels - 1) as f64 * 1.1,
        "compaction wrote {per_flushed:.2} times the flushed bytes"
    );
    for n in (0..3000).step_by(37) {
        assert_eq!(ids(&engine, id(n)), vec![(1, T0)]);
    }
}

/// Scans of ranges of trace IDs, as a metrics query's threads make them,
/// hand on between them exactly what one scan of every ID does: each
/// trace once, whole as the window holds it, from files at several levels
/// (some traces split across them, some repeated) and from the buffers.
#[test]
fn scans_of_trace_id_ranges_together_are_one_whole_scan() {
    use tracedb_lsm::TraceIdRange;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
    // Trace IDs spread over the whole ID space, as random ones are.
    let trace = |t: u128| t.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) | 1;
    for round in 0..3u64 {
        for t in 0..150u128 {
            let start = T0 + round * SEC + (t as u64) * 1_000;
            engine
                .write_blocking(
                    (0..3)
                        .map(|i| span_at(trace(t), round * 3 + i, start))
                        .collect(),
                )
                .expect("write");
        }
        engine.flush().expect("flush");
        if round == 1 {
            engine.compact().expect("compact");
        }
    }
    // An exact repeat in a level-0 file, and traces still buffered.
    engine
        .write_blocking(vec![span_at(trace(7), 0, T0 + 7_000)])
        .expect("write");
    engine.flush().expect("flush");
    for t in 140..160u128 {
        engine
            .write_blocking(vec![span_at(trace(t), 99, T0 + 3 * SEC)])
            .expect("write");
    }
    let window = TimeRange::new(T0, T0 + 10 * SEC);
    let scan = |ids: TraceIdRange, buffers| {
        let mut seen = Vec::new();
        engine
            .scan_trace_ids(window, ids, buffers, |id, spans| {
                assert!(ids.contains(id), "{id} outside {ids:?}");
                seen.push((id, spans.len()));
                true
            })
            .expect("scan");
        seen
    };
    let whole = scan(TraceIdRange::ALL, engine.scan_buffers(window));
    assert_eq!(whole.len(), 160);
    assert_eq!(whole.iter().map(|(_, n)| n).sum::<usize>(), 150 * 9 + 20);
    for n in [2, 3, 5] {
        let ranges = TraceIdRange::split(n);
        let parts = engine.scan_buffers(window).split(&ranges);
        let together: Vec<_> = ranges
            .iter()
            .zip(parts)
            .flat_map(|(&ids, buffers)| scan(ids, buffers))
            .collect();
        assert_eq!(together, whole, "{n} ranges");
    }
}
