//! Named minutes left out where light (docs/FORMAT.md, "Metrics cells"):
//! a reader adds them up from the seconds.

use std::path::Path;

use super::*;

/// Forty names, each a span a minute for ten minutes, at seconds that
/// differ by name: every named minute cell counts the one span its second
/// does.
fn a_span_a_minute() -> Vec<Span> {
    let mut spans = Vec::new();
    for minute in 0..10u64 {
        for n in 0..40u64 {
            let second = minute * 60 + (n * 7 + minute) % 60 + 1;
            let name = format!("op {n}");
            spans.push(span(
                Some("s"),
                &name,
                n % 3,
                n % 5 == 0,
                second * NANOS,
                1000 + n,
            ));
        }
    }
    spans
}

/// The named table of `seconds` in `bytes`' cells, read whole, if there.
fn named_table(bytes: &[u8], seconds: u64) -> Option<Vec<CellTable>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    std::fs::write(crate::index::sidecar_path(&table), bytes).expect("write");
    let file = CellsFile::open(&table).expect("open").expect("cells");
    file.table(Family::Named, seconds, Reading::whole(), None)
        .expect("read")
}

/// Light named minutes are left out and read back added up from the
/// seconds, as they were; the other families' minutes, dense named
/// minutes, and light ones beside seconds without every duration are
/// written.
#[test]
fn light_named_minutes_are_left_out_and_added_up_from_the_seconds() {
    let path = Path::new("x.idx");
    let light = counted(&a_span_a_minute());
    let minutes = light.table(Family::Named, 60).expect("minutes");
    let seconds = light.table(Family::Named, 1).expect("seconds");
    assert_eq!(minutes.cells.len(), seconds.cells.len());
    let bytes = encode(&light);
    assert!(
        named_table(&bytes, 60).is_none(),
        "light named minutes written"
    );
    assert!(named_table(&bytes, 1).is_some());
    let unnamed = decode(path, &bytes).expect("decodes").expect("cells");
    assert_eq!(unnamed, light, "the minutes added up from the seconds");
    let kept = Layout {
        light_named_minutes_left_out: false,
        ..Layout::default()
    };
    let bytes_kept = encode_laid_out(&light, kept);
    assert!(named_table(&bytes_kept, 60).is_some());
    assert!(bytes_kept.len() > bytes.len());

    // Dense: a span of each of six keys every second.
    let dense = counted(&every_second(3, 600));
    assert!(
        named_table(&encode(&dense), 60).is_some(),
        "dense minutes left out"
    );

    // Light, but the seconds without durations: the minutes hold what the
    // seconds do not.
    let mut untimed = light.clone();
    for t in &mut untimed.tables {
        if t.family == Family::Named && t.seconds == 1 {
            *t = CellTable {
                durations: Vec::new(),
                cells: t
                    .cells
                    .iter()
                    .map(|c| Cell {
                        durations: (0, 0),
                        ..*c
                    })
                    .collect(),
                ..CellTable::empty(Family::Named, 1, false)
            };
        }
    }
    let bytes = encode(&untimed);
    assert!(named_table(&bytes, 60).is_some());
    assert_eq!(decode(path, &bytes).expect("decodes"), Some(untimed));
}
