//! The unnamed cells of a sorted run a merge writes ([`RunCells`]).
//!
//! The files of a run split the trace IDs of one time partition, so each
//! covers the partition's every second, and per-file cells of the unnamed
//! family (a few hundred keys, each active every second) repeat each
//! (second, key) once per file. They are added up across the run's files as
//! the merge finishes them and written once, with the file that ends the
//! run (or earlier, when the sums pass a bound, so a merge's memory stays
//! bounded). The named family stays per file: its keys are near one per
//! span, so summing them across files saves little.

use super::{coarser, CellKey, CellTable, Counts, Family, FileCells, HashMap, BUCKET_SECONDS};

/// Bytes of summed cells after which the file being finished writes them,
/// and the next files start new sums.
pub const RUN_CELLS_BYTES: usize = 32 << 20;

/// Adds up the unnamed cells of a run's files, in the order the merge
/// finishes them, and says what each file's sidecar holds.
pub struct RunCells {
    /// [`RUN_CELLS_BYTES`], but in tests.
    bound: usize,
    /// The run's number: its first file's ID.
    run: Option<u64>,
    /// Files whose unnamed cells are in the sums, ascending.
    members: Vec<u64>,
    keys: Vec<CellKey>,
    key_ids: HashMap<CellKey, u32>,
    /// The unnamed cells of 1 s of the members, summed.
    seconds: Option<CellTable>,
}

impl Default for RunCells {
    fn default() -> Self {
        RunCells::with_bound(RUN_CELLS_BYTES)
    }
}

impl RunCells {
    /// Sums that a file writes once they pass `bound` bytes.
    pub fn with_bound(bound: usize) -> RunCells {
        RunCells {
            bound,
            run: None,
            members: Vec::new(),
            keys: Vec::new(),
            key_ids: HashMap::default(),
            seconds: None,
        }
    }

    /// The cells to write with file `id` of the run (IDs ascending), whose
    /// own cells are `own` (`None`: it has none, so its spans are counted
    /// from the file when a query needs them); `last` when the run ends
    /// with it. The file keeps its named cells; its unnamed ones are added
    /// to the run's and written with the file that ends the sums.
    pub fn file(&mut self, id: u64, own: Option<FileCells>, last: bool) -> Option<FileCells> {
        let run = *self.run.get_or_insert(id);
        let Some(own) = own else {
            return if last { self.holder(None) } else { None };
        };
        let FileCells {
            named,
            unnamed,
            attr,
            counted,
            tables,
            ..
        } = own;
        let mut mine = FileCells {
            named,
            attr,
            counted,
            counts: Counts::InRun { run },
            ..FileCells::default()
        };
        let mut unnamed_seconds = None;
        for t in tables {
            match t.family {
                Family::Named | Family::Attr => mine.tables.push(t),
                Family::Unnamed if t.seconds == BUCKET_SECONDS[0] => unnamed_seconds = Some(t),
                Family::Unnamed => {}
            }
        }
        let Some(seconds) = unnamed_seconds else {
            // Cells without the unnamed seconds are not ones a builder
            // makes: count the file from its spans.
            return if last { self.holder(None) } else { None };
        };
        self.add(&unnamed, seconds);
        self.members.push(id);
        if last || self.bytes() >= self.bound {
            self.holder(Some(mine))
        } else {
            Some(mine)
        }
    }

    /// Bytes the sums hold.
    fn bytes(&self) -> usize {
        self.seconds.as_ref().map_or(0, |t| {
            t.cells.capacity() * std::mem::size_of::<super::Cell>() + t.durations.capacity() * 16
        }) + self.keys.len() * 64
    }

    /// `t`, a file's unnamed seconds numbering `keys`, added to the sums.
    fn add(&mut self, keys: &[CellKey], mut t: CellTable) {
        let ids: Vec<u32> = keys
            .iter()
            .map(|k| match self.key_ids.get(k) {
                Some(&id) => id,
                None => {
                    let id = self.keys.len() as u32;
                    self.keys.push(k.clone());
                    self.key_ids.insert(k.clone(), id);
                    id
                }
            })
            .collect();
        for c in &mut t.cells {
            c.key = ids[c.key as usize];
        }
        t.cells.sort_unstable_by_key(|c| (c.bucket, c.key));
        self.seconds = Some(match self.seconds.take() {
            None => t,
            Some(sums) => sum(&sums, &t),
        });
    }

