//! Bytes the metrics cells add to the sidecars of a data directory's live
//! files, per stored span: the figure issue 43 bounds (≤ 2 B per span).
//!
//! ```text
//! cargo run --release -p tracedb-lsm --example cells_bytes -- DATA_DIR
//! ```
//!
//! Reads the manifest, each live local file's metadata and the end of its
//! sidecar; run it on a stopped server's directory, or a copy. Prints the
//! total, then the bytes of each family's keys and tables (and of each
//! length's table) and how the files hold them (alone, or a run's summed with one file).

use std::path::PathBuf;

use tracedb_lsm::{
    index::cells::{cells_len, CellsFile, Counts, Family, Reading, BUCKET_SECONDS},
    layout, manifest, SsTable,
};

const FAMILIES: [Family; 4] = [
    Family::Named,
    Family::Unnamed,
    Family::Attr,
    Family::AnyService,
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: cells_bytes DATA_DIR")?,
    );
    let (state, _) = manifest::read(&layout::manifest_path(&dir))?.ok_or("no manifest")?;
    let tables = layout::tables_dir(&dir);
    let (mut files, mut without, mut spans, mut cells, mut sidecars) = (0, 0, 0u64, 0u64, 0u64);
    let mut family_bytes = [0u64; 4];
    // Per family, the bytes of each length's table.
    let mut table_bytes = [[0u64; BUCKET_SECONDS.len()]; 4];
    let (mut own, mut holders, mut members, mut in_runs) = (0, 0, 0, 0);
    let mut sections = 0;
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
        if let Some(c) = CellsFile::open(&table)? {
            if std::env::var_os("CELLS_FILES").is_some() {
                // Every part's durations, some parts' (of roots), or none.
                let timed = |family| -> Result<&str, Box<dyn std::error::Error>> {
                    let parts = c
                        .table(family, 1, Reading::whole(), None)?
                        .unwrap_or_default();
                    let timed = parts.iter().filter(|t| t.has_durations).count();
                    Ok(match timed {
                        0 => "none",
                        n if n == parts.len() => "all",
                        _ => "some",
                    })
                };
                println!(
                    "file {} level {} partition {} {:?}: seconds cells named {} (durations: {}) unnamed {} attribute {} (durations: {}) any-service {} (durations: {})",
                    entry.id,
                    entry.level,
                    entry.partition,
                    c.counts()?,
                    c.cell_count(Family::Named, 1),
                    timed(Family::Named)?,
                    c.cell_count(Family::Unnamed, 1),
                    c.cell_count(Family::Attr, 1),
                    timed(Family::Attr)?,
                    c.cell_count(Family::AnyService, 1),
                    timed(Family::AnyService)?
                );
            }
            sections += c.sections();
            for (i, f) in FAMILIES.into_iter().enumerate() {
                family_bytes[i] += c.stored_bytes(f);
                for (j, &seconds) in BUCKET_SECONDS.iter().enumerate() {
                    table_bytes[i][j] += c.table_bytes(f, seconds);
                }
            }
            match c.counts()? {
                Counts::Own => own += 1,
                Counts::Run { members: m, .. } => {
                    holders += 1;
                    members += m.len();
                }
                Counts::InRun { .. } => in_runs += 1,
            }
        }
    }
    let per_span = |b: u64| b as f64 / spans.max(1) as f64;
    println!("{files} live files ({without} without cells), {spans} spans");
    println!(
        "cells {cells} bytes ({:.2} B per span) of sidecars' {sidecars} ({:.2} B per span)",
        per_span(cells),
        per_span(sidecars)
    );
    println!(
        "{sections} sections in the files' indexes ({} a file)",
        sections as u64 / (files - without).max(1)
    );
    println!(
        "named {:.2}, unnamed {:.2}, attribute {:.2}, any-service {:.2} B per span",
        per_span(family_bytes[0]),
        per_span(family_bytes[1]),
        per_span(family_bytes[2]),
        per_span(family_bytes[3])
    );
    for (i, family) in ["named", "unnamed", "attribute", "any-service"]
        .into_iter()
        .enumerate()
    {
        let tables: Vec<String> = BUCKET_SECONDS
            .iter()
            .zip(table_bytes[i])
            .map(|(seconds, b)| format!("{seconds} s {:.2}", per_span(b)))
            .collect();
        println!("  {family} tables: {} B per span", tables.join(", "));
    }
    println!(
        "{own} files count their own spans; {holders} hold the sums of {members} files of runs; \
         {in_runs} are counted by another"
    );
    Ok(())
}
