//! Damage to every kind of file: a flipped byte in a sorted file's data
//! blocks, index, bloom filter, footer or header, a truncated file, a zeroed
//! page; a damaged WAL segment; a damaged manifest record. Each is detected
//! by a checksum or a structural check, named with its file and offset by
//! `check_data_dir`, and (for sorted files) quarantined, never deleted, while
//! the engine keeps serving everything else and says which lookups may be
//! incomplete.

use std::{
    fs,
    io::{Seek, SeekFrom, Write},
    path::{Path, PathBuf},
};

use tracedb_lsm::{
    check::check_data_dir, Engine, EngineOptions, Error, TimeRange, TraceLookup, QUARANTINE_DIR,
};

use crate::util::{files_in_version, small_tree, span_at, tid, TestClock, T0};

/// Traces only in file `k` are `100 * (k + 1) + i`; trace `SHARED` is in all three.
const SHARED: u128 = 7;
const OWN: u128 = 6;

fn own(k: u128, i: u128) -> u128 {
    100 * (k + 1) + i
}

fn opts(dir: &Path, clock: &TestClock) -> EngineOptions {
    let mut opts = small_tree(dir, clock);
    // One file per flush, never merged: each file's traces are known.
    opts.compaction.l0_trigger_files = 100;
    opts.memtable.flush_bytes = 1 << 30;
    opts.memtable.shards = 1;
    opts
}

