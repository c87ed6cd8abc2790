//! Tests of the write-ahead log: round trips, group commit, recovery from torn
//! and damaged segments, rotation, recycled segments, and failed writes and
//! fsyncs.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use rand::{rngs::SmallRng, Rng, SeedableRng};

use super::*;
use crate::fault::{FaultInjector, FaultKind, FaultOp, FaultTarget};

/// Records replayed by an open, with their segment ids.
type Replayed = Vec<(u64, Vec<u8>)>;

fn open_opts(opts: WalOptions) -> (Wal, ReplayStats, Replayed) {
    let mut seen = Vec::new();
    let (wal, stats) = Wal::open(opts, |seg, payload| {
        seen.push((seg, payload.to_vec()));
        Ok(())
    })
    .expect("open wal");
    (wal, stats, seen)
}

fn open(dir: &Path) -> (Wal, ReplayStats, Replayed) {
    open_opts(WalOptions::new(dir))
}

fn payloads(seen: &Replayed) -> Vec<Vec<u8>> {
    seen.iter().map(|(_, p)| p.clone()).collect()
}

/// A payload of `len` bytes that differs for every `i`.
fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(i);
    (0..len).map(|_| rng.random()).collect()
}

fn seg(dir: &Path, id: u64) -> PathBuf {
    segment_path(dir, id)
}

/// Offset of each record in a segment holding records of these payload lengths.
fn record_offsets(lens: &[usize]) -> Vec<u64> {
    let mut at = HEADER_LEN;
    lens.iter()
        .map(|&len| {
            let start = at;
            at += framed_len(len);
            start
        })
        .collect()
}

/// Appends each payload and waits until all are durable.
fn append_all(wal: &Wal, records: &[Vec<u8>]) -> Vec<WalTicket> {
    let tickets: Vec<_> = records
        .iter()
        .map(|p| wal.append(p).expect("append"))
        .collect();
    for t in &tickets {
        wal.wait_durable_blocking(*t).expect("durable");
    }
    tickets
}

/// Names of the files in `dir`, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Scans segment `id` in `dir` without replaying anything.
fn scan_segment(dir: &Path, id: u64) -> segment::ScanOutcome {
    let (_, outcome) = segment::scan(&seg(dir, id), id, &mut |_, _| Ok(())).expect("scan");
    outcome
}

/// Ends the log as a crash would: no end mark, no close. The sync thread is
/// left asleep with nothing to do (it is never woken again).
fn crash(wal: Wal) {
    std::mem::forget(wal);
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).expect("read segment");
    bytes[offset as usize] ^= 0x40;
    fs::write(path, bytes).expect("write segment");
}

#[test]
fn wal_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Wal>();
}

#[test]
fn appended_records_replay_in_order_with_exact_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lens = [0usize, 1, 7, 100, 4096, 100_000, 3];
    let records: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| payload(i as u64, len))
        .collect();

    let (wal, stats, seen) = open(dir.path());
    assert_eq!(stats, ReplayStats::default());
    assert!(seen.is_empty());
    assert_eq!(wal.current_segment(), 1);
    let tickets = append_all(&wal, &records);
    let lsns: Vec<_> = tickets.iter().map(|t| t.lsn).collect();
    assert_eq!(lsns, (1..=records.len() as u64).collect::<Vec<_>>());
    assert!(tickets.iter().all(|t| t.segment == 1));
    let st = wal.stats();
    assert_eq!(st.records, records.len() as u64);
    let framed: u64 = lens.iter().map(|&l| framed_len(l)).sum();
    assert_eq!(st.bytes_written, HEADER_LEN + framed);
    wal.close().expect("close");

    let (wal, stats, seen) = open(dir.path());
    assert_eq!(payloads(&seen), records);
    assert!(seen.iter().all(|(s, _)| *s == 1));
    assert_eq!(stats.segments, 1);
    assert_eq!(stats.records, records.len() as u64);
    assert_eq!(stats.bytes, lens.iter().sum::<usize>() as u64);
    assert_eq!(stats.torn_tails, 0);
    assert_eq!(
        wal.current_segment(),
        2,
        "a reopened log starts a new segment"
    );
}

