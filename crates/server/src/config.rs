//! `tracedb serve`'s configuration: one struct, four sources, one validation.
//!
//! [`Config`] is at once the clap argument set (each field a `--flag` with a
//! `TRACEDB_*` environment variable and a default, all shown by
//! `tracedb serve --help`) and the schema of the optional TOML file
//! (`--config`, same names in snake_case, unknown keys refused). Adding a knob
//! is adding one field here, then reading it where it applies (for storage
//! knobs, in [`Config::engine_options`]).
//!
//! Precedence, highest first: command-line flag, environment variable, config
//! file, default. [`load`] merges them without naming any field: it serializes
//! what clap resolved, overlays the file's keys for every option clap took
//! from its default, and deserializes the result. [`Config::validate`] then
//! checks everything at once and says, for each problem, what to change.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use clap::{parser::ValueSource, ArgMatches};
use serde::{Deserialize, Serialize};
use tracedb_ingest::IngestOptions;
use tracedb_lsm::{index::cells::CellAttributes, EngineOptions, MemTableOptions};

use crate::{
    tenancy::{CertField, Rule, Tenancy},
    tls::{ServerTls, TlsFiles},
};

mod tier;
mod units;
pub use tier::TierConfig;
pub use units::{Age, ByteSize};

/// Default OTLP gRPC address.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:4317";
/// Default OTLP HTTP address.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:4318";
/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "./tracedb-data";

/// Largest request the WAL can take in one record, with room for the batch
/// encoding's overhead.
const MAX_MESSAGE_BYTES_LIMIT: u64 = 128 << 20;

/// What the server holds besides admitted requests and buffered spans under
/// heavy ingest: flush and compaction working memory, cached summaries, the
/// runtime and the binary. About 180 MB measured at max ingest
/// (docs/decisions/0014-resident-memory-held-to-budget.md).
const WORKING_SET_BYTES: u64 = 192 << 20;

