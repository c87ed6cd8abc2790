//! How a named table is cut into time frames and parts (docs/FORMAT.md,
//! "Metrics cells"), the index's check that a table's parts lie apart, and
//! a file's index kept between queries.

use std::path::Path;

use rand::{rngs::SmallRng, Rng, SeedableRng};

use super::*;
use crate::index::cells::format::{apart, PartRanges};

/// Services, names a service's spans take, and minutes of spans.
const SERVICES: usize = 20;
const NAMES: usize = 16;
const MINUTES: u64 = 5;

/// In every second, a span of every (service, name), none of them a root's
/// or an error's, and a root span of every service: the named seconds of
/// the others hold 19,200 cells a minute, more than a named frame's
/// 16,384, the roots' 1,200.
fn many_names() -> Vec<Span> {
    let mut spans = Vec::new();
    for second in 1..=MINUTES * 60 {
        for s in 0..SERVICES {
            let service = format!("service-{s}");
            spans.push(span(Some(&service), "GET /", 0, true, second * NANOS, 1000));
            for n in 0..NAMES {
                let name = format!("op {n}");
                spans.push(span(Some(&service), &name, 0, false, second * NANOS, 900));
            }
        }
    }
    spans
}

/// The minute (its last second over 60, rounded up) a bucket of seconds is in.
fn minute(bucket: u64) -> u64 {
    bucket.div_ceil(60)
}

/// The named seconds of keys neither a root's nor an error's are framed by
/// the minute, the roots' as the other families' tables (one frame here);
/// within a minute, a service's parts end where the name changes once past
/// 8,192 cells. Asked for one name of one service, a reader reads a part a
/// minute and gives that key's cells alone; every layout reads back as the
/// same cells.
#[test]
fn named_seconds_are_framed_by_the_minute_and_cut_by_name() {
    let cells = counted(&many_names());
    let path = Path::new("x.idx");
    let before = Layout {
        named_frame_cells: Layout::default().frame_cells,
        name_part_cells: usize::MAX,
        ..Layout::default()
    };
    for layout in [Layout::default(), before] {
        let read = decode(path, &encode_laid_out(&cells, layout)).expect("decodes");
        assert_eq!(read, Some(cells.clone()), "{layout:?}");
    }
    // The same cells with their named seconds packed (as a merge's sums
    // are held) are written alike.
    let mut packed = cells.clone();
    let at = packed
        .tables
        .iter()
        .position(|t| t.family == Family::Named && t.seconds == 1)
        .expect("named seconds");
    let seconds = packed.tables.remove(at);
    packed.packed.push(Packed::of(&seconds));
    let read = decode(path, &encode(&packed)).expect("decodes");
    assert_eq!(read, Some(packed.clone().unpacked()));
    for written in [&cells, &packed] {
        framed_by_the_minute_and_cut_by_name(
            written,
            cells.table(Family::Named, 1).expect("seconds"),
        );
    }
}

/// [`named_seconds_are_framed_by_the_minute_and_cut_by_name`], on the
/// sidecar `cells` write, their named seconds being `whole`.
fn framed_by_the_minute_and_cut_by_name(cells: &FileCells, whole: &CellTable) {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    std::fs::write(crate::index::sidecar_path(&table), encode(cells)).expect("write");
    let file = CellsFile::open(&table).expect("open").expect("cells");
    let keys = file.keys(Family::Named).expect("keys");
    let all = file
        .table(Family::Named, 1, Reading::whole(), None)
        .expect("read")
        .expect("seconds");
    let minutes_of = |t: &CellTable| {
        let first = t.cells.first().expect("a part holds cells").bucket;
        let last = t.cells.last().expect("a part holds cells").bucket;
        (minute(first), minute(last))
    };
    let (roots, others): (Vec<&CellTable>, Vec<&CellTable>) = all
        .iter()
        .partition(|t| keys[t.cells[0].key as usize].is_root());
    assert_eq!(roots.len(), 1, "the roots' cells are one part");
    assert_eq!(minutes_of(roots[0]), (1, MINUTES));
    for part in &others {
        let (first, last) = minutes_of(part);
        assert_eq!(first, last, "a part of others' keys in one minute");
        assert!(part.cells.iter().all(|c| !keys[c.key as usize].is_root()));
    }
    // Each minute's others are cut where the name changes past 8,192
    // cells: three parts a minute, not two (past 16,384, where the
    // service does).
    assert_eq!(others.len() as u64, 3 * MINUTES, "{} parts", others.len());

    let service = keys[0].service.clone();
    let want: Vec<bool> = keys
        .iter()
        .map(|k| !k.is_root() && k.service == service && k.name.as_deref() == Some(b"op 3"))
        .collect();
    assert_eq!(want.iter().filter(|&&w| w).count(), 1);
    let pieces = file
        .table(Family::Named, 1, Reading::default(), Some(&want))
        .expect("read")
        .expect("seconds");
    assert_eq!(pieces.len() as u64, MINUTES, "a part a minute");
    let wanted = |k: u32| want[k as usize];
    assert_eq!(
        cells_of(&pieces, wanted),
        cells_of(std::slice::from_ref(whole), wanted)
    );
    let read: usize = pieces.iter().map(|t| t.cells.len()).sum();
    assert_eq!(read as u64, MINUTES * 60, "that key's cells alone");
}

