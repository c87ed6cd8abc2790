//! The engine's side of the search index: which [`SummarySet`]s make up a
//! snapshot, and the cache that keeps them in memory.
//!
//! Sources, in the order spans move: the memtable's frozen chunks (each
//! summarized once, cached while the chunk lives) and growing tails
//! (summarized per query: at most `CHUNK_SPANS` spans per shard), the sealed
//! buffers (cached by buffer ID), and the snapshot's files (their sidecars,
//! loaded once and cached by file ID; a file an edit removed leaves the cache
//! at the next query). A span is seen in at least one source, as for
//! lookups; a span seen twice (between two stages) is counted twice in span
//! counts, which are estimates while a trace is being flushed.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use parking_lot::Mutex;

use super::Engine;
use crate::{
    error::Result,
    index::{self, SearchQuery, SummaryBuilder, SummarySet, TagScope, TraceHit},
    span::Span,
    version::{TableFile, TimeRange},
};

/// A frozen memtable chunk and its summary.
type CachedChunk = (Arc<Vec<Span>>, Arc<SummarySet>);

/// Summaries kept between queries.
#[derive(Default)]
pub(crate) struct IndexCache {
    files: Mutex<HashMap<u64, Arc<SummarySet>>>,
    sealed: Mutex<HashMap<u64, Arc<SummarySet>>>,
    /// Keyed by the chunk's address; the entry holds the chunk, so the
    /// address is not reused while the entry exists.
    chunks: Mutex<HashMap<usize, CachedChunk>>,
}

impl IndexCache {
    /// Caches the set of a file just written (saves reading its sidecar back).
    pub(crate) fn insert_file(&self, id: u64, set: Arc<SummarySet>) {
        self.files.lock().insert(id, set);
    }
}

/// The summary sets of one snapshot, for [`crate::index`]'s queries.
#[derive(Clone)]
pub struct IndexSnapshot {
    pub sets: Vec<Arc<SummarySet>>,
    /// Parts ending before this are past retention.
    pub expire_before: u64,
}

impl IndexSnapshot {
    pub fn search(&self, q: &SearchQuery) -> Vec<TraceHit> {
        index::search(&self.sets, q, self.expire_before)
    }

    pub fn services(&self) -> Vec<String> {
        index::services(&self.sets)
    }

    pub fn operations(&self, service: &str, kind: Option<u8>) -> Vec<(String, u8)> {
        index::operations(&self.sets, service, kind)
    }

    pub fn dependencies(&self, start: u64, end: u64) -> BTreeMap<(String, String), u64> {
        index::dependencies(&self.sets, start.max(self.expire_before), end)
    }

    pub fn tag_keys(&self, start: u64, end: u64) -> BTreeSet<(TagScope, String)> {
        index::tag_keys(&self.sets, start.max(self.expire_before), end)
    }

    pub fn tag_values(
        &self,
        scope: Option<TagScope>,
        key: &str,
        start: u64,
        end: u64,
    ) -> BTreeSet<String> {
        index::tag_values(&self.sets, scope, key, start.max(self.expire_before), end)
    }
}

impl Engine {
    /// The summary sets of the current snapshot whose spans may lie in
    /// `range` (files outside it are skipped; buffers are always included).
    /// Reads only sidecars not yet cached; blocking, like [`Engine::get_trace`].
    pub fn index(&self, range: TimeRange) -> Result<IndexSnapshot> {
        let inner = &self.inner;
        let cache = &inner.index;
        let mut sets = Vec::new();

        let (chunks, tails) = inner.memtable.chunks();
        let mut fresh_chunks = HashMap::with_capacity(chunks.len());
        {
            let cached = cache.chunks.lock();
            for chunk in &chunks {
                let key = Arc::as_ptr(chunk) as usize;
                if let Some((c, set)) = cached.get(&key) {
                    fresh_chunks.insert(key, (c.clone(), set.clone()));
                }
            }
        }
        for chunk in chunks {
            let key = Arc::as_ptr(&chunk) as usize;
            let set = match fresh_chunks.get(&key) {
                Some((_, set)) => set.clone(),
                None => {
                    let set = Arc::new(SummarySet::from_spans(chunk.iter()));
                    fresh_chunks.insert(key, (chunk, set.clone()));
                    set
                }
            };
            sets.push(set);
        }
        *cache.chunks.lock() = fresh_chunks;
        if !tails.is_empty() {
            sets.push(Arc::new(SummarySet::from_spans(tails.iter())));
        }

        let snapshot = self.snapshot();
        {
            let mut cached = cache.sealed.lock();
            cached.retain(|id, _| snapshot.sealed.iter().any(|s| s.id == *id));
        }
        for sealed in &snapshot.sealed {
            let hit = cache.sealed.lock().get(&sealed.id).cloned();
            let set = match hit {
                Some(set) => set,
                None => {
                    let set = Arc::new(SummarySet::from_spans(
                        sealed.chunks.iter().flat_map(|c| c.iter()),
                    ));
                    cache.sealed.lock().insert(sealed.id, set.clone());
                    set
                }
            };
            sets.push(set);
        }

        let live: HashSet<u64> = snapshot.version.files().map(|f| f.id).collect();
        cache.files.lock().retain(|id, _| live.contains(id));
        for file in snapshot.version.files() {
            let m = file.table().meta();
            if !range.overlaps(m.min_time_unix_nano, m.max_time_unix_nano) {
                continue;
            }
            let hit = cache.files.lock().get(&file.id).cloned();
            let set = match hit {
                Some(set) => set,
                None => {
                    let set = Arc::new(load_or_rebuild(file)?);
                    cache.files.lock().insert(file.id, set.clone());
                    set
                }
            };
            sets.push(set);
        }
        Ok(IndexSnapshot {
            sets,
            expire_before: inner.expire_before(),
        })
    }

    /// [`Engine::index`] over everything, then [`index::search`].
    pub fn search(&self, q: &SearchQuery) -> Result<Vec<TraceHit>> {
        let range = TimeRange::new(q.start_min, 0);
        Ok(self.index(range)?.search(q))
    }
}

/// A file's summary from its sidecar; rebuilt from the file (and the sidecar
/// rewritten) when the sidecar is missing or damaged.
fn load_or_rebuild(file: &TableFile) -> Result<SummarySet> {
    match index::read_sidecar(file.path()) {
        Ok(set) => Ok(set),
        Err(e) => {
            tracing::warn!(file = %file.path().display(), error = %e, "index sidecar unusable; rebuilding it from the file");
            let mut b = SummaryBuilder::default();
            for span in file.table().iter() {
                b.add(&span?);
            }
            let set = b.finish();
            if let Err(e) = index::write_sidecar(file.path(), &set) {
                tracing::warn!(error = %e, "writing rebuilt index sidecar");
            }
            Ok(set)
        }
    }
}
