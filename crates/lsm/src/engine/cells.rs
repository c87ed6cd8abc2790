//! The metrics cells of a time window ([`Engine::cells_in`]): each file's
//! from its sidecar, or counted from its spans when the sidecar has none,
//! and the buffers' counted from their spans, from one consistent view, so
//! that no span is counted in a buffer and again in the file it was
//! flushed to.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use crate::{
    budget::{Overloaded, Permit},
    error::Result,
    index::cells::{CellsBuilder, CellsFile, CellsView, Counts, Dict, Family, FileCells},
    version::{SuperVersion, TableFile, TimeRange},
};

use super::{Engine, SkippedFile};

/// Tries at a view of the buffers and files that no seal of a buffer
/// crossed, before [`Engine::cells_in`] gives up.
const VIEW_TRIES: usize = 16;

/// What [`Engine::cells_in`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CellsStats {
    /// Files whose sidecar held their cells.
    pub files_with_cells: usize,
    /// Files counted from their spans (their sidecar had no cells).
    pub files_counted: usize,
    /// Files of the window whose unnamed or attribute cells were read with their run's,
    /// from another file.
    pub files_in_runs: usize,
    /// Spans of the buffers counted.
    pub buffered_spans: usize,
    /// Files of the window that could not be read: their spans are missing.
    pub skipped: Vec<SkippedFile>,
}

/// Why the cells of a window were not given.
#[derive(Debug)]
pub enum CellsError {
    /// The view moved under every try, or the window reaches back past
    /// retention (where a file may still hold spans a read leaves out):
    /// the caller reads the spans instead.
    NotNow,
    /// Memory for the buffers' cells was refused.
    Overloaded(Overloaded),
    Engine(crate::Error),
    /// The caller's `f` asked to stop (its query was cancelled).
    Stopped,
}

impl From<crate::Error> for CellsError {
    fn from(e: crate::Error) -> Self {
        CellsError::Engine(e)
    }
}

/// A file whose cells are read, and the other files of the window they
/// count (of its run).
type Readable<'a> = (&'a Arc<TableFile>, CellsFile, Vec<&'a Arc<TableFile>>);

/// A file's cells, opened, and whose spans they count (`None`: none, or
/// unreadable).
type Opened = Option<(CellsFile, Counts)>;

/// Bytes a buffered span costs while the buffers' cells are counted: its
/// record, and one for each counted attribute it carries, of which
/// [`ATTRIBUTES_PER_SPAN`] are reckoned with.
const RECORD_BYTES: usize = 8;
/// Counted attributes a span is reckoned to carry: a request's method,
/// route and status code, and an environment.
const ATTRIBUTES_PER_SPAN: usize = 4;

impl Engine {
    /// The dictionary a metrics query numbers the cell keys of the sources
    /// [`Engine::cells_in`] gives it with ([`CellsView::key_ids`]).
    pub fn cells_dict(&self) -> Arc<Dict> {
        self.inner.summary_cache.cells_files().dict()
    }

