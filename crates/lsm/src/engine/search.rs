//! The engine's side of the search index: which [`SummarySet`]s make up a
//! snapshot, and the cache that keeps them in memory.
//!
//! Sources, in the order spans move: the memtable's frozen chunks (each
//! summarized once, cached while the chunk lives) and growing tails
//! (summarized per query: at most `CHUNK_SPANS` spans per shard), the sealed
//! buffers (cached by buffer ID), and the snapshot's files (their sidecars,
//! cached by file ID up to `EngineOptions::index_cache_bytes`, least recently
//! used first out, and read again from disk when needed; a file an edit
//! removes leaves the cache with the edit). A span is seen in at least one source, as for
//! lookups; a span seen twice (between two stages) is counted twice in span
//! counts, which are estimates while a trace is being flushed.
//!
//! A store's decoded summaries outgrow any memory budget (a few hundred bytes
//! per trace), so no query holds the files' sets whole: a search walks the
//! files' sidecars a block at a time, newest first, and holds only their
//! digests ([`Engine::candidates`], in `walk.rs`, on the sets and digests
//! this module caches); tag keys are read from the digests alone; tag values
//! read the blocks that may hold the key, newest first, until the limit
//! ([`Engine::tag_values`]); services, operations and dependencies take one
//! set at a time ([`Engine::each_index`]). [`Engine::index`], every set at
//! once, is for tests and benchmarks. How a key's values are gathered and
//! bounded is `values`'.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, OnceLock,
    },
};

use parking_lot::Mutex;

use super::{Engine, EngineOptions, SuperVersion};

mod values;

use crate::{
    budget::Work,
    error::Result,
    index::{
        self,
        blocks::{BlockDigest, DigestTag, FileIndex, NeedTerms},
        cells::{FileCells, SectionCache},
        OpNeed, SummaryBuilder, SummarySet, TagScope, ValueKind,
    },
    memtable::Chunk,
    version::{TableFile, TimeRange},
};
use values::{BlockValues, ValueHasher};
pub use values::{TagValues, ValuesLimit};

/// A buffer's summary, built once by the first query that needs it: the
/// queries that come meanwhile wait for it rather than build their own (four
/// clients searching at once each summarized every sealed buffer, hundreds
/// of MiB the memory budget does not see). It is counted in the memory
/// budget while cached, as background work ([`crate::budget::Work`]): a
/// search's first summaries of the buffers came as a spike admission had
/// not seen (up to 46 MiB at max ingest).
type SetCell = Arc<OnceLock<(Arc<SummarySet>, Work)>>;
/// A frozen memtable chunk and its summary.
type CachedChunk = (Arc<Chunk>, SetCell);
/// A frozen memtable chunk and its metrics cells.
pub(super) type ChunkCells = (Arc<Chunk>, Arc<FileCells>);

/// Summaries kept between queries.
pub(crate) struct SummaryCache {
    files: Mutex<FileCache<Arc<SummarySet>>>,
    /// Digests of the files' sidecars, for the newest-first walk.
    pub(super) digests: Mutex<FileCache<Arc<FileIndex>>>,
    sealed: Mutex<HashMap<u64, SetCell>>,
    /// Keyed by the chunk's address; the entry holds the chunk, so the
    /// address is not reused while the entry exists.
    chunks: Mutex<HashMap<usize, CachedChunk>>,
    /// The metrics cells of the frozen chunks (keyed as `chunks`) and of
    /// the sealed buffers, counted once each (`engine/cells.rs`), while
    /// they take at most `cells_bound` bytes together.
    pub(super) cells_chunks: Mutex<HashMap<usize, ChunkCells>>,
    pub(super) cells_sealed: Mutex<HashMap<u64, Arc<FileCells>>>,
    pub(super) cells_bound: usize,
    /// The files' metrics cells sections a query inflated.
    pub(super) cells_files: Arc<SectionCache>,
}