#[test]
fn concurrent_appenders_share_fsyncs() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 500;
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    let wal = Arc::new(wal);
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let ticket = wal
                        .append(format!("thread {t} record {i}").as_bytes())
                        .expect("append");
                    wal.wait_durable_blocking(ticket).expect("durable");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("appender thread");
    }
    let elapsed = started.elapsed();
    let stats = wal.stats();
    let total = THREADS * PER_THREAD;
    assert_eq!(stats.records, total);
    assert!(
        stats.group_commits < total && stats.fsyncs < total,
        "no group commit: {stats:?}"
    );
    eprintln!(
        "{total} records, {} group commits, {:.2} ms per commit",
        stats.group_commits,
        elapsed.as_secs_f64() * 1e3 / stats.group_commits as f64
    );
    wal.close().expect("close");

    let (_, stats, seen) = open(dir.path());
    assert_eq!(stats.records, total);
    for t in 0..THREADS {
        let prefix = format!("thread {t} record ");
        let mine: Vec<String> = seen
            .iter()
            .map(|(_, p)| String::from_utf8(p.clone()).expect("utf-8"))
            .filter(|s| s.starts_with(&prefix))
            .collect();
        let expected: Vec<String> = (0..PER_THREAD).map(|i| format!("{prefix}{i}")).collect();
        assert_eq!(mine, expected, "thread {t}'s records out of order or lost");
    }
}

#[test]
fn torn_tail_at_every_offset_is_cut_and_the_log_stays_usable() {
    let source = tempfile::tempdir().expect("tempdir");
    let lens = [30usize, 50, 40];
    let records: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| payload(i as u64, len))
        .collect();
    let (wal, _, _) = open(source.path());
    append_all(&wal, &records);
    wal.close().expect("close");
    let full = fs::read(seg(source.path(), 1)).expect("read segment");
    let last_start = record_offsets(&lens)[2];
    let records_end = last_start + framed_len(40);
    assert_eq!(
        full.len() as u64,
        records_end + segment::FRAME_LEN as u64,
        "three records and the end mark of the close"
    );

    // Cuts in the last record lose it; cuts in the end mark lose nothing.
    for cut in last_start..full.len() as u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = seg(dir.path(), 1);
        fs::write(&path, &full[..cut as usize]).expect("write torn segment");

        let (wal, stats, seen) = open(dir.path());
        let (kept, good_len) = if cut < records_end {
            (2, last_start)
        } else {
            (3, records_end)
        };
        assert_eq!(payloads(&seen), records[..kept], "cut at {cut}");
        let torn = usize::from(cut != good_len);
        assert_eq!(stats.torn_tails, torn, "cut at {cut}");
        let len = fs::metadata(&path).expect("metadata").len();
        assert_eq!(len, good_len, "file not cut back (cut at {cut})");
        let after = payload(1000 + cut, 20);
        append_all(&wal, std::slice::from_ref(&after));
        wal.close().expect("close");

        let (_, stats, seen) = open(dir.path());
        let mut expected = records[..kept].to_vec();
        expected.push(after);
        assert_eq!(payloads(&seen), expected, "second reopen, cut at {cut}");
        assert_eq!(stats.torn_tails, 0);
        assert_eq!(stats.segments, 2);
    }
}

#[test]
fn flipped_byte_in_the_last_record_drops_only_that_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lens = [10usize, 20, 30];
    let records: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| payload(i as u64, len))
        .collect();
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &records);
    wal.close().expect("close");
    let offsets = record_offsets(&lens);
    flip_byte(
        &seg(dir.path(), 1),
        offsets[2] + segment::FRAME_LEN as u64 + 15,
    );

    let (_, stats, seen) = open(dir.path());
    assert_eq!(payloads(&seen), records[..2]);
    assert_eq!(stats.torn_tails, 1);
    assert_eq!(
        fs::metadata(seg(dir.path(), 1)).expect("metadata").len(),
        offsets[2]
    );
}

#[test]
fn flipped_byte_in_an_older_segment_stops_only_that_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lens = [10usize, 20, 30];
    let older: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| payload(i as u64, len))
        .collect();
    let newer: Vec<_> = (0..2).map(|i| payload(100 + i, 25)).collect();
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &older);
    wal.close().expect("close");
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &newer);
    wal.close().expect("close");

    let path = seg(dir.path(), 1);
    let len_before = fs::metadata(&path).expect("metadata").len();
    flip_byte(
        &path,
        record_offsets(&lens)[1] + segment::FRAME_LEN as u64 + 5,
    );

    let (_, stats, seen) = open(dir.path());
    let mut expected = vec![older[0].clone()];
    expected.extend(newer.iter().cloned());
    assert_eq!(payloads(&seen), expected);
    assert_eq!(seen[0].0, 1);
    assert!(seen[1..].iter().all(|(s, _)| *s == 2));
    assert_eq!(stats.corrupt_segments, 1);
    assert_eq!(stats.torn_tails, 0);
    assert_eq!(
        fs::metadata(&path).expect("metadata").len(),
        len_before,
        "an older damaged segment is left as it is"
    );
}

