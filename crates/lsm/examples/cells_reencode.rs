//! Writes the metrics cells of a data directory's live files again, in
//! this build's layout: for an A/B of two cell layouts on the very same
//! spans (docs/BENCHMARKS.md, "A week of traffic", and "Durations a byte a
//! span, and every named second timed", "Named cells framed by the minute").
//!
//! ```text
//! cargo run --release -p tracedb-lsm --example cells_reencode -- DATA_DIR [--listed-below N] [--named-as-before] [--named-frames N] [--name-parts N|none] [--named-minutes-kept]
//! ```
//!
//! `--listed-below N` writes the durations of cells of fewer than N spans
//! span by span (1: none, as before 4b88898; this build's default else);
//! `--named-as-before` drops light named seconds' durations but their
//! root and error keys', as before 1a3f4f5. `--named-frames N` ends the
//! time frames of the named cells of keys neither a root's nor an error's
//! at the first whole minute past N cells (this build: 16,384; 1,048,576
//! frames them with the others, as before); `--name-parts N` ends a named
//! part where the name changes within a service once past N cells (this
//! build: 8,192; `none`: only where the service changes, as before);
//! `--named-minutes-kept` writes the named minutes where light too, as
//! before.
//!
//! Run it on a stopped server's directory, or a copy: each sidecar's cells
//! are read, checked, and written back in place of the old ones (the
//! sidecar written to a temporary file, then renamed over it).

use std::path::PathBuf;

use tracedb_lsm::{
    index::cells::{cells_len, decode, encode_laid_out, Layout},
    layout, manifest,
};

const USAGE: &str = "usage: cells_reencode DATA_DIR [--listed-below N] [--named-as-before] \
                     [--named-frames N] [--name-parts N|none] [--named-minutes-kept]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or(USAGE)?);
    let (mut layout, mut named_as_before) = (Layout::default(), false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listed-below" => {
                let n: u8 = args.next().ok_or(USAGE)?.parse()?;
                if !(1..=64).contains(&n) {
                    return Err("--listed-below takes 1 to 64".into());
                }
                layout.listed_below = n;
            }
            "--named-as-before" => named_as_before = true,
            "--named-minutes-kept" => layout.light_named_minutes_left_out = false,
            "--named-frames" => layout.named_frame_cells = args.next().ok_or(USAGE)?.parse()?,
            "--name-parts" => {
                layout.name_part_cells = match args.next().ok_or(USAGE)?.as_str() {
                    "none" => usize::MAX,
                    n => n.parse()?,
                }
            }
            _ => return Err(USAGE.into()),
        }
    }
    let (state, _) = manifest::read(&layout::manifest_path(&dir))?.ok_or("no manifest")?;
    let tables = layout::tables_dir(&dir);
    let (mut files, mut before, mut after) = (0, 0u64, 0u64);
    for entry in state.files.values() {
        let sidecar = layout::sidecar_path(&layout::table_path(&tables, entry.id));
        let mut bytes = std::fs::read(&sidecar)?;
        let Some(mut cells) = decode(&sidecar, &bytes)? else {
            continue;
        };
        if named_as_before {
            cells.named_as_before();
        }
        let old = cells_len(&sidecar, &bytes)?;
        bytes.truncate(bytes.len() - old);
        let new = encode_laid_out(&cells, layout);
        before += old as u64;
        after += new.len() as u64;
        bytes.extend_from_slice(&new);
        let tmp = sidecar.with_extension("idx.reencode");
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, &sidecar)?;
        files += 1;
    }
    println!("{files} files' cells written again: {before} bytes before, {after} after");
    Ok(())
}