impl SummaryCache {
    /// A cache that keeps at most about `file_bytes` of the files' summary
    /// sets, sidecar digests and metrics cells together. (Each once had
    /// the whole bound, so the cache could hold twice its share of
    /// `--max-memory`.) Nine sixteenths go to the digests, which every
    /// search walks (about 0.7 B per stored span: 67 MB at 100 M spans,
    /// inside the 72 MiB of a 1 GiB server); a sixteenth to the sets, which
    /// the lists of services and operations read (about 8 B per span: past
    /// a million spans they never all fit); an eighth to the buffers'
    /// metrics cells, which a metrics query otherwise counts again from
    /// their spans; a quarter to the files' cells (`SectionCache`): the
    /// sections a metrics query inflated and the dictionary of their keys,
    /// which a dashboard's next refresh reads again (on an hour of 85 M
    /// spans, the root spans' sections 7.7 MB, the named keys and each
    /// file's numbers for them 10.3 MB).
    pub(crate) fn new(file_bytes: usize) -> Self {
        let sixteenth = file_bytes / 16;
        SummaryCache {
            files: Mutex::new(FileCache::new(sixteenth)),
            digests: Mutex::new(FileCache::new(file_bytes - 7 * sixteenth)),
            sealed: Mutex::default(),
            chunks: Mutex::default(),
            cells_chunks: Mutex::default(),
            cells_sealed: Mutex::default(),
            cells_bound: 2 * sixteenth,
            cells_files: Arc::new(SectionCache::new(4 * sixteenth)),
        }
    }

    /// Bytes of the buffers' metrics cells cached.
    pub(super) fn cells_bytes(&self) -> usize {
        self.cells_chunks
            .lock()
            .values()
            .map(|(_, c)| c.bytes())
            .chain(self.cells_sealed.lock().values().map(|c| c.bytes()))
            .sum()
    }

    /// The files' metrics cells sections kept.
    pub(super) fn cells_files(&self) -> &Arc<SectionCache> {
        &self.cells_files
    }

    /// Caches the set of a file just written (saves reading its sidecar back).
    pub(crate) fn insert_file(&self, id: u64, set: Arc<SummarySet>) {
        let size = set.heap_bytes();
        self.files.lock().insert(id, set, size);
    }

    /// Forgets files an edit removed.
    pub(crate) fn remove_files(&self, ids: &[u64]) {
        let mut files = self.files.lock();
        let mut digests = self.digests.lock();
        for id in ids {
            files.remove(*id);
            digests.remove(*id);
        }
        self.cells_files.retain(|id| !ids.contains(&id));
    }

    /// Forgets what is cached of a file's sidecar (it was rebuilt).
    pub(super) fn forget_digest(&self, id: u64) {
        self.digests.lock().remove(id);
        self.cells_files.retain(|f| f != id);
    }

    /// Bytes of file summaries, digests and metrics cells cached, as
    /// estimated.
    pub(crate) fn file_bytes(&self) -> usize {
        self.files.lock().bytes
            + self.digests.lock().bytes
            + self.cells_bytes()
            + self.cells_files.bytes()
    }
}

/// File summaries by file ID, bounded in bytes: the index of a store grows
/// with the store, and memory must not. Past the bound the least recently
/// used sets are dropped (a query that holds one keeps it alive until done).
pub(super) struct FileCache<T> {
    /// Value, its estimated size, and when it was last used.
    sets: HashMap<u64, (T, usize, u64)>,
    bytes: usize,
    limit: usize,
    clock: u64,
}

impl<T: Clone> FileCache<T> {
    fn new(limit: usize) -> Self {
        FileCache {
            sets: HashMap::new(),
            bytes: 0,
            limit,
            clock: 0,
        }
    }

    pub(super) fn get(&mut self, id: u64) -> Option<T> {
        self.clock += 1;
        let entry = self.sets.get_mut(&id)?;
        entry.2 = self.clock;
        Some(entry.0.clone())
    }

    pub(super) fn insert(&mut self, id: u64, set: T, size: usize) {
        self.remove(id);
        if size > self.limit {
            return;
        }
        while self.bytes + size > self.limit {
            let oldest = self
                .sets
                .iter()
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(&id, _)| id);
            match oldest {
                Some(old) => self.remove(old),
                None => break,
            }
        }
        self.clock += 1;
        self.bytes += size;
        self.sets.insert(id, (set, size, self.clock));
    }

    fn remove(&mut self, id: u64) {
        if let Some((_, size, _)) = self.sets.remove(&id) {
            self.bytes -= size;
        }
    }

    fn retain(&mut self, live: &HashSet<u64>) {
        let gone: Vec<u64> = self
            .sets
            .keys()
            .filter(|id| !live.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.remove(id);
        }
    }
}

