//! Hostile input for the decoders outside the sorted files: span batches
//! (the WAL record payload and block content), WAL segments record by record,
//! manifest records and edits. Seeded mutations of valid encodings and
//! random bytes; every decoder must return an error, stop at the damage, or
//! give back exactly what was written. `TRACEDB_FUZZ_ITERS` multiplies the
//! number of inputs (the sorted-file decoders are in `table/hostile.rs`).

use bytes::Bytes;
use rand::{rngs::SmallRng, Rng, SeedableRng};

use crate::{
    batch::{decode_batch, encode_batch},
    fault::Faults,
    manifest::{self, Edit, FileEntry, Manifest, ManifestState},
    table::hostile::{iters, mutate},
    test_util::{group, span},
    wal::{segment, Wal, WalOptions},
};

#[test]
fn mutated_and_random_span_batches_are_errors_or_decode_in_bounds() {
    let groups = [group("a"), group("b"), group("c")];
    let spans: Vec<_> = (0..30u64)
        .map(|i| span(&groups[(i % 3) as usize], u128::from(i / 4), i, i * 10))
        .collect();
    let mut good = Vec::new();
    encode_batch(&spans, &mut good);
    let mut rng = SmallRng::seed_from_u64(0xba7c);
    let mut refused = 0;
    for i in 0..iters(300_000) {
        let bytes = if i % 4 == 0 {
            (0..rng.random_range(0..200))
                .map(|_| rng.random())
                .collect()
        } else {
            let mut b = good.clone();
            mutate(&mut rng, &mut b);
            b
        };
        let len = bytes.len();
        match decode_batch(&Bytes::from(bytes)) {
            Err(_) => refused += 1,
            Ok(decoded) => {
                // Whatever decodes is made of the input's bytes: no span can
                // claim more than the input holds (each takes at least 42).
                assert!(
                    decoded.len() * 42 <= len,
                    "{} spans from {len} bytes",
                    decoded.len()
                );
                let payload: usize = decoded.iter().map(|s| s.payload.len()).sum();
                assert!(payload <= len);
            }
        }
    }
    assert!(refused > iters(300_000) / 2);
}

#[test]
fn mutated_wal_segments_replay_a_prefix_of_what_was_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let payloads: Vec<Vec<u8>> = (0..12u64)
        .map(|i| {
            let mut b = Vec::new();
            encode_batch(&[span(&group("w"), u128::from(i), i, i)], &mut b);
            b
        })
        .collect();
    {
        let (wal, _) = Wal::open(WalOptions::new(dir.path()), |_, _| Ok(())).expect("open");
        let tickets: Vec<_> = payloads
            .iter()
            .map(|p| wal.append(p).expect("append"))
            .collect();
        for t in tickets {
            wal.wait_durable_blocking(t).expect("durable");
        }
        wal.close().expect("close");
    }
    let path = segment::segment_path(dir.path(), 1);
    let good = std::fs::read(&path).expect("read");
    let mut rng = SmallRng::seed_from_u64(0x3a1);
    let mut short = 0;
    for _ in 0..iters(1500) {
        let mut bytes = good.clone();
        mutate(&mut rng, &mut bytes);
        std::fs::write(&path, &bytes).expect("write");
        let mut seen: Vec<Bytes> = Vec::new();
        let scanned = segment::scan(&path, 1, &mut |_, p| {
            let _ = decode_batch(&p);
            seen.push(p);
            Ok(())
        });
        if scanned.is_err() {
            continue; // a damaged header: refused
        }
        // Every record replayed is one that was written, in order: damage
        // stops the replay, it never yields a changed record.
        assert!(seen.len() <= payloads.len());
        for (got, want) in seen.iter().zip(&payloads) {
            assert_eq!(&got[..], &want[..]);
        }
        if seen.len() < payloads.len() {
            short += 1;
        }
    }
    assert!(short > 0);
}

fn entry(id: u64) -> FileEntry {
    FileEntry {
        id,
        level: (id % 3) as u32,
        partition: if id.is_multiple_of(3) {
            manifest::NO_PARTITION
        } else {
            id / 2
        },
        file_size: 4096 + id,
        remote: id % 4 == 1,
    }
}

#[test]
fn mutated_manifests_are_refused_or_give_the_state_of_a_prefix_of_edits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut state = ManifestState::default();
    state.files.insert(1, entry(1));
    state.next_file_id = 2;
    let edits: Vec<Edit> = (0..8u64)
        .map(|i| Edit {
            next_file_id: 3 + 2 * i,
            removed: if i % 2 == 1 { vec![1 + i] } else { vec![] },
            added: vec![entry(2 + i), entry(100 + i)],
        })
        .collect();
    let mut m = Manifest::create(dir.path(), &state, &Faults::default()).expect("create");
    // The files after each prefix of edits.
    let mut prefixes = vec![state.files.keys().copied().collect::<Vec<_>>()];
    let mut files = state.files.clone();
    for e in &edits {
        m.append(e).expect("append");
        for id in &e.removed {
            files.remove(id);
        }
        for f in &e.added {
            files.insert(f.id, *f);
        }
        prefixes.push(files.keys().copied().collect());
    }
    drop(m);
    let path = crate::layout::manifest_path(dir.path());
    let good = std::fs::read(&path).expect("read");
    let mut rng = SmallRng::seed_from_u64(0x3a2);
    let (mut refused, mut torn) = (0, 0);
    for _ in 0..iters(3000) {
        let mut bytes = good.clone();
        mutate(&mut rng, &mut bytes);
        std::fs::write(&path, &bytes).expect("write");
        match manifest::read(&path) {
            Err(_) => refused += 1,
            Ok(None) => panic!("the file exists"),
            Ok(Some((state, _))) => {
                let ids: Vec<u64> = state.files.keys().copied().collect();
                assert!(
                    prefixes.contains(&ids),
                    "a mutated manifest gave a state no prefix of edits gives: {ids:?}"
                );
                torn += usize::from(state.torn_tail);
            }
        }
    }
    assert!(refused > 0 && torn > 0, "refused {refused}, torn {torn}");
    // Edits alone, from random bytes.
    for _ in 0..iters(300_000) {
        let b: Vec<u8> = (0..rng.random_range(0..100))
            .map(|_| rng.random())
            .collect();
        if let Some(e) = Edit::decode(&b, manifest::VERSION) {
            let mut again = Vec::new();
            e.encode(&mut again);
            assert_eq!(again, b, "a decoded edit re-encodes to its bytes");
        }
    }
}