    /// The cells of the file that ends the sums: its own named cells
    /// (`mine`) and the members' unnamed cells, counted for them; the sums
    /// start again. With one member, the file's own cells.
    fn holder(&mut self, mine: Option<FileCells>) -> Option<FileCells> {
        let members = std::mem::take(&mut self.members);
        let keys = std::mem::take(&mut self.keys);
        self.key_ids.clear();
        let seconds = self.seconds.take();
        let (mut mine, seconds) = match (mine, seconds) {
            (Some(m), Some(s)) => (m, s),
            // The last file has no cells: the members' unnamed cells have
            // no file to go with, and are counted from their spans.
            _ => return None,
        };
        let run = match mine.counts {
            Counts::InRun { run } => run,
            _ => unreachable!("a file of a run"),
        };
        mine.counts = if members.len() == 1 {
            Counts::Own
        } else {
            Counts::Run { run, members }
        };
        let (keys, seconds) = RunCells::sorted(keys, seconds);
        let coarse: Vec<CellTable> = BUCKET_SECONDS[1..]
            .iter()
            .map(|&len| coarser(&seconds, Family::Unnamed, len, |k| k))
            .collect();
        mine.tables.push(seconds);
        mine.tables.extend(coarse);
        mine.unnamed = keys;
        Some(mine)
    }

    /// The sums' keys in order (as a file's are, so its tables' parts
    /// hold ranges of them) and the cells renumbered to match.
    fn sorted(keys: Vec<CellKey>, mut seconds: CellTable) -> (Vec<CellKey>, CellTable) {
        let mut numbered: Vec<(CellKey, u32)> = keys.into_iter().zip(0..).collect();
        numbered.sort_unstable();
        let mut renumber = vec![0u32; numbered.len()];
        for (new, (_, old)) in numbered.iter().enumerate() {
            renumber[*old as usize] = new as u32;
        }
        for c in &mut seconds.cells {
            c.key = renumber[c.key as usize];
        }
        seconds.sort();
        (numbered.into_iter().map(|k| k.0).collect(), seconds)
    }
}

/// Which of two sorted sequences' heads comes first: `(a's, b's)` taken
/// (both when they are equal).
fn first<T: Ord>(x: Option<T>, y: Option<T>) -> (bool, bool) {
    match (x, y) {
        (Some(p), Some(q)) => (p <= q, q <= p),
        (x, y) => (x.is_some(), y.is_some()),
    }
}

/// Two unnamed tables of seconds, each in order of (bucket, key), added
/// up.
fn sum(a: &CellTable, b: &CellTable) -> CellTable {
    let mut out = CellTable {
        family: Family::Unnamed,
        seconds: a.seconds,
        has_durations: true,
        cells: Vec::with_capacity(a.cells.len().max(b.cells.len())),
        durations: Vec::with_capacity(a.durations.len().max(b.durations.len())),
    };
    let (mut i, mut j) = (0, 0);
    loop {
        let (x, y) = (a.cells.get(i), b.cells.get(j));
        let (take_a, take_b) = first(x.map(|c| (c.bucket, c.key)), y.map(|c| (c.bucket, c.key)));
        let (x, y) = (x.filter(|_| take_a), y.filter(|_| take_b));
        let Some(&cell) = x.or(y) else {
            break;
        };
        let from = out.durations.len() as u32;
        let da = x.map(|c| (c.spans, a.durations_of(c)));
        let db = y.map(|c| (c.spans, b.durations_of(c)));
        let spans = da.map_or(0, |d| d.0) + db.map_or(0, |d| d.0);
        merge_durations(
            &mut out.durations,
            da.map_or(&[], |d| d.1),
            db.map_or(&[], |d| d.1),
        );
        i += usize::from(take_a);
        j += usize::from(take_b);
        out.cells.push(super::Cell {
            spans,
            durations: (from, out.durations.len() as u32),
            ..cell
        });
    }
    out
}

/// Two lists of (exponent, spans) in ascending exponent, added up.
fn merge_durations(out: &mut Vec<(u8, u64)>, a: &[(u8, u64)], b: &[(u8, u64)]) {
    let (mut i, mut j) = (0, 0);
    loop {
        let (x, y) = (a.get(i), b.get(j));
        let (take_a, take_b) = first(x.map(|d| d.0), y.map(|d| d.0));
        let (x, y) = (x.filter(|_| take_a), y.filter(|_| take_b));
        let Some(&(exp, _)) = x.or(y) else {
            break;
        };
        out.push((exp, x.map_or(0, |d| d.1) + y.map_or(0, |d| d.1)));
        i += usize::from(take_a);
        j += usize::from(take_b);
    }
}