/// The summary sets of one snapshot, for [`crate::index`]'s queries.
#[derive(Clone)]
pub struct SearchSnapshot {
    pub sets: Vec<Arc<SummarySet>>,
    /// Parts ending before this are past retention.
    pub expire_before: u64,
}

impl SearchSnapshot {
    pub fn services(&self) -> Vec<String> {
        index::services(&self.sets)
    }

    pub fn operations(&self, service: &str, kind: Option<u8>) -> Vec<(String, u8)> {
        index::operations(&self.sets, service, kind)
    }

    /// Calls between services; see [`index::dependencies`]. `engine` reads
    /// the traces whose spans have parents in another part.
    pub fn dependencies(
        &self,
        engine: &Engine,
        start: u64,
        end: u64,
    ) -> Result<BTreeMap<(String, String), u64>> {
        index::dependencies(&self.sets, start.max(self.expire_before), end, |id| {
            engine.get_trace(id)
        })
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
        needs: &[OpNeed],
    ) -> BTreeSet<(String, ValueKind)> {
        index::tag_values(
            &self.sets,
            scope,
            key,
            start.max(self.expire_before),
            end,
            needs,
        )
    }
}

impl Engine {
    /// The summary sets of the current snapshot whose spans may lie in
    /// `range` (files outside it are skipped; buffers are always included).
    /// Reads only sidecars not yet cached; blocking, like [`Engine::get_trace`].
    pub fn index(&self, range: TimeRange) -> Result<SearchSnapshot> {
        let (mut sets, snapshot) = self.buffer_sets();
        for file in self.files_in(&snapshot, range) {
            sets.push(self.file_set(file)?);
        }
        Ok(SearchSnapshot {
            sets,
            expire_before: self.inner.retention.expire_before(),
        })
    }

    /// [`Engine::index`] one summary set at a time: `f` sees a snapshot of
    /// each set in turn (each buffer's, then each block of each file's
    /// sidecar that may hold parts in `range`), and a block is let go once
    /// `f` returns. For the queries whose answer is a union or a sum over
    /// sets: services, operations, dependencies. Holding every file's
    /// summaries at once took 2.5 GiB for the tag names of a store of 100 M
    /// spans.
    pub fn each_index(&self, range: TimeRange, f: impl FnMut(&SearchSnapshot)) -> Result<()> {
        self.each_index_until(range, &AtomicBool::new(false), f)
    }

    /// [`Engine::each_index`], which stops before its next set once `stop`
    /// is set (its caller went away): `f` has then not seen every set.
    pub fn each_index_until(
        &self,
        range: TimeRange,
        stop: &AtomicBool,
        mut f: impl FnMut(&SearchSnapshot),
    ) -> Result<()> {
        let expire_before = self.inner.retention.expire_before();
        let one = |set: Arc<SummarySet>| SearchSnapshot {
            sets: vec![set],
            expire_before,
        };
        let stopped = || stop.load(Ordering::Relaxed);
        let (buffers, snapshot) = self.buffer_sets();
        for set in buffers {
            if stopped() {
                return Ok(());
            }
            f(&one(set));
        }
        for file in self.files_in(&snapshot, range) {
            let index = self.file_index(file)?;
            for (b, d) in index.blocks.iter().enumerate() {
                if stopped() {
                    return Ok(());
                }
                if overlaps(d, range, expire_before) {
                    f(&one(Arc::new(self.block(file, &index, b)?)));
                }
            }
        }
        Ok(())
    }

    /// Block `b` of a file's sidecar; a damaged one has the sidecar rebuilt,
    /// and the whole file's summaries stand for it.
    fn block(&self, file: &TableFile, index: &FileIndex, b: usize) -> Result<SummarySet> {
        index.block(b).or_else(|e| self.rebuilt_block(file, e))
    }

    /// What stands for a block of `file`'s sidecar that failed to read with
    /// `e`: the sidecar is rebuilt, and the whole file's summaries are
    /// answered.
    fn rebuilt_block(&self, file: &TableFile, e: crate::Error) -> Result<SummarySet> {
        self.inner.summary_cache.forget_digest(file.id);
        rebuild(file, &e, &self.inner.opts)
    }

