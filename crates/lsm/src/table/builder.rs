//! Writes a sorted span file from spans given in trace-ID order.
//!
//! Spans are cut into blocks of about [`TableOptions::block_bytes`]
//! uncompressed bytes. A block that has reached the target is closed at the
//! next trace boundary, so most traces live in one block and a lookup inflates
//! one block; a trace that alone outgrows twice the target is split anyway, so
//! one huge trace cannot make a huge block. Blocks are compressed as they fill
//! and kept in memory (compressed) until [`SsTableBuilder::finish`] writes the
//! whole file: the builder does not know its path before then, and a file
//! holds at most one memtable's or one compaction output's worth of data.
//!
//! Out-of-order spans are refused with [`Error::OutOfOrder`] rather than
//! asserted: an unsorted file would silently lose lookups, and the check is
//! one comparison per span.

use std::{
    collections::HashSet,
    fs::{self, File},
    path::{Path, PathBuf},
    sync::Arc,
};

use crate::{
    error::{Error, Result},
    fault::{FaultTarget, Faults},
    span::{ScopeGroup, Span, TraceId},
};

use super::{
    block::{encode_block, MAX_BLOCK_BYTES},
    bloom::BloomBuilder,
    footer::{encode_header, Footer, FOOTER_LEN, HEADER_LEN},
    index::{encode_index, BlockHandle},
    TableMeta, TableOptions,
};

/// Upper bound on the varint-prefixed batch header (group and span counts).
const BATCH_HEADER_MAX: usize = 20;

/// Upper bound on one span's bytes in a batch, beyond its payload: IDs and
/// times (40), group index and payload length varints (10 each).
const SPAN_OVERHEAD_MAX: usize = 60;

/// Builds one sorted span file; see the module docs.
#[derive(Debug)]
pub struct SsTableBuilder {
    opts: TableOptions,
    /// Target and hard limit for the open block's estimated size.
    target: usize,
    split_at: usize,
    /// Header and finished blocks: the file up to the index.
    body: Vec<u8>,
    blocks: Vec<BlockHandle>,
    /// Spans of the open block, not yet encoded.
    pending: Vec<Span>,
    /// Upper bound on the open block's encoded size.
    pending_bytes: usize,
    /// Groups already counted in `pending_bytes`, by address (an address and
    /// not a pointer, so the builder stays `Send`; the `Arc`s in `pending` keep
    /// the addresses from being reused).
    pending_groups: HashSet<usize>,
    bloom: BloomBuilder,
    last_trace_id: Option<TraceId>,
    first_trace_id: Option<TraceId>,
    span_count: u64,
    trace_count: u64,
    min_start_unix_nano: u64,
    max_end_unix_nano: u64,
}

impl SsTableBuilder {
    pub fn new(opts: TableOptions) -> Self {
        // Keep a block (target, then up to twice that mid-trace, plus one span)
        // well under the reader's limit, whatever the options say.
        let target = opts.block_bytes.clamp(1, MAX_BLOCK_BYTES / 4);
        SsTableBuilder {
            opts,
            target,
            split_at: 2 * target,
            body: encode_header().to_vec(),
            blocks: Vec::new(),
            pending: Vec::new(),
            pending_bytes: BATCH_HEADER_MAX,
            pending_groups: HashSet::new(),
            bloom: BloomBuilder::default(),
            last_trace_id: None,
            first_trace_id: None,
            span_count: 0,
            trace_count: 0,
            min_start_unix_nano: u64::MAX,
            max_end_unix_nano: 0,
        }
    }

    /// Adds the next span. Spans must arrive in non-decreasing trace-ID order;
    /// a span that would go backwards is refused with [`Error::OutOfOrder`] and
    /// a span too large for any block with [`Error::SpanTooLarge`]; in both
    /// cases the builder is unchanged and can go on.
    pub fn add(&mut self, span: &Span) -> Result<()> {
        let new_trace = match self.last_trace_id {
            Some(previous) if span.trace_id < previous => {
                return Err(Error::OutOfOrder {
                    previous,
                    next: span.trace_id,
                })
            }
            Some(previous) => span.trace_id != previous,
            None => true,
        };
        let span_bytes = SPAN_OVERHEAD_MAX + span.payload.len();
        let group_bytes = group_size(&span.group);
        let alone = BATCH_HEADER_MAX + group_bytes + span_bytes;
        if alone > MAX_BLOCK_BYTES {
            return Err(Error::SpanTooLarge {
                trace_id: span.trace_id,
                size: alone as u64,
                max: MAX_BLOCK_BYTES as u64,
            });
        }

        if !self.pending.is_empty() {
            let cut_here = (new_trace && self.pending_bytes >= self.target)
                || self.pending_bytes >= self.split_at
                || self.pending_bytes + group_bytes + span_bytes > MAX_BLOCK_BYTES;
            if cut_here {
                self.close_block();
            }
        }

        if self.pending_groups.insert(Arc::as_ptr(&span.group).addr()) {
            self.pending_bytes += group_bytes;
        }
        self.pending_bytes += span_bytes;
        self.pending.push(span.clone());

        if new_trace {
            self.bloom.add(&span.trace_id);
            self.trace_count += 1;
        }
        self.first_trace_id.get_or_insert(span.trace_id);
        self.last_trace_id = Some(span.trace_id);
        self.span_count += 1;
        self.min_start_unix_nano = self.min_start_unix_nano.min(span.start_unix_nano);
        self.max_end_unix_nano = self.max_end_unix_nano.max(span.end_unix_nano);
        Ok(())
    }

