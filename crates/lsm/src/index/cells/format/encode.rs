//! The cells as a sidecar ends with them ([`encode`]): how tables are cut
//! into time frames and parts, and which tables are written.

use super::*;

/// Buckets a table's time frames start at a multiple of.
const FRAME_BUCKETS: u64 = 60;

/// Cells a table's time frame holds before the next whole minute (or hour)
/// ends it. A frame's cells are cut again into parts by key, and a query of
/// one service reads that service's parts: frames of fewer cells have
/// fewer parts, each holding more services. At a sixteenth of this, one
/// service's unnamed quantiles on an hour of 82.6 M spans took 107 ms
/// against 51 ms unframed (docs/BENCHMARKS.md, "A week of traffic").
const FRAME_CELLS: usize = 64 * PART_CELLS;

/// [`FRAME_CELLS`] for the named family's cells of keys neither a root's
/// nor an error's, most of a file's cells: a query at a step that is not
/// whole minutes reads the seconds of the minutes its intervals' edges
/// cut, and the frames holding them. A file of a run spreads its cells
/// over the partition's every second, so at [`FRAME_CELLS`] a frame held
/// half an hour and such a query read them all: on the hour of 82.7 M
/// spans, one name's 0.9 quantile by service at Drilldown's 150 s took
/// 1,300 ms so and 636 ms framed by the minute, the cells 1.94 and 1.87 B
/// a span (docs/BENCHMARKS.md, "Named cells framed by the minute"). The
/// roots' and errors' keep [`FRAME_CELLS`]: a few a minute, framed so
/// small they would make Drilldown's panels read many parts.
const NAMED_FRAME_CELLS: usize = PART_CELLS;

/// The cells of `t` (indices into its cells) each of its time frames
/// holds: the seconds and minutes are cut where a bucket starts a new
/// [`FRAME_BUCKETS`] once a frame holds `frame_cells` cells, so a query
/// that needs a few of a table's buckets reads the frames holding them.
/// The hours are one frame.
fn time_frames(t: &CellTable, frame_cells: usize) -> Vec<std::ops::Range<usize>> {
    let mut frames = Vec::new();
    let mut start = 0;
    if t.seconds < BUCKET_SECONDS[2] {
        for (i, pair) in t.cells.windows(2).enumerate() {
            // Bucket `b` ends at second `b` times its length: a minute's
            // seconds are `60m - 59..=60m`.
            let window = |b: u64| b.saturating_sub(1) / FRAME_BUCKETS;
            let cut = window(pair[0].bucket) != window(pair[1].bucket);
            if cut && i + 1 - start >= frame_cells {
                frames.push(start..i + 1);
                start = i + 1;
            }
        }
    }
    frames.push(start..t.cells.len());
    frames
}

/// Cells of a table framed in time apart from its others ([`encode`]).
#[derive(Debug, Clone, Copy)]
enum Share {
    All,
    /// Those of root and error keys ([`CellKey::timed_when_light`]).
    Timed,
    Others,
}

impl Share {
    fn holds(self, key: &CellKey) -> bool {
        match self {
            Share::All => true,
            Share::Timed => key.timed_when_light(),
            Share::Others => !key.timed_when_light(),
        }
    }
}

/// A run's files, each ID as the step from the one before.
fn members_body(members: &[u64]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut last = 0;
    for &id in members {
        put_varint(&mut body, id - last);
        last = id;
    }
    body
}

fn compress(body: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(body, CELLS_ZSTD_LEVEL).expect("zstd compresses")
}

/// The cells as the end of a sidecar holds them: a zstd frame per key list
/// and per table, an index frame saying where each is, then the footer
/// (docs/FORMAT.md, "Metrics cells"). A query reads the index and the
/// frames it needs.
pub fn encode(cells: &FileCells) -> Vec<u8> {
    encode_framed_as(cells, Layout::default())
}

/// How [`encode`] lays a file's cells out, for an A/B of layouts on the
/// same cells (the `cells_reencode` example); [`Layout::default`] is
/// [`encode`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Cells a table's time frame holds before the next whole minute (an
    /// hour, in a table of minutes) ends it.
    pub frame_cells: usize,
    /// The same, for the named family's cells of keys neither a root's
    /// nor an error's, framed apart from the others where it differs.
    pub named_frame_cells: usize,
    /// Cells of a named table's part past which it ends where the name
    /// changes within a service (`usize::MAX`: only where the service
    /// does, as in the other families).
    pub name_part_cells: usize,
    /// A table's cells of fewer spans than this (1 to 64) list their
    /// spans' duration buckets: 1 writes every cell's buckets with their
    /// spans, as sidecars did before.
    pub listed_below: u8,
    /// Whether the named minutes are left out where light: where the named
    /// seconds keep every duration and the minutes would hold three
    /// quarters as many cells or more.
    pub light_named_minutes_left_out: bool,
}

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            frame_cells: FRAME_CELLS,
            named_frame_cells: NAMED_FRAME_CELLS,
            name_part_cells: NAMED_PART_CELLS,
            listed_below: LISTED_BELOW,
            light_named_minutes_left_out: true,
        }
    }
}