/// Everything `tracedb serve` can be told.
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where files and the write-ahead log live; created if missing.
    #[arg(long, env = "TRACEDB_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,

    /// gRPC address: OTLP TraceService, tracedb.query.v1.QueryService, health, reflection.
    #[arg(long, env = "TRACEDB_GRPC_ADDR", default_value = DEFAULT_GRPC_ADDR)]
    pub grpc_addr: SocketAddr,

    /// HTTP address: OTLP/HTTP (POST /v1/traces), GET /metrics, GET /ready.
    #[arg(long, env = "TRACEDB_HTTP_ADDR", default_value = DEFAULT_HTTP_ADDR)]
    pub http_addr: SocketAddr,

    /// Largest accepted request body, compressed and after decompression
    /// (bytes; suffixes KiB, MiB, GiB). Larger ones get RESOURCE_EXHAUSTED / 413.
    #[arg(long, env = "TRACEDB_MAX_MESSAGE_BYTES", default_value = "64MiB")]
    pub max_message_bytes: ByteSize,

    /// Memory budget (bytes; suffixes KiB, MiB, GiB): three quarters for
    /// in-flight request bodies plus spans not yet flushed to files (beyond it
    /// exports get UNAVAILABLE / 429 with a retry delay), an eighth for cached
    /// search-index summaries, an eighth left for flush and compaction.
    #[arg(long, env = "TRACEDB_MAX_MEMORY", default_value = "1GiB")]
    pub max_memory: ByteSize,

    /// Number of in-memory buffer shards [default: number of cores].
    #[arg(long, env = "TRACEDB_SHARDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,

    /// A shard's buffer is flushed to a file once it holds this much
    /// (bytes; suffixes KiB, MiB, GiB).
    #[arg(long, env = "TRACEDB_FLUSH_BYTES", default_value = "32MiB")]
    pub flush_bytes: ByteSize,

    /// ... or once its oldest span has waited this many seconds.
    #[arg(long, env = "TRACEDB_FLUSH_AGE_SECS", default_value_t = 30)]
    pub flush_age_secs: u64,

    /// How long spans are kept: files whose newest span is older are dropped
    /// whole (suffixes s, m, h, d; "off" keeps everything).
    #[arg(long, env = "TRACEDB_RETENTION", default_value = "7d")]
    pub retention: Age,

    /// Background compaction threads (0 turns compaction off).
    #[arg(long, env = "TRACEDB_COMPACTION_THREADS", default_value_t = 1)]
    pub compaction_threads: usize,

    /// Most bytes per second compaction may write, so it cannot starve ingest
    /// (suffixes KiB, MiB, GiB; 0 = unlimited).
    #[arg(long, env = "TRACEDB_COMPACTION_RATE", default_value = "64MiB")]
    pub compaction_rate: ByteSize,

    /// Span and resource attributes each file's metrics cells count, as
    /// TraceQL names them, comma-separated (`span.http.route,resource.cloud.region`):
    /// a metrics query whose filters need one of them present is answered
    /// from the cells, without reading spans. "none" counts none [default:
    /// the low-cardinality semantic-convention attributes the README lists].
    #[arg(long, env = "TRACEDB_METRICS_ATTRIBUTES", value_name = "LIST")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_attributes: Option<String>,

    /// Scheduler time slice, in microseconds, asked for by the threads an
    /// export waits on (request handlers, the WAL's sync thread): shorter
    /// than the kernel's default, so they preempt flush and compaction when
    /// they wake. Linux 6.12 or later; ignored elsewhere. 0 keeps the
    /// kernel's default; else 100 to 100000.
    #[arg(long, env = "TRACEDB_REQUEST_SLICE_US", default_value_t = 100)]
    pub request_slice_us: u64,

    /// On SIGTERM or ctrl-c, how many seconds in-flight requests get to finish
    /// and buffers to flush before the process exits anyway (every
    /// acknowledged span is already in the fsynced WAL).
    #[arg(long, env = "TRACEDB_SHUTDOWN_TIMEOUT_SECS", default_value_t = 30)]
    pub shutdown_timeout_secs: u64,

    /// PEM certificate chain, the server's certificate first. With --tls-key,
    /// both listeners serve TLS only (gRPC with ALPN h2, HTTP/1.1 with ALPN
    /// http/1.1) [default: none: plaintext].
    #[arg(long, env = "TRACEDB_TLS_CERT", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert, unencrypted: PKCS#8, PKCS#1 (RSA) or
    /// SEC1 (EC) [default: none].
    #[arg(long, env = "TRACEDB_TLS_KEY", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates: with it, clients must present a certificate
    /// signed by one of them (mutual TLS) [default: none: no client
    /// certificates asked for].
    #[arg(long, env = "TRACEDB_TLS_CLIENT_CA", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,

    /// How requests name their tenant: "off" (one tenant; the data
    /// directory as it always was), "header" (each request names its
    /// tenants in --tenant-header) or "certificate" (with mutual TLS, a
    /// field of the client's certificate names it); with tenancy, each
    /// tenant's spans are kept in a store of their own under tenants/.
    #[arg(long, env = "TRACEDB_TENANCY", value_enum, default_value = "off")]
    pub tenancy: Tenancy,

    /// With --tenancy header: the HTTP header and gRPC metadata key that
    /// names a request's tenant ("a|b" reads several together).
    #[arg(long, env = "TRACEDB_TENANT_HEADER", default_value = tracedb_proto::tenant::DEFAULT_HEADER_NAME)]
    pub tenant_header: String,

    /// With --tenancy header: the tenant of requests that name none
    /// [default: none: they are refused, gRPC UNAUTHENTICATED, HTTP 401].
    #[arg(long, env = "TRACEDB_DEFAULT_TENANT", value_name = "TENANT")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_tenant: Option<String>,

    /// With --tenancy certificate: the field of the client's certificate
    /// that names its tenant.
    #[arg(
        long,
        env = "TRACEDB_TENANT_CERT_FIELD",
        value_enum,
        default_value = "cn"
    )]
    pub tenant_cert_field: CertField,

    /// Per-tenant limits (TOML: rates, memory share, retention), read again
    /// whenever the file changes [default: none: no limits; --retention for
    /// all].
    #[arg(long, env = "TRACEDB_OVERRIDES", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<PathBuf>,

    /// Keep cold sorted files in an object store: s3://BUCKET/PREFIX (S3 or
    /// an S3-compatible server, credentials from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY, region from AWS_REGION). An empty data
    /// directory restores from it. One node per prefix [default: none:
    /// every file stays on local disk].
    #[arg(long, env = "TRACEDB_OBJECT_STORE", value_name = "URL")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<String>,

    /// With --object-store: the address of an S3-compatible server, such as
    /// http://127.0.0.1:8333 [default: none: AWS S3].
    #[arg(long, env = "TRACEDB_S3_ENDPOINT", value_name = "URL")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,

    /// With --object-store: the bucket's region [default: AWS_REGION, else
    /// us-east-1].
    #[arg(long, env = "TRACEDB_S3_REGION")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_region: Option<String>,

    /// With --object-store: a file is uploaded once its newest span ended
    /// this long ago (suffixes s, m, h, d).
    #[arg(long, env = "TRACEDB_COLD_AFTER", default_value = "1h")]
    pub cold_after: Age,

    /// With --object-store: local copies of uploaded files are dropped,
    /// oldest first, while sorted files, their indexes and the block cache
    /// take more local disk than this (suffixes KiB, MiB, GiB) [default:
    /// none: local copies are kept].
    #[arg(long, env = "TRACEDB_MAX_LOCAL_DISK")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_local_disk: Option<ByteSize>,

    /// With --object-store: bytes of remote blocks cached on local disk;
    /// they count in --max-local-disk, and local copies of files go first
    /// to make room.
    #[arg(long, env = "TRACEDB_BLOCK_CACHE", default_value = "1GiB")]
    pub block_cache: ByteSize,

    /// With --object-store: how often files are looked at for upload and
    /// local copies for dropping (suffixes s, m, h).
    #[arg(long, env = "TRACEDB_COLD_INTERVAL", default_value = "10s")]
    pub cold_interval: Age,

    /// With --object-store: how long this node's lease on its prefix lasts
    /// unless renewed (renewed at a third of it); a new node takes a dead
    /// one's prefix over once it expired.
    #[arg(long, env = "TRACEDB_LEASE_TTL", default_value = "60s")]
    pub lease_ttl: Age,

    /// Log filter: error, warn, info, debug, trace, or RUST_LOG directives
    /// such as "info,tracedb_ingest=debug".
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_level: String,
}