    /// Spans added so far.
    pub fn span_count(&self) -> u64 {
        self.span_count
    }

    /// About how large the file would be if finished now (finished blocks
    /// compressed, the open block uncompressed); compaction cuts outputs by it.
    pub fn estimated_bytes(&self) -> u64 {
        (self.body.len() + self.pending_bytes) as u64
    }

    /// Encodes the open block into `body`.
    fn close_block(&mut self) {
        let (Some(first), Some(last)) = (self.pending.first(), self.pending.last()) else {
            return;
        };
        let handle_base = BlockHandle {
            offset: self.body.len() as u64,
            len: 0,
            span_count: self.pending.len() as u32,
            first_trace_id: first.trace_id,
            last_trace_id: last.trace_id,
            min_start_unix_nano: self
                .pending
                .iter()
                .map(|s| s.start_unix_nano)
                .min()
                .unwrap_or(0),
            max_start_unix_nano: self
                .pending
                .iter()
                .map(|s| s.start_unix_nano)
                .max()
                .unwrap_or(0),
        };
        let raw_len = encode_block(&self.pending, self.opts.zstd_level, &mut self.body);
        debug_assert!(
            raw_len <= self.pending_bytes,
            "size estimate is an upper bound"
        );
        let len = self.body.len() as u64 - handle_base.offset;
        self.blocks.push(BlockHandle {
            len: u32::try_from(len).expect("a block of at most 64 MiB fits in u32"),
            ..handle_base
        });
        self.pending.clear();
        self.pending_groups.clear();
        self.pending_bytes = BATCH_HEADER_MAX;
    }

    /// Writes the file to `{path}.tmp`, fsyncs it, renames it to `path` and
    /// fsyncs the directory, so after `Ok` the file survives a crash under its
    /// final name and before it no file of that name exists. A builder with no
    /// spans is refused with [`Error::EmptyTable`]: a file always holds at
    /// least one span, so its meta always has a real ID and time range.
    pub fn finish(mut self, path: &Path) -> Result<TableMeta> {
        let (Some(min_trace_id), Some(max_trace_id)) = (self.first_trace_id, self.last_trace_id)
        else {
            return Err(Error::EmptyTable {
                path: path.to_path_buf(),
            });
        };
        self.close_block();
        let index = encode_index(&self.blocks);
        let bloom = self.bloom.finish(self.opts.bloom_bits_per_key);
        let index_offset = self.body.len() as u64;
        let bloom_offset = index_offset + index.len() as u64;
        let footer = Footer {
            index_offset,
            index_len: index.len() as u64,
            bloom_offset,
            bloom_len: bloom.len() as u64,
            min_trace_id,
            max_trace_id,
            min_start_unix_nano: self.min_start_unix_nano,
            max_end_unix_nano: self.max_end_unix_nano,
            span_count: self.span_count,
            trace_count: self.trace_count,
            block_count: self.blocks.len() as u64,
        };
        let file_size = bloom_offset + bloom.len() as u64 + FOOTER_LEN as u64;
        debug_assert!(index_offset >= HEADER_LEN as u64);

        write_atomically(
            &self.opts.faults,
            path,
            &[&self.body, &index, &bloom, &footer.encode()],
        )?;
        Ok(TableMeta {
            min_trace_id,
            max_trace_id,
            min_time_unix_nano: self.min_start_unix_nano,
            max_time_unix_nano: self.max_end_unix_nano,
            span_count: self.span_count,
            trace_count: self.trace_count,
            file_size,
        })
    }
}

/// Bytes a group takes in a batch, at most: four length varints and the fields.
fn group_size(g: &ScopeGroup) -> usize {
    40 + g.resource.as_ref().map_or(0, |b| b.len())
        + g.resource_schema_url.len()
        + g.scope.as_ref().map_or(0, |b| b.len())
        + g.scope_schema_url.len()
}

/// Writes `parts` to `{path}.tmp`, syncs, renames to `path`, syncs the parent.
/// On failure the temporary file is removed (best effort) and no file named
/// `path` exists: a half-written file never carries a live name.
fn write_atomically(faults: &Faults, path: &Path, parts: &[&[u8]]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        for part in parts {
            faults.write_all(FaultTarget::Table, &mut file, &tmp, part)?;
        }
        faults.sync_all(FaultTarget::Table, &file, &tmp)?;
        fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    })();
    if let Err(e) = written {
        // Best effort: a leftover temporary file is removed at the next open.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if let Err(e) = faults.sync_dir(FaultTarget::Table, dir) {
        // The rename may not be durable: take the name back, so the caller
        // can retry without a file whose durability is unknown.
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok(())
}