/// Minutes whose cells are at least this share of the seconds' (in
/// quarters) add up too few seconds each to be worth their bytes: on a
/// day at a week's density the named minutes took 0.87 of 4.76 B a span,
/// and one service's quantiles by name over 12 hours at a 1,800 s step,
/// read from the seconds, 63 ms against 37 ms (docs/BENCHMARKS.md, "Light
/// named minutes left out"). At an hour's traffic a named minute adds up
/// about four seconds' cells, and is kept.
const LIGHT_MINUTES_QUARTERS: usize = 3;

/// Whether `cells`' named minutes are left out of their sidecar: their
/// seconds keep every cell's durations, so a reader adds the minutes up
/// from them, and the minutes hold three quarters as many cells as the
/// seconds or more (light traffic, where a named cell counts a span or
/// two), so reading the seconds costs about as much.
fn named_minutes_left_out(cells: &FileCells) -> bool {
    // Cells of the named table of `seconds`, if it keeps every duration.
    let timed = |seconds: u64| {
        let whole = cells
            .tables
            .iter()
            .find(|t| t.family == Family::Named && t.seconds == seconds)
            .map(|t| (t.has_durations && !t.roots_only, t.cells.len()));
        let packed = cells
            .packed
            .iter()
            .find(|p| p.family == Family::Named && p.seconds == seconds)
            .map(|p| (p.has_durations && !p.roots_only, p.cells()));
        whole.or(packed)
    };
    match (timed(1), timed(60)) {
        (Some((true, seconds)), Some((true, minutes))) => {
            minutes * 4 >= seconds * LIGHT_MINUTES_QUARTERS
        }
        _ => false,
    }
}

/// [`encode`], laid out as `layout` says.
pub fn encode_laid_out(cells: &FileCells, layout: Layout) -> Vec<u8> {
    assert!((1..=MAX_LISTED_BELOW).contains(&layout.listed_below));
    encode_framed_as(cells, layout)
}

/// [`encode`], cutting tables into time frames of `frame_cells` cells
/// or more, their cells of fewer than `listed_below` spans giving each
/// span's duration bucket (1: none, as sidecars written before did).
#[cfg(test)]
pub(in crate::index::cells) fn encode_framed(
    cells: &FileCells,
    frame_cells: usize,
    listed_below: u8,
) -> Vec<u8> {
    encode_framed_as(
        cells,
        Layout {
            frame_cells,
            named_frame_cells: frame_cells,
            listed_below,
            ..Layout::default()
        },
    )
}