impl Config {
    /// The storage engine's options.
    pub fn engine_options(&self) -> EngineOptions {
        let mut opts = EngineOptions::new(&self.data_dir);
        let mut memtable = MemTableOptions::default();
        if let Some(shards) = self.shards {
            memtable.shards = shards;
        }
        memtable.flush_bytes = self.flush_bytes.as_usize();
        memtable.max_age = Duration::from_secs(self.flush_age_secs);
        opts.memtable = memtable;
        opts.retention = self.retention.0;
        opts.compaction_threads = self.compaction_threads;
        opts.compaction_bytes_per_sec = self.compaction_rate.0;
        opts.request_thread_slice = self.request_slice();
        // Checked by `validate`.
        opts.table.cell_attributes = Arc::new(self.cell_attributes().unwrap_or_default());
        // The data budget: `serve` gives the engine the ingest layer's
        // budget, of this limit, to count its buffered spans in (the engine's
        // own admission is the backstop for writes). An eighth of max_memory
        // bounds the search-index cache; the last eighth is left for flush
        // and compaction working memory.
        opts.memory_budget_bytes = self.data_budget();
        opts.index_cache_bytes = self.max_memory.as_usize() / 8;
        opts
    }

    /// The attributes metrics cells count (`--metrics-attributes`); an
    /// error names one that is not `span.<key>` or `resource.<key>`.
    pub fn cell_attributes(&self) -> Result<CellAttributes, String> {
        match self.metrics_attributes.as_deref().map(str::trim) {
            None => Ok(CellAttributes::default()),
            Some("none") => Ok(CellAttributes::none()),
            Some(list) => CellAttributes::parse(list.split(',')),
        }
    }

