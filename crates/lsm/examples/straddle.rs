//! How many traces have parts in more than one live file of a data
//! directory, by level: the figure decision 0043's pre-aggregated metrics
//! index depends on (per-file counts are exact only for spans no other file
//! repeats, and only traces in two files can repeat a span).
//!
//! ```text
//! cargo run --release -p tracedb-lsm --example straddle -- DATA_DIR
//! ```
//!
//! Reads the manifest and every live local file (each span decoded once);
//! run it on a stopped server's directory, or a copy.

use std::{collections::HashMap, path::PathBuf};

use tracedb_lsm::{layout, manifest, SsTable};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: straddle DATA_DIR")?);
    let (state, _) = manifest::read(&layout::manifest_path(&dir))?.ok_or("no manifest")?;
    // trace → (files holding it, bitmask of the levels they are at)
    let mut traces: HashMap<u128, (u16, u32)> = HashMap::new();
    let mut per_level: Vec<(u64, u64)> = Vec::new(); // (files, spans)
    for entry in state.files.values() {
        let table = SsTable::open(&layout::table_path(&layout::tables_dir(&dir), entry.id))?;
        let level = entry.level as usize;
        if per_level.len() <= level {
            per_level.resize(level + 1, (0, 0));
        }
        per_level[level].0 += 1;
        let mut last = None;
        for span in table.iter() {
            let span = span?;
            per_level[level].1 += 1;
            let id = u128::from_be_bytes(span.trace_id.0);
            if last != Some(id) {
                let e = traces.entry(id).or_default();
                e.0 += 1;
                e.1 |= 1 << level.min(31);
                last = Some(id);
            }
        }
    }
    for (level, (files, spans)) in per_level.iter().enumerate() {
        println!("level {level}: {files} files, {spans} spans");
    }
    let total = traces.len() as f64;
    let mut by_files: HashMap<u16, u64> = HashMap::new();
    for (files, _) in traces.values() {
        *by_files.entry(*files).or_default() += 1;
    }
    let mut counts: Vec<_> = by_files.into_iter().collect();
    counts.sort();
    println!("{} traces", traces.len());
    for (files, n) in counts {
        println!(
            "  in {files} file(s): {n} ({:.2}%)",
            n as f64 * 100.0 / total
        );
    }
    let across_levels = traces.values().filter(|(_, l)| l.count_ones() > 1).count();
    println!(
        "  in files of more than one level: {across_levels} ({:.2}%)",
        across_levels as f64 * 100.0 / total
    );
    Ok(())
}
