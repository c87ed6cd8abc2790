//! The operator's HTTP endpoints beside OTLP/HTTP: `GET /metrics` and `GET /ready`.
//!
//! `/metrics` is Prometheus' text format: the ingest counters (spans accepted
//! and rejected by reason, requests by outcome, latency histograms), the memory
//! budget, and the storage engine's own counters, read when scraped.
//! `/ready` is 200 while the server takes exports and 503 while it starts up or
//! shuts down, for load balancers and orchestrators.

use std::{fmt, sync::Arc};

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::IntoResponse,
    routing::get,
    Router,
};
use tracedb_ingest::{
    exposition::{self, family, single, DescriptorEncoder, Kind, Labels},
    Ingest, Phase,
};
use tracedb_lsm::Stores;
use tracedb_proto::start::StartCell;

use crate::{memory::Governor, overrides::Watch, tls::HandshakeLog};

/// What the endpoints read.
#[derive(Clone)]
pub struct Ops {
    pub ingest: Arc<Ingest>,
    /// Set once the stores have opened: until then `/metrics` has no
    /// storage counters. With tenancy on, each has a `tenant` label.
    pub stores: StartCell<Arc<Stores>>,
    /// The overrides file, if one is watched (set once the stores are open).
    pub overrides: StartCell<Option<Arc<Watch>>>,
    /// The process's memory against `--max-memory`.
    pub memory: Arc<Governor>,
    /// The listeners' failed TLS handshakes; empty without TLS.
    pub tls_handshakes: Vec<Arc<HandshakeLog>>,
}

/// `/metrics` and `/ready`.
pub fn router(ops: Ops) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/ready", get(ready))
        .with_state(ops)
}

async fn ready(State(ops): State<Ops>) -> impl IntoResponse {
    match ops.ingest.phase() {
        Phase::Serving => (StatusCode::OK, "ready\n"),
        Phase::Starting => (StatusCode::SERVICE_UNAVAILABLE, "starting up\n"),
        Phase::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n"),
    }
}

async fn metrics(State(ops): State<Ops>) -> impl IntoResponse {
    let text = render(&ops);
    ([(header::CONTENT_TYPE, exposition::CONTENT_TYPE)], text)
}

/// The storage engine's levels, compaction, retention, lookup and WAL latency
/// counters.
fn write_lsm(out: &mut DescriptorEncoder<'_>, engines: &[Sampled]) -> fmt::Result {
    family(
        out,
        Kind::Gauge,
        "tracedb_level_files",
        "Sorted span files per level (0 = flush outputs).",
        per_level(engines, |stats| stats.files as u64),
    )?;
    family(
        out,
        Kind::Gauge,
        "tracedb_level_runs",
        "Sorted runs per level, summed over time partitions: the most files of the level a lookup probes.",
        per_level(engines, |stats| stats.runs as u64),
    )?;
    family(
        out,
        Kind::Gauge,
        "tracedb_level_bytes",
        "Bytes of sorted span files per level.",
        per_level(engines, |stats| stats.bytes),
    )?;
    let counters: [Family; 17] = [
        (
            "tracedb_compactions_total",
            "Compactions that merged files.",
            |e| e.stats.compactions,
        ),
        (
            "tracedb_compaction_moves_total",
            "Files moved to a deeper level without rewriting.",
            |e| e.stats.compaction_moves,
        ),
        (
            "tracedb_compaction_errors_total",
            "Failed compactions (retried).",
            |e| e.stats.compaction_errors,
        ),
        (
            "tracedb_merges_run_first_total",
            "Merges of upper levels run between the traces of a merge of deeper levels.",
            |e| e.stats.merges_run_first,
        ),
        (
            "tracedb_merges_waited_for_memory_total",
            "Merges that waited for flushes to leave room for the memory they expect to need before they started.",
            |e| e.stats.merges_waited_for_memory,
        ),
        (
            "tracedb_compaction_read_bytes_total",
            "Bytes compaction read.",
            |e| e.stats.compaction_bytes_read,
        ),
        (
            "tracedb_compaction_written_bytes_total",
            "Bytes compaction wrote (with flushed bytes: write amplification).",
            |e| e.stats.compaction_bytes_written,
        ),
        (
            "tracedb_flush_written_bytes_total",
            "Bytes flushes wrote to sorted files.",
            |e| e.stats.flush_bytes_written,
        ),
        (
            "tracedb_compaction_duplicates_total",
            "Duplicate spans (same trace and span ID) compaction dropped.",
            |e| e.stats.compaction_duplicates,
        ),
        (
            "tracedb_compaction_index_parts_reused_total",
            "Traces whose search-index summary compaction copied from an input file's sidecar instead of scanning their spans.",
            |e| e.stats.compaction_index_parts_reused,
        ),
        (
            "tracedb_compaction_cells_summed_total",
            "Merges whose metrics cells were added up from their inputs' cells instead of counted from their spans.",
            |e| e.stats.compaction_cells_summed,
        ),
        (
            "tracedb_retention_dropped_files_total",
            "Sorted files dropped by retention.",
            |e| e.stats.retention_files_dropped,
        ),
        (
            "tracedb_retention_dropped_bytes_total",
            "Bytes dropped by retention.",
            |e| e.stats.retention_bytes_dropped,
        ),
        ("tracedb_lookups_total", "Trace lookups by ID.", |e| e.stats.lookups),
        (
            "tracedb_lookup_files_read_total",
            "Sorted files a lookup had to open a block of.",
            |e| e.stats.lookup_files_read,
        ),
        (
            "tracedb_blocks_read_total",
            "Data blocks read (checksummed and inflated).",
            |e| e.stats.blocks_read,
        ),
        (
            "tracedb_backpressure_rejections_total",
            "Writes refused because flushing or compaction was behind.",
            |e| e.stats.backpressure_rejections,
        ),
    ];
    per_store(out, Kind::Counter, engines, &counters)?;
    family(
        out,
        Kind::Counter,
        "tracedb_wal_data_sync_seconds_total",
        "Time spent in group-commit fdatasyncs of the write-ahead log.",
        each(engines, |e| e.stats.wal.data_sync_nanos as f64 / 1e9),
    )?;
    family(
        out,
        Kind::Counter,
        "tracedb_wal_data_syncs_total",
        "Group-commit fdatasyncs of the write-ahead log.",
        each(engines, |e| e.stats.wal.data_syncs),
    )?;
    family(
        out,
        Kind::Gauge,
        "tracedb_wal_data_sync_max_seconds",
        "Longest group-commit fdatasync since start.",
        each(engines, |e| e.stats.wal.data_sync_max_nanos as f64 / 1e9),
    )
}

