//! The unnamed, any-service and attribute cells of a sorted run a merge
//! writes ([`RunCells`]).
//!
//! The files of a run split the trace IDs of one time partition, so each
//! covers the partition's every second, and per-file cells of the unnamed
//! family (a few hundred keys, each active every second) repeat each
//! (second, key) once per file; so do the any-service family's (a few
//! hundred to a few thousand keys) and the attribute family's (a few
//! thousand keys: on an hour of 105 M spans, 61.6 M cells in 40 files,
//! where the sums of such a run are 3.2 M). They are added up across the run's files
//! as the merge finishes them, kept packed ([`Packed`]), and written once,
//! with the file that ends the run (or earlier, when the sums pass a bound,
//! so a merge's memory stays bounded). The named family stays per file:
//! its keys are near one per span, so summing them across files saves
//! little.

use super::{
    builder::{coarser, coarser_of, counts_only, light, roots_timed, timed},
    packed::{Packed, Packer},
    wire, CellKey, CellTable, Counts, Family, FileCells, HashMap,
};

/// Bytes of summed cells, packed, after which the file being finished
/// writes them, and the next files start new sums.
pub const RUN_CELLS_BYTES: usize = 32 << 20;

/// Adds up the unnamed, any-service and attribute cells of a run's files,
/// in the order the merge finishes them, and says what each file's sidecar
/// holds.
pub struct RunCells {
    /// [`RUN_CELLS_BYTES`], but in tests.
    bound: usize,
    /// The run's number: its first file's ID.
    run: Option<u64>,
    /// Files whose cells are in the sums, ascending.
    members: Vec<u64>,
    unnamed: Sums,
    attr: Sums,
    any_service: Sums,
    /// The attributes every member counted; `None` before the first.
    counted: Option<Vec<Box<[u8]>>>,
}