/// Three level-0 files; returns their paths in flush order.
fn three_files(dir: &Path, clock: &TestClock) -> Vec<PathBuf> {
    let engine = Engine::open(opts(dir, clock)).expect("open");
    for k in 0..3u128 {
        for i in 0..OWN {
            let t = own(k, i);
            engine
                .write_blocking((0..5).map(|s| span_at(t, s, T0 + s)).collect())
                .expect("write");
        }
        let id = 1000 + k as u64;
        engine
            .write_blocking(vec![span_at(SHARED, id, T0 + id)])
            .expect("write");
        engine.flush().expect("flush");
    }
    let files: Vec<PathBuf> = engine
        .snapshot()
        .version
        .l0
        .iter()
        .map(|f| f.path().to_path_buf())
        .collect();
    assert_eq!(files.len(), 3);
    engine.close().expect("close");
    files
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// (offset, length) of every data block, read from the index.
fn blocks(bytes: &[u8]) -> Vec<(u64, u64)> {
    let footer = bytes.len() - 120;
    let index_at = u64_at(bytes, footer) as usize;
    let index_len = u64_at(bytes, footer + 8) as usize;
    (0..(index_len - 4) / 64)
        .map(|i| {
            let e = index_at + 64 * i;
            let len = u32::from_le_bytes(bytes[e + 8..e + 12].try_into().expect("4 bytes"));
            (u64_at(bytes, e), u64::from(len))
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    Blocks,
    Index,
    Bloom,
    Footer,
    Header,
    Truncated,
    ZeroedPage,
}

const ALL: [Damage; 7] = [
    Damage::Blocks,
    Damage::Index,
    Damage::Bloom,
    Damage::Footer,
    Damage::Header,
    Damage::Truncated,
    Damage::ZeroedPage,
];

/// Damages the file in place (through `write`, as bit rot under a live mmap
/// would appear). Returns the offset the check is expected to name, if one.
fn damage(path: &Path, how: Damage) -> Option<u64> {
    let bytes = fs::read(path).expect("read");
    let footer = bytes.len() - 120;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open for damage");
    let mut flip = |at: u64| {
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.write_all(&[bytes[at as usize] ^ 0x5a]).expect("write");
    };
    match how {
        Damage::Blocks => {
            let all = blocks(&bytes);
            for &(at, len) in &all {
                flip(at + len / 2);
            }
            Some(all[0].0)
        }
        Damage::Index => {
            let at = u64_at(&bytes, footer);
            flip(at + 20);
            Some(at)
        }
        Damage::Bloom => {
            let at = u64_at(&bytes, footer + 16);
            flip(at + 9);
            Some(at)
        }
        Damage::Footer => {
            flip(footer as u64 + 40);
            Some(footer as u64)
        }
        Damage::Header => {
            flip(1);
            Some(0)
        }
        Damage::Truncated => {
            f.set_len(bytes.len() as u64 / 2).expect("truncate");
            None
        }
        Damage::ZeroedPage => {
            let n = bytes.len().min(4096);
            f.seek(SeekFrom::Start(0)).expect("seek");
            f.write_all(&vec![0u8; n]).expect("zero");
            None
        }
    }
}

fn lookup(engine: &Engine, trace: u128) -> TraceLookup {
    engine
        .lookup_trace(&tid(trace), TimeRange::ALL)
        .expect("lookup")
}

fn quarantined(dir: &Path, file: &Path) -> PathBuf {
    dir.join(QUARANTINE_DIR)
        .join(file.file_name().expect("file name"))
}

/// What the engine must do with file `bad` (of three) damaged: serve every
/// other trace whole, report the damaged file's traces as partial, and keep
/// the file in quarantine.
fn check_serving(engine: &Engine, dir: &Path, files: &[PathBuf], bad: usize, how: Damage) {
    for k in 0..3u128 {
        for i in 0..OWN {
            let found = lookup(engine, own(k, i));
            if k as usize == bad {
                assert!(found.is_partial(), "{how:?}: trace {}", own(k, i));
                assert_eq!(found.skipped[0].path, quarantined(dir, &files[bad]));
                assert!(found.spans.is_empty(), "{how:?}");
            } else {
                assert_eq!(found.spans.len(), 5, "{how:?}: trace {}", own(k, i));
            }
        }
    }
    let shared = lookup(engine, SHARED);
    assert_eq!(shared.spans.len(), 2, "{how:?}: the two good files' spans");
    assert!(shared.is_partial(), "{how:?}");
    let reason = &shared.skipped[0].reason;
    assert!(!reason.is_empty(), "{how:?}");
    assert!(
        !files[bad].exists(),
        "{how:?}: moved out of tables/, not copied"
    );
    assert!(
        quarantined(dir, &files[bad]).exists(),
        "{how:?}: kept, never deleted"
    );
    assert_eq!(engine.stats().quarantined_files, 1);
}

#[test]
fn every_kind_of_sorted_file_damage_is_detected_quarantined_and_reported() {
    let mut detected = 0;
    for how in ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = TestClock::new();
        let files = three_files(dir.path(), &clock);
        let bad = 1;
        let offset = damage(&files[bad], how);

        // Offline: named, with the offset where there is one.
        let report = check_data_dir(dir.path()).expect("check");
        let problem = report
            .problems
            .iter()
            .find(|p| p.file == files[bad])
            .unwrap_or_else(|| panic!("{how:?}: not found by check: {report}"));
        if let Some(offset) = offset {
            assert_eq!(problem.offset, Some(offset), "{how:?}: {problem}");
        }
        assert_eq!(report.problems.len(), 1, "{how:?}: {report}");
        detected += 1;

        let engine = Engine::open(opts(dir.path(), &clock)).expect("open despite the damage");
        if how == Damage::Blocks {
            // Footer, index and bloom filter are intact: the file opens and
            // the damage is found by the first read, which quarantines it.
            assert_eq!(files_in_version(&engine).len(), 3);
        } else {
            assert_eq!(
                files_in_version(&engine).len(),
                2,
                "{how:?}: quarantined at open"
            );
        }
        check_serving(&engine, dir.path(), &files, bad, how);
        if how == Damage::Blocks {
            // The file still tells its ID range and bloom filter apart: traces
            // it cannot hold are not reported incomplete.
            assert!(!lookup(&engine, own(0, 0)).is_partial());
        }
        // Writes, flushes and compaction go on.
        engine
            .write_blocking(vec![span_at(999, 1, T0)])
            .expect("write");
        engine.flush().expect("flush");
        engine.compact().expect("compact");
        engine.close().expect("close");
        drop(engine);

        let report = check_data_dir(dir.path()).expect("check");
        assert!(report.is_clean(), "{how:?}: {report}");
        assert!(
            report.notes.iter().any(|n| n.what.contains("quarantined")),
            "{how:?}: {report}"
        );
        // After a restart the quarantine still makes those lookups partial.
        let engine = Engine::open(opts(dir.path(), &clock)).expect("reopen");
        check_serving(&engine, dir.path(), &files, bad, how);
        assert_eq!(lookup(&engine, 999).spans.len(), 1);
    }
    println!("sorted-file damage kinds detected and quarantined: {detected}");
}

#[test]
fn damage_found_by_a_compaction_quarantines_the_input_and_the_next_compaction_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let files = three_files(dir.path(), &clock);
    let mut o = opts(dir.path(), &clock);
    o.compaction.l0_trigger_files = 3;
    let engine = Engine::open(o).expect("open");
    // Bit rot under the live mapping.
    damage(&files[2], Damage::Blocks);
    match engine.compact() {
        Err(e) => assert!(e.is_corruption(), "{e}"),
        Ok(n) => panic!("the merge read a damaged block and succeeded ({n} tasks)"),
    }
    assert!(quarantined(dir.path(), &files[2]).exists());
    assert_eq!(engine.stats().quarantined_files, 1);
    engine
        .compact()
        .expect("the tree without the damaged file compacts");
    for k in 0..2u128 {
        for i in 0..OWN {
            assert_eq!(lookup(&engine, own(k, i)).spans.len(), 5);
        }
    }
    assert!(lookup(&engine, own(2, 0)).is_partial());
}

/// A scan (a metrics query's one pass over its window) that meets a damaged
/// file quarantines it, hands on every trace of the other files whole, and
/// names the file; a later scan names it again from the quarantine.
#[test]
fn a_scan_goes_on_without_a_damaged_file_and_names_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let files = three_files(dir.path(), &clock);
    let engine = Engine::open(opts(dir.path(), &clock)).expect("open");
    // A trace still in the buffers, whose copy the scan admits first.
    engine
        .write_blocking((0..5).map(|s| span_at(900, s, T0 + s)).collect())
        .expect("write");
    damage(&files[1], Damage::Blocks);
    for pass in ["finds the damage", "finds it in quarantine"] {
        let buffers = engine.scan_buffers(TimeRange::ALL);
        assert!(
            buffers.bytes() >= 5 * std::mem::size_of::<tracedb_lsm::Span>(),
            "{pass}"
        );
        let mut seen = std::collections::BTreeMap::new();
        let stats = engine
            .scan_traces(TimeRange::ALL, buffers, |id, spans| {
                seen.insert(id, spans.len());
                true
            })
            .expect("the scan goes on");
        for k in [0u128, 2] {
            for i in 0..OWN {
                assert_eq!(seen.get(&tid(own(k, i))), Some(&5), "{pass}: {}", own(k, i));
            }
        }
        for i in 0..OWN {
            assert_eq!(seen.get(&tid(own(1, i))), None, "{pass}");
        }
        assert_eq!(seen.get(&tid(SHARED)), Some(&2), "{pass}");
        assert_eq!(seen.get(&tid(900)), Some(&5), "{pass}");
        assert_eq!(stats.skipped.len(), 1, "{pass}: {stats:?}");
        assert!(!stats.skipped[0].reason.is_empty(), "{pass}");
        assert!(quarantined(dir.path(), &files[1]).exists(), "{pass}");
    }
    assert_eq!(engine.stats().quarantined_files, 1);
}