    /// Attribute keys (with their scopes) of parts that may lie in `range`:
    /// from the digests of the files' sidecars, without reading their blocks.
    pub fn tag_keys(&self, range: TimeRange) -> Result<BTreeSet<(TagScope, String)>> {
        let expire_before = self.inner.retention.expire_before();
        let (start, end) = (
            range.start_unix_nano.max(expire_before),
            range.end_unix_nano,
        );
        let (buffers, snapshot) = self.buffer_sets();
        let mut out = index::tag_keys(&buffers, start, end);
        for file in self.files_in(&snapshot, range) {
            let index = self.file_index(file)?;
            for d in &index.blocks {
                if overlaps(d, range, expire_before) {
                    out.extend(d.tags.iter().map(|t| (t.scope, t.key.to_string())));
                }
            }
        }
        Ok(out)
    }

    /// Values of `key` (in `scope`, or either), with their types, of parts
    /// overlapping `range` that meet `needs` (see [`index::tag_values`]),
    /// until `limit` is reached: the buffers first, then the files newest
    /// first, each a block at a time, so a key with a value per trace stops
    /// after a few blocks. [`TagValues::stopped`] says whether it did.
    ///
    /// A block whose digest rules out `needs` or lacks the key is not read;
    /// nor is one whose digest lists only values already answered, nor one
    /// that lies inside `range` whose digest lists the key's values, when
    /// nothing is needed.
    ///
    /// The blocks to read are read in rounds, each shared among the cores
    /// (`scan_blocks`), and their values are added in the walk's order,
    /// stopping at the limit after the block that reaches it: the answer is
    /// the one a single thread reading a block at a time gives. A round
    /// holds twice the blocks of the one before, up to 32, so
    /// an answer that stops early reads few blocks past its last; with one
    /// thread, a round is a block.
    pub fn tag_values(
        &self,
        scope: Option<TagScope>,
        key: &str,
        range: TimeRange,
        needs: &[OpNeed],
        limit: ValuesLimit,
    ) -> Result<TagValues> {
        let go_on = AtomicBool::new(false);
        self.tag_values_until(scope, key, range, needs, limit, &go_on)
    }

