//! The export path both protocols share: admit, scan, store, count.
//!
//! [`Ingest`] is what the gRPC handler ([`crate::service`]) and the HTTP handler
//! ([`crate::http`]) call once they hold a protobuf request body. It knows the
//! server's phase (starting, serving, shutting down), makes the server's
//! [`MemoryBudget`] (the storage engine counts its buffered spans in the same
//! one: [`Ingest::budget`]) and asks it to admit each request, owns the
//! [`IngestMetrics`], and runs
//! [`scan_export_request`] and [`Engine::write`] in the same way for every
//! request, so a request gets the same answer whichever way it came.
//!
//! The phase only ever moves forward: `Starting` until the storage engine is
//! open, `Serving`, then `ShuttingDown` from the moment a shutdown signal
//! arrives. Requests admitted before shutdown finish normally; later ones are
//! told to retry elsewhere or later.

use std::{
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc,
    },
    sync::{PoisonError, RwLock},
    time::Instant,
};

use bytes::Bytes;
use tracedb_lsm::{
    budget::{MemoryBudget, Permit},
    Engine, Stores,
};
use tracedb_proto::{
    start::StartCell,
    tenant::{InvalidTenant, TenantId, Tenants, SINGLE_TENANT},
};

use crate::{
    error::Error,
    metrics::{IngestMetrics, Protocol},
    scan::{scan_export_request, ScanOutcome, TimeRules},
    tenants::{LimitsSource, RateLimiter, TenantCounters, TenantLimits, TraceSizes, Unlimited},
};

/// Typical encoded size of a span, to size the output vector in one allocation.
const TYPICAL_SPAN_BYTES: usize = 128;

/// Where the server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Starting = 0,
    Serving = 1,
    ShuttingDown = 2,
}

/// Limits of the export path.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Largest request body, compressed or not, in bytes.
    pub max_message_bytes: usize,
    /// Budget for in-flight request bodies plus buffered spans, in bytes
    /// ([`MemoryBudget`]).
    pub max_memory: usize,
    /// The whole process's memory limit, which the budget narrows to keep
    /// the sampled resident memory within; 0 for none (see
    /// [`MemoryBudget::with_process_limit`]). The budget never narrows below
    /// [`IngestOptions::budget_floor`].
    pub process_memory: usize,
}

impl IngestOptions {
    /// The least the budget narrows to, however much the rest of the process
    /// holds: a quarter of `max_memory`, or two largest requests if more, so
    /// ingest goes on and a largest request stays admissible.
    pub fn budget_floor(&self) -> usize {
        (self.max_memory / 4).max(self.max_message_bytes.saturating_mul(2))
    }
}

/// The shared export path.
pub struct Ingest {
    options: IngestOptions,
    phase: AtomicU8,
    /// Set once, when the stores have opened; `Starting` until then.
    stores: StartCell<Arc<Stores>>,
    budget: Arc<MemoryBudget>,
    metrics: IngestMetrics,
    /// Each tenant's limits, asked on every export.
    limits: RwLock<Arc<dyn LimitsSource>>,
    rates: RateLimiter,
    trace_sizes: TraceSizes,
    tenants: TenantCounters,
}

impl Ingest {
    /// An export path that refuses every request until [`Ingest::start`].
    pub fn new(options: IngestOptions) -> Arc<Self> {
        Arc::new(Ingest {
            budget: MemoryBudget::with_process_limit(
                options.max_memory,
                options.process_memory,
                options.budget_floor(),
            ),
            options,
            phase: AtomicU8::new(Phase::Starting as u8),
            stores: StartCell::new(),
            metrics: IngestMetrics::default(),
            limits: RwLock::new(Arc::new(Unlimited)),
            rates: RateLimiter::default(),
            trace_sizes: TraceSizes::default(),
            tenants: TenantCounters::default(),
        })
    }