/// A scan's copy of the buffers holds only the spans of its window: a
/// buffered span that ends before it or starts after it is not handed on.
#[test]
fn a_scan_takes_the_buffered_spans_of_its_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(opts(dir.path(), &clock)).expect("open");
    let hour = 3_600_000_000_000;
    engine
        .write_blocking(vec![
            span_at(1, 1, T0),
            span_at(1, 2, T0 + hour),
            span_at(2, 1, T0 + 2 * hour),
        ])
        .expect("write");
    let window = TimeRange::new(T0 + hour - 10, T0 + hour + 10);
    let whole = engine.scan_buffers(TimeRange::ALL).bytes();
    let buffers = engine.scan_buffers(window);
    assert!(buffers.bytes() < whole, "{} of {whole}", buffers.bytes());
    let mut seen = Vec::new();
    engine
        .scan_traces(window, buffers, |id, spans| {
            seen.push((
                id,
                spans.iter().map(|s| s.start_unix_nano).collect::<Vec<_>>(),
            ));
            true
        })
        .expect("scan");
    assert_eq!(seen, vec![(tid(1), vec![T0 + hour])]);
}

/// Damage in a file's last block only: the scan has handed on the traces
/// of its earlier blocks, whole, before it meets it; it goes on over the
/// other files without handing any of those traces twice.
#[test]
fn a_scan_that_meets_damage_midway_hands_each_trace_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let files = three_files(dir.path(), &clock);
    let engine = Engine::open(opts(dir.path(), &clock)).expect("open");
    let bytes = fs::read(&files[1]).expect("read");
    let all = blocks(&bytes);
    assert!(all.len() >= 2, "the file has {} blocks", all.len());
    let (at, len) = all[all.len() - 1];
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(&files[1])
        .expect("open");
    f.seek(SeekFrom::Start(at + len / 2)).expect("seek");
    f.write_all(&[bytes[(at + len / 2) as usize] ^ 0x5a])
        .expect("write");
    let mut seen = std::collections::BTreeMap::new();
    let stats = engine
        .scan_traces(
            TimeRange::ALL,
            engine.scan_buffers(TimeRange::ALL),
            |id, spans| {
                assert!(seen.insert(id, spans.len()).is_none(), "{id:?} twice");
                true
            },
        )
        .expect("the scan goes on");
    for k in [0u128, 2] {
        for i in 0..OWN {
            assert_eq!(seen.get(&tid(own(k, i))), Some(&5), "{}", own(k, i));
        }
    }
    let from_damaged: Vec<_> = (0..OWN).map(|i| seen.get(&tid(own(1, i)))).collect();
    assert!(
        from_damaged.iter().all(|n| matches!(n, None | Some(5))),
        "{from_damaged:?}"
    );
    assert!(from_damaged.iter().any(Option::is_some), "{from_damaged:?}");
    assert!(from_damaged.iter().any(Option::is_none), "{from_damaged:?}");
    assert_eq!(stats.skipped.len(), 1, "{stats:?}");
    assert!(quarantined(dir.path(), &files[1]).exists());
}

