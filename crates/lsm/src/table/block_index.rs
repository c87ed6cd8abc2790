//! The block index: one fixed-size entry per data block, in file order, so a
//! lookup finds the blocks whose trace-ID range covers an ID by binary search
//! and reads nothing else.
//!
//! Entries are 64 bytes: block offset (`u64`), block length including its
//! trailer (`u32`), span count (`u32`), first and last trace ID (16 bytes
//! each), smallest and largest span start time (`u64` each). The entries are
//! followed by a crc32c of all of them. Because blocks are written back to
//! back in trace-ID order, a reader checks that the entries tile the data
//! region exactly and that their ID ranges never go backwards; after that,
//! every block offset and length is known to lie inside the file.

use std::path::Path;

use crate::{error::Result, span::TraceId};

use super::{
    check_crc, corrupt,
    footer::{trace_id_at, u32_at, u64_at},
};

/// Bytes of one index entry.
pub(crate) const ENTRY_LEN: usize = 64;

/// Where one data block is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockHandle {
    pub offset: u64,
    /// Length of the block including its trailer.
    pub len: u32,
    pub span_count: u32,
    pub first_trace_id: TraceId,
    pub last_trace_id: TraceId,
    pub min_start_unix_nano: u64,
    pub max_start_unix_nano: u64,
}

impl BlockHandle {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.span_count.to_le_bytes());
        out.extend_from_slice(&self.first_trace_id.0);
        out.extend_from_slice(&self.last_trace_id.0);
        out.extend_from_slice(&self.min_start_unix_nano.to_le_bytes());
        out.extend_from_slice(&self.max_start_unix_nano.to_le_bytes());
    }

    fn decode(b: &[u8]) -> BlockHandle {
        BlockHandle {
            offset: u64_at(b, 0),
            len: u32_at(b, 8),
            span_count: u32_at(b, 12),
            first_trace_id: trace_id_at(b, 16),
            last_trace_id: trace_id_at(b, 32),
            min_start_unix_nano: u64_at(b, 48),
            max_start_unix_nano: u64_at(b, 56),
        }
    }

    /// Offset one past the block's last byte.
    pub(crate) fn end(&self) -> u64 {
        self.offset + u64::from(self.len)
    }
}

/// The encoded index region for `blocks`.
pub(crate) fn encode_block_index(blocks: &[BlockHandle]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * ENTRY_LEN + 4);
    for b in blocks {
        b.encode(&mut out);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks and decodes the index region `region` found at `offset` in `path`.
/// The blocks must tile `[data_start, offset)` exactly, in trace-ID order.
pub(crate) fn decode_block_index(
    path: &Path,
    offset: u64,
    region: &[u8],
    data_start: u64,
) -> Result<Vec<BlockHandle>> {
    let entries = check_crc(path, offset, region)?;
    if entries.is_empty() || entries.len() % ENTRY_LEN != 0 {
        return Err(corrupt(
            path,
            offset,
            format!(
                "index of {} bytes is not a whole number of entries",
                entries.len()
            ),
        ));
    }
    let blocks: Vec<BlockHandle> = entries
        .chunks_exact(ENTRY_LEN)
        .map(BlockHandle::decode)
        .collect();
    let mut expected_offset = data_start;
    let mut previous_last: Option<TraceId> = None;
    for (i, b) in blocks.iter().enumerate() {
        let at = offset + (i * ENTRY_LEN) as u64;
        if b.offset != expected_offset {
            return Err(corrupt(
                path,
                at,
                format!(
                    "block {i} starts at {}, previous block ends at {expected_offset}",
                    b.offset
                ),
            ));
        }
        if b.span_count == 0
            || b.first_trace_id > b.last_trace_id
            || b.min_start_unix_nano > b.max_start_unix_nano
        {
            return Err(corrupt(
                path,
                at,
                format!("index entry {i} is inconsistent: {b:?}"),
            ));
        }
        if previous_last.is_some_and(|last| last > b.first_trace_id) {
            return Err(corrupt(
                path,
                at,
                format!("block {i} starts before the previous block ends"),
            ));
        }
        previous_last = Some(b.last_trace_id);
        expected_offset = b.end();
    }
    if expected_offset != offset {
        return Err(corrupt(
            path,
            offset,
            format!("blocks end at {expected_offset}, index starts at {offset}"),
        ));
    }
    Ok(blocks)
}

/// Indexes of the blocks whose trace-ID range includes `id`: a contiguous run,
/// since ranges are ordered and only touch at a trace that straddles blocks.
pub(crate) fn blocks_for(blocks: &[BlockHandle], id: &TraceId) -> std::ops::Range<usize> {
    let start = blocks.partition_point(|b| b.last_trace_id < *id);
    let end = start + blocks[start..].partition_point(|b| b.first_trace_id <= *id);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(offset: u64, len: u32, first: u8, last: u8) -> BlockHandle {
        BlockHandle {
            offset,
            len,
            span_count: 1,
            first_trace_id: TraceId([first; 16]),
            last_trace_id: TraceId([last; 16]),
            min_start_unix_nano: 1,
            max_start_unix_nano: 2,
        }
    }

    #[test]
    fn lookup_finds_every_block_holding_an_id() {
        let blocks = vec![
            handle(16, 10, 1, 3),
            handle(26, 10, 3, 3),
            handle(36, 10, 3, 5),
            handle(46, 10, 7, 9),
        ];
        assert_eq!(blocks_for(&blocks, &TraceId([3; 16])), 0..3);
        assert_eq!(blocks_for(&blocks, &TraceId([2; 16])), 0..1);
        assert_eq!(blocks_for(&blocks, &TraceId([6; 16])), 3..3);
        assert_eq!(blocks_for(&blocks, &TraceId([0; 16])), 0..0);
        assert_eq!(blocks_for(&blocks, &TraceId([10; 16])), 4..4);
        assert_eq!(blocks_for(&blocks, &TraceId([9; 16])), 3..4);
    }

    #[test]
    fn index_round_trips_and_rejects_gaps_and_disorder() {
        let path = Path::new("t");
        let blocks = vec![handle(16, 10, 1, 3), handle(26, 10, 4, 5)];
        let region = encode_block_index(&blocks);
        assert_eq!(
            decode_block_index(path, 36, &region, 16).expect("decodes"),
            blocks
        );
        assert!(
            decode_block_index(path, 37, &region, 16).is_err(),
            "gap before the index"
        );
        assert!(
            decode_block_index(path, 36, &region, 17).is_err(),
            "gap after the header"
        );
        let backwards = encode_block_index(&[handle(16, 10, 4, 5), handle(26, 10, 1, 3)]);
        assert!(decode_block_index(path, 36, &backwards, 16).is_err());
        let inverted = encode_block_index(&[handle(16, 20, 5, 4)]);
        assert!(decode_block_index(path, 36, &inverted, 16).is_err());
        let overflow = encode_block_index(&[handle(u64::MAX - 5, 10, 1, 1)]);
        assert!(decode_block_index(path, 36, &overflow, 16).is_err());
    }
}
