//! `tracedb tenant list` and `tracedb tenant delete`: the tenants' stores of
//! a data directory, offline (see `tracedb_lsm::stores`).

use std::path::Path;

use anyhow::Context;
use tracedb_proto::tenant::TenantId;

/// Prints each tenant with a store, its files and bytes.
pub fn list(data_dir: &Path) -> anyhow::Result<()> {
    let tenants = tracedb_lsm::list_tenants(data_dir)
        .with_context(|| format!("reading {}", data_dir.display()))?;
    if tenants.is_empty() {
        println!("no tenants' stores in {}", data_dir.display());
    }
    for tenant in tenants {
        let (files, bytes) = tracedb_lsm::tenant_usage(data_dir, &tenant)?;
        println!("{tenant}\t{files} files\t{bytes} bytes");
    }
    Ok(())
}

/// Deletes a tenant's store; prints what went.
pub fn delete(data_dir: &Path, tenant: &str, store: &super::ObjectStoreArgs) -> anyhow::Result<()> {
    let id = TenantId::new(tenant).with_context(|| format!("tenant {tenant:?}"))?;
    let bucket = store.bucket()?;
    let deleted =
        tracedb_lsm::delete_tenant_with(data_dir, &id, bucket.as_ref()).map_err(|e| match e {
            tracedb_lsm::Error::Locked(_) => {
                anyhow::anyhow!(
                    "{e}: stop the server first (it holds the tenant's store), then delete"
                )
            }
            e => anyhow::Error::from(e).context(format!("deleting tenant {tenant}")),
        })?;
    println!(
        "deleted tenant {tenant}: {} files, {} bytes, gone from disk",
        deleted.files, deleted.bytes
    );
    if let Some(bucket) = &bucket {
        println!(
            "deleted tenant {tenant}'s {} objects from {bucket}",
            deleted.objects
        );
    }
    Ok(())
}
