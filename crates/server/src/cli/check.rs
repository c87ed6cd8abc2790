//! `tracedb check DATA_DIR`: verifies every file of a data directory offline
//! (manifest, every live sorted file block by block, every WAL segment record
//! by record) and changes nothing. Prints one line per finding with its file
//! and offset; the exit status is 0 when no problem was found and 1 otherwise.
//! Notes (what a crash normally leaves and the next start tidies up) do not
//! make it fail.
//!
//! The tenants' stores in it (`tenants/NAME/`) are checked the same way.
//! With `--object-store`, each remote file's object is asked for its size
//! and footer, which must match the local head (its blocks are not
//! downloaded).
//!
//! Run it on the directory of a stopped server: a running one may change
//! files while they are read, which can show up as spurious findings.

use std::path::Path;

use anyhow::Context;

/// Checks `data_dir` and prints the report; an error when problems were found.
/// With tenants' stores in it (`--tenancy`), each of them too, after a line
/// naming the tenant.
pub fn run(data_dir: &Path, store: &super::ObjectStoreArgs) -> anyhow::Result<()> {
    let bucket = store.bucket()?;
    let report = tracedb_lsm::check::check_data_dir_with(data_dir, bucket.as_ref())
        .with_context(|| format!("checking {}", data_dir.display()))?;
    print!("{report}");
    let mut problems = report.problems.len();
    let tenants = tracedb_lsm::list_tenants(data_dir)
        .with_context(|| format!("listing the tenants of {}", data_dir.display()))?;
    for tenant in tenants {
        let dir = tracedb_lsm::layout::tenant_dir(data_dir, tenant.as_str());
        let tenant_bucket = bucket
            .as_ref()
            .map(|b| b.child(&format!("tenants/{}", tenant.as_str())));
        let report = tracedb_lsm::check::check_data_dir_with(&dir, tenant_bucket.as_ref())
            .with_context(|| format!("checking tenant {tenant} ({})", dir.display()))?;
        println!("tenant {tenant}:");
        print!("{report}");
        problems += report.problems.len();
    }
    anyhow::ensure!(
        problems == 0,
        "{problems} problem(s) found in {}",
        data_dir.display()
    );
    Ok(())
}