    /// [`Engine::tag_values`], which stops before its next round of blocks
    /// once `stop` is set (its caller went away); what it answers then is
    /// not the values of the range.
    pub fn tag_values_until(
        &self,
        scope: Option<TagScope>,
        key: &str,
        range: TimeRange,
        needs: &[OpNeed],
        limit: ValuesLimit,
        stop: &AtomicBool,
    ) -> Result<TagValues> {
        let expire_before = self.inner.retention.expire_before();
        let (start, end) = (
            range.start_unix_nano.max(expire_before),
            range.end_unix_nano,
        );
        let (buffers, snapshot) = self.buffer_sets();
        let threads = self.inner.opts.search_threads;
        let mut out = TagValues::new(limit, threads);
        out.extend(index::tag_values(&buffers, scope, key, start, end, needs));
        let terms: Vec<NeedTerms> = needs.iter().map(NeedTerms::new).collect();
        let mut files = self.files_in(&snapshot, range);
        files.sort_by_key(|f| std::cmp::Reverse(f.table().meta().max_time_unix_nano));
        let mut files = files.into_iter();
        // The file being walked and its next block.
        let mut walking: Option<(&Arc<TableFile>, Arc<FileIndex>, usize)> = None;
        let mut round = 1;
        while !out.stopped && !stop.load(Ordering::Relaxed) {
            // The next blocks that hold the key and may meet the needs, in
            // the walk's order.
            let mut batch: Vec<(&Arc<TableFile>, Arc<FileIndex>, usize)> = Vec::new();
            while batch.len() < round {
                let Some((file, index, b)) = &mut walking else {
                    match files.next() {
                        Some(file) => walking = Some((file, self.file_index(file)?, 0)),
                        None => break,
                    }
                    continue;
                };
                let Some(d) = index.blocks.get(*b) else {
                    walking = None;
                    continue;
                };
                *b += 1;
                if overlaps(d, range, expire_before)
                    && terms.iter().all(|t| t.may_meet(d))
                    && !key_tags(d, key, scope).is_empty()
                {
                    batch.push((file, index.clone(), *b - 1));
                }
            }
            if batch.is_empty() {
                break;
            }
            if threads > 1 {
                round = (round * 2).min(ROUND_BLOCKS);
            }
            // What each block of the batch adds: its digest's list, or the
            // values read from its body.
            let listed: Vec<Option<Vec<(String, ValueKind)>>> = batch
                .iter()
                .map(|(_, index, b)| {
                    let d = &index.blocks[*b];
                    let tags = key_tags(d, key, scope);
                    let all_listed = tags.iter().all(|t| t.values.is_some());
                    let listed_values = || {
                        tags.iter().flat_map(|t| {
                            let values = t.values.as_deref().unwrap_or_default();
                            values.iter().map(|v| (v.to_string(), t.kind))
                        })
                    };
                    // The block's values of the key are all answered
                    // already: reading it could add none.
                    if all_listed && listed_values().all(|(v, kind)| out.contains(&v, kind)) {
                        return Some(Vec::new());
                    }
                    let inside = d.min_start >= start && (end == 0 || d.max_start <= end);
                    (needs.is_empty() && inside && all_listed).then(|| listed_values().collect())
                })
                .collect();
            let to_read: Vec<(&FileIndex, usize)> = batch
                .iter()
                .zip(&listed)
                .filter(|(_, l)| l.is_none())
                .map(|((_, index, b), _)| (&**index, *b))
                .collect();
            let mut read = scan_blocks(
                &to_read,
                threads,
                &out.hasher,
                scope,
                key,
                (start, end),
                needs,
            )
            .into_iter();
            let mut values = Vec::with_capacity(batch.len());
            for ((file, _, _), listed) in batch.iter().zip(listed) {
                let read = match listed {
                    Some(listed) => Ok(BlockValues::of(listed, &out.hasher)),
                    None => read.next().expect("a scan per block to read"),
                };
                values.push(match read {
                    Ok(values) => values,
                    Err(e) => {
                        let set = [Arc::new(self.rebuilt_block(file, e)?)];
                        let rebuilt = index::tag_values(&set, scope, key, start, end, needs);
                        BlockValues::of(rebuilt, &out.hasher)
                    }
                });
            }
            out.add_round(&values);
        }
        out.finish();
        Ok(out)
    }

    /// Calls between services over `range`, one summary set at a time (see
    /// [`index::Dependencies`]); the traces with calls across parts are read
    /// with [`Engine::get_trace`].
    pub fn dependencies(&self, range: TimeRange) -> Result<BTreeMap<(String, String), u64>> {
        self.dependencies_until(range, &AtomicBool::new(false))
    }

    /// [`Engine::dependencies`], which stops once `stop` is set (its caller
    /// went away); what it answers then is not the range's calls.
    pub fn dependencies_until(
        &self,
        range: TimeRange,
        stop: &AtomicBool,
    ) -> Result<BTreeMap<(String, String), u64>> {
        let mut calls = index::Dependencies::default();
        self.each_index_until(range, stop, |one| {
            let start = range.start_unix_nano.max(one.expire_before);
            calls.add(&one.sets[0], start, range.end_unix_nano);
        })?;
        calls.finish(|id| {
            if stop.load(Ordering::Relaxed) {
                return Ok(Vec::new());
            }
            self.get_trace(id)
        })
    }