    /// Starts taking exports into the tenants' `stores`.
    pub fn start(&self, stores: Arc<Stores>) {
        if self.stores.set(stores) {
            let _ = self.phase.compare_exchange(
                Phase::Starting as u8,
                Phase::Serving as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Refuses new exports from now on; admitted ones finish.
    pub fn shut_down(&self) {
        self.phase
            .store(Phase::ShuttingDown as u8, Ordering::Release);
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Starting,
            1 => Phase::Serving,
            _ => Phase::ShuttingDown,
        }
    }

    pub fn options(&self) -> &IngestOptions {
        &self.options
    }

    /// The memory budget requests are admitted against; give the storage
    /// engine the same one (`EngineOptions::memory_budget`), so its buffered
    /// spans are the budget's buffered bytes.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    pub fn metrics(&self) -> &IngestMetrics {
        &self.metrics
    }

    /// Each tenant's counters.
    pub fn tenant_counters(&self) -> &TenantCounters {
        &self.tenants
    }

    /// Where each tenant's limits come from from now on.
    pub fn set_limits(&self, limits: Arc<dyn LimitsSource>) {
        *self.limits.write().unwrap_or_else(PoisonError::into_inner) = limits;
    }

    fn limits_of(&self, tenant: &TenantId) -> TenantLimits {
        self.limits
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .limits(tenant)
    }

    /// Admits a request of `bytes` (0 when its size is not known yet) for
    /// `tenant`: checks the phase and the back-pressure of the tenant's
    /// store, and asks the memory budget for the bytes.
    pub fn admit(&self, tenant: &TenantId, bytes: usize) -> Result<Permit, Error> {
        // Storage pushing back refuses the request before its body is read.
        if let Some(engine) = self.serving_stores()?.get(tenant) {
            engine.check_pressure().map_err(Error::Storage)?;
            // So does the tenant's store holding its share of the budget.
            let share = self.limits_of(tenant).memory_share;
            if share < 1.0 {
                let cap = (self.budget.limit() as f64 * share) as usize;
                let held = engine.buffered_bytes();
                if held.saturating_add(bytes) > cap {
                    return Err(Error::TenantMemory {
                        tenant: tenant.to_string(),
                        held,
                        share: cap,
                    });
                }
            }
        }
        if bytes > self.options.max_message_bytes {
            return Err(Error::TooLarge {
                limit: self.options.max_message_bytes,
            });
        }
        Ok(self.budget.acquire(bytes)?)
    }

    fn serving_stores(&self) -> Result<&Arc<Stores>, Error> {
        match self.phase() {
            Phase::Starting => Err(Error::Starting),
            Phase::ShuttingDown => Err(Error::ShuttingDown),
            Phase::Serving => Ok(self.stores.get()?),
        }
    }

    /// The store of `tenant`, made on its first write.
    async fn store_of(&self, tenant: &TenantId) -> Result<Arc<Engine>, Error> {
        let stores = self.serving_stores()?;
        if let Some(engine) = stores.get(tenant) {
            return Ok(engine);
        }
        let (stores, tenant) = (stores.clone(), tenant.clone());
        match tokio::task::spawn_blocking(move || stores.get_or_create(&tenant)).await {
            Ok(made) => made.map_err(Error::Storage),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is stopping.
            Err(_) => Err(Error::ShuttingDown),
        }
    }

    /// Scans an encoded `ExportTraceServiceRequest` and stores its valid spans
    /// in `tenant`'s store. Returns once they are durable; `permit` holds the
    /// body's bytes meanwhile.
    pub async fn store(
        &self,
        tenant: &TenantId,
        body: Bytes,
        permit: Permit,
    ) -> Result<ScanOutcome, Error> {
        self.tenants.record_bytes(tenant, body.len());
        let engine = self.store_of(tenant).await?;
        let mut spans = Vec::with_capacity(body.len() / TYPICAL_SPAN_BYTES + 1);
        let rules = TimeRules::at(engine.now_unix_nano(), engine.expire_before());
        let mut outcome = scan_export_request(&body, &mut spans, rules)?;
        let limits = self.limits_of(tenant);
        let taken = self.rates.take(
            tenant,
            &limits,
            spans.len() as u64,
            body.len() as u64,
            Instant::now(),
        );
        if let Err((rate, limit, retry_after)) = taken {
            return Err(Error::TenantRate {
                tenant: tenant.to_string(),
                unit: rate.unit(),
                limit,
                retry_after,
            });
        }
        if limits.max_trace_bytes > 0 {
            let max = limits.max_trace_bytes;
            let dropped = self
                .trace_sizes
                .admit(tenant, max, &mut spans, Instant::now());
            if dropped > 0 {
                outcome.leave_out_too_large(dropped, max);
            }
            if spans.is_empty() {
                drop(permit);
                return Ok(outcome);
            }
        }
        let started = Instant::now();
        if let Err(e) = engine.write(spans).await {
            if let tracedb_lsm::Error::Backpressure { .. } = e {
                // Flushing or compaction is behind: the client retries later.
                tracing::debug!(error = %e, spans = outcome.accepted, "export refused: storage pushing back");
            } else {
                self.metrics.record_storage_failure(outcome.accepted);
                tracing::warn!(error = %e, spans = outcome.accepted, "export not stored");
            }
            return Err(Error::Storage(e));
        }
        self.metrics.record_storage_write(started.elapsed());
        // The spans now live in the memtable, counted as buffered by the
        // engine's reservation: the body's in-flight bytes go back.
        drop(permit);
        Ok(outcome)
    }

    /// Records a finished request for `tenant` (when it was known) in the
    /// metrics and the log.
    pub fn finish(
        &self,
        protocol: Protocol,
        tenant: Option<&TenantId>,
        result: &Result<ScanOutcome, Error>,
        started: Instant,
    ) {
        self.metrics.record(protocol, result, started.elapsed());
        if let Some(tenant) = tenant {
            match result {
                Ok(o) => self.tenants.record(tenant, o.accepted, o.rejected, false),
                Err(_) => self.tenants.record(tenant, 0, 0, true),
            }
        }
        match result {
            Ok(o) if o.rejected > 0 => tracing::debug!(
                protocol = protocol.label(),
                accepted = o.accepted,
                rejected = o.rejected,
                reasons = %o.rejection_message,
                "export partially accepted"
            ),
            Ok(o) => tracing::trace!(
                protocol = protocol.label(),
                accepted = o.accepted,
                "export stored"
            ),
            Err(e @ (Error::Overloaded { .. } | Error::Starting | Error::ShuttingDown)) => {
                tracing::debug!(protocol = protocol.label(), error = %e, "export refused")
            }
            Err(e) => tracing::info!(protocol = protocol.label(), error = %e, "export refused"),
        }
    }
}

/// The tenant a request writes to: the one its [`Tenants`] extension names
/// (`tenants`)
/// (set by the server's tenancy layer), or [`SINGLE_TENANT`] without one (no
/// tenancy). A request naming several tenants is refused.
pub fn tenant_of(tenants: Option<&Tenants>) -> Result<TenantId, InvalidTenant> {
    match tenants {
        Some(tenants) => Ok(tenants.single()?.clone()),
        None => Ok(TenantId::new(SINGLE_TENANT).expect("a valid tenant ID")),
    }
}