    /// The object store tier of `--object-store`, if given; an error names
    /// what is wrong with the URL.
    pub fn cold_options(&self) -> anyhow::Result<Option<tracedb_lsm::cold::ColdOptions>> {
        use tracedb_lsm::cold::{Bucket, BucketConfig, ColdOptions};
        let Some(url) = &self.object_store else {
            return Ok(None);
        };
        let bucket = Bucket::open(&BucketConfig {
            url: url.clone(),
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
        })?;
        let mut cold = ColdOptions::new(bucket);
        cold.cold_after = self.cold_after.0.unwrap_or(Duration::MAX);
        cold.max_local_disk = self.max_local_disk.map(|b| b.0);
        cold.block_cache_bytes = self.block_cache.0;
        if let Some(ttl) = self.lease_ttl.0 {
            cold.lease_ttl = ttl;
        }
        if let Some(every) = self.cold_interval.0 {
            cold.interval = every;
        }
        Ok(Some(cold))
    }

    /// Scheduler time slice for the threads an export waits on (zero: the
    /// kernel's default); see `tracedb_sched`.
    pub fn request_slice(&self) -> Duration {
        Duration::from_micros(self.request_slice_us)
    }

    /// The ingest path's limits.
    pub fn ingest_options(&self) -> IngestOptions {
        IngestOptions {
            max_message_bytes: self.max_message_bytes.as_usize(),
            max_memory: self.data_budget(),
            // An eighth of the limit is headroom for what grows between two
            // samples of the process's memory (a flush's sort, a compaction's
            // sidecar being encoded).
            process_memory: self.max_memory.as_usize() - self.max_memory.as_usize() / 8,
        }
    }

    /// The share of `max_memory` for request bodies and buffered spans: three
    /// quarters. An eighth bounds the cached search-index summaries and an
    /// eighth is left for what flushes and compactions hold while they run.
    pub fn data_budget(&self) -> usize {
        let all = self.max_memory.as_usize();
        all - all / 4
    }

    /// How each request's tenants are found; `None` with tenancy off.
    pub fn tenancy_rule(&self) -> Option<Arc<Rule>> {
        tenancy_rule(
            self.tenancy,
            &self.tenant_header,
            self.default_tenant.as_deref(),
            self.tenant_cert_field,
        )
    }

