//! One store per tenant: each tenant's spans live in an [`Engine`] of their
//! own, in a folder of their own (`tenants/{tenant}/`, laid out as any data
//! directory), so a read of one tenant never opens another's files, and one
//! tenant's store is expired or deleted without touching the others'.
//!
//! The store at the top of the data directory is the tenant
//! [`SINGLE_TENANT`]: without tenancy it is the only one, so a data directory
//! written before tenancy existed opens as that tenant when tenancy is turned
//! on. All the stores share one memory budget
//! ([`EngineOptions::memory_budget`]).
//!
//! Every store found at start-up is opened then (its WAL replayed), so what
//! was acknowledged is readable at once; a tenant's store is created by its
//! first write. A tenant without a store reads as an empty one.
//!
//! With an object store ([`crate::cold`]), each tenant's store has a prefix
//! of its own (`PREFIX/tenants/{tenant}/`, with its own manifest and lease),
//! and `PREFIX/tenants.txt` names the tenants, one per line, so that a node
//! restored on an empty data directory opens (and restores) each of them
//! without listing the bucket.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use parking_lot::{Mutex, RwLock};
use tracedb_proto::tenant::{TenantId, SINGLE_TENANT};

use crate::{
    engine::EngineOptions,
    error::{Error, Result},
    layout, Engine,
};

/// The tenants' stores of one data directory.
pub struct Stores {
    root: PathBuf,
    /// Each tenant's store is opened with these, but for its folder.
    template: EngineOptions,
    tenancy: bool,
    engines: RwLock<BTreeMap<TenantId, Arc<Engine>>>,
    /// Held while a store is created or deleted.
    changing: Mutex<()>,
    /// Each tenant's retention (see [`Stores::set_retention`]).
    retention: RwLock<Retentions>,
}

/// The retention of every tenant: its own, or the default.
#[derive(Debug, Clone, Default)]
pub struct Retentions {
    /// `None`: keep everything.
    pub default: Option<Duration>,
    /// The tenants with a retention of their own.
    pub tenants: HashMap<TenantId, Option<Duration>>,
}

impl Retentions {
    pub fn of(&self, tenant: &TenantId) -> Option<Duration> {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }
}

impl Stores {
    /// Opens the store at `opts.data_dir` as [`SINGLE_TENANT`] and, with
    /// `tenancy`, every tenant's store under it. Without `tenancy`, a data
    /// directory that holds tenants' stores is refused: their spans would be
    /// silently left out of every answer.
    pub fn open(opts: EngineOptions, tenancy: bool) -> Result<Stores> {
        let root = opts.data_dir.clone();
        let mut found = tenant_dirs(&root)?;
        if let Some(cold) = &opts.cold {
            for tenant in bucket_tenants(&cold.bucket)? {
                if !found.contains(&tenant) {
                    tracing::info!(%tenant, "tenant named by the object store: restoring its store");
                    found.push(tenant);
                }
            }
            found.sort();
        }
        if !tenancy && !found.is_empty() {
            return Err(Error::TenantsWithoutTenancy {
                dir: layout::tenants_dir(&root),
                tenants: found.len(),
            });
        }
        clear_deleting(&root)?;
        let mut engines = BTreeMap::new();
        let single = TenantId::new(SINGLE_TENANT).expect("a valid tenant ID");
        engines.insert(single, Arc::new(Engine::open(opts.clone())?));
        let stores = Stores {
            root,
            retention: RwLock::new(Retentions {
                default: opts.retention,
                tenants: HashMap::new(),
            }),
            template: opts,
            tenancy,
            engines: RwLock::new(BTreeMap::new()),
            changing: Mutex::new(()),
        };
        for tenant in found {
            let engine = match Engine::open(stores.options_of(&tenant)) {
                Ok(engine) => engine,
                Err(e) => {
                    for engine in engines.values() {
                        let _ = engine.close();
                    }
                    return Err(e);
                }
            };
            tracing::info!(%tenant, "tenant store opened");
            engines.insert(tenant, Arc::new(engine));
        }
        *stores.engines.write() = engines;
        Ok(stores)
    }

    /// Whether stores other than [`SINGLE_TENANT`]'s may exist.
    pub fn tenancy(&self) -> bool {
        self.tenancy
    }

