//! The index's check that a table's parts lie apart (docs/FORMAT.md,
//! "Metrics cells").

use rand::{rngs::SmallRng, Rng, SeedableRng};

use crate::index::cells::format::{apart, PartRanges};

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
