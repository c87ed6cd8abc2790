//! Writes a sorted span file from spans given in trace-ID order.
//!
//! Spans are cut into blocks of about [`TableOptions::block_bytes`]
//! uncompressed bytes. A block that has reached the target is closed at the
//! next trace boundary, so most traces live in one block and a lookup inflates
//! one block; a trace that alone outgrows twice the target is split anyway, so
//! one huge trace cannot make a huge block. Blocks are compressed as they fill
//! and written at once to `{path}.tmp`, whose bytes go to the kernel's
//! writeback a megabyte at a time ([`crate::writeback`]);
//! [`SsTableBuilder::finish`] appends the index, bloom filter and footer,
//! fsyncs and renames. The builder holds one
//! open block, the block index and the bloom keys, never the file: a 64 MiB
//! compaction output costs the same memory as a small flush. A builder dropped
//! before `finish` removes its temporary file.
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
    layout::tmp_path,
    span::{ScopeGroup, Span, TraceId},
    writeback::Writeback,
};

use super::{
    block::{encode_block, MAX_BLOCK_BYTES},
    block_index::{encode_block_index, BlockHandle},
    bloom::BloomBuilder,
    footer::{encode_header, Footer, FOOTER_LEN, HEADER_LEN},
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
    /// The final name, and the temporary file that holds the header and the
    /// finished blocks until `finish` renames it.
    path: PathBuf,
    tmp: PathBuf,
    /// `None` after a failed write (the file ends mid-block) or once `finish`
    /// has taken it.
    file: Option<File>,
    /// Set by `finish`, which renames or removes the temporary file itself;
    /// until then, dropping the builder removes it.
    finished: bool,
    /// Bytes written to `file`: where the next block starts.
    offset: u64,
    /// Hands finished blocks to the kernel as they are written.
    writeback: Writeback,
    /// Reused buffer for one compressed block.
    scratch: Vec<u8>,
    blocks: Vec<BlockHandle>,
    /// Spans of the open block, not yet encoded.
    pending: Vec<Span>,
    /// Upper bound on the open block's encoded size.
    pending_bytes: usize,
    /// Groups already counted in `pending_bytes`, by address (an address and
    /// not a pointer, so the builder stays `Send`; the `Arc`s in `pending` keep
    /// the addresses from being reused). Spans of one trace mostly share a
    /// group, so the previous span's is checked first.
    pending_groups: HashSet<usize, foldhash::fast::RandomState>,
    last_group: usize,
    bloom: BloomBuilder,
    last_trace_id: Option<TraceId>,
    first_trace_id: Option<TraceId>,
    span_count: u64,
    trace_count: u64,
    min_start_unix_nano: u64,
    max_end_unix_nano: u64,
}

impl SsTableBuilder {
    /// Starts the file `path` by creating `{path}.tmp` and writing its header.
    pub fn create(path: &Path, opts: TableOptions) -> Result<Self> {
        // Keep a block (target, then up to twice that mid-trace, plus one span)
        // well under the reader's limit, whatever the options say.
        let target = opts.block_bytes.clamp(1, MAX_BLOCK_BYTES / 4);
        let tmp = tmp_path(path);
        let mut file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let header = encode_header();
        if let Err(e) = opts
            .faults
            .write_all(FaultTarget::Table, &mut file, &tmp, &header)
        {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(SsTableBuilder {
            opts,
            target,
            split_at: 2 * target,
            path: path.to_path_buf(),
            tmp,
            file: Some(file),
            finished: false,
            offset: header.len() as u64,
            writeback: Writeback::default(),
            scratch: Vec::new(),
            blocks: Vec::new(),
            pending: Vec::new(),
            pending_bytes: BATCH_HEADER_MAX,
            pending_groups: HashSet::default(),
            last_group: 0,
            bloom: BloomBuilder::default(),
            last_trace_id: None,
            first_trace_id: None,
            span_count: 0,
            trace_count: 0,
            min_start_unix_nano: u64::MAX,
            max_end_unix_nano: 0,
        })
    }

    /// Adds the next span. Spans must arrive in non-decreasing trace-ID order;
    /// a span that would go backwards is refused with [`Error::OutOfOrder`] and
    /// a span too large for any block with [`Error::SpanTooLarge`]; in both
    /// cases the builder is unchanged and can go on. An I/O error writing a
    /// finished block leaves the builder unusable: drop it (which removes the
    /// temporary file).
    pub fn add(&mut self, span: &Span) -> Result<()> {
        self.add_owned(span.clone())
    }

    /// [`SsTableBuilder::add`] for a span the caller is done with: it is kept
    /// as is rather than cloned (a clone is two reference counts taken, and
    /// given back when the block is written).
    pub fn add_owned(&mut self, span: Span) -> Result<()> {
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
                self.close_block()?;
            }
        }

        let group = Arc::as_ptr(&span.group).addr();
        if group != self.last_group && self.pending_groups.insert(group) {
            self.pending_bytes += group_bytes;
        }
        self.last_group = group;
        self.pending_bytes += span_bytes;