    /// The TLS files, if both a certificate and a key are set.
    pub fn tls_files(&self) -> Option<TlsFiles<'_>> {
        Some(TlsFiles {
            cert: self.tls_cert.as_deref()?,
            key: self.tls_key.as_deref()?,
            client_ca: self.tls_client_ca.as_deref(),
        })
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_secs)
    }

    /// Settings that are valid but will not do what an operator expects, each
    /// as a sentence saying what to change; the server logs them at start-up.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let requests = self.max_message_bytes.0.saturating_mul(2);
        let floor = self.ingest_options().budget_floor() as u64;
        let needed = floor.saturating_add(WORKING_SET_BYTES);
        if self.max_memory.0 < needed {
            let lower = if requests >= floor {
                let fits = self.max_memory.0.saturating_sub(WORKING_SET_BYTES) / 2;
                if fits >= 1024 {
                    format!(
                        ", or lower max_message_bytes to {} or less",
                        ByteSize(fits >> 10 << 10)
                    )
                } else {
                    String::new()
                }
            } else {
                String::new()
            };
            warnings.push(format!(
                "max_memory ({}) is less than the server needs under heavy ingest: admission \
                 never narrows below {} (two largest requests, or a quarter of the budget), \
                 and flush, compaction and the runtime hold about {} besides, so resident \
                 memory can pass max_memory; raise max_memory to {}{lower}",
                self.max_memory,
                ByteSize(floor),
                ByteSize(WORKING_SET_BYTES),
                ByteSize(needed.div_ceil(1 << 20) << 20),
            ));
        }
        warnings
    }

    /// Checks every option; the error lists each problem with how to fix it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, problem: String| {
            if !ok {
                problems.push(problem);
            }
        };
        if let Err(problem) = self.cell_attributes() {
            check(false, problem);
        }
        if let Some(shards) = self.shards {
            check(
                (1..=4096).contains(&shards),
                format!(
                    "shards is {shards}: it must be between 1 and 4096; leave it out for one per core"
                ),
            );
        }
        let max_message = self.max_message_bytes.0;
        check(
            (1024..=MAX_MESSAGE_BYTES_LIMIT).contains(&max_message),
            format!(
                "max_message_bytes is {}: it must be between 1KiB and {}",
                self.max_message_bytes,
                ByteSize(MAX_MESSAGE_BYTES_LIMIT)
            ),
        );
        let needed = max_message.saturating_mul(2);
        check(
            self.data_budget() as u64 >= needed,
            format!(
                "max_memory ({}) leaves {} for requests and buffered spans (three quarters), \
                 less than twice max_message_bytes ({}): a largest request (held compressed and \
                 decompressed) could never be admitted; raise max_memory to at least {} or \
                 lower max_message_bytes",
                self.max_memory,
                ByteSize(self.data_budget() as u64),
                self.max_message_bytes,
                ByteSize(needed.saturating_add(needed.div_ceil(3)))
            ),
        );
        check(
            (4096..=(4 << 30)).contains(&self.flush_bytes.0),
            format!(
                "flush_bytes is {}: it must be between 4KiB and 4GiB",
                self.flush_bytes
            ),
        );
        let (shortest, longest) = tracedb_sched::SLICE_RANGE;
        let slice = self.request_slice();
        check(
            slice.is_zero() || (shortest..=longest).contains(&slice),
            format!(
                "request_slice_us is {}: it must be 0 (the kernel's default) or between {} and {}",
                self.request_slice_us,
                shortest.as_micros(),
                longest.as_micros()
            ),
        );
        check(
            self.flush_age_secs >= 1,
            "flush_age_secs is 0: it must be at least 1 second".to_string(),
        );
        check(
            self.compaction_threads <= 64,
            format!(
                "compaction_threads is {}: use 0 to 64 (one or two is plenty on most machines)",
                self.compaction_threads
            ),
        );
        if let Some(retention) = self.retention.0 {
            check(
                retention >= Duration::from_secs(60),
                format!(
                    "retention is {}: keep at least 1m, or say \"off\" to keep everything",
                    self.retention
                ),
            );
        }
        if let Some(url) = &self.object_store {
            check(
                url.starts_with("s3://") && url.len() > "s3://".len(),
                format!("object_store is {url:?}: give s3://BUCKET or s3://BUCKET/PREFIX"),
            );
        }
        check(
            self.lease_ttl
                .0
                .is_some_and(|t| t >= Duration::from_secs(3)),
            format!("lease_ttl is {}: give at least 3s", self.lease_ttl),
        );
        check(
            self.cold_interval
                .0
                .is_some_and(|t| t >= Duration::from_secs(1)),
            format!("cold_interval is {}: give at least 1s", self.cold_interval),
        );
        check(
            self.shutdown_timeout_secs >= 1,
            "shutdown_timeout_secs is 0: it must be at least 1 second".to_string(),
        );
        check(
            self.grpc_addr != self.http_addr || self.grpc_addr.port() == 0,
            format!(
                "grpc_addr and http_addr are both {}: give them different ports \
                 (OTLP uses 4317 for gRPC and 4318 for HTTP)",
                self.grpc_addr
            ),
        );
        check_listener(
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            self.tls_client_ca.as_deref(),
            &self.log_level,
            &mut problems,
        );
        check_tenancy(
            self.tenancy,
            &self.tenant_header,
            self.default_tenant.as_deref(),
            self.tls_client_ca.is_some(),
            &mut problems,
        );
        if let Some(path) = &self.overrides {
            if let Err(e) = crate::overrides::Overrides::load(path, self.retention.0) {
                problems.push(e);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }
}

/// What is wrong with the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