#[test]
fn rotation_and_delete_segments_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = WalOptions {
        segment_bytes: 256,
        ..WalOptions::new(dir.path())
    };
    let (wal, _, _) = open_opts(opts.clone());
    let records: Vec<_> = (0..50).map(|i| payload(i, 40)).collect();
    let tickets = append_all(&wal, &records);

    // 24 + 5 * 48 = 264 >= 256: five records per segment.
    let segments: Vec<_> = tickets.iter().map(|t| t.segment).collect();
    let expected: Vec<u64> = (0..50).map(|i| 1 + i / 5).collect();
    assert_eq!(segments, expected);
    assert_eq!(wal.current_segment(), 10);
    assert_eq!(
        list_segments(dir.path()).expect("list"),
        (1..=10).collect::<Vec<_>>()
    );
    assert_eq!(wal.stats().segments_created, 10);
    assert_eq!(wal.stats().segments_recycled, 0);
    // Each segment closed by a rotation ends with its end mark, fsynced.
    let end_mark = segment::FRAME_LEN as u64;
    for id in 1..10 {
        let len = fs::metadata(seg(dir.path(), id)).expect("metadata").len();
        assert_eq!(
            len,
            HEADER_LEN + 5 * framed_len(40) + end_mark,
            "segment {id}"
        );
        let outcome = scan_segment(dir.path(), id);
        assert!(outcome.end_mark, "segment {id}: {outcome:?}");
        assert_eq!(outcome.damage, None);
        assert_eq!(outcome.records, 5);
        assert_eq!(outcome.good_len, len - end_mark);
    }

    let cut = tickets[25].segment;
    assert_eq!(cut, 6);
    assert_eq!(wal.delete_segments_before(cut, None).expect("delete"), 5);
    assert_eq!(
        list_segments(dir.path()).expect("list"),
        (6..=10).collect::<Vec<_>>()
    );
    // The newest two of them are kept as spares; the others are gone.
    let spare = |id: u64| format!("{id:020}.wal.spare");
    let segment_file = |id: u64| format!("{id:020}.wal");
    let mut expected: Vec<String> = (6..=10).map(segment_file).collect();
    expected.extend([spare(4), spare(5)]);
    expected.sort();
    assert_eq!(file_names(dir.path()), expected);
    assert_eq!(
        wal.delete_segments_before(cut, None).expect("delete again"),
        0
    );
    // Never the current segment, whatever the bound; and never more than two
    // spares.
    assert_eq!(
        wal.delete_segments_before(u64::MAX, None).expect("delete"),
        4
    );
    assert_eq!(list_segments(dir.path()).expect("list"), vec![10]);
    assert_eq!(
        file_names(dir.path()),
        vec![spare(4), spare(5), segment_file(10)]
    );
    wal.close().expect("close");
    drop(wal);

    let (wal, stats, seen) = open_opts(opts);
    assert_eq!(payloads(&seen), records[45..]);
    assert!(seen.iter().all(|(s, _)| *s == 10));
    assert_eq!(stats.segments, 1);
    assert_eq!(stats.torn_tails, 0, "the clean close left an end mark");
    // The new run started in the newest spare.
    assert_eq!(wal.stats().segments_recycled, 1);
    assert_eq!(
        file_names(dir.path()),
        vec![spare(4), segment_file(10), segment_file(11)]
    );
    // A clean shutdown leaves no write-ahead log file behind.
    assert_eq!(wal.close_and_discard().expect("discard"), 3);
    assert_eq!(file_names(dir.path()), Vec::<String>::new());
}

#[test]
fn hostile_length_is_a_torn_tail() {
    for hostile in [u32::MAX, (MAX_RECORD_LEN as u32) + 1, 200 << 20] {
        let dir = tempfile::tempdir().expect("tempdir");
        let records: Vec<_> = (0..2).map(|i| payload(i, 16)).collect();
        let (wal, _, _) = open(dir.path());
        append_all(&wal, &records);
        wal.close().expect("close");
        let path = seg(dir.path(), 1);
        let second = record_offsets(&[16, 16])[1] as usize;
        let mut bytes = fs::read(&path).expect("read");
        bytes[second..second + 4].copy_from_slice(&hostile.to_le_bytes());
        fs::write(&path, bytes).expect("write");

        let (_, stats, seen) = open(dir.path());
        assert_eq!(payloads(&seen), records[..1], "length {hostile:#x}");
        assert_eq!(stats.torn_tails, 1);
        assert_eq!(fs::metadata(&path).expect("metadata").len(), second as u64);
    }
}

