//! A sidecar's metrics cells decoded whole from its bytes in memory
//! ([`decode`]), every section checked.

use std::path::Path;

use super::{
    counts_of, families_of, inflate, parse_counted, read_index, table::parse_table, KeyList,
    Section, What, FOOTER_BYTES,
};
use crate::{
    error::Result,
    index::cells::{builder::coarser, CellTable, Counts, Family, FileCells, Reading},
    table::corrupt,
};

/// The cells at the end of a sidecar's bytes held in memory: `Ok(None)`
/// when it has none (it does not end with the magic), an error when they
/// fail a check.
pub fn decode(path: &Path, file: &[u8]) -> Result<Option<FileCells>> {
    let Some(at) = file.len().checked_sub(FOOTER_BYTES) else {
        return Ok(None);
    };
    let footer: [u8; FOOTER_BYTES] = file[at..].try_into().expect("20 bytes");
    let mut read_at =
        |offset: u64, len: usize| Ok(file[offset as usize..offset as usize + len].to_vec());
    let Some((index_start, sections)) = read_index(path, &footer, at as u64, &mut read_at)? else {
        return Ok(None);
    };
    let frame = |s: &Section| {
        let at = index_start - s.back;
        let bytes = &file[at as usize..(at + u64::from(s.frame_len)) as usize];
        inflate(path, at, bytes, s.body_len, s.crc)
    };
    let run = match sections.iter().find(|s| matches!(s.what, What::Run { .. })) {
        Some(s) => Some((*s, frame(s)?)),
        None => None,
    };
    let counts = counts_of(path, run)?;
    let counted_section = sections
        .iter()
        .find(|s| matches!(s.what, What::Counted { .. }));
    let counted = match counted_section {
        Some(s) => parse_counted(path, &frame(s)?, s.count)?,
        None => Vec::new(),
    };
    let attr_per_file = counts != Counts::Own
        && counted_section.is_some_and(|s| s.what == What::Counted { per_file: true });
    let named_in_run = run_named(&sections);
    let any_service = sections
        .iter()
        .any(|s| s.what == What::Keys(Family::AnyService));
    let families = families_of(&counts, named_in_run, !counted.is_empty(), any_service);
    let mut cells = FileCells {
        counts,
        counted,
        attr_per_file,
        named_in_run,
        ..FileCells::default()
    };
    let count_of = |family| {
        sections
            .iter()
            .find(|s| s.what == What::Keys(family))
            .map(|s| s.count)
            .ok_or_else(|| corrupt(path, index_start, "metrics cells without their keys"))
    };
    for &family in &families {
        let s = sections
            .iter()
            .find(|s| s.what == What::Keys(family))
            .ok_or_else(|| corrupt(path, index_start, "metrics cells without their keys"))?;
        let keys = KeyList::read(path, frame(s)?, family, s.count)?.to_keys();
        match family {
            Family::Named => cells.named = keys,
            Family::Unnamed => cells.unnamed = keys,
            Family::Attr => cells.attr = keys,
            Family::AnyService => cells.any_service = keys,
        }
    }
    // Per (family, length), its pieces, each with where its frame is.
    type Pieces = Vec<(u64, CellTable)>;
    let mut pieces: Vec<((Family, u64), Pieces)> = Vec::new();
    for s in &sections {
        if let What::Table(f, l, _) = s.what {
            let piece = parse_table(path, &frame(s)?, s, count_of(f)?, Reading::whole(), None)?;
            let at = index_start - s.back;
            match pieces.iter_mut().find(|(fl, _)| *fl == (f, l)) {
                Some((_, of)) => of.push((at, piece)),
                None => pieces.push(((f, l), vec![(at, piece)])),
            }
        }
    }
    for ((family, seconds), of) in pieces {
        // Parts with durations beside parts without are of a table whose
        // roots and errors alone keep theirs: those without hold neither.
        let timed = of.iter().filter(|(_, p)| p.has_durations).count();
        let roots_only = timed > 0 && timed < of.len();
        let keys = cells.keys(family);
        let mut t = CellTable {
            roots_only,
            ..CellTable::empty(family, seconds, timed > 0)
        };
        for (at, piece) in of {
            // A part without durations beside parts with them holds no root
            // key; one holding an error key was written before error keys
            // kept their durations: readable part by part (a query of error
            // spans' durations reads that file's spans), but this table
            // cannot say which of its cells lack them, so it is not decoded
            // whole.
            let timed_key = || {
                piece
                    .cells
                    .iter()
                    .map(|c| &keys[c.key as usize])
                    .find(|k| k.timed_when_light())
            };
            if let Some(k) = (roots_only && !piece.has_durations)
                .then(timed_key)
                .flatten()
            {
                let why = if k.is_root() {
                    "a table part without durations holds a root key beside parts with them"
                } else {
                    "a table part without durations holds an error key beside parts with \
                     them: written by an earlier version, its parts are read one by one"
                };
                return Err(corrupt(path, at, why));
            }
            t.append(piece);
        }
        cells.tables.push(t);
    }
    // Named minutes left out where light are added up from the seconds,
    // which keep every duration where they are.
    let has = |cells: &FileCells, seconds| cells.table(Family::Named, seconds).is_some();
    if has(&cells, 1) && !has(&cells, 60) {
        let seconds = cells.table(Family::Named, 1).expect("named seconds");
        if !seconds.has_durations || seconds.roots_only {
            return Err(corrupt(
                path,
                index_start,
                "named minutes left out beside seconds without every duration",
            ));
        }
        let minutes = coarser(seconds, Family::Named, 60, |k| k);
        cells.tables.push(minutes);
    }
    for t in &mut cells.tables {
        t.sort();
    }
    Ok(Some(cells))
}

/// Whether the run section, if any, says the run holds the named cells.
fn run_named(sections: &[Section]) -> bool {
    sections
        .iter()
        .any(|s| matches!(s.what, What::Run { named: true, .. }))
}
