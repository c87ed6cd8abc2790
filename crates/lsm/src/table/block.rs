//! Data blocks: a run of spans in trace-ID order, compressed and checksummed
//! on its own so a lookup reads and inflates only the blocks it needs.
//!
//! A block is the compressed columnar batch (`table/columns.rs`) of its spans (a
//! [row batch](crate::batch) in files of format version 1) followed by a
//! 16-byte trailer: compressed length (`u32`), uncompressed length
//! (`u32`), compression kind (`u8`), three zero bytes, and a crc32c over the
//! compressed bytes and the first 12 trailer bytes. Covering the trailer too
//! means a damaged length or kind is reported as a checksum mismatch rather
//! than misread. The checksum is checked before anything is decompressed, and
//! decompression is bounded by the trailer's uncompressed length, itself
//! capped at `MAX_BLOCK_BYTES`, so a hostile file cannot make a reader
//! allocate more than that per block.
//!
//! Decoded spans point into a buffer owned by the block (never into the file
//! mapping), so they outlive the [`SsTable`](super::SsTable) they came from.
//!
//! Each thread keeps one zstd compression and one decompression context and
//! reuses them for every block: creating a context per block cost about 5% of
//! a compaction's CPU time.

use std::{cell::RefCell, path::Path};

use bytes::Bytes;

use crate::{
    batch::{decode_batch, encode_batch},
    error::{Error, Result},
    span::Span,
};

use super::{
    columns::{decode_columns_where, encode_columns},
    corrupt,
    footer::u32_at,
    BlockFacts, KeepSpan,
};

/// Bytes of a block trailer.
pub(crate) const TRAILER_LEN: usize = 16;

/// Largest uncompressed block a reader accepts and a writer produces.
pub(crate) const MAX_BLOCK_BYTES: usize = 64 << 20;

thread_local! {
    /// This thread's compressor and the level it is set to.
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// `data` compressed at `level` with this thread's context.
fn compress(data: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    COMPRESSOR.with_borrow_mut(|slot| {
        match slot {
            Some((current, c)) if *current != level => {
                c.set_compression_level(level)?;
                *current = level;
            }
            Some(_) => {}
            None => *slot = Some((level, zstd::bulk::Compressor::new(level)?)),
        }
        let (_, c) = slot.as_mut().expect("set above");
        c.compress(data)
    })
}

/// One zstd frame inflated, into at most `capacity` bytes, with this thread's
/// context.
fn decompress(data: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with_borrow_mut(|slot| {
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        slot.as_mut().expect("set above").decompress(data, capacity)
    })
}

/// How a block's batch is stored. Version-1 files hold row batches (kinds 0
/// and 1); this build writes columnar ones (kinds 2 and 3) and reads all four.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// A row batch stored as is.
    Raw = 0,
    /// A row batch in one zstd frame.
    Zstd = 1,
    /// A columnar batch stored as is: used when compression does not make
    /// the block smaller.
    ColumnsRaw = 2,
    /// A columnar batch in one zstd frame.
    ColumnsZstd = 3,
}

/// Appends the block for `spans` (already known to encode to at most
/// `MAX_BLOCK_BYTES` as a row batch) to `out`; returns the uncompressed
/// length.
pub fn encode_block(spans: &[Span], zstd_level: i32, out: &mut Vec<u8>) -> usize {
    let mut raw = Vec::new();
    encode_columns(spans, &mut raw);
    if raw.len() > MAX_BLOCK_BYTES {
        // Only spans too small to carry their own IDs can make the columns
        // longer than the rows the builder measured.
        return encode_row_block(spans, zstd_level, out);
    }
    write_block(raw, Kind::ColumnsRaw, Kind::ColumnsZstd, zstd_level, out)
}

/// [`encode_block`] as format version 1 wrote it: a row batch.
pub fn encode_row_block(spans: &[Span], zstd_level: i32, out: &mut Vec<u8>) -> usize {
    let mut raw = Vec::new();
    encode_batch(spans, &mut raw);
    write_block(raw, Kind::Raw, Kind::Zstd, zstd_level, out)
}