#[test]
fn a_hostile_length_is_rejected_before_reading_the_payload() {
    // The scan must report the limit, not a short file, for a length above it.
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &[b"x".to_vec()]);
    wal.close().expect("close");
    let path = seg(dir.path(), 1);
    let mut bytes = fs::read(&path).expect("read");
    let at = HEADER_LEN as usize;
    bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    fs::write(&path, bytes).expect("write");
    let (_, outcome) = segment::scan(&path, 1, &mut |_, _| Ok(())).expect("scan");
    let damage = outcome.damage.expect("damage found");
    assert_eq!(damage.offset, HEADER_LEN);
    assert!(
        damage.reason.contains("exceeds the limit"),
        "{}",
        damage.reason
    );
}

#[tokio::test(flavor = "current_thread")]
async fn wait_durable_works_in_an_async_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    let wal = Arc::new(wal);
    let tasks: Vec<_> = (0..16u64)
        .map(|i| {
            let wal = wal.clone();
            tokio::spawn(async move {
                let ticket = wal.append(&payload(i, 32)).expect("append");
                wal.wait_durable(ticket).await.map(|()| ticket)
            })
        })
        .collect();
    let mut lsns = Vec::new();
    for task in tasks {
        lsns.push(task.await.expect("task").expect("durable").lsn);
    }
    lsns.sort_unstable();
    assert_eq!(lsns, (1..=16).collect::<Vec<_>>());
    assert!(wal.stats().group_commits >= 1);
    wal.close().expect("close");
    let (_, stats, _) = open(dir.path());
    assert_eq!(stats.records, 16);
}

fn failing_opts(dir: &Path) -> (WalOptions, Arc<FaultInjector>) {
    let injector = FaultInjector::new();
    let opts = WalOptions {
        faults: Faults::new(Some(injector.clone())),
        ..WalOptions::new(dir)
    };
    (opts, injector)
}

#[test]
fn a_failed_fsync_fails_its_records_and_the_log_goes_on_in_a_new_segment() {
    for kind in [FaultKind::Io, FaultKind::NoSpace] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (opts, injector) = failing_opts(dir.path());
        let (wal, _, _) = open_opts(opts.clone());
        let good = wal.append(b"good").expect("append");
        wal.wait_durable_blocking(good).expect("durable");

        injector.fail_nth(None, Some(FaultOp::Sync), 1, kind);
        let lost = wal.append(b"lost").expect("append");
        assert!(matches!(
            wal.wait_durable_blocking(lost),
            Err(Error::WalFailed(_))
        ));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert!(matches!(
            rt.block_on(wal.wait_durable(lost)),
            Err(Error::WalFailed(_))
        ));
        // What was durable before the failure stays durable.
        wal.wait_durable_blocking(good).expect("still durable");

        // The log takes writes again, in a new segment.
        let later = wal.append(b"later").expect("append after a failure");
        assert_eq!(later.segment, 2, "the failed segment is never reused");
        wal.wait_durable_blocking(later).expect("durable");
        // A waiter that wakes late still learns its record failed.
        assert!(matches!(
            wal.wait_durable_blocking(lost),
            Err(Error::WalFailed(_))
        ));
        assert_eq!(injector.injected(), 1);
        wal.close().expect("close");
        drop(wal);

        // The failed segment was cut back to its last fsync.
        let len = fs::metadata(seg(dir.path(), 1)).expect("segment 1").len();
        assert_eq!(len, HEADER_LEN + framed_len(4));
        let (_, stats, seen) = open(dir.path());
        assert_eq!(payloads(&seen), vec![b"good".to_vec(), b"later".to_vec()]);
        assert_eq!(stats.corrupt_segments, 0);
    }
}