    /// The files of `snapshot` whose spans may lie in `range`; the cache
    /// forgets the files no longer in it.
    pub(super) fn files_in<'a>(
        &self,
        snapshot: &'a SuperVersion,
        range: TimeRange,
    ) -> Vec<&'a Arc<TableFile>> {
        let live: HashSet<u64> = snapshot.version.files().map(|f| f.id).collect();
        self.inner.summary_cache.files.lock().retain(&live);
        self.inner.summary_cache.digests.lock().retain(&live);
        self.inner
            .summary_cache
            .cells_files
            .retain(|id| live.contains(&id));
        snapshot
            .version
            .files()
            .filter(|f| {
                let m = f.table().meta();
                range.overlaps(m.min_time_unix_nano, m.max_time_unix_nano)
            })
            .collect()
    }

    /// The summary sets of the memtable and the sealed buffers, and the
    /// snapshot taken after them whose files the caller adds: a span moving
    /// from a buffer to a file meanwhile is seen at least once.
    pub(super) fn buffer_sets(&self) -> (Vec<Arc<SummarySet>>, Arc<SuperVersion>) {
        let inner = &self.inner;
        let cache = &inner.summary_cache;
        let mut sets = Vec::new();

        let (chunks, tails) = inner.write.memtable.chunks();
        let cells: Vec<(Arc<Chunk>, SetCell)> = {
            let mut cached = cache.chunks.lock();
            let live: HashSet<usize> = chunks.iter().map(|c| Arc::as_ptr(c) as usize).collect();
            cached.retain(|key, _| live.contains(key));
            chunks
                .into_iter()
                .map(|chunk| {
                    let (_, cell) = cached
                        .entry(Arc::as_ptr(&chunk) as usize)
                        .or_insert_with(|| (chunk.clone(), SetCell::default()));
                    let cell = cell.clone();
                    (chunk, cell)
                })
                .collect()
        };
        let counted = |set: SummarySet| {
            let mut work = inner.write.budget.work(0);
            work.holds(set.heap_bytes());
            (Arc::new(set), work)
        };
        for (chunk, cell) in cells {
            let (set, _) = cell.get_or_init(|| counted(SummarySet::from_spans(chunk.iter())));
            sets.push(set.clone());
        }
        if !tails.is_empty() {
            sets.push(Arc::new(SummarySet::from_spans(tails.iter())));
        }

        let snapshot = self.snapshot();
        let cells: Vec<SetCell> = {
            let mut cached = cache.sealed.lock();
            cached.retain(|id, _| snapshot.sealed.iter().any(|s| s.id == *id));
            snapshot
                .sealed
                .iter()
                .map(|sealed| cached.entry(sealed.id).or_default().clone())
                .collect()
        };
        for (sealed, cell) in snapshot.sealed.iter().zip(cells) {
            let (set, _) = cell.get_or_init(|| {
                counted(SummarySet::from_spans(
                    sealed.chunks.iter().flat_map(|c| c.iter()),
                ))
            });
            sets.push(set.clone());
        }
        (sets, snapshot)
    }

    /// A file's sidecar digest, from the cache or its sidecar (then cached);
    /// a sidecar that is missing, damaged or of an older version is rebuilt
    /// from the file.
    /// Reads the search-index digest of every live file not yet cached, so
    /// that the first search after a start finds them in memory (on a store
    /// of 100 M spans, reading them made the first `{}` take 371 ms instead
    /// of 5). A server calls it in the background once it serves. Returns
    /// how many digests were read.
    pub fn warm_index(&self) -> Result<usize> {
        let snapshot = self.snapshot();
        let mut read = 0;
        for file in snapshot.version.files() {
            if self.inner.write.is_closed() {
                break;
            }
            if self
                .inner
                .summary_cache
                .digests
                .lock()
                .get(file.id)
                .is_none()
            {
                self.file_index(file)?;
                read += 1;
            }
        }
        Ok(read)
    }

    pub(super) fn file_index(&self, file: &TableFile) -> Result<Arc<FileIndex>> {
        let cache = &self.inner.summary_cache;
        if let Some(index) = cache.digests.lock().get(file.id) {
            return Ok(index);
        }
        let index = match index::open_index(file.path()) {
            Ok(index) => index,
            Err(e) => {
                rebuild(file, &e, &self.inner.opts)?;
                index::open_index(file.path())?
            }
        };
        let index = Arc::new(index);
        cache
            .digests
            .lock()
            .insert(file.id, index.clone(), index.heap_bytes());
        Ok(index)
    }

    /// A file's summary set, from the cache or its sidecar (then cached).
    fn file_set(&self, file: &TableFile) -> Result<Arc<SummarySet>> {
        let cache = &self.inner.summary_cache;
        let hit = cache.files.lock().get(file.id);
        Ok(match hit {
            Some(set) => set,
            None => {
                let set = Arc::new(load_or_rebuild(file, &self.inner.opts)?);
                cache
                    .files
                    .lock()
                    .insert(file.id, set.clone(), set.heap_bytes());
                set
            }
        })
    }
}

