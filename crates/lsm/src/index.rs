//! The search index: a summary of every trace in every sorted file, so that
//! a search finds its candidate traces, and services, operations, tag values
//! and dependencies are answered, without reading span payloads.
//!
//! - `model`: a [`SummarySet`] summarizes the spans of one source: a sorted
//!   file, a sealed buffer, or a frozen memtable chunk. It holds one
//!   [`TraceSummary`] per trace in the source (its *part* of the trace: the
//!   spans the source holds) and a string table its summaries point into.
//! - `build`: [`SummaryBuilder`] makes a set from spans, in any order, with a
//!   light wire scan of the few fields it needs ([`wire`]);
//!   [`SidecarBuilder`] writes a file's set trace by trace without holding it.
//! - `sidecar`: a file's set is written next to it as `{id:020}.idx` when a
//!   flush or a compaction writes the file, before the file is installed, and
//!   deleted with it; a missing or damaged sidecar is rebuilt from its file.
//!   Its bytes are `format`'s (docs/FORMAT.md, "Index sidecar"); `encode`
//!   cuts a set into blocks; `block_values` reads a key's values from a
//!   block's bytes for the tag-values query.
//! - [`cells`]: the file's metrics cells, written after the sidecar's
//!   blocks: span counts and duration buckets per (service, name, kind,
//!   status, root) and second, minute and hour, which TraceQL metrics add
//!   instead of reading spans (docs/FORMAT.md, "Metrics cells").
//! - [`blocks`]: a sidecar keeps its parts in blocks, newest start first,
//!   each described by a digest ([`blocks::BlockDigest`]: times, kinds,
//!   errors, a Bloom filter of its strings); a file's digests
//!   ([`blocks::FileIndex`]) are what a search holds, and it reads a block
//!   only when its digest may meet what the query needs.
//! - `query`: [`SearchQuery`] and [`OpNeed`], what a search asks of the
//!   index, checked a part at a time as a [`ResolvedNeed`]; [`services`],
//!   [`operations`], [`dependencies`], [`tag_keys`], [`tag_values`]: pure
//!   functions over the sets of one snapshot.
//!
//! A search is the engine's newest-first walk (`engine/walk.rs`,
//! [`Engine::candidates`](crate::Engine::candidates)) over the buffers' sets
//! and the files' blocks: it proposes each trace once, from its newest part
//! that meets the query's need (each need is met by one span, so by one
//! part) and starts in the window. The index only rules traces out; the
//! caller reads each candidate whole and evaluates the query on its spans
//! (the query crate's TraceQL), so a trace whose spans lie in several
//! sources (level-0 files, buffers) is judged on all of them together.

mod block_values;
pub mod blocks;
mod build;
pub mod cells;
mod encode;
mod format;
mod model;
mod query;
mod sidecar;
#[cfg(test)]
mod tests;
pub mod wire;

pub use build::{service_name, SidecarBuilder, SummaryBuilder};
pub use encode::encode as encode_sidecar;
pub use model::{Edge, Op, SummarySet, Tag, TagScope, TraceSummary, ValueKind, MAX_TAGS_PER_TRACE};
pub use query::{
    dependencies, operations, services, tag_keys, tag_values, Dependencies, OpNeed, ResolvedNeed,
    ResolvedTag, SearchQuery, TagNeed,
};
pub use sidecar::{
    decode as decode_sidecar, open_index, read as read_sidecar, remove_orphans, remove_sidecar,
    sidecar_path, write as write_sidecar, BlockParts, SidecarParts,
};

/// Hash maps keyed by strings and IDs from spans, used for every span a
/// flush or compaction summarizes: foldhash (seeded per process) instead of
/// SipHash, which took an eighth of a compaction's CPU time.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// The same hashing for sets.
type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