    /// Calls `f` with the metrics cells of every source that may hold a
    /// span starting in `range`: each file whose time range overlaps it,
    /// and the buffers (their spans that overlap it, as one source). The
    /// memory to count the buffers is admitted to `held` first; `f` returns
    /// the bytes its caller holds after each source, which are admitted too.
    /// `f` reads what it needs of a source before it counts any of it: when
    /// it fails to read a file's cells (damaged), it is called again with
    /// the cells counted from the file's spans. When `f` fails otherwise
    /// (such as [`CellsError::Stopped`]), the call ends with its error.
    pub fn cells_in(
        &self,
        range: TimeRange,
        family: Family,
        held: &mut Permit,
        mut f: impl FnMut(&CellsView<'_>) -> std::result::Result<usize, CellsError>,
    ) -> std::result::Result<CellsStats, CellsError> {
        let mut callers = 0usize;
        let mut f = |cells: &CellsView<'_>, extra: usize, held: &mut Permit| {
            let now = f(cells)? + extra;
            if now > callers {
                held.grow(now - callers).map_err(CellsError::Overloaded)?;
                callers = now;
            }
            Ok::<(), CellsError>(())
        };
        let memtable = &self.inner.write.memtable;
        let view = (0..VIEW_TRIES).find_map(|_| {
            let before = memtable.seals();
            let (chunks, tails) = memtable.chunks();
            let snapshot = self.snapshot();
            (memtable.seals() == before).then_some((chunks, tails, snapshot))
        });
        let Some((chunks, tails, snapshot)) = view else {
            return Err(CellsError::NotNow);
        };
        // A read leaves out the spans that ended before retention's cut,
        // which cells count while their file lives: a window reaching back
        // past the cut is counted from cells only where no file (and no
        // buffer, below) holds a span that started before it.
        let cut = self.inner.retention.expire_before();
        let past_cut = range.start_unix_nano < cut;
        if past_cut
            && snapshot
                .version
                .files()
                .any(|f| f.table().meta().min_time_unix_nano < cut)
        {
            return Err(CellsError::NotNow);
        }
        let mut stats = CellsStats::default();
        // The buffers' frozen chunks and sealed buffers do not change: each
        // is counted once and its cells kept while it lives (the entry of a
        // chunk holds it, so its address is not reused meanwhile), within
        // the index cache's share for them. The growing tails are counted
        // at every query.
        let cache = &self.inner.summary_cache;
        let mut fresh: HashMap<usize, super::search::ChunkCells> =
            HashMap::with_capacity(chunks.len());
        {
            let cached = cache.cells_chunks.lock();
            for chunk in &chunks {
                let key = Arc::as_ptr(chunk) as usize;
                if let Some(hit) = cached.get(&key) {
                    fresh.insert(key, hit.clone());
                }
            }
        }
        let mut sealed_cells: Vec<Option<Arc<FileCells>>> = {
            let mut cached = cache.cells_sealed.lock();
            cached.retain(|id, _| snapshot.sealed.iter().any(|s| s.id == *id));
            snapshot
                .sealed
                .iter()
                .map(|s| cached.get(&s.id).cloned())
                .collect()
        };
        // Memory to count what is not cached yet.
        let to_count = tails.len()
            + chunks
                .iter()
                .filter(|c| !fresh.contains_key(&(Arc::as_ptr(c) as usize)))
                .map(|c| c.len())
                .sum::<usize>()
            + snapshot
                .sealed
                .iter()
                .zip(&sealed_cells)
                .filter(|(_, hit)| hit.is_none())
                .map(|(s, _)| s.chunks.iter().map(|c| c.len()).sum::<usize>())
                .sum::<usize>();
        let attributes = self.inner.opts.table.cell_attributes.clone();
        let span_bytes = RECORD_BYTES * (1 + attributes.names().len().min(ATTRIBUTES_PER_SPAN));
        held.grow(to_count * span_bytes)
            .map_err(CellsError::Overloaded)?;
        let count = |spans: &mut dyn Iterator<Item = &crate::span::Span>| {
            let mut b = CellsBuilder::new(attributes.clone());
            for s in spans {
                b.add(s);
            }
            b.finish().map(Arc::new).ok_or(CellsError::NotNow)
        };
        // Cells are kept while they fit the cache's share for them; past
        // it, a chunk's or buffer's cells are counted again at each query.
        let mut kept = fresh.values().map(|(_, c)| c.bytes()).sum::<usize>()
            + sealed_cells
                .iter()
                .flatten()
                .map(|c| c.bytes())
                .sum::<usize>();
        let mut fits = |c: &FileCells| {
            let fits = kept + c.bytes() <= cache.cells_bound;
            if fits {
                kept += c.bytes();
            }
            fits
        };
        let mut sources: Vec<Arc<FileCells>> = Vec::new();
        for chunk in &chunks {
            let key = Arc::as_ptr(chunk) as usize;
            let cells = match fresh.get(&key) {
                Some((_, c)) => c.clone(),
                None => {
                    let c = count(&mut chunk.iter())?;
                    if fits(&c) {
                        fresh.insert(key, (chunk.clone(), c.clone()));
                    }
                    c
                }
            };
            stats.buffered_spans += chunk.len();
            sources.push(cells);
        }
        *cache.cells_chunks.lock() = fresh;
        for (sealed, hit) in snapshot.sealed.iter().zip(sealed_cells.iter_mut()) {
            let cells = match hit.take() {
                Some(c) => c,
                None => {
                    let c = count(&mut sealed.chunks.iter().flat_map(|c| c.iter()))?;
                    if fits(&c) {
                        cache.cells_sealed.lock().insert(sealed.id, c.clone());
                    }
                    c
                }
            };
            stats.buffered_spans += sealed.chunks.iter().map(|c| c.len()).sum::<usize>();
            sources.push(cells);
        }
        if !tails.is_empty() {
            stats.buffered_spans += tails.len();
            sources.push(count(&mut tails.iter())?);
        }
        held.shrink(to_count * span_bytes);
        drop((chunks, tails));
        if past_cut && sources.iter().any(|c| c.starts_before(cut)) {
            return Err(CellsError::NotNow);
        }
        for c in &sources {
            f(&CellsView::Memory(c), c.bytes(), held)?;
        }
        drop(sources);

        stats.skipped = self.quarantined_in(range);
        let files = self.files_in(&snapshot, range);
        let (readable, to_count) = self.file_sources(&snapshot, &files, family);
        let mut to_count: Vec<&Arc<TableFile>> = to_count;
        for (file, cells, members) in readable {
            match f(&CellsView::File(&cells), 0, held) {
                Ok(()) => {
                    stats.files_with_cells += 1;
                    stats.files_in_runs += members.len();
                }
                Err(CellsError::Engine(e)) => {
                    tracing::warn!(file = %file.path().display(), error = %e,
                        "metrics cells unreadable; counting the spans of the files they count");
                    to_count.push(file);
                    to_count.extend(members);
                }
                Err(e) => return Err(e),
            }
        }
        for file in to_count {
            let meta = file.table().meta();
            held.grow(meta.span_count as usize * RECORD_BYTES)
                .map_err(CellsError::Overloaded)?;
            let counted = self.count_file(file);
            held.shrink(meta.span_count as usize * RECORD_BYTES);
            match counted {
                Ok(Some(c)) => {
                    stats.files_counted += 1;
                    f(&CellsView::Memory(&c), c.bytes(), held)?;
                }
                Ok(None) => return Err(CellsError::NotNow),
                Err(e) if e.is_corruption() => {
                    tracing::error!(file = %file.path().display(), error = %e,
                        "a sorted file failed while its metrics cells were counted; its spans are left out");
                    self.inner.quarantine(file.id, &e);
                    stats.skipped.push(SkippedFile {
                        id: file.id,
                        path: file.path().to_path_buf(),
                        reason: e.to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        held.shrink(callers);
        Ok(stats)
    }

    /// Where the cells of `family` for `files` (a window's files of
    /// `snapshot`) are read from: the files whose cells count them, each
    /// with the other files of the window it counts for (a run's, whose
    /// unnamed, any-service and attribute cells one file holds, and its
    /// named ones where a merge added them up too), and the files to count
    /// from their spans
    /// (cells missing or unreadable).
    ///
    /// A run's cells are read only when every file they list is live (not
    /// quarantined, not dropped) and listed by no other run's cells; then
    /// those files' own sidecars are not read. Otherwise the run's files in
    /// the window are each read alone: from their own cells if a rebuilt
    /// sidecar gave them some, else from their spans (slower, as exact).
    fn file_sources<'a>(
        &self,
        snapshot: &'a SuperVersion,
        files: &[&'a Arc<TableFile>],
        family: Family,
    ) -> (Vec<Readable<'a>>, Vec<&'a Arc<TableFile>>) {
        let cache = self.inner.summary_cache.cells_files();
        let turn = cache.turn();
        let open =
            |file: &TableFile| match CellsFile::open_cached(file.path(), cache, file.id, turn) {
                // Attribute cells written before a run's were added up count
                // their file's own spans.
                Ok(Some(c)) if family == Family::Attr && c.attr_per_file() => {
                    Some((c, Counts::Own))
                }
                // Named cells count their own file's spans, unless a merge
                // added them up over its run.
                Ok(Some(c)) if family == Family::Named && !c.named_in_run() => {
                    Some((c, Counts::Own))
                }
                Ok(Some(c)) => match c.counts() {
                    Ok(counts) => Some((c, counts)),
                    Err(e) => {
                        tracing::warn!(file = %file.path().display(), error = %e,
                            "metrics cells unreadable; counting the file's spans");
                        None
                    }
                },
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(file = %file.path().display(), error = %e,
                        "metrics cells unreadable; counting the file's spans");
                    None
                }
            };
        let mut opened: Vec<(&'a Arc<TableFile>, Opened)> =
            files.iter().map(|&file| (file, open(file))).collect();
        let mut readable = Vec::new();
        let mut to_count = Vec::new();
        // The live files by ID, and the window's.
        let live: HashMap<u64, &'a Arc<TableFile>> =
            snapshot.version.files().map(|f| (f.id, f)).collect();
        let in_window: HashSet<u64> = files.iter().map(|f| f.id).collect();
        // The holders of the window's runs outside the window: a run's
        // files live in one level and partition, so they are looked for
        // there.
        let wanted: HashSet<u64> = opened
            .iter()
            .filter_map(|(_, c)| match c {
                Some((_, Counts::InRun { run })) => Some(*run),
                _ => None,
            })
            .collect();
        let partitions: HashSet<(u32, u64)> = opened
            .iter()
            .filter(|(_, c)| matches!(c, Some((_, Counts::InRun { .. }))))
            .map(|(f, _)| (f.level, f.partition))
            .collect();
        for file in snapshot.version.files() {
            if in_window.contains(&file.id) || !partitions.contains(&(file.level, file.partition)) {
                continue;
            }
            if let Some((c, counts)) = open(file) {
                if matches!(&counts, Counts::Run { run, .. } if wanted.contains(run)) {
                    opened.push((file, Some((c, counts))));
                }
            }
        }
        // A run's sums are used when every file they count is live and
        // counted by no other sums: they then stand for those files,
        // whatever each file's own sidecar now says (rebuilt after a crash,
        // lost, damaged), since a file never changes.
        let mut claims: HashMap<u64, usize> = HashMap::new();
        for (_, cells) in &opened {
            if let Some((_, Counts::Run { members, .. })) = cells {
                for m in members {
                    *claims.entry(*m).or_default() += 1;
                }
            }
        }
        let usable = |file: &TableFile, members: &[u64]| {
            members.contains(&file.id)
                && members
                    .iter()
                    .all(|m| claims.get(m) == Some(&1) && live.contains_key(m))
        };
        let counted: HashSet<u64> = opened
            .iter()
            .filter_map(|(file, cells)| match cells {
                Some((_, Counts::Run { members, .. })) if usable(file, members) => {
                    Some(members.iter().copied())
                }
                _ => None,
            })
            .flatten()
            .collect();
        for (file, cells) in opened {
            match cells {
                Some((c, Counts::Run { members, .. })) if usable(file, &members) => {
                    let others = members
                        .iter()
                        .filter(|m| **m != file.id && in_window.contains(m))
                        .map(|m| live[m])
                        .collect();
                    readable.push((file, c, others));
                }
                // Counted by its run's sums.
                _ if counted.contains(&file.id) => {}
                Some((c, Counts::Own)) => readable.push((file, c, Vec::new())),
                _ if in_window.contains(&file.id) => to_count.push(file),
                // Another run's unusable sums, outside the window.
                _ => {}
            }
        }
        (readable, to_count)
    }

    /// A file's cells from its spans.
    fn count_file(&self, file: &crate::version::TableFile) -> Result<Option<FileCells>> {
        let mut b = CellsBuilder::new(self.inner.opts.table.cell_attributes.clone());
        for span in file.table().iter() {
            b.add(&span?);
        }
        Ok(b.finish())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use crate::{
        engine::{Engine, EngineOptions},
        index::cells::{Family, Reading},
        memtable::CHUNK_SPANS,
        test_util::{group, span},
        version::TimeRange,
    };

    const SEC: u64 = 1_000_000_000;

    /// The buffers' cells are kept within their share of the index cache;
    /// past it they are counted again at each query, to the same cells.
    #[test]
    fn the_buffers_cells_are_kept_within_their_share_of_the_index_cache() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64;
        let base = now - 7200 * SEC;
        let g = group("svc");
        let n = 3 * CHUNK_SPANS as u64;
        let spans: Vec<_> = (0..n)
            .map(|i| span(&g, u128::from(i / 4 + 1), i % 4 + 1, base + i * SEC / 2))
            .collect();
        let mut runs = Vec::new();
        for cache_bytes in [64 << 20, 64 << 10] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut opts = EngineOptions::new(dir.path());
            opts.index_cache_bytes = cache_bytes;
            opts.compaction_threads = 0;
            opts.memtable.shards = 1;
            opts.memtable.flush_bytes = 1 << 30;
            opts.memtable.max_age = Duration::from_secs(3600);
            let engine = Engine::open(opts).expect("open");
            engine.write_blocking(spans.clone()).expect("write");
            let mut counted = Vec::new();
            for _ in 0..2 {
                let mut held = engine.memory_budget().acquire(0).expect("budget");
                let mut spans_in = 0;
                engine
                    .cells_in(TimeRange::new(base, now), Family::Unnamed, &mut held, |c| {
                        let pieces = c
                            .table(Family::Unnamed, 1, Reading::default(), None)?
                            .expect("seconds");
                        spans_in += pieces
                            .iter()
                            .flat_map(|t| &t.cells)
                            .map(|c| c.spans)
                            .sum::<u64>();
                        Ok(0)
                    })
                    .unwrap_or_else(|_| panic!("cells of the buffers"));
                counted.push(spans_in);
            }
            let cache = &engine.inner.summary_cache;
            let kept = cache.cells_bytes();
            assert!(
                kept <= cache.cells_bound,
                "{kept} over {}",
                cache.cells_bound
            );
            runs.push((counted, kept > 0));
        }
        assert_eq!(runs[0], (vec![n, n], true));
        assert_eq!(runs[1], (vec![n, n], false));
    }

    /// A span of trace `trace` starting at `start` with the span attribute
    /// `http.route` (counted by default) of `route`.
    fn routed(
        g: &std::sync::Arc<crate::span::ScopeGroup>,
        trace: u128,
        start: u64,
        route: &str,
    ) -> crate::span::Span {
        let field = |out: &mut Vec<u8>, n: u8, b: &[u8]| {
            out.push(n << 3 | 2);
            out.push(b.len() as u8);
            out.extend_from_slice(b);
        };
        let mut value = Vec::new();
        field(&mut value, 1, route.as_bytes());
        let mut kv = Vec::new();
        field(&mut kv, 1, b"http.route");
        field(&mut kv, 2, &value);
        let mut payload = Vec::new();
        field(&mut payload, 9, &kv);
        crate::test_util::span_with(g, trace, 1, (start, start + 1_000), payload)
    }

    /// A run's attribute cells are read with its unnamed ones, from the
    /// file holding them; cells written before a run's were summed (each
    /// file's own, saying so) are read file by file; both count every span.
    #[test]
    fn a_runs_attribute_cells_are_read_as_written_summed_or_per_file() {
        use crate::index::cells::{cells_len, decode, encode, CellsBuilder, Counts};
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64;
        let base = now - 600 * SEC;
        let g = group("svc");
        let dir = tempfile::tempdir().expect("tempdir");
        let options = || {
            let mut opts = EngineOptions::new(dir.path());
            opts.compaction_threads = 0;
            opts.compaction.l0_trigger_files = 2;
            opts.compaction.target_file_bytes = 16 << 10;
            opts
        };
        let engine = Engine::open(options()).expect("open");
        let n = 3000u64;
        for part in 0..3 {
            let spans: Vec<_> = (part * n / 3..(part + 1) * n / 3)
                .map(|i| {
                    routed(
                        &g,
                        u128::from(i % 997 + 1) << 64 | u128::from(i),
                        base + i * SEC / 10,
                        ["/a", "/b"][(i % 2) as usize],
                    )
                })
                .collect();
            engine.write_blocking(spans).expect("write");
            engine.flush().expect("flush");
        }
        assert!(engine.compact().expect("compact") > 0);
        let range = TimeRange::new(base - SEC, now);
        let count = |engine: &Engine| {
            let mut held = engine.memory_budget().acquire(0).expect("budget");
            let mut spans = 0;
            let stats = engine
                .cells_in(range, Family::Attr, &mut held, |c| {
                    for t in c
                        .table(Family::Attr, 1, Reading::default(), None)?
                        .expect("seconds")
                    {
                        spans += t.cells.iter().map(|c| c.spans).sum::<u64>();
                    }
                    Ok(0)
                })
                .unwrap_or_else(|_| panic!("cells of the window"));
            (spans, stats)
        };
        let (spans, stats) = count(&engine);
        assert_eq!(spans, n);
        assert!(stats.files_in_runs > 0, "{stats:?}");
        let files: Vec<_> = engine.snapshot().version.files().cloned().collect();
        drop(engine);
        // Each file of a run as written before: its own attribute cells,
        // saying so.
        for file in &files {
            let path = crate::index::sidecar_path(file.path());
            let bytes = std::fs::read(&path).expect("sidecar");
            let at = bytes.len() - cells_len(&path, &bytes).expect("cells");
            let mut cells = decode(&path, &bytes).expect("cells").expect("cells");
            if cells.counts == Counts::Own {
                continue;
            }
            let mut b = CellsBuilder::default();
            for span in file.table().iter() {
                b.add(&span.expect("span"));
            }
            let own = b.finish().expect("cells");
            // Named cells per file, as merges wrote them before they added
            // up their inputs' cells.
            let per_file = |f: Family| f == Family::Attr || f == Family::Named;
            cells.tables.retain(|t| !per_file(t.family));
            cells
                .tables
                .extend(own.tables.into_iter().filter(|t| per_file(t.family)));
            cells.named = own.named;
            cells.attr = own.attr;
            cells.counted = own.counted;
            cells.attr_per_file = true;
            cells.named_in_run = false;
            let mut rewritten = bytes[..at].to_vec();
            rewritten.extend(encode(&cells));
            std::fs::write(&path, rewritten).expect("write");
        }
        let engine = Engine::open(options()).expect("open");
        let (spans, per_file) = count(&engine);
        assert_eq!(spans, n);
        assert_eq!(per_file.files_in_runs, 0, "{per_file:?}");
        assert_eq!(per_file.files_with_cells, files.len(), "{per_file:?}");
    }
}