/// Merges `cli` (what clap resolved from flags, environment and defaults, with
/// `matches` telling which) with the TOML file at `file`, and validates.
pub fn load<T: Options>(
    cli: T,
    matches: &ArgMatches,
    file: Option<&Path>,
) -> Result<T, ConfigError> {
    let config = match file {
        None => cli,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            merge_file(cli, matches, &text).map_err(|message| ConfigError::File {
                path: path.to_path_buf(),
                message,
            })?
        }
    };
    config.check()?;
    Ok(config)
}

/// The options of one command (`tracedb serve`, `tracedb query`): flags,
/// environment variables and the keys of its TOML file, checked as a whole.
pub trait Options: clap::Args + Serialize + serde::de::DeserializeOwned {
    /// The subcommand, for messages (`serve`).
    const COMMAND: &'static str;
    /// Every problem with the settings, or none.
    fn check(&self) -> Result<(), ConfigError>;
}

impl Options for Config {
    const COMMAND: &'static str = "serve";
    fn check(&self) -> Result<(), ConfigError> {
        self.validate()
    }
}

/// How each request's tenants are found (settings `tracedb serve` and
/// `tracedb query` share, checked by [`check_tenancy`]); `None` with tenancy
/// off.
fn tenancy_rule(
    tenancy: Tenancy,
    header: &str,
    default: Option<&str>,
    field: CertField,
) -> Option<Arc<Rule>> {
    match tenancy {
        Tenancy::Off => None,
        Tenancy::Header => Some(Arc::new(
            Rule::new(header, default).expect("checked by validate"),
        )),
        Tenancy::Certificate => Some(Arc::new(Rule::Certificate { field })),
    }
}

/// The problems with the tenancy settings (`client_ca`: whether the
/// listeners ask for client certificates).
fn check_tenancy(
    tenancy: Tenancy,
    header: &str,
    default: Option<&str>,
    client_ca: bool,
    problems: &mut Vec<String>,
) {
    if tenancy == Tenancy::Certificate {
        if !client_ca {
            problems.push(
                "tenancy is certificate but the listeners ask for no client certificate: give \
                 --tls-cert, --tls-key and --tls-client-ca (mutual TLS)"
                    .to_string(),
            );
        }
        if default.is_some() {
            problems.push(
                "default_tenant is set but tenancy is certificate: every request's tenant is its \
                 certificate's; leave default_tenant out"
                    .to_string(),
            );
        }
    }
    if let Err(e) = Rule::new(header, default) {
        problems.push(format!(
            "{e}: tenant_header must be a header name, default_tenant a tenant ID"
        ));
    }
    if tenancy == Tenancy::Off && default.is_some() {
        problems.push(
            "default_tenant is set but tenancy is off: turn tenancy on (--tenancy header), \
             or leave default_tenant out"
                .to_string(),
        );
    }
}

/// The problems with the listeners' TLS files and the log filter, settings
/// `tracedb serve` and `tracedb query` share.
fn check_listener(
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
    log_level: &str,
    problems: &mut Vec<String>,
) {
    match (cert, key) {
        (Some(_), Some(_)) | (None, None) => {}
        (Some(_), None) => problems.push(
            "tls_cert is set but tls_key is not: give both (--tls-key PATH, the certificate's \
             private key) to serve TLS, or neither for plaintext"
                .to_string(),
        ),
        (None, Some(_)) => problems.push(
            "tls_key is set but tls_cert is not: give both (--tls-cert PATH, the certificate \
             chain) to serve TLS, or neither for plaintext"
                .to_string(),
        ),
    }
    if client_ca.is_some() && cert.is_none() && key.is_none() {
        problems.push(
            "tls_client_ca is set without tls_cert and tls_key: client certificates are \
             asked for on TLS listeners only; give all three, or leave tls_client_ca out"
                .to_string(),
        );
    }
    // The files themselves: read and checked now, so a server never starts
    // with a listener it cannot serve. It reads them again to serve.
    if let (Some(cert), Some(key)) = (cert, key) {
        if let Err(errors) = ServerTls::load(TlsFiles {
            cert,
            key,
            client_ca,
        }) {
            problems.extend(errors.iter().map(ToString::to_string));
        }
    }
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(log_level) {
        problems.push(format!(
            "log_level {log_level:?} is not a log filter ({e}): use error, warn, info, debug or trace"
        ));
    }
}