/// One store's counters, sampled for one scrape.
struct Sampled {
    /// `tenant` with tenancy on; empty without.
    labels: Labels,
    stats: tracedb_lsm::EngineStats,
    sealed_bytes: usize,
    /// With an object store.
    cold: Option<tracedb_lsm::ColdStats>,
}

/// A metric family's name, help and value per store.
type Family = (&'static str, &'static str, fn(&Sampled) -> u64);

/// One sample per store.
fn each<V>(
    engines: &[Sampled],
    value: impl Fn(&Sampled) -> V,
) -> impl Iterator<Item = (&[(&'static str, String)], V)> {
    engines.iter().map(move |e| (e.labels.as_slice(), value(e)))
}

/// One sample per store and level, labelled with both.
fn per_level(
    engines: &[Sampled],
    value: fn(&tracedb_lsm::LevelStats) -> u64,
) -> impl Iterator<Item = (Labels, u64)> + '_ {
    engines.iter().flat_map(move |e| {
        e.stats
            .levels
            .iter()
            .enumerate()
            .map(move |(level, stats)| {
                let mut labels = e.labels.clone();
                labels.push(("level", level.to_string()));
                (labels, value(stats))
            })
    })
}

/// Families of one kind with one sample per store.
fn per_store(
    out: &mut DescriptorEncoder<'_>,
    kind: Kind,
    engines: &[Sampled],
    families: &[Family],
) -> fmt::Result {
    for &(name, help, value) in families {
        family(out, kind, name, help, each(engines, value))?;
    }
    Ok(())
}

/// The whole `/metrics` document.
pub fn render(ops: &Ops) -> String {
    let ops = ops.clone();
    exposition::render(move |out| collect(out, &ops))
}

/// Every family, read now.
fn collect(out: &mut DescriptorEncoder<'_>, ops: &Ops) -> fmt::Result {
    let ingest = &ops.ingest;
    single(
        out,
        Kind::Gauge,
        "tracedb_ready",
        "1 while the server takes exports, 0 while starting up or shutting down.",
        u64::from(ingest.phase() == Phase::Serving),
    )?;
    ingest.metrics().encode(out)?;
    ingest.tenant_counters().encode(out)?;
    if let Ok(Some(watch)) = ops.overrides.get() {
        single(
            out,
            Kind::Counter,
            "tracedb_overrides_reload_failures_total",
            "Times the overrides file changed and was refused (the limits in force were kept).",
            watch.failures(),
        )?;
    }
    family(
        out,
        Kind::Counter,
        "tracedb_partial_answers_total",
        "Traces answered without the spans of damaged files, by read API.",
        tracedb_query::read::Api::ALL.into_iter().map(|api| {
            (
                [("api", api.label())],
                tracedb_query::read::partial_answers(api),
            )
        }),
    )?;
    single(
        out,
        Kind::Counter,
        "tracedb_queries_cancelled_total",
        "Searches, metrics queries and index reads stopped because their client went away.",
        tracedb_query::cancel::cancelled_queries(),
    )?;

    let budget = ingest.budget();
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_budget_bytes",
        "The budget for in-flight requests and buffered spans (three quarters of --max-memory).",
        budget.limit(),
    )?;
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_admit_limit_bytes",
        "What in-flight requests and buffered spans are admitted up to now: the budget, or less when the rest of the process leaves less of --max-memory.",
        budget.admit_limit(),
    )?;
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_limit_bytes",
        "--max-memory: the limit for the process's resident memory.",
        ops.memory.limit(),
    )?;
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_resident_bytes",
        "The process's resident anonymous memory (RssAnon), as last sampled.",
        budget.resident(),
    )?;
    single(
        out,
        Kind::Counter,
        "tracedb_memory_trims_total",
        "Times free allocator memory was returned to the system (resident memory over three quarters of --max-memory).",
        ops.memory.trims(),
    )?;
    single(
        out,
        Kind::Counter,
        "tracedb_memory_trim_seconds_total",
        "Time spent returning free allocator memory to the system.",
        ops.memory.trim_time().as_secs_f64(),
    )?;
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_in_flight_bytes",
        "Bytes of request bodies being read, decoded or stored.",
        budget.in_flight(),
    )?;
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_work_room_bytes",
        "The room admission keeps for background work (merges, the buffers' cached search summaries): the most it expected to hold over the last minute, or now if more.",
        budget.work_room(),
    )?;
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_work_held_bytes",
        "Bytes background work (merges, the buffers' cached search summaries) holds now, as it counts them.",
        budget.work_held(),
    )?;
    single(
        out,
        Kind::Gauge,
        "tracedb_memory_buffered_bytes",
        "Bytes of spans the storage engine holds in memory, not yet in sorted files (writes being stored included).",
        budget.buffered(),
    )?;
    if !ops.tls_handshakes.is_empty() {
        family(
            out,
            Kind::Counter,
            "tracedb_tls_handshake_failures_total",
            "TLS handshakes that failed or timed out, per listener.",
            ops.tls_handshakes
                .iter()
                .map(|log| ([("listener", log.listener())], log.failures())),
        )?;
    }

    if let Ok(stores) = ops.stores.get() {
        let engines: Vec<Sampled> = stores
            .all()
            .into_iter()
            .map(|(tenant, engine)| Sampled {
                labels: if stores.tenancy() {
                    vec![("tenant", tenant.to_string())]
                } else {
                    Vec::new()
                },
                stats: engine.stats(),
                sealed_bytes: engine.snapshot().sealed.iter().map(|b| b.bytes).sum(),
                cold: engine.cold_stats(),
            })
            .collect();
        let gauges: [Family; 9] = [
            (
                "tracedb_memtable_spans",
                "Spans in the memtable.",
                |e| e.stats.memtable_spans as u64,
            ),
            (
                "tracedb_memtable_bytes",
                "Bytes of spans in the memtable.",
                |e| e.stats.memtable_bytes as u64,
            ),
            (
                "tracedb_sealed_buffers",
                "Sealed buffers waiting to be flushed.",
                |e| e.stats.sealed_buffers as u64,
            ),
            (
                "tracedb_sealed_bytes",
                "Bytes of spans in sealed buffers.",
                |e| e.sealed_bytes as u64,
            ),
            (
                "tracedb_index_cache_bytes",
                "Bytes of the search index and metrics cells cached in memory: sorted files' summaries and digests, the buffers' cells and the files' inflated cells sections (bounded by an eighth of --max-memory).",
                |e| e.stats.index_cache_bytes as u64,
            ),
            (
                "tracedb_metrics_cells_cached_bytes",
                "Of the index cache, the sorted files' metrics cells sections a metrics query inflated and kept for the next, and each file's index of them.",
                |e| e.stats.cells_sections_bytes as u64,
            ),
            (
                "tracedb_metrics_key_dict_bytes",
                "Of the index cache, the dictionary numbering metrics cell keys and each file's list of numbers.",
                |e| e.stats.cells_dict_bytes as u64,
            ),
            (
                "tracedb_sorted_files",
                "Sorted span files on disk.",
                |e| e.stats.tables as u64,
            ),
            (
                "tracedb_sorted_file_bytes",
                "Bytes of sorted span files on disk.",
                |e| e.stats.table_bytes,
            ),
        ];
        per_store(out, Kind::Gauge, &engines, &gauges)?;
        let counters: [Family; 8] = [
            (
                "tracedb_flushes_total",
                "Buffers flushed to sorted files.",
                |e| e.stats.flushes,
            ),
            (
                "tracedb_flush_errors_total",
                "Failed flush attempts (retried).",
                |e| e.stats.flush_errors,
            ),
            (
                "tracedb_wal_fsyncs_total",
                "fdatasync calls on the write-ahead log.",
                |e| e.stats.wal.fsyncs,
            ),
            (
                "tracedb_wal_group_commits_total",
                "WAL writes that made records durable, each covering one or more requests.",
                |e| e.stats.wal.group_commits,
            ),
            (
                "tracedb_wal_records_total",
                "Records appended to the write-ahead log (one per request).",
                |e| e.stats.wal.records,
            ),
            (
                "tracedb_wal_written_bytes_total",
                "Bytes written to the write-ahead log.",
                |e| e.stats.wal.bytes_written,
            ),
            (
                "tracedb_wal_segments_created_total",
                "Write-ahead log segment files created.",
                |e| e.stats.wal.segments_created,
            ),
            (
                "tracedb_wal_segments_recycled_total",
                "Of the write-ahead log segments created, those that reused a flushed segment's file.",
                |e| e.stats.wal.segments_recycled,
            ),
        ];
        per_store(out, Kind::Counter, &engines, &counters)?;
        write_lsm(out, &engines)?;
        write_cold(out, &engines)?;
    }
    Ok(())
}