fn encode_framed_as(cells: &FileCells, layout: Layout) -> Vec<u8> {
    let Layout {
        frame_cells,
        named_frame_cells,
        name_part_cells,
        listed_below,
        light_named_minutes_left_out,
    } = layout;
    let left_out = light_named_minutes_left_out && named_minutes_left_out(cells);
    // A named table framed apart is two shares: its root and error keys'
    // cells (a few a minute, framed as the other families') and the
    // others'.
    let shares = |family| match family {
        Family::Named if named_frame_cells != frame_cells => vec![
            (Share::Timed, frame_cells),
            (Share::Others, named_frame_cells),
        ],
        _ => vec![(Share::All, frame_cells)],
    };
    let mut out = Vec::new();
    // Each section, its `back` the frame's offset until the index's is known.
    let mut placed: Vec<Section> = Vec::new();
    let mut frame =
        |out: &mut Vec<u8>, (what, keys, buckets): Placed, count: usize, body: Vec<u8>| {
            let f = compress(&body);
            placed.push(Section {
                what,
                keys,
                buckets,
                count: count as u64,
                listed_below,
                back: out.len() as u64,
                frame_len: f.len() as u32,
                body_len: body.len() as u32,
                crc: crc32c::crc32c(&f),
            });
            out.extend_from_slice(&f);
        };
    let families = &families_of(
        &cells.counts,
        cells.named_in_run,
        !cells.counted.is_empty(),
        cells.has(Family::AnyService),
    );
    let written = |family: Family, seconds: u64| {
        families.contains(&family) && !(left_out && family == Family::Named && seconds == 60)
    };
    for &family in families {
        let keys = cells.keys(family);
        frame(
            &mut out,
            (What::Keys(family), None, None),
            keys.len(),
            keys_body(keys),
        );
    }
    for t in cells.tables.iter().filter(|t| written(t.family, t.seconds)) {
        let keys = cells.keys(t.family);
        let mut any = false;
        for (share, frame_cells) in shares(t.family) {
            let cells = match share {
                Share::All => std::borrow::Cow::Borrowed(t),
                share => std::borrow::Cow::Owned(select(t, |k| share.holds(&keys[k as usize]))),
            };
            if cells.cells.is_empty() {
                continue;
            }
            any = true;
            for in_frame in time_frames(&cells, frame_cells) {
                put_frame(
                    &mut frame,
                    &mut out,
                    &cells,
                    &cells.cells[in_frame],
                    keys,
                    (name_part_cells, listed_below),
                );
            }
        }
        if !any {
            // A table of no cells, whole.
            put_frame(
                &mut frame,
                &mut out,
                t,
                &[],
                keys,
                (name_part_cells, listed_below),
            );
        }
    }
    // A packed table is unpacked a frame's chunks at a time, each share's
    // held apart.
    for p in cells.packed.iter().filter(|p| written(p.family, p.seconds)) {
        let keys = cells.keys(p.family);
        let mut put = |held: &CellTable, in_frame: std::ops::Range<usize>| {
            put_frame(
                &mut frame,
                &mut out,
                held,
                &held.cells[in_frame],
                keys,
                (name_part_cells, listed_below),
            )
        };
        let mut held: Vec<(Share, usize, CellTable)> = shares(p.family)
            .into_iter()
            .map(|(share, frame_cells)| (share, frame_cells, p.empty()))
            .collect();
        let mut any = false;
        for chunk in p.chunks() {
            let mut chunk = Some(chunk);
            for (share, frame_cells, held) in &mut held {
                held.append(match share {
                    Share::All => chunk.take().expect("all of a chunk is one share"),
                    share => select(chunk.as_ref().expect("a chunk"), |k| {
                        share.holds(&keys[k as usize])
                    }),
                });
                if held.cells.len() >= *frame_cells {
                    let mut frames = time_frames(held, *frame_cells);
                    let rest = frames.pop().expect("a frame");
                    for in_frame in frames {
                        any = true;
                        put(held, in_frame);
                    }
                    *held = cut(held, rest);
                }
            }
        }
        for (_, frame_cells, held) in &held {
            if !held.cells.is_empty() {
                any = true;
                for in_frame in time_frames(held, *frame_cells) {
                    put(held, in_frame);
                }
            }
        }
        if !any {
            put(&p.empty(), 0..0);
        }
    }
    if !cells.counted.is_empty() && families.contains(&Family::Attr) {
        frame(
            &mut out,
            (
                What::Counted {
                    per_file: cells.attr_per_file,
                },
                None,
                None,
            ),
            cells.counted.len(),
            counted_body(&cells.counted),
        );
    }
    match &cells.counts {
        Counts::Own => {}
        Counts::Run { run, members } => frame(
            &mut out,
            (
                What::Run {
                    holds: true,
                    run: *run,
                    named: cells.named_in_run,
                },
                None,
                None,
            ),
            members.len(),
            members_body(members),
        ),
        Counts::InRun { run } => frame(
            &mut out,
            (
                What::Run {
                    holds: false,
                    run: *run,
                    named: cells.named_in_run,
                },
                None,
                None,
            ),
            0,
            Vec::new(),
        ),
    }
    let index_start = out.len() as u64;
    let mut index = Vec::new();
    put_varint(&mut index, placed.len() as u64);
    for s in placed {
        match s.what {
            What::Keys(family) => {
                index.extend_from_slice(&[0, family as u8]);
                put_varint(&mut index, 0);
                index.push(0);
            }
            What::Table(family, seconds, durations) => {
                // A part framed in time has both ranges (`encode_framed`).
                let kind = match (s.keys, s.buckets) {
                    (Some(_), Some(_)) => 4,
                    (Some(_), None) => 3,
                    (None, None) => 1,
                    (None, Some(_)) => unreachable!("a part framed in time has its keys"),
                };
                index.extend_from_slice(&[kind, family as u8]);
                put_varint(&mut index, seconds);
                index.push(if durations { s.listed_below.max(1) } else { 0 });
                if let Some((first, last)) = s.keys {
                    put_varint(&mut index, u64::from(first));
                    put_varint(&mut index, u64::from(last));
                }
                if let Some((first, last)) = s.buckets {
                    put_varint(&mut index, first);
                    put_varint(&mut index, last - first);
                }
            }
            What::Run { holds, run, named } => {
                index.extend_from_slice(&[2, 0]);
                put_varint(&mut index, run);
                index.push(u8::from(holds) | u8::from(named) << 1);
            }
            What::Counted { per_file } => {
                index.extend_from_slice(&[5, Family::Attr as u8]);
                put_varint(&mut index, 0);
                index.push(u8::from(!per_file));
            }
        }
        put_varint(&mut index, s.count);
        put_varint(&mut index, index_start - s.back);
        put_varint(&mut index, u64::from(s.frame_len));
        put_varint(&mut index, u64::from(s.body_len));
        index.extend_from_slice(&s.crc.to_le_bytes());
    }
    let f = compress(&index);
    out.extend_from_slice(&f);
    out.extend_from_slice(&(f.len() as u32).to_le_bytes());
    out.extend_from_slice(&(index.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&f).to_le_bytes());
    out.extend_from_slice(CELLS_MAGIC);
    out
}