fn merge_file<T: Options>(cli: T, matches: &ArgMatches, text: &str) -> Result<T, String> {
    let file: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut merged = toml::Table::try_from(&cli).map_err(|e| e.to_string())?;
    let options = <T as clap::Args>::augment_args(clap::Command::new("tracedb"));
    let known: Vec<&str> = options
        .get_arguments()
        .map(|a| a.get_id().as_str())
        .collect();
    for (key, value) in file {
        if !known.contains(&key.as_str()) {
            let mut names = known.clone();
            names.sort_unstable();
            return Err(format!(
                "unknown key `{key}`; the keys are {} (see tracedb {} --help)",
                names.join(", "),
                T::COMMAND
            ));
        }
        let explicit = matches
            .value_source(&key)
            .is_some_and(|source| source != ValueSource::DefaultValue);
        if !explicit {
            merged.insert(key, value);
        }
    }
    merged
        .try_into()
        .map_err(|e: toml::de::Error| e.to_string().trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        settings: Config,
    }

    fn parse(args: &[&str], file: &str) -> Result<Config, String> {
        let matches = Cli::command()
            .mut_args(|a| a.env(None::<&str>))
            .try_get_matches_from(std::iter::once("tracedb").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let cli = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
        let merged = merge_file(cli.settings, &matches, file)?;
        merged.validate().map_err(|e| e.to_string())?;
        Ok(merged)
    }

    #[test]
    fn a_memory_limit_too_small_for_the_largest_requests_is_warned_about() {
        let c = parse(&["--max-memory", "256MiB"], "").expect("valid flags");
        let warnings = c.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("raise max_memory to 320MiB"),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[0].contains("lower max_message_bytes to 32MiB or less"),
            "{}",
            warnings[0]
        );
        let smaller = parse(
            &["--max-memory", "256MiB", "--max-message-bytes", "16MiB"],
            "",
        )
        .expect("valid flags");
        assert_eq!(smaller.warnings(), Vec::<String>::new());
        let default = parse(&[], "").expect("valid flags");
        assert_eq!(default.warnings(), Vec::<String>::new());
    }

    #[test]
    fn byte_sizes() {
        assert_eq!("1GiB".parse(), Ok(ByteSize(1 << 30)));
        assert_eq!("64 kb".parse(), Ok(ByteSize(64 << 10)));
        assert_eq!("123".parse(), Ok(ByteSize(123)));
        assert!("12XB".parse::<ByteSize>().is_err());
        assert!("".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(64 << 20).to_string(), "64MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
    }

    #[test]
    fn ages() {
        assert_eq!("7d".parse(), Ok(Age(Some(Duration::from_secs(7 * 86_400)))));
        assert_eq!("90s".parse(), Ok(Age(Some(Duration::from_secs(90)))));
        assert_eq!("off".parse(), Ok(Age(None)));
        assert!("7w".parse::<Age>().is_err());
        assert!("d".parse::<Age>().is_err());
        assert_eq!(Age(Some(Duration::from_secs(3 * 3_600))).to_string(), "3h");
        assert_eq!(Age(None).to_string(), "off");
    }

    #[test]
    fn storage_knobs_reach_the_engine() {
        let c = parse(
            &[
                "--retention",
                "12h",
                "--compaction-threads",
                "2",
                "--compaction-rate",
                "8MiB",
            ],
            "",
        )
        .expect("valid flags");
        let opts = c.engine_options();
        assert_eq!(opts.retention, Some(Duration::from_secs(12 * 3_600)));
        assert_eq!(opts.compaction_threads, 2);
        assert_eq!(opts.compaction_bytes_per_sec, 8 << 20);
        let off = parse(&["--retention", "off"], "").expect("valid flags");
        assert_eq!(off.engine_options().retention, None);
        let short = parse(&["--retention", "10s"], "").expect_err("too short");
        assert!(short.contains("retention is 10s"), "{short}");
    }

    #[test]
    fn metrics_attributes_reach_the_engine_or_say_what_is_wrong() {
        let counted = |c: &Config| c.engine_options().table.cell_attributes.names().len();
        let default = parse(&[], "").expect("valid");
        assert_eq!(
            counted(&default),
            tracedb_lsm::index::cells::DEFAULT_ATTRIBUTES.len()
        );
        let two = parse(
            &["--metrics-attributes", "span.tenant, resource.cloud.region"],
            "",
        )
        .expect("valid");
        assert_eq!(counted(&two), 2);
        let none = parse(&[], "metrics_attributes = \"none\"\n").expect("valid");
        assert_eq!(counted(&none), 0);
        let bad = parse(&["--metrics-attributes", "span.a,tenant"], "").expect_err("no scope");
        assert!(
            bad.contains("\"tenant\" is neither span.<key> nor resource.<key>"),
            "{bad}"
        );
    }

    #[test]
    fn file_fills_in_what_flags_leave_at_default() {
        let c = parse(
            &["--flush-age-secs", "7"],
            "flush_age_secs = 99\nshards = 3\nmax_memory = \"2GiB\"\nmax_message_bytes = 1048576\n",
        )
        .expect("valid");
        assert_eq!(c.flush_age_secs, 7, "the flag wins");
        assert_eq!(c.shards, Some(3));
        assert_eq!(c.max_memory, ByteSize(2 << 30));
        assert_eq!(c.max_message_bytes, ByteSize(1 << 20));
        assert_eq!(c.http_addr.to_string(), DEFAULT_HTTP_ADDR);
        assert_eq!(c.engine_options().memtable.shards, 3);
        // Three quarters for data, one eighth for the search-index cache.
        assert_eq!(c.engine_options().memory_budget_bytes, 3 << 29);
        assert_eq!(c.engine_options().index_cache_bytes, 1 << 28);
        assert_eq!(c.ingest_options().max_memory, 3 << 29);
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = parse(&[], "max_memroy = \"1GiB\"\n").expect_err("typo");
        assert!(e.starts_with("unknown key `max_memroy`"), "{e}");
        assert!(e.contains("max_memory"), "{e}");
    }

    #[test]
    fn wrong_types_are_refused() {
        let e = parse(&[], "shards = \"many\"\n").expect_err("not a number");
        assert!(e.contains("shards"), "{e}");
    }

    #[test]
    fn tls_needs_both_files_and_checks_them() {
        let e = parse(&["--tls-cert", "cert.pem"], "").expect_err("no key");
        assert!(e.contains("tls_cert is set but tls_key is not"), "{e}");
        let e = parse(&[], "tls_key = \"key.pem\"\n").expect_err("no certificate");
        assert!(e.contains("tls_key is set but tls_cert is not"), "{e}");
        let e = parse(&["--tls-client-ca", "ca.pem"], "").expect_err("no TLS");
        assert!(e.contains("tls_client_ca is set without"), "{e}");
        // Both given (here by the file): the files are read by validate().
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        let e = parse(
            &["--tls-key", missing.to_str().expect("utf-8")],
            &format!("tls_cert = {:?}\n", missing.to_str().expect("utf-8")),
        )
        .expect_err("missing files");
        assert!(e.contains("tls_cert") && e.contains("tls_key"), "{e}");
        assert!(e.contains("cannot read it"), "{e}");
        let plain = parse(&[], "").expect("defaults");
        assert!(plain.tls_files().is_none(), "plaintext by default");
    }

    #[test]
    fn validation_lists_every_problem() {
        let e = parse(
            &["--max-memory", "1MiB", "--flush-age-secs", "0"],
            "shards = 0\nrequest_slice_us = 50\n",
        )
        .expect_err("invalid");
        assert!(e.contains("shards is 0"), "{e}");
        assert!(e.contains("request_slice_us is 50"), "{e}");
        assert!(e.contains("max_memory (1MiB) leaves"), "{e}");
        assert!(e.contains("flush_age_secs is 0"), "{e}");
    }
}