#[test]
fn a_full_disk_fails_every_commit_until_space_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (opts, injector) = failing_opts(dir.path());
    let (wal, _, _) = open_opts(opts);
    let acked: Vec<_> = (0..5).map(|i| payload(i, 100)).collect();
    append_all(&wal, &acked);

    // A short write then ENOSPC, on every write and fsync, segment creation included.
    injector.fail_from_nth(None, None, 1, FaultKind::NoSpace);
    for i in 0..4 {
        let t = wal.append(&payload(100 + i, 100)).expect("append");
        let err = wal.wait_durable_blocking(t).expect_err("disk is full");
        assert!(err.to_string().contains("No space left"), "{err}");
    }
    injector.heal();
    let after: Vec<_> = (10..15).map(|i| payload(i, 100)).collect();
    let tickets = append_all(&wal, &after);
    assert!(tickets[0].segment > 2, "{tickets:?}");
    wal.close().expect("close");
    drop(wal);

    let (_, _, seen) = open(dir.path());
    let expected: Vec<_> = acked.iter().chain(&after).cloned().collect();
    assert_eq!(
        payloads(&seen),
        expected,
        "every acknowledged record, nothing else"
    );
}

#[test]
fn a_failure_during_rotation_keeps_what_was_synced_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut opts, injector) = failing_opts(dir.path());
    opts.segment_bytes = 100;
    let (wal, _, _) = open_opts(opts);
    // Header (24) + two records of 40 (48 each) passes 100: the third rotates.
    // The first two are made durable first: how many group commits they take
    // depends on when the sync thread wakes.
    let mut tickets: Vec<_> = (0..2)
        .map(|i| wal.append(&payload(i, 40)).expect("append"))
        .collect();
    for t in &tickets {
        wal.wait_durable_blocking(*t).expect("durable");
    }
    // The rotation fdatasyncs segment 1's end mark, then creates segment 2:
    // fail that creation's header fsync.
    injector.fail_nth(None, Some(FaultOp::Sync), 2, FaultKind::Io);
    tickets.push(wal.append(&payload(2, 40)).expect("append"));
    assert_eq!(
        tickets.iter().map(|t| t.segment).collect::<Vec<_>>(),
        vec![1, 1, 2]
    );
    assert!(wal.wait_durable_blocking(tickets[2]).is_err());
    assert_eq!(injector.injected(), 1);
    wal.wait_durable_blocking(tickets[0])
        .expect("synced before the rotation");
    wal.wait_durable_blocking(tickets[1])
        .expect("synced before the rotation");
    assert!(!seg(dir.path(), 2).exists(), "a failed creation is removed");
    let next = wal.append(b"next").expect("append");
    assert_eq!(next.segment, 3);
    wal.wait_durable_blocking(next).expect("durable");
}

#[test]
fn close_drains_is_idempotent_and_refuses_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    let records: Vec<_> = (0..100).map(|i| payload(i, 64)).collect();
    let tickets: Vec<_> = records
        .iter()
        .map(|p| wal.append(p).expect("append"))
        .collect();
    wal.close().expect("close");
    // Everything appended before close is durable once it returns.
    for t in tickets {
        wal.wait_durable_blocking(t).expect("durable after close");
    }
    wal.close().expect("second close");
    assert!(matches!(wal.append(b"late"), Err(Error::Closed)));
    let never = WalTicket {
        segment: 1,
        lsn: 1_000,
    };
    assert!(matches!(
        wal.wait_durable_blocking(never),
        Err(Error::Closed)
    ));
    drop(wal);
    let (_, _, seen) = open(dir.path());
    assert_eq!(payloads(&seen), records);
}

#[test]
fn a_short_newest_segment_is_removed_and_a_short_older_one_is_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &[b"kept".to_vec()]);
    wal.close().expect("close");
    drop(wal);
    // A crash while the next open created segment 2, cut mid-header.
    fs::write(seg(dir.path(), 2), [0u8; 10]).expect("write");

    let (wal, stats, seen) = open(dir.path());
    assert_eq!(payloads(&seen), vec![b"kept".to_vec()]);
    assert_eq!(stats.segments, 1);
    assert_eq!(wal.current_segment(), 3);
    assert!(!seg(dir.path(), 2).exists());
    wal.close().expect("close");
    drop(wal);

    // Segment 3 is now the newest; a short segment 1 is a creation that
    // failed (disk full) and whose removal failed too: it holds no record.
    fs::write(seg(dir.path(), 1), [0u8; 10]).expect("write");
    let (wal, stats, seen) = open(dir.path());
    assert!(seen.is_empty());
    assert_eq!(stats.segments, 1);
    assert_eq!(wal.current_segment(), 4);
    assert!(seg(dir.path(), 1).exists(), "left for the trim");
}