/// The object store tier's families, for the stores that have one.
fn write_cold(out: &mut DescriptorEncoder<'_>, engines: &[Sampled]) -> fmt::Result {
    let cold: Vec<(&[(&'static str, String)], &tracedb_lsm::ColdStats)> = engines
        .iter()
        .filter_map(|e| Some((e.labels.as_slice(), e.cold.as_ref()?)))
        .collect();
    if cold.is_empty() {
        return Ok(());
    }
    type ColdFamily = (
        Kind,
        &'static str,
        &'static str,
        fn(&tracedb_lsm::ColdStats) -> u64,
    );
    let families: [ColdFamily; 16] = [
        (
            Kind::Gauge,
            "tracedb_object_store_remote_files",
            "Sorted files in the object store.",
            |c| c.remote_files as u64,
        ),
        (
            Kind::Gauge,
            "tracedb_object_store_remote_bytes",
            "Bytes of sorted files in the object store.",
            |c| c.remote_bytes,
        ),
        (
            Kind::Gauge,
            "tracedb_object_store_local_copies",
            "Remote files that still have a local copy.",
            |c| c.local_copies as u64,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_uploaded_files_total",
            "Files uploaded and verified (size and MD5).",
            |c| c.uploaded_files,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_upload_failures_total",
            "Uploads that failed; the file stays local and is tried again.",
            |c| c.upload_failures,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_local_copies_dropped_total",
            "Local copies of remote files dropped under --max-local-disk.",
            |c| c.local_copies_dropped,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_files_deleted_total",
            "Remote files whose objects were deleted (compaction, retention).",
            |c| c.objects_deleted,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_snapshots_total",
            "Manifest snapshots written to the bucket.",
            |c| c.snapshots_written,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_puts_total",
            "PUT requests that succeeded.",
            |c| c.bucket.uploads,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_put_bytes_total",
            "Bytes uploaded.",
            |c| c.bucket.upload_bytes,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_gets_total",
            "GET requests (whole or ranged).",
            |c| c.bucket.gets,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_get_bytes_total",
            "Bytes downloaded.",
            |c| c.bucket.get_bytes,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_lists_total",
            "LIST requests (start-up orphan sweep, tenant deletion).",
            |c| c.bucket.lists,
        ),
        (
            Kind::Counter,
            "tracedb_object_store_errors_total",
            "Requests to the object store that failed.",
            |c| c.bucket.errors,
        ),
        (
            Kind::Counter,
            "tracedb_block_cache_hits_total",
            "Remote blocks read from the local block cache.",
            |c| c.cache_hits,
        ),
        (
            Kind::Counter,
            "tracedb_block_cache_misses_total",
            "Remote blocks fetched from the object store.",
            |c| c.cache_misses,
        ),
    ];
    for (kind, name, help, value) in families {
        let samples = cold.iter().map(|&(labels, c)| (labels, value(c)));
        family(out, kind, name, help, samples)?;
    }
    family(
        out,
        Kind::Gauge,
        "tracedb_block_cache_bytes",
        "Bytes of remote blocks cached on local disk.",
        cold.iter().map(|&(labels, c)| (labels, c.cache_bytes)),
    )
}
