//! A table of cells kept packed ([`Packed`]): the sums of a sorted run's
//! seconds, which a merge holds from its run's first file to its last.
//! Unpacked, the attribute seconds of an hour of 105 M spans summed over
//! its run are millions of cells and their durations, hundreds of
//! megabytes; packed, a few bytes a cell. They are read and written a chunk
//! at a time.

use tracedb_proto::wire::put_varint;

use super::{Cell, CellTable, Family};

/// Cells a chunk holds, about: a chunk ends at a new bucket once it has
/// this many.
const CHUNK_CELLS: usize = 64 * 1024;

/// zstd level of a chunk. A chunk is packed once and unpacked once for each
/// file the run adds afterwards.
const CHUNK_ZSTD_LEVEL: i32 = 1;

/// Cells in order of bucket then key, packed in chunks of whole buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    pub family: Family,
    /// Seconds, one of [`super::BUCKET_SECONDS`].
    pub seconds: u64,
    pub has_durations: bool,
    /// With `has_durations`: only root keys' cells hold them
    /// ([`CellTable::roots_only`]).
    pub roots_only: bool,
    chunks: Vec<Chunk>,
    cells: usize,
    spans: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Chunk {
    /// Bytes unpacked.
    len: usize,
    cells: usize,
    zstd: Vec<u8>,
}

impl Packed {
    /// `t` (in order), packed.
    pub fn of(t: &CellTable) -> Packed {
        let mut p = Packer::new(t.family, t.seconds, t.has_durations);
        p.out.roots_only = t.roots_only;
        for c in &t.cells {
            p.push(c.bucket, c.key, c.spans, t.durations_of(c));
        }
        p.finish()
    }

    /// Cells it holds.
    pub fn cells(&self) -> usize {
        self.cells
    }

    /// Spans its cells count.
    pub fn spans(&self) -> u64 {
        self.spans
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.zstd.capacity() + 48).sum()
    }

    /// Its chunks, each unpacked as a table of its cells, in order.
    pub fn chunks(&self) -> impl Iterator<Item = CellTable> + '_ {
        self.chunks.iter().map(|c| self.unpack(c))
    }

    /// The whole table, unpacked.
    pub fn unpacked(&self) -> CellTable {
        let mut t = self.empty();
        for chunk in self.chunks() {
            t.append(chunk);
        }
        t
    }

    /// A table of no cells, of its family, length and durations.
    pub fn empty(&self) -> CellTable {
        CellTable {
            roots_only: self.roots_only,
            ..CellTable::empty(self.family, self.seconds, self.has_durations)
        }
    }

    fn unpack(&self, c: &Chunk) -> CellTable {
        let raw = zstd::bulk::decompress(&c.zstd, c.len).expect("a chunk packed here unpacks");
        // The columns' lengths, then the columns.
        let mut at = 0;
        let mut lens = [0usize; COLUMNS];
        for len in &mut lens {
            let (v, n) = varint(&raw[at..]);
            *len = v as usize;
            at += n;
        }
        let mut columns: [&[u8]; COLUMNS] = [&[]; COLUMNS];
        for (column, len) in columns.iter_mut().zip(lens) {
            *column = &raw[at..at + len];
            at += len;
        }
        let next = |column: &mut &[u8]| {
            let (v, n) = varint(column);
            *column = &column[n..];
            v
        };
        let [mut buckets, mut keys, mut spans, mut counts, mut exps, mut exp_spans] = columns;
        let mut t = self.empty();
        t.cells.reserve_exact(c.cells);
        let mut bucket = 0;
        for _ in 0..c.cells {
            bucket += next(&mut buckets);
            let key = next(&mut keys) as u32;
            let spans = next(&mut spans);
            let from = t.durations.len() as u32;
            if self.has_durations {
                for _ in 0..next(&mut counts) {
                    let (&exp, rest) = exps.split_first().expect("an exponent packed here");
                    exps = rest;
                    t.durations.push((exp, next(&mut exp_spans)));
                }
            }
            t.cells.push(Cell {
                bucket,
                key,
                spans,
                durations: (from, t.durations.len() as u32),
            });
        }
        t
    }
}

/// A varint of `b`'s start, and its length.
fn varint(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    unreachable!("a varint packed here ends")
}

/// Columns of a chunk: bucket steps, keys, spans, duration buckets per
/// cell, their exponents, their spans: column by column, as a sidecar's
/// tables are, they compress to a few bytes a cell, where cell by cell the
/// durations' bytes interleave with the keys'.
const COLUMNS: usize = 6;

/// Packs cells given in order of bucket then key.
pub struct Packer {
    out: Packed,
    columns: [Vec<u8>; COLUMNS],
    in_raw: usize,
    /// The last cell's bucket (0 at a chunk's start).
    last: u64,
}

impl Packer {
    pub fn new(family: Family, seconds: u64, has_durations: bool) -> Packer {
        Packer {
            out: Packed {
                family,
                seconds,
                has_durations,
                roots_only: false,
                chunks: Vec::new(),
                cells: 0,
                spans: 0,
            },
            columns: Default::default(),
            in_raw: 0,
            last: 0,
        }
    }

    /// A cell after those pushed before it; its durations are left out
    /// when the table has none.
    pub fn push(&mut self, bucket: u64, key: u32, spans: u64, durations: &[(u8, u64)]) {
        if self.in_raw >= CHUNK_CELLS && bucket != self.last {
            self.cut();
        }
        debug_assert!(bucket >= self.last, "cells in order");
        let [buckets, keys, spans_of, counts, exps, exp_spans] = &mut self.columns;
        put_varint(buckets, bucket - self.last);
        put_varint(keys, u64::from(key));
        put_varint(spans_of, spans);
        if self.out.has_durations {
            put_varint(counts, durations.len() as u64);
            for &(exp, n) in durations {
                exps.push(exp);
                put_varint(exp_spans, n);
            }
        }
        self.last = bucket;
        self.in_raw += 1;
        self.out.cells += 1;
        self.out.spans += spans;
    }

    fn cut(&mut self) {
        if self.in_raw > 0 {
            let mut raw = Vec::with_capacity(self.columns.iter().map(|c| c.len() + 4).sum());
            for c in &self.columns {
                put_varint(&mut raw, c.len() as u64);
            }
            for c in &mut self.columns {
                raw.extend_from_slice(c);
                c.clear();
            }
            self.out.chunks.push(Chunk {
                len: raw.len(),
                cells: self.in_raw,
                zstd: {
                    let mut z =
                        zstd::bulk::compress(&raw, CHUNK_ZSTD_LEVEL).expect("zstd compresses");
                    // It comes with room for the worst case.
                    z.shrink_to_fit();
                    z
                },
            });
        }
        self.in_raw = 0;
        self.last = 0;
    }

    /// Only root keys' cells keep the durations pushed with them
    /// ([`CellTable::roots_only`]): the others are pushed with none.
    pub fn roots_only(mut self) -> Packer {
        self.out.roots_only = self.out.has_durations;
        self
    }

    pub fn finish(mut self) -> Packed {
        self.cut();
        self.out
    }
}