#[test]
fn a_damaged_manifest_record_stops_the_open_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    three_files(dir.path(), &clock);
    let path = dir.path().join("MANIFEST");
    let mut bytes = fs::read(&path).expect("read");
    // The first record (after the 16-byte header) is followed by others.
    let at = 16 + 8 + 3;
    bytes[at] ^= 0x01;
    fs::write(&path, &bytes).expect("write");

    let report = check_data_dir(dir.path()).expect("check");
    assert_eq!(report.problems.len(), 1, "{report}");
    assert_eq!(report.problems[0].file, path);
    assert_eq!(report.problems[0].offset, Some(16));

    let err = match Engine::open(opts(dir.path(), &clock)) {
        Err(e) => e,
        Ok(_) => panic!("opened with a damaged manifest"),
    };
    assert!(
        matches!(&err, Error::ManifestUnreadable { offset: 16, .. }),
        "{err:?}"
    );
    let message = err.to_string();
    for needed in [
        "MANIFEST",
        "offset 16",
        "tracedb check",
        "backup",
        "move it aside",
    ] {
        assert!(
            message.contains(needed),
            "{needed:?} missing from: {message}"
        );
    }
    // Nothing was touched: every file is still there.
    assert_eq!(fs::read(&path).expect("read"), bytes);
    let sorted_files = fs::read_dir(dir.path().join("tables"))
        .expect("tables")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "sst"))
        .count();
    assert_eq!(sorted_files, 3, "every sorted file is still there");
}

#[test]
fn wal_damage_is_reported_by_check_and_cut_or_skipped_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut o = opts(dir.path(), &clock);
    o.wal_segment_bytes = 600;
    let engine = Engine::open(o.clone()).expect("open");
    for t in 0..20u128 {
        engine
            .write_blocking((0..3).map(|s| span_at(t, s, T0 + s)).collect())
            .expect("write");
    }
    engine.abandon();
    drop(engine);
    let wal = dir.path().join("wal");
    let mut segments: Vec<_> = fs::read_dir(&wal)
        .expect("wal dir")
        .map(|e| e.expect("entry").path())
        .collect();
    segments.sort();
    assert!(segments.len() >= 3, "{segments:?}");
    // A flipped byte in the second record of the first segment, and a torn
    // tail on the newest one.
    let first = &segments[0];
    let bytes = fs::read(first).expect("read");
    let second_record = 24 + 8 + u32::from_le_bytes(bytes[24..28].try_into().expect("4")) as u64;
    let mut damaged = bytes.clone();
    damaged[second_record as usize + 12] ^= 0x10;
    fs::write(first, &damaged).expect("write");
    let newest = segments.last().expect("newest");
    let len = fs::metadata(newest).expect("meta").len();
    fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .and_then(|f| f.set_len(len - 5))
        .expect("tear");

    let report = check_data_dir(dir.path()).expect("check");
    assert_eq!(report.problems.len(), 1, "{report}");
    assert_eq!(&report.problems[0].file, first);
    assert_eq!(report.problems[0].offset, Some(second_record));
    assert!(
        report
            .notes
            .iter()
            .any(|n| &n.file == newest && n.what.contains("torn tail")),
        "{report}"
    );

    // The open keeps every intact record: the first segment's first record,
    // all of the middle segments, the newest but its torn last record.
    let engine = Engine::open(o).expect("open");
    assert_eq!(lookup(&engine, 0).spans.len(), 3);
    let found: usize = (0..20).map(|t| lookup(&engine, t).spans.len()).sum();
    assert!((60 - 3 * 6..60).contains(&found), "{found}");
}
