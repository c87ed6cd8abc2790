//! `tracedb check DATA_DIR`: verifies every file of a data directory offline
//! (manifest, every live sorted file block by block, every WAL segment record
//! by record) and changes nothing. Prints one line per finding with its file
//! and offset; the exit status is 0 when no problem was found and 1 otherwise.
//! Notes (what a crash normally leaves and the next start tidies up) do not
//! make it fail.
//!
//! Run it on the directory of a stopped server: a running one may change
//! files while they are read, which can show up as spurious findings.

use std::path::Path;

use anyhow::Context;

/// Checks `data_dir` and prints the report; an error when problems were found.
pub fn run(data_dir: &Path) -> anyhow::Result<()> {
    let report = tracedb_lsm::check::check_data_dir(data_dir)
        .with_context(|| format!("checking {}", data_dir.display()))?;
    print!("{report}");
    anyhow::ensure!(
        report.is_clean(),
        "{} problem(s) found in {}",
        report.problems.len(),
        data_dir.display()
    );
    Ok(())
}
