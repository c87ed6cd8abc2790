//! Per-tenant limits from the overrides file (`--overrides PATH`, TOML),
//! read at start-up and again whenever it changes while the server runs:
//!
//! ```toml
//! [defaults]                   # every tenant without a section of its own
//! rate_spans = 50000           # spans a second (0 or absent: no limit)
//! rate_bytes = "32MiB"         # bytes of decoded export requests a second
//! memory_share = 0.5           # of the memory budget, for unflushed spans
//! max_trace_bytes = "5MiB"     # the largest trace (0 or absent: no limit)
//! retention = "7d"             # absent: --retention
//!
//! [tenants.team-a]             # a tenant's own, over the defaults
//! rate_spans = 200000
//! retention = "30d"
//! ```
//!
//! A file that cannot be read, parsed or checked stops the server at
//! start-up with the reason; while serving, it keeps the limits in force,
//! logs why, and counts the failure (`tracedb_overrides_reload_failures_total`).
//! The rates and the memory share are enforced by ingest
//! (`tracedb_ingest::tenants`); retention by each tenant's store.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::{Duration, SystemTime},
};

use serde::Deserialize;
use tracedb_ingest::{
    tenants::{LimitsSource, TenantLimits},
    Ingest,
};
use tracedb_lsm::{Retentions, Stores};
use tracedb_proto::tenant::TenantId;

use crate::config::{Age, ByteSize};

/// How often the file is looked at for a change.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// One section of the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    rate_spans: Option<u64>,
    rate_bytes: Option<ByteSize>,
    memory_share: Option<f64>,
    max_trace_bytes: Option<ByteSize>,
    retention: Option<Age>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    defaults: Section,
    #[serde(default)]
    tenants: BTreeMap<String, Section>,
}

/// The limits the file sets, checked.
#[derive(Debug, Clone)]
pub struct Overrides {
    defaults: Section,
    tenants: HashMap<TenantId, Section>,
    /// `--retention`: for tenants the file gives none.
    retention: Option<Duration>,
}

impl Overrides {
    /// No file: every tenant unlimited, kept for `retention`.
    pub fn none(retention: Option<Duration>) -> Self {
        Overrides {
            defaults: Section::default(),
            tenants: HashMap::new(),
            retention,
        }
    }

    /// The file at `path`, or every reason it is refused.
    pub fn load(path: &Path, retention: Option<Duration>) -> Result<Overrides, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the overrides file {}: {e}", path.display()))?;
        Self::parse(&text, retention).map_err(|e| format!("overrides file {}: {e}", path.display()))
    }

    fn parse(text: &str, retention: Option<Duration>) -> Result<Overrides, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut problems = Vec::new();
        check(&file.defaults, "[defaults]", &mut problems);
        let mut tenants = HashMap::new();
        for (name, section) in file.tenants {
            match TenantId::new(&name) {
                Ok(id) => {
                    check(&section, &format!("[tenants.{name}]"), &mut problems);
                    tenants.insert(id, section);
                }
                Err(e) => problems.push(format!("[tenants.{name}]: {e}")),
            }
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(Overrides {
            defaults: file.defaults,
            tenants,
            retention,
        })
    }

    /// A setting of `tenant`: its own, else the default's.
    fn get<T: Copy>(&self, tenant: &TenantId, f: impl Fn(&Section) -> Option<T>) -> Option<T> {
        self.tenants
            .get(tenant)
            .and_then(&f)
            .or_else(|| f(&self.defaults))
    }

    /// Every tenant's retention.
    pub fn retentions(&self) -> Retentions {
        let default = self.defaults.retention.map_or(self.retention, |a| a.0);
        Retentions {
            default,
            tenants: self
                .tenants
                .iter()
                .filter_map(|(t, s)| Some((t.clone(), s.retention?.0)))
                .collect(),
        }
    }
}

fn check(section: &Section, name: &str, problems: &mut Vec<String>) {
    if let Some(share) = section.memory_share {
        if !(share > 0.0 && share <= 1.0) {
            problems.push(format!(
                "{name}: memory_share is {share}: give a fraction above 0, at most 1"
            ));
        }
    }
    if let Some(Age(Some(r))) = section.retention {
        if r < Duration::from_secs(60) {
            problems.push(format!(
                "{name}: retention is {}: keep at least 1m, or say \"off\" to keep everything",
                Age(Some(r))
            ));
        }
    }
}

