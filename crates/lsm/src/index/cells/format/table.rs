//! A table's cells in columns: how a table, or a part of one, is written
//! into its section's body and read back.

use std::path::Path;

use tracedb_proto::wire::put_varint;

use super::{small, Placed, Section, What, PART_CELLS};
use crate::{
    error::Result,
    index::{
        cells::{Cell, CellKey, CellTable, Reading},
        format::Reader,
    },
};

/// The cells `range` of `t`, with their durations, as a table.
pub(super) fn cut(t: &CellTable, range: std::ops::Range<usize>) -> CellTable {
    copied(t, &t.cells[range])
}

/// The cells of `t` whose key `keep` keeps, in its order.
pub(super) fn select(t: &CellTable, keep: impl Fn(u32) -> bool) -> CellTable {
    copied(t, t.cells.iter().filter(|c| keep(c.key)))
}

/// A table like `t` of `cells` (some of `t`'s, in its order) and their
/// durations.
fn copied<'a>(t: &CellTable, cells: impl IntoIterator<Item = &'a Cell>) -> CellTable {
    let mut out = CellTable {
        roots_only: t.roots_only,
        ..CellTable::empty(t.family, t.seconds, t.has_durations)
    };
    for c in cells {
        let from = out.durations.len() as u32;
        out.durations.extend_from_slice(t.durations_of(c));
        out.cells.push(Cell {
            durations: (from, out.durations.len() as u32),
            ..*c
        });
    }
    out
}

/// Writes `in_frame`, cells of one time frame of `t`, in parts by ranges
/// of `keys` (or a table of no cells, whole) with `frame`. A part of a
/// table whose roots and errors alone keep durations
/// ([`CellTable::roots_only`]) holds them if its keys are roots or errors
/// (a part's keys share their parent and whether they are errors); its
/// cells of fewer than `listed_below` spans give each span's duration
/// bucket ([`table_body`]). A named part past `name_part_cells` cells ends
/// where the name changes ([`key_ranges`]).
pub(super) fn put_frame(
    frame: &mut impl FnMut(&mut Vec<u8>, Placed, usize, Vec<u8>),
    out: &mut Vec<u8>,
    t: &CellTable,
    in_frame: &[Cell],
    keys: &[CellKey],
    (name_part_cells, listed_below): (usize, u8),
) {
    let Some(buckets) = in_frame.first().zip(in_frame.last()) else {
        let what = What::Table(t.family, t.seconds, t.has_durations);
        let body = table_body(t, in_frame.iter(), t.has_durations, listed_below);
        frame(out, (what, None, None), 0, body);
        return;
    };
    let buckets = Some((buckets.0.bucket, buckets.1.bucket));
    let ranges = key_ranges(in_frame, keys, name_part_cells);
    let mut part_of = vec![0usize; keys.len()];
    for (i, &(first, last)) in ranges.iter().enumerate() {
        part_of[first as usize..=last as usize].fill(i);
    }
    let mut parts: Vec<Vec<&Cell>> = vec![Vec::new(); ranges.len()];
    for c in in_frame {
        parts[part_of[c.key as usize]].push(c);
    }
    for (range, part) in ranges.into_iter().zip(parts) {
        if !part.is_empty() {
            let timed =
                t.has_durations && (!t.roots_only || keys[range.0 as usize].timed_when_light());
            let what = What::Table(t.family, t.seconds, timed);
            let body = table_body(t, part.iter().copied(), timed, listed_below);
            frame(out, (what, Some(range), buckets), part.len(), body);
        }
    }
}