/// One family's seconds, summed.
#[derive(Default)]
struct Sums {
    keys: Vec<CellKey>,
    key_ids: HashMap<CellKey, u32>,
    seconds: Option<Packed>,
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
            unnamed: Sums::default(),
            attr: Sums::default(),
            any_service: Sums::default(),
            counted: None,
        }
    }

    /// The cells to write with file `id` of the run (IDs ascending), whose
    /// own cells are `own` (`None`: it has none, so its spans are counted
    /// from the file when a query needs them); `last` when the run ends
    /// with it. The file keeps its named cells; its unnamed, any-service
    /// and attribute ones are added to the run's and written with the file
    /// that ends the sums.
    pub fn file(&mut self, id: u64, own: Option<FileCells>, last: bool) -> Option<FileCells> {
        let run = *self.run.get_or_insert(id);
        let Some(own) = own.map(FileCells::unpacked) else {
            return if last { self.holder(None) } else { None };
        };
        let FileCells {
            named,
            unnamed,
            attr,
            any_service,
            counted,
            tables,
            ..
        } = own;
        let mut mine = FileCells {
            named,
            counts: Counts::InRun { run },
            ..FileCells::default()
        };
        let (mut unnamed_seconds, mut attr_seconds, mut any_seconds) = (None, None, None);
        for t in tables {
            match (t.family, t.seconds) {
                (Family::Named, _) => mine.tables.push(t),
                (Family::Unnamed, 1) => unnamed_seconds = Some(t),
                (Family::Attr, 1) => attr_seconds = Some(t),
                (Family::AnyService, 1) => any_seconds = Some(t),
                _ => {}
            }
        }
        let (Some(seconds), Some(any_seconds)) = (unnamed_seconds, any_seconds) else {
            // Cells without the unnamed or any-service seconds are not ones
            // a builder makes: count the file from its spans.
            return if last { self.holder(None) } else { None };
        };
        self.unnamed.add(&unnamed, seconds);
        self.any_service.add(&any_service, any_seconds);
        // A file that counted an attribute the others did not leaves it
        // out of the sums.
        let counted = match (self.counted.take(), attr_seconds) {
            (None, Some(t)) => {
                self.attr.add(&attr, t);
                counted
            }
            (Some(before), Some(t)) => {
                self.attr.add(&attr, t);
                before.into_iter().filter(|c| counted.contains(c)).collect()
            }
            (_, None) => Vec::new(),
        };
        self.counted = Some(counted);
        self.members.push(id);
        if last || self.bytes() >= self.bound {
            self.holder(Some(mine))
        } else {
            Some(mine)
        }
    }

    /// Bytes the sums hold.
    pub fn bytes(&self) -> usize {
        self.unnamed.bytes() + self.attr.bytes() + self.any_service.bytes()
    }

    /// The cells of the file that ends the sums: its own named cells
    /// (`mine`) and the members' unnamed, any-service and attribute cells, counted for
    /// them; the sums start again. With one member, the file's own cells.
    fn holder(&mut self, mine: Option<FileCells>) -> Option<FileCells> {
        let members = std::mem::take(&mut self.members);
        let unnamed = std::mem::take(&mut self.unnamed);
        let attr = std::mem::take(&mut self.attr);
        let any_service = std::mem::take(&mut self.any_service);
        let counted = self.counted.take().unwrap_or_default();
        let mut mine = match (mine, &unnamed.seconds) {
            (Some(m), Some(_)) => m,
            // The last file has no cells: the members' cells have no file
            // to go with, and are counted from their spans.
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
        let all = vec![true; unnamed.keys.len()];
        let (keys, seconds) = unnamed.sorted(&all, true);
        let (seconds, minutes) = seconds.expect("unnamed seconds");
        let hours = coarser(&minutes, Family::Unnamed, 3600, |k| k);
        mine.tables.extend([seconds.unpacked(), minutes, hours]);
        mine.unnamed = keys;
        // Written where the sums are dense, with every duration, as in a
        // file's own (`FileCells::thin`); kept packed until written, as the
        // attribute sums are (an hour's at 22 k spans a second are 2.6 M
        // cells).
        let all = vec![true; any_service.keys.len()];
        let (cells, spans) = cells_of(&any_service, &all);
        if !light(cells, spans) {
            let (keys, seconds) = any_service.sorted(&all, true);
            if let Some((seconds, minutes)) = seconds {
                let hours = coarser(&minutes, Family::AnyService, 3600, |k| k);
                mine.packed.push(seconds);
                mine.tables.extend([minutes, hours]);
                mine.any_service = keys;
            }
        }
        if counted.is_empty() {
            return Some(mine);
        }
        // The attributes every member counted.
        let kept: Vec<bool> = attr
            .keys
            .iter()
            .map(|k| {
                k.attr
                    .as_deref()
                    .and_then(attribute_of)
                    .is_some_and(|name| counted.iter().any(|c| **c == *name))
            })
            .collect();
        if attr.seconds.is_none() {
            return Some(mine);
        }
        // Durations where the sums kept are dense, as in a file's own.
        let (cells, spans) = cells_of(&attr, &kept);
        let (keys, seconds) = attr.sorted(&kept, timed(cells, spans));
        let Some((seconds, minutes)) = seconds else {
            return Some(mine);
        };
        let hours = coarser(&minutes, Family::Attr, 3600, |k| k);
        mine.packed.push(seconds);
        mine.tables.push(minutes);
        mine.tables.push(hours);
        mine.attr = keys;
        mine.counted = counted;
        Some(mine)
    }
}

/// The cells of the seconds `sums` holds of the keys `kept` marks, and the
/// spans they count.
fn cells_of(sums: &Sums, kept: &[bool]) -> (usize, u64) {
    let (mut cells, mut spans) = (0, 0);
    for chunk in sums.seconds.iter().flat_map(Packed::chunks) {
        for c in chunk.cells.iter().filter(|c| kept[c.key as usize]) {
            cells += 1;
            spans += c.spans;
        }
    }
    (cells, spans)
}

/// The attribute an attribute key's value is of: its scope byte, then its
/// key, as [`super::CellAttributes::names`] names it.
pub(super) fn attribute_of(attr: &[u8]) -> Option<Vec<u8>> {
    let (&scope, kv) = attr.split_first()?;
    let key = wire::key_of(kv)?;
    let mut name = Vec::with_capacity(1 + key.len());
    name.push(scope);
    name.extend_from_slice(key);
    Some(name)
}

impl Sums {
    fn bytes(&self) -> usize {
        self.seconds.as_ref().map_or(0, Packed::bytes) + self.keys.len() * 64
    }