/// Whether a block may hold parts that overlap `range` and are not past
/// retention.
fn overlaps(d: &BlockDigest, range: TimeRange, expire_before: u64) -> bool {
    d.max_end >= expire_before && range.overlaps(d.min_start, d.max_end)
}

/// The most blocks a round of [`Engine::tag_values`] reads.
const ROUND_BLOCKS: usize = 32;

/// The digest's entries for `key` (in `scope`, or either) of a block, but
/// those of values the index does not keep.
fn key_tags<'a>(d: &'a BlockDigest, key: &str, scope: Option<TagScope>) -> Vec<&'a DigestTag> {
    d.tags
        .iter()
        .filter(|t| {
            &*t.key == key && t.kind != ValueKind::Unindexed && scope.is_none_or(|s| t.scope == s)
        })
        .collect()
}

/// [`FileIndex::block_tag_values`] of each block of `blocks`, in their order,
/// read by up to `threads` threads, each a run of neighbouring blocks.
#[allow(clippy::too_many_arguments)]
fn scan_blocks(
    blocks: &[(&FileIndex, usize)],
    threads: usize,
    hasher: &ValueHasher,
    scope: Option<TagScope>,
    key: &str,
    window: (u64, u64),
    needs: &[OpNeed],
) -> Vec<Result<BlockValues>> {
    let scan = |run: &[(&FileIndex, usize)]| -> Vec<Result<BlockValues>> {
        run.iter()
            .map(|&(index, b)| {
                let mut values = BlockValues::default();
                index.block_tag_values(b, scope, key, window, needs, |v, kind| {
                    values.push(v, kind, hasher)
                })?;
                Ok(values)
            })
            .collect()
    };
    let threads = threads.clamp(1, blocks.len().max(1));
    if threads == 1 {
        return scan(blocks);
    }
    let per = blocks.len().div_ceil(threads);
    std::thread::scope(|s| {
        let mut runs = blocks.chunks(per);
        let first = runs.next().unwrap_or_default();
        let others: Vec<_> = runs.map(|run| s.spawn(move || scan(run))).collect();
        let mut out = scan(first);
        for other in others {
            out.extend(other.join().expect("a scan of blocks does not panic"));
        }
        out
    })
}

/// A file's summary from its sidecar; rebuilt from the file (and the sidecar
/// rewritten) when the sidecar is missing or damaged.
fn load_or_rebuild(file: &TableFile, opts: &EngineOptions) -> Result<SummarySet> {
    match index::read_sidecar(file.path()) {
        Ok(set) => Ok(set),
        Err(e) => rebuild(file, &e, opts),
    }
}

