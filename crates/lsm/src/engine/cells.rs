//! The metrics cells of a time window ([`Engine::cells_in`]): each file's
//! from its sidecar, or counted from its spans when the sidecar has none,
//! and the buffers' counted from their spans, from one consistent view, so
//! that no span is counted in a buffer and again in the file it was
//! flushed to.

use crate::{
    budget::{Overloaded, Permit},
    error::Result,
    index::cells::{CellsBuilder, CellsFile, CellsView, FileCells},
    version::TimeRange,
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
}

impl From<crate::Error> for CellsError {
    fn from(e: crate::Error) -> Self {
        CellsError::Engine(e)
    }
}

/// Bytes a buffered span costs while the buffers' cells are counted.
const RECORD_BYTES: usize = 8;

impl Engine {
    /// Calls `f` with the metrics cells of every source that may hold a
    /// span starting in `range`: each file whose time range overlaps it,
    /// and the buffers (their spans that overlap it, as one source). The
    /// memory to count the buffers is admitted to `held` first; `f` returns
    /// the bytes its caller holds after each source, which are admitted too.
    /// `f` reads what it needs of a source before it counts any of it: when
    /// it fails to read a file's cells (damaged), it is called again with
    /// the cells counted from the file's spans.
    pub fn cells_in(
        &self,
        range: TimeRange,
        held: &mut Permit,
        mut f: impl FnMut(&CellsView<'_>) -> Result<usize>,
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
        if range.start_unix_nano < self.inner.retention.expire_before() {
            return Err(CellsError::NotNow);
        }
        let memtable = &self.inner.memtable;
        let view = (0..VIEW_TRIES).find_map(|_| {
            let before = memtable.seals();
            let (chunks, tails) = memtable.chunks();
            let snapshot = self.snapshot();
            (memtable.seals() == before).then_some((chunks, tails, snapshot))
        });
        let Some((chunks, tails, snapshot)) = view else {
            return Err(CellsError::NotNow);
        };
        let mut stats = CellsStats::default();
        let within = |s: &crate::span::Span| range.overlaps(s.start_unix_nano, s.end_unix_nano);
        let buffered: usize = tails.len()
            + chunks
                .iter()
                .chain(snapshot.sealed.iter().flat_map(|s| s.chunks.iter()))
                .map(|c| c.len())
                .sum::<usize>();
        held.grow(buffered * RECORD_BYTES)
            .map_err(CellsError::Overloaded)?;
        let mut counted = CellsBuilder::default();
        for span in tails.iter().chain(
            chunks
                .iter()
                .chain(snapshot.sealed.iter().flat_map(|s| s.chunks.iter()))
                .flat_map(|c| c.iter()),
        ) {
            if within(span) {
                counted.add(span);
                stats.buffered_spans += 1;
            }
        }
        if let Some(c) = counted.finish() {
            f(&CellsView::Memory(&c), c.bytes(), held)?;
        }
        held.shrink(buffered * RECORD_BYTES);
        drop((chunks, tails));

        stats.skipped = self.quarantined_in(range);
        for file in self.files_in(&snapshot, range) {
            let read = match CellsFile::open(file.path()) {
                Ok(Some(c)) => f(&CellsView::File(&c), 0, held).map(Some),
                Ok(None) => Ok(None),
                Err(e) => Err(CellsError::Engine(e)),
            };
            match read {
                Ok(Some(())) => {
                    stats.files_with_cells += 1;
                    continue;
                }
                Ok(None) => {}
                Err(CellsError::Engine(e)) => {
                    tracing::warn!(file = %file.path().display(), error = %e,
                    "metrics cells unreadable; counting the file's spans")
                }
                Err(e) => return Err(e),
            }
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

    /// A file's cells from its spans.
    fn count_file(&self, file: &crate::version::TableFile) -> Result<Option<FileCells>> {
        let mut b = CellsBuilder::default();
        for span in file.table().iter() {
            b.add(&span?);
        }
        Ok(b.finish())
    }
}