#[test]
fn a_replay_error_stops_the_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &[b"a".to_vec(), b"b".to_vec()]);
    wal.close().expect("close");
    drop(wal);
    let mut calls = 0;
    let result = Wal::open(WalOptions::new(dir.path()), |_, _| {
        calls += 1;
        Err(Error::Closed)
    });
    assert!(matches!(result, Err(Error::Closed)));
    assert_eq!(calls, 1);
}

#[test]
fn an_oversized_payload_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    let big = vec![0u8; MAX_RECORD_LEN + 1];
    assert!(matches!(
        wal.append(&big),
        Err(Error::RecordTooLarge { .. })
    ));
    assert!(
        wal.append(b"fine").is_ok(),
        "a refused record does not poison"
    );
}

/// Options for 256-byte segments: five records of 40 bytes fill one
/// (24 + 5 * 48 = 264).
fn small_segments(dir: &Path) -> WalOptions {
    WalOptions {
        segment_bytes: 256,
        ..WalOptions::new(dir)
    }
}

#[test]
fn records_in_recycled_segments_replay_once_after_a_clean_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = small_segments(dir.path());
    let (wal, _, _) = open_opts(opts.clone());
    // Large records: three per segment (24 + 3 * 108 = 348), so the smaller
    // records that later reuse these files leave stale bytes after them.
    let old: Vec<_> = (0..12).map(|i| payload(i, 100)).collect();
    let tickets = append_all(&wal, &old);
    assert_eq!(tickets.last().map(|t| t.segment), Some(4));
    // Segments 1..=3 are flushed: 2 and 3 become spares.
    assert_eq!(wal.delete_segments_before(4, None).expect("delete"), 3);
    assert!(!seg(dir.path(), 1).exists());

    // Five records fill segment 5 (spare 3), two go to segment 6 (spare 2).
    let new: Vec<_> = (100..107).map(|i| payload(i, 40)).collect();
    let tickets = append_all(&wal, &new);
    let segments: Vec<_> = tickets.iter().map(|t| t.segment).collect();
    assert_eq!(segments, vec![5, 5, 5, 5, 5, 6, 6]);
    assert_eq!(wal.stats().segments_recycled, 2);
    assert_eq!(wal.stats().segments_created, 6);
    wal.close().expect("close");
    drop(wal);

    // Both recycled files are longer than what they hold now: stale bytes
    // of the old segments follow the end marks.
    for (id, records) in [(5, 5), (6, 2)] {
        let len = fs::metadata(seg(dir.path(), id)).expect("metadata").len();
        let end = HEADER_LEN + records * framed_len(40);
        assert!(len > end + segment::FRAME_LEN as u64, "segment {id}: {len}");
        let outcome = scan_segment(dir.path(), id);
        assert!(outcome.end_mark, "segment {id}: {outcome:?}");
        assert_eq!(outcome.good_len, end);
    }

    let (_, stats, seen) = open_opts(opts);
    let expected: Vec<_> = old[9..].iter().chain(&new).cloned().collect();
    assert_eq!(payloads(&seen), expected, "each record once, in order");
    let ids: Vec<_> = seen.iter().map(|(s, _)| *s).collect();
    assert_eq!(ids, vec![4, 4, 4, 5, 5, 5, 5, 5, 6, 6]);
    assert_eq!(stats.torn_tails, 0);
    assert_eq!(stats.corrupt_segments, 0);
}

#[test]
fn a_crash_in_a_recycled_segment_replays_what_was_acknowledged_and_cuts_the_stale_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = small_segments(dir.path());
    let (wal, _, _) = open_opts(opts.clone());
    let old: Vec<_> = (0..10).map(|i| payload(i, 40)).collect();
    append_all(&wal, &old);
    assert_eq!(wal.delete_segments_before(2, None).expect("delete"), 1);

    // Records of the same size as the old ones: the stale bytes after the
    // second new record are the old segment's third record, intact and
    // checksummed under its old id. Only the seed tells it apart.
    let new: Vec<_> = (100..102).map(|i| payload(i, 40)).collect();
    let tickets = append_all(&wal, &new);
    assert!(tickets.iter().all(|t| t.segment == 3));
    assert_eq!(wal.stats().segments_recycled, 1);
    crash(wal);

    let path = seg(dir.path(), 3);
    let end = HEADER_LEN + 2 * framed_len(40);
    assert_eq!(
        fs::metadata(&path).expect("metadata").len(),
        HEADER_LEN + 5 * framed_len(40) + segment::FRAME_LEN as u64,
        "the recycled file kept the old segment's length"
    );
    let damage = scan_segment(dir.path(), 3).damage.expect("stale tail");
    assert_eq!(damage.offset, end);
    assert!(
        damage.reason.contains("checksum mismatch"),
        "{}",
        damage.reason
    );

    let (wal, stats, seen) = open_opts(opts.clone());
    let expected: Vec<_> = old[5..].iter().chain(&new).cloned().collect();
    assert_eq!(payloads(&seen), expected);
    assert_eq!(stats.torn_tails, 1);
    assert_eq!(stats.corrupt_segments, 0);
    assert_eq!(fs::metadata(&path).expect("metadata").len(), end);
    let after = payload(200, 40);
    append_all(&wal, std::slice::from_ref(&after));
    wal.close().expect("close");
    drop(wal);

    let (_, stats, seen) = open_opts(opts);
    let mut expected = expected;
    expected.push(after);
    assert_eq!(payloads(&seen), expected);
    assert_eq!(stats.torn_tails, 0);
    assert_eq!(stats.corrupt_segments, 0);
}