    /// The store of `tenant`, if it has one.
    pub fn get(&self, tenant: &TenantId) -> Option<Arc<Engine>> {
        self.engines.read().get(tenant).cloned()
    }

    /// The store of `tenant`, created if it has none (blocking: a new store
    /// is made on disk). Without tenancy only [`SINGLE_TENANT`] has one.
    pub fn get_or_create(&self, tenant: &TenantId) -> Result<Arc<Engine>> {
        if let Some(engine) = self.get(tenant) {
            return Ok(engine);
        }
        if !self.tenancy {
            return Err(Error::NoSuchTenant(format!(
                "{tenant} (tenancy is off: only {SINGLE_TENANT} has one)"
            )));
        }
        let _changing = self.changing.lock();
        if let Some(engine) = self.get(tenant) {
            return Ok(engine);
        }
        let tenants = layout::tenants_dir(&self.root);
        fs::create_dir_all(&tenants).map_err(|e| Error::io(&tenants, e))?;
        let engine = Arc::new(Engine::open(self.options_of(tenant))?);
        // The tenant's folder must survive a crash with the WAL in it.
        sync_dir(&tenants)?;
        if let Some(cold) = &self.template.cold {
            let mut named = bucket_tenants(&cold.bucket)?;
            if !named.contains(tenant) {
                named.push(tenant.clone());
                write_bucket_tenants(&cold.bucket, &named)?;
            }
        }
        tracing::info!(%tenant, "tenant store created");
        self.engines.write().insert(tenant.clone(), engine.clone());
        // A retention set while the store was being made applies to it too.
        engine.set_retention(self.retention.read().of(tenant));
        Ok(engine)
    }

    /// Every tenant's store, by tenant ID.
    pub fn all(&self) -> Vec<(TenantId, Arc<Engine>)> {
        self.engines
            .read()
            .iter()
            .map(|(t, e)| (t.clone(), e.clone()))
            .collect()
    }