impl LimitsSource for Overrides {
    fn limits(&self, tenant: &TenantId) -> TenantLimits {
        TenantLimits {
            spans_per_sec: self.get(tenant, |s| s.rate_spans).unwrap_or(0),
            bytes_per_sec: self.get(tenant, |s| s.rate_bytes.map(|b| b.0)).unwrap_or(0),
            memory_share: self.get(tenant, |s| s.memory_share).unwrap_or(1.0),
            max_trace_bytes: self
                .get(tenant, |s| s.max_trace_bytes.map(|b| b.0))
                .unwrap_or(0),
        }
    }
}

/// The file, watched: applies what it says to ingest and the stores.
pub struct Watch {
    path: PathBuf,
    retention: Option<Duration>,
    /// The file's modification time and length when last read.
    seen: Mutex<Option<(SystemTime, u64)>>,
    failures: AtomicU64,
}

impl Watch {
    /// Reads the file (an error stops the server) and applies it.
    pub fn start(
        path: &Path,
        retention: Option<Duration>,
        ingest: &Ingest,
        stores: &Stores,
    ) -> Result<Arc<Watch>, String> {
        let watch = Arc::new(Watch {
            path: path.to_owned(),
            retention,
            seen: Mutex::new(stamp(path)),
            failures: AtomicU64::new(0),
        });
        let overrides = Overrides::load(path, retention)?;
        apply(&overrides, ingest, stores);
        tracing::info!(path = %path.display(), tenants = overrides.tenants.len(), "overrides read");
        Ok(watch)
    }

    /// Reads the file again if it changed; a bad one keeps what is in force.
    pub fn reload(&self, ingest: &Ingest, stores: &Stores) {
        let now = stamp(&self.path);
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if *seen == now {
                return;
            }
            *seen = now;
        }
        match Overrides::load(&self.path, self.retention) {
            Ok(overrides) => {
                apply(&overrides, ingest, stores);
                tracing::info!(path = %self.path.display(), tenants = overrides.tenants.len(), "overrides read again");
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "overrides file refused; the limits in force are kept");
            }
        }
    }

    /// Reloads that failed since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

fn apply(overrides: &Overrides, ingest: &Ingest, stores: &Stores) {
    stores.set_retention(overrides.retentions());
    ingest.set_limits(Arc::new(overrides.clone()));
}

/// What tells a change of the file: its modification time and length.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(t: &str) -> TenantId {
        TenantId::new(t).expect("valid")
    }

    #[test]
    fn a_tenants_section_overrides_the_defaults_setting_by_setting() {
        let o = Overrides::parse(
            r#"
            [defaults]
            rate_spans = 100
            memory_share = 0.5
            [tenants.team-a]
            rate_spans = 1000
            rate_bytes = "1MiB"
            retention = "30d"
            "#,
            Some(Duration::from_secs(7 * 86_400)),
        )
        .expect("valid");
        let a = o.limits(&id("team-a"));
        assert_eq!(
            (a.spans_per_sec, a.bytes_per_sec, a.memory_share),
            (1000, 1 << 20, 0.5)
        );
        let b = o.limits(&id("team-b"));
        assert_eq!(
            (b.spans_per_sec, b.bytes_per_sec, b.memory_share),
            (100, 0, 0.5)
        );
        let r = o.retentions();
        assert_eq!(r.of(&id("team-a")), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(r.of(&id("team-b")), Some(Duration::from_secs(7 * 86_400)));
        let none = Overrides::none(None);
        assert_eq!(none.limits(&id("x")), TenantLimits::default());
    }

    #[test]
    fn a_bad_file_says_every_reason() {
        for (text, reason) in [
            ("[defaults]\nmemory_share = 1.5", "memory_share is 1.5"),
            ("[tenants.\"a/b\"]\nrate_spans = 1", "'/'"),
            ("[tenants.a]\nretention = \"10s\"", "retention is 10s"),
            ("[tenants.a]\nrate = 1", "unknown field"),
            ("[defaults", "expected"),
        ] {
            let e = Overrides::parse(text, None).expect_err(text);
            assert!(e.contains(reason), "{text}: {e}");
        }
    }
}