#[test]
fn a_record_copied_into_another_segment_fails_its_checksum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first: Vec<_> = (0..2).map(|i| payload(i, 30)).collect();
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &first);
    wal.close().expect("close");
    drop(wal);
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &[b"second".to_vec()]);
    wal.close().expect("close");
    drop(wal);

    // Segment 2's record, then segment 1's records verbatim where segment 2's
    // end mark was: the stale contents of a recycled file.
    let one = fs::read(seg(dir.path(), 1)).expect("read");
    let records_of_one = &one[HEADER_LEN as usize..][..2 * framed_len(30) as usize];
    let two = fs::read(seg(dir.path(), 2)).expect("read");
    let end = HEADER_LEN + framed_len(6);
    let mut forged = two[..end as usize].to_vec();
    forged.extend_from_slice(records_of_one);
    fs::write(seg(dir.path(), 2), &forged).expect("write");

    let outcome = scan_segment(dir.path(), 2);
    assert_eq!(outcome.records, 1);
    let damage = outcome.damage.expect("the copy is damage");
    assert_eq!(damage.offset, end);
    assert!(
        damage.reason.contains("checksum mismatch"),
        "{}",
        damage.reason
    );

    // The same bytes under their own id are valid: only the id differs.
    let mut own = one[..HEADER_LEN as usize].to_vec();
    own.extend_from_slice(records_of_one);
    fs::write(seg(dir.path(), 1), &own).expect("write");
    let outcome = scan_segment(dir.path(), 1);
    assert_eq!((outcome.records, outcome.damage), (2, None));

    let (_, stats, seen) = open(dir.path());
    let expected: Vec<_> = first.iter().cloned().chain([b"second".to_vec()]).collect();
    assert_eq!(payloads(&seen), expected);
    assert_eq!(stats.torn_tails, 1);
    assert_eq!(
        fs::metadata(seg(dir.path(), 2)).expect("metadata").len(),
        end
    );
}

/// A version-1 segment `id` holding `records`, byte by byte as the first
/// format wrote it: no segment id in the record checksums, no end mark.
fn version_1_segment(id: u64, records: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = b"TDB-WAL\0".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&id.to_le_bytes());
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    for r in records {
        let len = (r.len() as u32).to_le_bytes();
        let crc = crc32c::crc32c_append(crc32c::crc32c(&len), r);
        bytes.extend_from_slice(&len);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(r);
    }
    bytes
}

#[test]
fn a_version_1_segment_still_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old: Vec<_> = [0usize, 5, 300]
        .iter()
        .map(|&l| payload(l as u64, l))
        .collect();
    fs::write(seg(dir.path(), 7), version_1_segment(7, &old)).expect("write");

    let (wal, stats, seen) = open(dir.path());
    assert_eq!(payloads(&seen), old);
    assert!(seen.iter().all(|(s, _)| *s == 7));
    assert_eq!(stats.segments, 1);
    assert_eq!((stats.torn_tails, stats.corrupt_segments), (0, 0));
    assert_eq!(wal.current_segment(), 8);
    append_all(&wal, &[b"new".to_vec()]);
    wal.close().expect("close");
    drop(wal);

    // The old segment, now older, keeps replaying beside a version-2 one.
    assert_eq!(scan_segment(dir.path(), 7).version, 1);
    assert_eq!(scan_segment(dir.path(), 8).version, 2);
    let (_, stats, seen) = open(dir.path());
    let expected: Vec<_> = old.iter().cloned().chain([b"new".to_vec()]).collect();
    assert_eq!(payloads(&seen), expected);
    assert_eq!((stats.torn_tails, stats.corrupt_segments), (0, 0));
}