    /// Flushes and closes every store; the first error is returned once all
    /// were tried.
    pub fn close(&self) -> Result<()> {
        let mut first = Ok(());
        for (tenant, engine) in self.all() {
            if let Err(e) = engine.close() {
                tracing::warn!(%tenant, error = %e, "closing a tenant's store");
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Sets each tenant's retention: every store's at once, and a new
    /// store's when it is made. A store whose retention changed applies it
    /// now (blocking: files past it are dropped), not at its next pass.
    pub fn set_retention(&self, retentions: Retentions) {
        let engines = self.all();
        *self.retention.write() = retentions.clone();
        for (tenant, engine) in engines {
            let period = retentions.of(&tenant);
            if engine.retention() != period {
                engine.set_retention(period);
                match engine.apply_retention() {
                    Ok(dropped) => tracing::info!(%tenant, ?period, dropped, "retention changed"),
                    Err(e) => tracing::warn!(%tenant, error = %e, "applying a new retention"),
                }
            }
        }
    }

    fn options_of(&self, tenant: &TenantId) -> EngineOptions {
        let mut opts = self.template.clone();
        opts.data_dir = layout::tenant_dir(&self.root, tenant.as_str());
        opts.retention = self.retention.read().of(tenant);
        if let Some(cold) = opts.cold.as_mut() {
            cold.bucket = tenant_bucket(&cold.bucket, tenant);
        }
        opts
    }
}

/// `tenant`'s prefix under the store's.
fn tenant_bucket(bucket: &crate::cold::Bucket, tenant: &TenantId) -> crate::cold::Bucket {
    bucket.child(&format!("{}/{}", layout::TENANTS_DIR, tenant.as_str()))
}

/// The tenants `PREFIX/tenants.txt` names.
fn bucket_tenants(bucket: &crate::cold::Bucket) -> Result<Vec<TenantId>> {
    let Some(bytes) = bucket.get(layout::OBJECT_TENANTS)? else {
        return Ok(Vec::new());
    };
    let text = String::from_utf8_lossy(&bytes);
    Ok(text
        .lines()
        .filter_map(|line| TenantId::new(line.trim()).ok())
        .collect())
}

fn write_bucket_tenants(bucket: &crate::cold::Bucket, tenants: &[TenantId]) -> Result<()> {
    let mut text = String::new();
    for t in tenants {
        text.push_str(t.as_str());
        text.push('\n');
    }
    bucket.put(layout::OBJECT_TENANTS, bytes::Bytes::from(text))?;
    Ok(())
}

/// Deletes `tenant`'s objects from the object store `bucket` (the store's
/// prefix) and takes it off `tenants.txt`; returns the objects deleted.
/// Lists the tenant's prefix: deleting is the one job that must find
/// every object, including those of uploads cut short.
pub fn delete_tenant_objects(bucket: &crate::cold::Bucket, tenant: &TenantId) -> Result<u64> {
    let named: Vec<TenantId> = bucket_tenants(bucket)?
        .into_iter()
        .filter(|t| t != tenant)
        .collect();
    let prefix = tenant_bucket(bucket, tenant);
    let mut deleted = 0;
    for (name, _) in prefix.list("")? {
        prefix.delete(&name)?;
        deleted += 1;
    }
    write_bucket_tenants(bucket, &named)?;
    Ok(deleted)
}

/// A tenant's store as [`delete_tenant`] removed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedTenant {
    /// Files removed.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Objects deleted from the object store.
    pub objects: u64,
}

/// The tenants with a store in the data directory `root` (not
/// [`SINGLE_TENANT`], whose store is the directory's top).
pub fn list_tenants(root: &std::path::Path) -> Result<Vec<TenantId>> {
    tenant_dirs(root)
}

/// Deletes `tenant`'s store from the data directory `root` of a stopped
/// server, and returns once its files are gone from disk (the folder is
/// moved to `tenants.deleting/`, removed, and both parents fsynced; a crash
/// half way is finished at the next start). A server using the directory
/// holds the store's lock: [`Error::Locked`].
pub fn delete_tenant(root: &std::path::Path, tenant: &TenantId) -> Result<DeletedTenant> {
    delete_tenant_with(root, tenant, None)
}

/// [`delete_tenant`], and with the object store `bucket` (the store's
/// prefix) the tenant's objects first ([`delete_tenant_objects`]): a tenant
/// gone from disk but not from the bucket would come back at a restore.
pub fn delete_tenant_with(
    root: &std::path::Path,
    tenant: &TenantId,
    bucket: Option<&crate::cold::Bucket>,
) -> Result<DeletedTenant> {
    if tenant.as_str() == SINGLE_TENANT {
        return Err(Error::NoSuchTenant(format!(
            "{SINGLE_TENANT} (its store is the data directory's top, not a tenant's folder)"
        )));
    }
    let dir = layout::tenant_dir(root, tenant.as_str());
    if !dir.is_dir() {
        if let Some(bucket) = bucket {
            if bucket_tenants(bucket)?.contains(tenant) {
                let objects = delete_tenant_objects(bucket, tenant)?;
                return Ok(DeletedTenant {
                    files: 0,
                    bytes: 0,
                    objects,
                });
            }
        }
        return Err(Error::NoSuchTenant(tenant.to_string()));
    }
    let (files, bytes, objects) = {
        // Held while the objects go and the folder moves: no server is
        // using it.
        let _lock = crate::engine::lock_data_dir(&dir)?;
        let objects = match bucket {
            Some(bucket) => delete_tenant_objects(bucket, tenant)?,
            None => 0,
        };
        let (files, bytes) = count_files(&dir)?;
        let counted = (files, bytes, objects);
        let deleting = layout::deleting_tenant_dir(root, tenant.as_str());
        let parent = deleting.parent().expect("a folder under the root");
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        if deleting.exists() {
            fs::remove_dir_all(&deleting).map_err(|e| Error::io(&deleting, e))?;
        }
        fs::rename(&dir, &deleting).map_err(|e| Error::io(&dir, e))?;
        sync_dir(&layout::tenants_dir(root))?;
        sync_dir(parent)?;
        counted
    };
    clear_deleting(root)?;
    Ok(DeletedTenant {
        files,
        bytes,
        objects,
    })
}

/// The files and bytes of `tenant`'s store in the data directory `root`.
pub fn tenant_usage(root: &std::path::Path, tenant: &TenantId) -> Result<(u64, u64)> {
    count_files(&layout::tenant_dir(root, tenant.as_str()))
}

/// Files and bytes under `dir`.
fn count_files(dir: &std::path::Path) -> Result<(u64, u64)> {
    let mut out = (0, 0);
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let meta = entry.metadata().map_err(|e| Error::io(entry.path(), e))?;
        if meta.is_dir() {
            let (f, b) = count_files(&entry.path())?;
            out = (out.0 + f, out.1 + b);
        } else {
            out = (out.0 + 1, out.1 + meta.len());
        }
    }
    Ok(out)
}

/// The tenants with a store under `root`'s `tenants/`.
fn tenant_dirs(root: &std::path::Path) -> Result<Vec<TenantId>> {
    let dir = layout::tenants_dir(root);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let name = entry.file_name();
        let tenant = name.to_str().and_then(|n| TenantId::new(n).ok());
        match tenant {
            Some(t) if entry.path().is_dir() && t.as_str() != SINGLE_TENANT => out.push(t),
            _ => tracing::warn!(
                path = %entry.path().display(),
                "not a tenant's store; left alone"
            ),
        }
    }
    out.sort();
    Ok(out)
}

