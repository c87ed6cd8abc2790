//! Bytes the metrics cells add to the sidecars of a data directory's live
//! files, per stored span: the figure issue 43 bounds (≤ 2 B per span).
//!
//! ```text
//! cargo run --release -p tracedb-lsm --example cells_bytes -- DATA_DIR
//! ```
//!
//! Reads the manifest, each live local file's metadata and the end of its
//! sidecar; run it on a stopped server's directory, or a copy.

use std::path::PathBuf;

use tracedb_lsm::{index::cells::cells_len, layout, manifest, SsTable};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: cells_bytes DATA_DIR")?,
    );
    let (state, _) = manifest::read(&layout::manifest_path(&dir))?.ok_or("no manifest")?;
    let tables = layout::tables_dir(&dir);
    let (mut files, mut without, mut spans, mut cells, mut sidecars) = (0, 0, 0u64, 0u64, 0u64);
    for entry in state.files.values() {
        let table = layout::table_path(&tables, entry.id);
        spans += SsTable::open(&table)?.meta().span_count;
        let sidecar = layout::sidecar_path(&table);
        let bytes = std::fs::read(&sidecar)?;
        let n = cells_len(&sidecar, &bytes)? as u64;
        files += 1;
        without += u64::from(n == 0);
        cells += n;
        sidecars += bytes.len() as u64;
    }
    println!("{files} live files ({without} without cells), {spans} spans");
    println!(
        "cells {cells} bytes ({:.2} B per span) of sidecars' {sidecars} ({:.2} B per span)",
        cells as f64 / spans.max(1) as f64,
        sidecars as f64 / spans.max(1) as f64
    );
    Ok(())
}