        if new_trace {
            self.bloom.add(&span.trace_id);
            self.trace_count += 1;
        }
        self.first_trace_id.get_or_insert(span.trace_id);
        self.last_trace_id = Some(span.trace_id);
        self.span_count += 1;
        self.min_start_unix_nano = self.min_start_unix_nano.min(span.start_unix_nano);
        self.max_end_unix_nano = self.max_end_unix_nano.max(span.end_unix_nano);
        self.pending.push(span);
        Ok(())
    }

    /// Spans added so far.
    pub fn span_count(&self) -> u64 {
        self.span_count
    }

    /// About how large the file would be if finished now (finished blocks
    /// compressed, the open block uncompressed); compaction cuts outputs by it.
    pub fn estimated_bytes(&self) -> u64 {
        self.offset + self.pending_bytes as u64
    }

    /// Encodes the open block and appends it to the temporary file.
    fn close_block(&mut self) -> Result<()> {
        let (Some(first), Some(last)) = (self.pending.first(), self.pending.last()) else {
            return Ok(());
        };
        let Some(file) = self.file.as_mut() else {
            return Err(Error::io(&self.tmp, std::io::ErrorKind::BrokenPipe.into()));
        };
        let handle_base = BlockHandle {
            offset: self.offset,
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
        self.scratch.clear();
        let raw_len = encode_block(&self.pending, self.opts.zstd_level, &mut self.scratch);
        debug_assert!(raw_len <= MAX_BLOCK_BYTES, "blocks stay within the limit");
        if let Err(e) =
            self.opts
                .faults
                .write_all(FaultTarget::Table, file, &self.tmp, &self.scratch)
        {
            // The file now ends mid-block: nothing more may be appended.
            self.file = None;
            return Err(e);
        }
        let len = self.scratch.len() as u64;
        self.offset += len;
        if let Err(e) = self.writeback.wrote(file, self.offset) {
            self.file = None;
            return Err(Error::io(&self.tmp, e));
        }
        self.blocks.push(BlockHandle {
            len: u32::try_from(len).expect("a block of at most 64 MiB fits in u32"),
            ..handle_base
        });
        self.pending.clear();
        self.pending_groups.clear();
        self.last_group = 0;
        self.pending_bytes = BATCH_HEADER_MAX;
        Ok(())
    }

    /// Appends the index, bloom filter and footer to `{path}.tmp`, fsyncs it,
    /// renames it to `path` and fsyncs the directory, so after `Ok` the file
    /// survives a crash under its final name and before it no file of that
    /// name exists. A builder with no spans is refused with
    /// [`Error::EmptyTable`]: a file always holds at least one span, so its
    /// meta always has a real ID and time range. On any error the temporary
    /// file is removed.
    pub fn finish(mut self) -> Result<TableMeta> {
        let (Some(min_trace_id), Some(max_trace_id)) = (self.first_trace_id, self.last_trace_id)
        else {
            return Err(Error::EmptyTable {
                path: self.path.clone(),
            });
        };
        self.close_block()?;
        let index = encode_block_index(&self.blocks);
        let bloom = self.bloom.finish(self.opts.bloom_bits_per_key);
        let index_offset = self.offset;
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

        let Some(mut file) = self.file.take() else {
            return Err(Error::io(&self.tmp, std::io::ErrorKind::BrokenPipe.into()));
        };
        self.finished = true;
        let result = complete(
            &self.opts.faults,
            &mut file,
            &self.tmp,
            &self.path,
            &[&index, &bloom, &footer.encode()],
        );
        drop(file);
        result?;
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

impl Drop for SsTableBuilder {
    /// A builder given up before `finish` (an error, a stopped compaction)
    /// leaves no temporary file behind.
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Bytes a group takes in a batch, at most: four length varints and the fields.
fn group_size(g: &ScopeGroup) -> usize {
    40 + g.resource.as_ref().map_or(0, |b| b.len())
        + g.resource_schema_url.len()
        + g.scope.as_ref().map_or(0, |b| b.len())
        + g.scope_schema_url.len()
}

/// Writes the last `parts` to `tmp`, syncs, renames `tmp` to `path`, syncs
/// the parent. On failure the temporary file is removed (best effort) and no
/// file named `path` exists: a half-written file never carries a live name.
fn complete(
    faults: &Faults,
    file: &mut File,
    tmp: &Path,
    path: &Path,
    parts: &[&[u8]],
) -> Result<()> {
    let written = (|| {
        for part in parts {
            faults.write_all(FaultTarget::Table, file, tmp, part)?;
        }
        faults.sync_all(FaultTarget::Table, file, tmp)?;
        fs::rename(tmp, path).map_err(|e| Error::io(path, e))
    })();
    if let Err(e) = written {
        // Best effort: a leftover temporary file is removed at the next open.
        let _ = fs::remove_file(tmp);
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