/// Finishes deleting the stores a crash left in `tenants.deleting/`.
fn clear_deleting(root: &std::path::Path) -> Result<()> {
    let dir = root.join(layout::DELETING_TENANTS_DIR);
    match fs::remove_dir_all(&dir) {
        Ok(()) => sync_dir(root),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(&dir, e)),
    }
}

fn sync_dir(dir: &std::path::Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(t: &str) -> TenantId {
        TenantId::new(t).expect("valid")
    }

    #[test]
    fn each_tenant_has_a_store_of_its_own_made_by_its_first_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = EngineOptions::new(dir.path());
        let stores = Stores::open(opts.clone(), true).expect("open");
        assert!(stores.get(&id(SINGLE_TENANT)).is_some());
        assert!(stores.get(&id("a")).is_none());
        let a = stores.get_or_create(&id("a")).expect("create");
        assert!(Arc::ptr_eq(
            &a,
            &stores.get_or_create(&id("a")).expect("again")
        ));
        assert!(dir.path().join("tenants/a/wal").is_dir());
        // Not a tenant's store: left alone.
        fs::create_dir_all(dir.path().join("tenants/not a tenant")).expect("mkdir");
        stores.close().expect("close");
        drop((a, stores));

        let stores = Stores::open(opts.clone(), true).expect("reopen");
        let names: Vec<String> = stores.all().iter().map(|(t, _)| t.to_string()).collect();
        assert_eq!(names, ["a", SINGLE_TENANT]);
        stores.close().expect("close");
        drop(stores);

        // Deleted offline: gone from disk, and not while a server has it.
        let stores = Stores::open(opts.clone(), true).expect("reopen");
        assert!(matches!(
            delete_tenant(dir.path(), &id("a")),
            Err(Error::Locked(_))
        ));
        stores.close().expect("close");
        drop(stores);
        let deleted = delete_tenant(dir.path(), &id("a")).expect("deleted");
        assert!(deleted.files >= 2 && deleted.bytes > 0, "{deleted:?}");
        assert!(!dir.path().join("tenants/a").exists());
        assert!(!dir.path().join("tenants.deleting").exists());
        assert!(matches!(
            delete_tenant(dir.path(), &id("a")),
            Err(Error::NoSuchTenant(_))
        ));
        assert!(delete_tenant(dir.path(), &id(SINGLE_TENANT)).is_err());
        let _ = Stores::open(opts.clone(), true)
            .expect("reopen")
            .get_or_create(&id("a"))
            .expect("made again");

        // Without tenancy, the tenants' stores would go unread: refused.
        let e = Stores::open(opts.clone(), false).err().expect("refused");
        assert!(
            matches!(e, Error::TenantsWithoutTenancy { tenants: 1, .. }),
            "{e}"
        );
        fs::remove_dir_all(dir.path().join("tenants/a")).expect("rm");
        let stores = Stores::open(opts, false).expect("no tenants left");
        assert!(matches!(
            stores.get_or_create(&id("a")),
            Err(Error::NoSuchTenant(_))
        ));
        stores.close().expect("close");
    }
}