/// The index's check of a table's parts says what comparing every two of
/// them says: on random parts of two tables, some meeting, most not.
#[test]
fn parts_apart_as_every_two_say() {
    let mut rng = SmallRng::seed_from_u64(43);
    let meet = |a: &PartRanges, b: &PartRanges| {
        let over = |x: (u64, u64), y: (u64, u64)| x.0 <= y.1 && y.0 <= x.1;
        a.0 == b.0 && over(a.1, b.1) && over(a.2, b.2)
    };
    let (mut met, mut kept) = (0, 0);
    for _ in 0..2_000 {
        let n = rng.random_range(0..12);
        let mut parts: Vec<PartRanges> = Vec::new();
        for _ in 0..n {
            let table = (rng.random_range(0..2u8), 1);
            let ranges = |rng: &mut SmallRng, wide: u64| {
                let first = rng.random_range(0..40);
                (first, first + rng.random_range(0..wide))
            };
            let buckets = ranges(&mut rng, 12);
            let keys = ranges(&mut rng, 4);
            parts.push((table, buckets, keys));
        }
        let every_two = (0..parts.len()).all(|i| (0..i).all(|j| !meet(&parts[i], &parts[j])));
        assert_eq!(apart(parts.clone()), every_two, "{parts:?}");
        if every_two {
            kept += 1;
        } else {
            met += 1;
        }
    }
    assert!(met > 200 && kept > 200, "{met} met, {kept} apart");
    // A part meeting an open part that is not the last to start.
    let wide = ((0, 1), (0, 100), (0, 9));
    let short = ((0, 1), (0, 10), (10, 19));
    assert!(apart(vec![wide, short, ((0, 1), (50, 60), (10, 12))]));
    assert!(!apart(vec![wide, short, ((0, 1), (50, 60), (5, 5))]));
    // A whole table meets any other section of it.
    let whole = ((0, 1), (0, u64::MAX), (0, u64::MAX));
    assert!(!apart(vec![whole, ((0, 1), (7, 7), (3, 3))]));
    assert!(apart(vec![whole, ((1, 1), (7, 7), (3, 3))]));
}

/// A file's index is read once and kept: opened again, the file is not
/// read for it (its footer damaged in place, it still opens from the
/// cache, and only from it), a rebuilt sidecar (a new inode) is read anew,
/// and the index goes with its file. Past their share, indexes are not
/// kept.
#[test]
fn a_files_index_is_kept_between_opens() {
    use std::os::unix::fs::FileExt;
    let cells = counted(&many_names());
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    let sidecar = crate::index::sidecar_path(&table);
    std::fs::write(&sidecar, encode(&cells)).expect("write");
    let damage = || {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&sidecar)
            .expect("open");
        let len = f.metadata().expect("metadata").len();
        f.write_all_at(&[0; 20], len - 20)
            .expect("damage the footer");
    };
    let cache = Arc::new(SectionCache::new(64 << 20));
    let first = CellsFile::open_cached(&table, &cache, 1, cache.turn()).expect("opens");
    let keys = first.expect("cells").keys(Family::Named).expect("keys");
    assert!(cache.sections_bytes() > 0, "the index kept");
    damage();
    assert!(
        CellsFile::open(&table).expect("opens").is_none(),
        "no cells without the footer"
    );
    let again = CellsFile::open_cached(&table, &cache, 1, cache.turn()).expect("opens");
    assert_eq!(
        again
            .expect("cells from the kept index")
            .keys(Family::Named)
            .expect("keys"),
        keys
    );
    // Another file, or a rebuilt sidecar, is read from disk.
    assert!(CellsFile::open_cached(&table, &cache, 2, cache.turn())
        .expect("opens")
        .is_none());
    let rebuilt = dir.path().join("rebuilt.idx");
    std::fs::write(&rebuilt, encode(&cells)).expect("write");
    std::fs::rename(&rebuilt, &sidecar).expect("rename");
    damage();
    assert!(CellsFile::open_cached(&table, &cache, 1, cache.turn())
        .expect("opens")
        .is_none());
    cache.retain(|file| file != 1);
    assert_eq!(cache.sections_bytes(), 0);

    // A cache too small for the index keeps none.
    std::fs::write(&sidecar, encode(&cells)).expect("write");
    let small = Arc::new(SectionCache::new(16 << 10));
    assert!(CellsFile::open_cached(&table, &small, 1, small.turn())
        .expect("opens")
        .is_some());
    damage();
    assert!(CellsFile::open_cached(&table, &small, 1, small.turn())
        .expect("opens")
        .is_none());
}