    /// `t`, a file's seconds numbering `keys`, added to the sums.
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
        t.sort();
        self.seconds = Some(match self.seconds.take() {
            None => Packed::of(&t),
            Some(sums) => sum(&sums, &t),
        });
    }

    /// The keys `keep` marks (per key number), in order (as a file's are, so its tables'
    /// parts hold ranges of them) and the seconds of those keys renumbered
    /// to match, with their durations if `durations` (`None` when no cell
    /// is left).
    fn sorted(self, keep: &[bool], durations: bool) -> (Vec<CellKey>, Option<(Packed, CellTable)>) {
        let Some(seconds) = self.seconds else {
            return (Vec::new(), None);
        };
        let numbers = self.keys.len();
        let mut numbered: Vec<(CellKey, u32)> = self
            .keys
            .into_iter()
            .zip(0..)
            .filter(|(_, id)| keep[*id as usize])
            .collect();
        numbered.sort_unstable();
        let mut renumber = vec![u32::MAX; numbers];
        for (new, (_, old)) in numbered.iter().enumerate() {
            renumber[*old as usize] = new as u32;
        }
        let family = seconds.family;
        // Seconds too light for all their durations keep the roots' and
        // errors' (as a file's own do, `FileCells::thin`): all of them if
        // every key is one of those, none if none is.
        let keys: Vec<CellKey> = numbered.into_iter().map(|k| k.0).collect();
        let durations = durations || keys.iter().all(CellKey::timed_when_light);
        let roots_only = !durations && keys.iter().any(CellKey::timed_when_light);
        let mut out = Packer::new(
            family,
            seconds.seconds,
            seconds.has_durations && (durations || roots_only),
        );
        if roots_only || seconds.roots_only {
            out = out.roots_only();
        }
        // Each chunk's minutes, with their durations whether or not the
        // seconds keep them.
        let mut minutes = Vec::new();
        // A chunk holds whole buckets, so each sorts alone.
        for mut chunk in seconds.chunks() {
            chunk.cells.retain_mut(|c| {
                c.key = renumber[c.key as usize];
                c.key != u32::MAX
            });
            chunk.sort();
            minutes.push(coarser(&chunk, family, 60, |k| k));
            let chunk = if durations {
                chunk
            } else if roots_only {
                roots_timed(chunk, &keys)
            } else {
                counts_only(chunk)
            };
            for c in &chunk.cells {
                out.push(c.bucket, c.key, c.spans, chunk.durations_of(c));
            }
        }
        let out = out.finish();
        // A minute may lie in two chunks: added up.
        let minutes = coarser_of(&minutes, family, 60, |k| k);
        (keys, (out.cells() > 0).then_some((out, minutes)))
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

/// `b`, a table of seconds in order of (bucket, key), added to the sums
/// `a`, a chunk of them at a time.
pub(super) fn sum(a: &Packed, b: &CellTable) -> Packed {
    let mut out = Packer::new(a.family, a.seconds, a.has_durations && b.has_durations);
    if a.roots_only || b.roots_only {
        out = out.roots_only();
    }
    let mut durations = Vec::new();
    let mut j = 0;
    let push_b = |out: &mut Packer, j: &mut usize| {
        let c = &b.cells[*j];
        out.push(c.bucket, c.key, c.spans, b.durations_of(c));
        *j += 1;
    };
    for chunk in a.chunks() {
        for x in &chunk.cells {
            while b
                .cells
                .get(j)
                .is_some_and(|y| (y.bucket, y.key) < (x.bucket, x.key))
            {
                push_b(&mut out, &mut j);
            }
            match b.cells.get(j) {
                Some(y) if (y.bucket, y.key) == (x.bucket, x.key) => {
                    durations.clear();
                    merge_durations(&mut durations, chunk.durations_of(x), b.durations_of(y));
                    out.push(x.bucket, x.key, x.spans + y.spans, &durations);
                    j += 1;
                }
                _ => out.push(x.bucket, x.key, x.spans, chunk.durations_of(x)),
            }
        }
    }
    while j < b.cells.len() {
        push_b(&mut out, &mut j);
    }
    out.finish()
}

/// Two lists of (exponent, spans) in ascending exponent, added up.
pub(super) fn merge_durations(out: &mut Vec<(u8, u64)>, a: &[(u8, u64)], b: &[(u8, u64)]) {
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