/// Appends `raw`, compressed when that makes it smaller, and the trailer.
fn write_block(
    raw: Vec<u8>,
    stored: Kind,
    zstd: Kind,
    zstd_level: i32,
    out: &mut Vec<u8>,
) -> usize {
    let start = out.len();
    let kind = match compress(&raw, zstd_level) {
        Ok(z) if z.len() < raw.len() => {
            out.extend_from_slice(&z);
            zstd
        }
        Ok(_) => {
            out.extend_from_slice(&raw);
            stored
        }
        Err(error) => {
            // Only a bad level or an allocation failure gets here; the data is
            // still worth keeping, uncompressed.
            tracing::warn!(%error, zstd_level, "zstd compression failed, storing block raw");
            out.extend_from_slice(&raw);
            stored
        }
    };
    let compressed_len = out.len() - start;
    out.extend_from_slice(&(compressed_len as u32).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    out.extend_from_slice(&[kind as u8, 0, 0, 0]);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    raw.len()
}

/// Checks, decompresses and decodes the block `block`, found at `offset` in `path`.
pub fn decode_block(path: &Path, offset: u64, block: &[u8]) -> Result<Vec<Span>> {
    decode_block_where(path, offset, block, None).map(|(spans, _)| spans)
}

/// [`decode_block`] of only the spans `keep` accepts (all when `None`; see
/// [`KeepSpan`]), with what the block holds whole.
pub(crate) fn decode_block_where(
    path: &Path,
    offset: u64,
    block: &[u8],
    keep: Option<&KeepSpan>,
) -> Result<(Vec<Span>, BlockFacts)> {
    if block.len() < TRAILER_LEN {
        return Err(corrupt(
            path,
            offset,
            format!("block of {} bytes has no trailer", block.len()),
        ));
    }
    let body = super::check_crc(path, offset, block)?;
    let trailer = &body[body.len() - (TRAILER_LEN - 4)..];
    let data = &body[..body.len() - (TRAILER_LEN - 4)];
    let compressed_len = u32_at(trailer, 0) as usize;
    let raw_len = u32_at(trailer, 4) as usize;
    let trailer_at = offset + data.len() as u64;
    if compressed_len != data.len() {
        return Err(corrupt(
            path,
            trailer_at,
            format!(
                "trailer says {compressed_len} compressed bytes, block holds {}",
                data.len()
            ),
        ));
    }
    if raw_len > MAX_BLOCK_BYTES {
        return Err(corrupt(
            path,
            trailer_at + 4,
            format!("block claims {raw_len} uncompressed bytes, limit is {MAX_BLOCK_BYTES}"),
        ));
    }
    if trailer[9..12] != [0, 0, 0] {
        return Err(corrupt(
            path,
            trailer_at + 9,
            "nonzero reserved trailer bytes",
        ));
    }
    let kind = trailer[8];
    let raw = match kind {
        k if k == Kind::Raw as u8 || k == Kind::ColumnsRaw as u8 => {
            if raw_len != data.len() {
                return Err(corrupt(
                    path,
                    trailer_at + 4,
                    "raw block whose two lengths differ",
                ));
            }
            data.to_vec()
        }
        k if k == Kind::Zstd as u8 || k == Kind::ColumnsZstd as u8 => {
            let raw = decompress(data, raw_len).map_err(|e| {
                corrupt(
                    path,
                    offset,
                    format!("zstd frame does not decompress into {raw_len} bytes: {e}"),
                )
            })?;
            if raw.len() != raw_len {
                return Err(corrupt(
                    path,
                    offset,
                    format!(
                        "block decompressed to {} bytes, trailer says {raw_len}",
                        raw.len()
                    ),
                ));
            }
            raw
        }
        k => {
            return Err(corrupt(
                path,
                trailer_at + 8,
                format!("unknown compression kind {k}"),
            ))
        }
    };
    let raw = Bytes::from(raw);
    let decoded = if kind >= Kind::ColumnsRaw as u8 {
        decode_columns_where(&raw, keep)
    } else {
        decode_batch(&raw).map(|mut spans| {
            let facts = BlockFacts::of(&spans);
            if let Some(keep) = keep {
                spans.retain(|s| keep(&s.trace_id, &s.payload, s.group.resource.as_deref()));
            }
            (spans, facts)
        })
    };
    decoded.map_err(|source| Error::CorruptBlock {
        file: path.to_path_buf(),
        offset,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{group, span};

    fn block_of(spans: &[Span]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_block(spans, 3, &mut out);
        out
    }

    /// Rewrites the trailer checksum so a test reaches the checks behind it.
    fn reseal(block: &mut [u8]) {
        let n = block.len() - 4;
        let crc = crc32c::crc32c(&block[..n]);
        block[n..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn compressible_block_round_trips_compressed() {
        let g = group("svc");
        let spans: Vec<Span> = (0..200).map(|i| span(&g, 1, i, i * 10)).collect();
        let block = block_of(&spans);
        assert_eq!(block[block.len() - 8], Kind::ColumnsZstd as u8);
        let back = decode_block(Path::new("t"), 0, &block).expect("decodes");
        assert_eq!(back.len(), 200);
        assert_eq!(back[199].payload, spans[199].payload);
    }

    #[test]
    fn incompressible_block_is_stored_raw() {
        let g = std::sync::Arc::new(crate::span::ScopeGroup::default());
        let mut s = span(
            &g,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            0x5a5a_1234_9876_abcd,
            1,
        );
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..256)
            .map(|_| {
                // xorshift: bytes zstd cannot shrink.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        s.payload = Bytes::from(noise);
        let block = block_of(&[s]);
        assert_eq!(block[block.len() - 8], Kind::ColumnsRaw as u8);
        let back = decode_block(Path::new("t"), 0, &block).expect("decodes");
        assert_eq!(back.len(), 1);
    }

    #[test]
    fn every_flipped_byte_is_a_checksum_mismatch() {
        let g = group("svc");
        let spans: Vec<Span> = (0..20).map(|i| span(&g, 1, i, i)).collect();
        let block = block_of(&spans);
        for i in 0..block.len() {
            let mut bad = block.clone();
            bad[i] ^= 0x01;
            let err = decode_block(Path::new("t"), 40, &bad).expect_err("flip caught");
            assert!(
                matches!(err, Error::ChecksumMismatch { offset: 40, .. }),
                "byte {i}: {err}"
            );
        }
    }

    #[test]
    fn hostile_lengths_behind_a_valid_checksum_are_refused() {
        let g = group("svc");
        let block = block_of(&[span(&g, 1, 1, 1), span(&g, 1, 2, 2)]);
        let t = block.len() - TRAILER_LEN;

        let mut huge = block.clone();
        huge[t + 4..t + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut huge);
        assert!(matches!(
            decode_block(Path::new("t"), 0, &huge),
            Err(Error::Corrupt { .. })
        ));

        let mut short = block.clone();
        short[t + 4..t + 8].copy_from_slice(&3u32.to_le_bytes());
        reseal(&mut short);
        assert!(matches!(
            decode_block(Path::new("t"), 0, &short),
            Err(Error::Corrupt { .. })
        ));

        let mut kind = block.clone();
        kind[t + 8] = 9;
        reseal(&mut kind);
        assert!(matches!(
            decode_block(Path::new("t"), 0, &kind),
            Err(Error::Corrupt { .. })
        ));

        let mut clen = block.clone();
        clen[t..t + 4].copy_from_slice(&1u32.to_le_bytes());
        reseal(&mut clen);
        assert!(matches!(
            decode_block(Path::new("t"), 0, &clen),
            Err(Error::Corrupt { .. })
        ));

        let mut garbage = vec![0xee; 50];
        garbage.extend_from_slice(&50u32.to_le_bytes());
        garbage.extend_from_slice(&50u32.to_le_bytes());
        garbage.extend_from_slice(&[Kind::Raw as u8, 0, 0, 0, 0, 0, 0, 0]);
        reseal(&mut garbage);
        assert!(matches!(
            decode_block(Path::new("t"), 0, &garbage),
            Err(Error::CorruptBlock { .. })
        ));
    }
}