/// A file's summary from its spans, written as its sidecar (a failure to
/// write is logged: the summary is still right).
pub(super) fn rebuild(
    file: &TableFile,
    why: &crate::Error,
    opts: &EngineOptions,
) -> Result<SummarySet> {
    tracing::warn!(file = %file.path().display(), error = %why, "index sidecar unusable; rebuilding it from the file");
    let mut b = SummaryBuilder::default();
    let mut cells = index::cells::CellsBuilder::new(opts.table.cell_attributes.clone());
    for span in file.table().iter() {
        let span = span?;
        b.add(&span);
        cells.add(&span);
    }
    let set = b.finish();
    let cells = cells.finish();
    if let Err(e) = index::write_sidecar(file.path(), &set, opts.index_block_parts, cells.as_ref())
    {
        tracing::warn!(error = %e, "writing rebuilt index sidecar");
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        span::Span,
        test_util::{group, span},
    };

    fn set(first_trace: u128) -> Arc<SummarySet> {
        let g = group("svc");
        let spans: Vec<Span> = (0..100u128)
            .map(|t| span(&g, first_trace + t, 1, 1_000))
            .collect();
        Arc::new(SummarySet::from_spans(&spans))
    }

    /// The summary sets and the digests share the cache's one bound.
    #[test]
    fn the_sets_and_the_digests_together_stay_within_the_cache_bytes() {
        let one = set(1).heap_bytes();
        let limit = 16 * one;
        let cache = SummaryCache::new(limit);
        for id in 0..8 {
            let s = set(1 + 1000 * u128::from(id));
            let size = s.heap_bytes();
            cache.files.lock().insert(id, s, size);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let table = dir.path().join("1.sst");
        let spans: Vec<Span> = (0..400u128)
            .map(|t| span(&group("svc"), t, 1, 1_000))
            .collect();
        crate::index::write_sidecar(&table, &SummarySet::from_spans(&spans), 4, None)
            .expect("sidecar");
        let index = Arc::new(crate::index::open_index(&table).expect("digest"));
        let digest = index.heap_bytes();
        assert!(
            digest < limit / 2,
            "{digest} bytes of digest, {limit} of cache"
        );
        for id in 0..8 {
            cache.digests.lock().insert(id, index.clone(), digest);
        }
        // Both kinds fill up to their share, and no further.
        assert!(cache.files.lock().bytes > 0 && cache.digests.lock().bytes > 0);
        assert!(
            cache.file_bytes() <= limit,
            "{} bytes cached over a bound of {limit}",
            cache.file_bytes()
        );
    }

    #[test]
    fn the_file_cache_stays_within_its_bytes_dropping_the_least_recently_used() {
        let one = set(1).heap_bytes();
        let mut cache = FileCache::new(3 * one + one / 2);
        for id in 0..3 {
            let s = set(1 + 1000 * u128::from(id));
            let size = s.heap_bytes();
            cache.insert(id, s, size);
        }
        assert_eq!(cache.sets.len(), 3);
        // File 0 is used again, so file 1 is now the least recently used.
        assert!(cache.get(0).is_some());
        cache.insert(3, set(5000), one);
        assert!(
            cache.bytes <= cache.limit,
            "{} > {}",
            cache.bytes,
            cache.limit
        );
        assert!(cache.get(1).is_none(), "the least recently used set stays");
        for id in [0, 2, 3] {
            assert!(cache.get(id).is_some(), "file {id} was dropped");
        }
        cache.remove(0);
        cache.retain(&HashSet::from([3]));
        assert_eq!(cache.sets.len(), 1);
        assert_eq!(cache.bytes, cache.sets[&3].1);
        // A set larger than the whole cache is not kept (it is read again
        // when needed) and evicts nothing.
        let mut small = FileCache::new(one / 2);
        small.insert(9, set(1), one);
        assert!(small.get(9).is_none());
        assert_eq!(small.bytes, 0);
    }

    /// Queries that come together while a buffer's summary is being built
    /// wait for it: each frozen chunk is summarized once, not once per query.
    #[test]
    fn queries_at_once_share_one_summary_of_each_buffer() {
        use crate::{engine::EngineOptions, memtable::CHUNK_SPANS, Engine};
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = EngineOptions::new(dir.path());
        opts.compaction_threads = 0;
        opts.memtable.shards = 1;
        opts.memtable.flush_bytes = 1 << 30;
        opts.memtable.max_age = std::time::Duration::from_secs(3600);
        let engine = Engine::open(opts).expect("open");
        let g = group("svc");
        let spans: Vec<Span> = (0..8 * CHUNK_SPANS as u128 + 100)
            .map(|i| span(&g, i / 3 + 1, (i % 3) as u64 + 1, 1_000 + i as u64))
            .collect();
        engine.write_blocking(spans).expect("write");
        let start = std::sync::Barrier::new(4);
        let seen: Vec<Vec<Arc<SummarySet>>> = std::thread::scope(|s| {
            let queries: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        engine.buffer_sets().0
                    })
                })
                .collect();
            queries
                .into_iter()
                .map(|q| q.join().expect("query"))
                .collect()
        });
        // Eight frozen chunks, then the tail's set, made per query.
        assert_eq!(seen[0].len(), 9);
        for other in &seen[1..] {
            assert_eq!(other.len(), 9);
            for (a, b) in seen[0].iter().zip(other).take(8) {
                assert!(Arc::ptr_eq(a, b), "a chunk summarized twice");
            }
        }
        // The cached summaries count in the memory budget while cached.
        let cached: usize = seen[0].iter().take(8).map(|s| s.heap_bytes()).sum();
        assert!(cached > 0);
        assert_eq!(engine.memory_budget().work_held(), cached);
        engine.flush().expect("flush");
        assert_eq!(engine.buffer_sets().0.len(), 0, "nothing buffered");
        assert_eq!(
            engine.memory_budget().work_held(),
            0,
            "forgotten with their chunks"
        );
    }
}
