//! Writes the metrics cells of a data directory's live files again, in
//! this build's layout: for an A/B of two cell layouts on the very same
//! spans (docs/BENCHMARKS.md, "A week of traffic").
//!
//! ```text
//! cargo run --release -p tracedb-lsm --example cells_reencode -- DATA_DIR
//! ```
//!
//! Run it on a stopped server's directory, or a copy: each sidecar's cells
//! are read, checked, and written back in place of the old ones (the
//! sidecar written to a temporary file, then renamed over it).

use std::path::PathBuf;

use tracedb_lsm::{
    index::cells::{cells_len, decode, encode},
    layout, manifest,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: cells_reencode DATA_DIR")?,
    );
    let (state, _) = manifest::read(&layout::manifest_path(&dir))?.ok_or("no manifest")?;
    let tables = layout::tables_dir(&dir);
    let (mut files, mut before, mut after) = (0, 0u64, 0u64);
    for entry in state.files.values() {
        let sidecar = layout::sidecar_path(&layout::table_path(&tables, entry.id));
        let mut bytes = std::fs::read(&sidecar)?;
        let Some(cells) = decode(&sidecar, &bytes)? else {
            continue;
        };
        let old = cells_len(&sidecar, &bytes)?;
        bytes.truncate(bytes.len() - old);
        let new = encode(&cells);
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