/// Cells of `t` (some or all, in its order) in columns, which compress
/// better than cells one after another: each cell's bucket (as the step
/// from the previous cell's), its key (as the step from the previous
/// cell's in the same bucket, else whole), its spans, then (`timed`: of a
/// table with durations) its duration buckets: each with its spans, or,
/// in a cell of fewer than `listed_below` spans, each span's bucket in
/// ascending order (0 for a span in none). A cell of a span or two has
/// its durations in as many bytes, where its buckets with their spans of
/// one each took three or five.
pub(super) fn table_body<'a>(
    t: &CellTable,
    cells: impl Iterator<Item = &'a Cell> + Clone,
    timed: bool,
    listed_below: u8,
) -> Vec<u8> {
    let mut body = Vec::new();
    let mut last = 0u64;
    for c in cells.clone() {
        put_varint(&mut body, c.bucket - last);
        last = c.bucket;
    }
    let mut prev: Option<&Cell> = None;
    for c in cells.clone() {
        let key = match prev {
            Some(p) if p.bucket == c.bucket => c.key - p.key,
            _ => c.key,
        };
        put_varint(&mut body, u64::from(key));
        prev = Some(c);
    }
    for c in cells.clone() {
        put_varint(&mut body, c.spans);
    }
    if timed {
        for c in cells {
            let durations = t.durations_of(c);
            if c.spans < u64::from(listed_below) {
                let in_buckets: u64 = durations.iter().map(|d| d.1).sum();
                body.extend(std::iter::repeat_n(0, (c.spans - in_buckets) as usize));
                for &(exp, n) in durations {
                    body.extend(std::iter::repeat_n(exp, n as usize));
                }
                continue;
            }
            put_varint(&mut body, durations.len() as u64);
            for &(exp, n) in durations {
                body.push(exp);
                put_varint(&mut body, n);
            }
        }
    }
    body
}

/// The ranges of keys (first and last, inclusive) the parts of `cells`
/// (a table's, or a time frame's of it) hold. A
/// part ends where the keys' parent changes or whether their status is an
/// error does, and once past [`PART_CELLS`] cells where their service does
/// or, among keys of no service (the any-service family's), their name
/// does (or at any key past four times that), so the keys a query of
/// roots, of errors, of one service, or of one name of every service,
/// matches are in few parts. Among named keys of a service, a part also
/// ends where the name changes once past `name_part_cells` cells (this
/// version's files: 8,192; `usize::MAX`, as files written before, never).
pub(super) fn key_ranges(
    cells: &[Cell],
    keys: &[CellKey],
    name_part_cells: usize,
) -> Vec<(u32, u32)> {
    let n = keys.len() as u32;
    if n < 2 {
        return vec![(0, n.saturating_sub(1))];
    }
    let mut per_key = vec![0usize; keys.len()];
    for c in cells {
        per_key[c.key as usize] += 1;
    }
    let mut ranges = Vec::new();
    let (mut first, mut cells) = (0u32, 0usize);
    for k in 1..n {
        cells += per_key[k as usize - 1];
        let (a, b) = (&keys[k as usize - 1], &keys[k as usize]);
        if (a.parent, a.is_error()) != (b.parent, b.is_error())
            || (cells >= PART_CELLS
                && (a.service != b.service || (a.service.is_none() && a.name != b.name)))
            || cells >= 4 * PART_CELLS
            || (cells >= name_part_cells
                && a.service.is_some()
                && a.name.is_some()
                && (a.service != b.service || a.name != b.name))
        {
            ranges.push((first, k - 1));
            (first, cells) = (k, 0);
        }
    }
    ranges.push((first, n - 1));
    ranges
}

/// Where `n` varints from `from` in `buf` end, counting their last bytes
/// (under 0x80); `None` when `buf` ends first.
fn varints_end(buf: &[u8], from: usize, n: usize) -> Option<usize> {
    if n == 0 {
        return Some(from);
    }
    let mut left = n;
    for (i, &b) in buf.get(from..)?.iter().enumerate() {
        if b & 0x80 == 0 {
            left -= 1;
            if left == 0 {
                return Some(from + i + 1);
            }
        }
    }
    None
}