#[test]
fn spares_left_by_an_earlier_run_are_reused_and_capped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (wal, _, _) = open(dir.path());
    append_all(&wal, &[b"kept".to_vec()]);
    wal.close().expect("close");
    drop(wal);
    // Three spares, say from a run that died between its renames and its
    // trim: the oldest is deleted at open, the newest becomes segment 2.
    for id in [11, 12, 13] {
        let mut bytes = version_1_segment(id, &[payload(id, 500)]);
        bytes.extend_from_slice(&segment::end_mark(id));
        fs::write(segment::spare_path(dir.path(), id), bytes).expect("write spare");
    }

    let (wal, stats, seen) = open(dir.path());
    assert_eq!(payloads(&seen), vec![b"kept".to_vec()]);
    assert_eq!(stats.segments, 1, "spares are not replayed");
    assert_eq!(wal.current_segment(), 2);
    assert_eq!(wal.stats().segments_recycled, 1);
    assert_eq!(
        file_names(dir.path()),
        vec![
            format!("{:020}.wal", 1),
            format!("{:020}.wal", 2),
            format!("{:020}.wal.spare", 12),
        ]
    );
    append_all(&wal, &[b"in the spare".to_vec()]);
    crash(wal);

    let (wal, stats, seen) = open(dir.path());
    assert_eq!(
        payloads(&seen),
        vec![b"kept".to_vec(), b"in the spare".to_vec()]
    );
    assert_eq!(stats.torn_tails, 1, "the old record after the new one");
    assert_eq!(
        wal.stats().segments_recycled,
        1,
        "spare 12 became segment 3"
    );
    assert_eq!(wal.close_and_discard().expect("discard"), 3);
    assert_eq!(file_names(dir.path()), Vec::<String>::new());
}

#[test]
fn a_failure_while_recycling_falls_back_to_a_new_file_and_loses_nothing() {
    // Taking spare 2 for segment 4 does, after segment 3's end mark (write 1)
    // and its fdatasync (sync 1): header write (write 2), fdatasync (sync 2),
    // rename, directory fsync (sync 3). Fail each step; `None` is the control.
    let steps = [
        None,
        Some((FaultOp::Write, 2)),
        Some((FaultOp::Sync, 2)),
        Some((FaultOp::Sync, 3)),
    ];
    for step in steps {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut opts, injector) = failing_opts(dir.path());
        // Two records of 40 per segment: 24 + 2 * 48 = 120 >= 100.
        opts.segment_bytes = 100;
        let (wal, _, _) = open_opts(opts.clone());
        let before: Vec<_> = (0..6).map(|i| payload(i, 40)).collect();
        append_all(&wal, &before);
        assert_eq!(wal.current_segment(), 3);
        assert_eq!(wal.delete_segments_before(3, None).expect("delete"), 2);

        if let Some((op, n)) = step {
            injector.fail_nth(Some(FaultTarget::Wal), Some(op), n, FaultKind::Io);
        }
        let rotated = payload(100, 40);
        let ticket = append_all(&wal, std::slice::from_ref(&rotated))[0];
        assert_eq!(ticket.segment, 4);
        let recycled = u64::from(step.is_none());
        assert_eq!(injector.injected(), 1 - recycled, "{step:?}");
        assert_eq!(wal.stats().segments_recycled, recycled, "{step:?}");
        // The spare that failed is gone; the other one waits.
        assert_eq!(
            file_names(dir.path()),
            vec![
                format!("{:020}.wal.spare", 1),
                format!("{:020}.wal", 3),
                format!("{:020}.wal", 4),
            ],
            "{step:?}"
        );
        let after: Vec<_> = (200..205).map(|i| payload(i, 40)).collect();
        append_all(&wal, &after);
        wal.close().expect("close");
        drop(wal);

        let (_, stats, seen) = open_opts(opts);
        let expected: Vec<_> = before[4..]
            .iter()
            .chain([&rotated])
            .chain(&after)
            .cloned()
            .collect();
        assert_eq!(payloads(&seen), expected, "{step:?}");
        assert_eq!(
            (stats.torn_tails, stats.corrupt_segments),
            (0, 0),
            "{step:?}"
        );
    }
}