/// The table, or table part, of section `s` from its inflated `body`, its
/// family having `keys` keys, read as `reading` asks, with the cells of the
/// keys `want` marks only (all without it; a key past its end is kept).
///
/// The columns are read side by side, a cell at a time (where each starts
/// is found first by counting the varints' last bytes), so a cell the
/// reading or `want` leaves out is never stored, nor its durations.
pub(super) fn parse_table(
    path: &Path,
    body: &[u8],
    s: &Section,
    keys: u64,
    reading: Reading<'_>,
    want: Option<&[bool]>,
) -> Result<CellTable> {
    let What::Table(family, seconds, has_durations) = s.what else {
        unreachable!("a table's section")
    };
    let n = s.count;
    // The keys its cells may have: `first..end`.
    let (first, end) = s.keys.map_or((0, keys), |(a, b)| (a, u64::from(b) + 1));
    let reader = |at| Reader {
        path,
        buf: body,
        at,
    };
    // Each cell takes at least a byte in each of its three columns.
    if n > body.len() as u64 / 3 {
        return Err(reader(0).err("more cells than their bytes hold"));
    }
    let n = n as usize;
    let column_end =
        |from| varints_end(body, from, n).ok_or_else(|| reader(body.len()).err("truncated"));
    let keys_at = column_end(0)?;
    let spans_at = column_end(keys_at)?;
    let durations_at = column_end(spans_at)?;
    let (mut rb, mut rk, mut rs, mut rd) = (
        reader(0),
        reader(keys_at),
        reader(spans_at),
        reader(durations_at),
    );
    let read_durations = has_durations && reading.durations;
    let mut t = CellTable {
        family,
        seconds,
        has_durations: read_durations,
        roots_only: false,
        cells: Vec::with_capacity(n),
        durations: Vec::new(),
    };
    if read_durations {
        // Each cell's list takes a byte for its length, and each bucket two
        // at least: room for them all at once.
        t.durations
            .reserve((body.len() - durations_at).saturating_sub(n) / 2);
    }
    let (mut bucket, mut last) = (0u64, None::<(u64, u32)>);
    for _ in 0..n {
        bucket = bucket
            .checked_add(rb.varint()?)
            .ok_or_else(|| rb.err("a cell's bucket overflows"))?;
        let step = small(&mut rk)?;
        let key = match last {
            Some((b, k)) if b == bucket => {
                if step == 0 {
                    return Err(rk.err("cells out of order"));
                }
                k.checked_add(step)
                    .ok_or_else(|| rk.err("a cell's key overflows"))?
            }
            _ => step,
        };
        if s.buckets.is_some_and(|(a, b)| bucket < a || bucket > b) {
            return Err(rb.err("a cell of a bucket its table part does not have"));
        }
        if key < first || u64::from(key) >= end {
            return Err(rk.err("a cell names a key its family or table part does not have"));
        }
        last = Some((bucket, key));
        let spans = rs.varint()?;
        if spans == 0 {
            return Err(rs.err("a cell of no spans"));
        }
        let kept = reading.keeps(bucket)
            && want.is_none_or(|w| w.get(key as usize).copied().unwrap_or(true));
        let from = t.durations.len() as u32;
        if read_durations && spans < u64::from(s.listed_below) {
            // Each span's bucket, ascending: equal ones are one bucket.
            let listed = rd.bytes(spans as usize)?;
            if listed.windows(2).any(|w| w[0] > w[1]) || listed.last() > Some(&64) {
                return Err(rd.err("a cell's durations are out of order or out of range"));
            }
            if kept {
                for &exp in listed.iter().filter(|&&e| e > 0) {
                    let begun = t.durations.len() > from as usize;
                    match t.durations.last_mut() {
                        Some(d) if begun && d.0 == exp => d.1 += 1,
                        _ => t.durations.push((exp, 1)),
                    }
                }
            }
        } else if read_durations {
            let b = rd.count(2)?;
            if kept {
                // Exponents start at 1: 0 is below any.
                let mut last_exp = 0;
                let mut in_buckets = 0u64;
                for _ in 0..b {
                    let exp = rd.bytes(1)?[0];
                    let count = rd.varint()?;
                    if exp <= last_exp || exp > 64 || count == 0 {
                        return Err(
                            rd.err("a cell's durations are out of order, out of range or empty")
                        );
                    }
                    last_exp = exp;
                    in_buckets = in_buckets.saturating_add(count);
                    t.durations.push((exp, count));
                }
                if in_buckets > spans {
                    return Err(rd.err("a cell counts fewer spans than its durations"));
                }
            } else {
                // Stepped over: each bucket is an exponent byte and a
                // varint. The frame's checksum vouched for them.
                for _ in 0..b {
                    rd.at = varints_end(body, rd.at + 1, 1).ok_or_else(|| rd.err("truncated"))?;
                }
            }
        }
        if kept {
            t.cells.push(Cell {
                bucket,
                key,
                spans,
                durations: (from, t.durations.len() as u32),
            });
        }
    }
    // A table read without its durations stops before them; the frame's
    // checksum vouched for the rest.
    let end_at = match (has_durations, read_durations) {
        (false, _) => durations_at,
        (true, true) => rd.at,
        (true, false) => body.len(),
    };
    if end_at != body.len() {
        return Err(reader(end_at).err("bytes left over after the cells"));
    }
    Ok(t)
}
