//! The workload: realistic OTLP export requests, generated from a seed and
//! encoded before the clock starts.
//!
//! Traces have 5-50 spans across a chain of services, with parent links,
//! attributes, events, some error spans, and links to earlier traces. A few
//! spans of some traces are held back and sent a couple of requests later, as
//! late spans and retried batches arrive in real deployments. Requests are
//! shaped as a Collector sends them: up to `batch_spans` spans, grouped by
//! service (resource) and instrumentation scope.
//!
//! The pool of requests is reused for long runs. Each pass over the pool XORs
//! a mask made from the pass number ([`pass_mask`]) into every trace ID (at
//! offsets recorded at generation), so every pass sends new traces without
//! re-encoding. The mask changes all 128 bits: a trace's copies from different
//! passes, whose spans are otherwise byte for byte the same, then sort as far
//! apart as unrelated traces do. (Renamed in their low bytes only, they sorted
//! next to each other, and a sorted file holding many passes kept them in the
//! same block, where zstd stored the copies for almost nothing.)

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use prost::Message;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{any_value::Value, AnyValue, InstrumentationScope, KeyValue},
    resource::v1::Resource,
    trace::v1::{span, status::StatusCode, ResourceSpans, ScopeSpans, Span, Status},
};

/// How the workload looks.
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    pub seed: u64,
    /// Spans per request.
    pub batch_spans: usize,
    /// Spans in the pool of pre-encoded requests.
    pub pool_spans: usize,
    /// Distinct services (resources).
    pub services: usize,
    /// Share of traces that have one span sent late.
    pub late_fraction: f64,
    /// Share of spans with an error status.
    pub error_fraction: f64,
    /// When the first trace starts. The default is the current minute, so servers
    /// with a retention period keep the spans; all else follows the seed.
    pub start_unix_nano: u64,
    /// How much later each pass over the pool runs than the one before (0:
    /// every pass has the pool's times).
    pub pass_shift_nanos: u64,
    /// How far apart the pool's traces start (the pool covers its traces
    /// times this in span time).
    pub trace_spacing_nanos: u64,
    /// Cardinalities a search meets in production: non-root span names in
    /// the hundreds, and on each root span a `user.id` with up to a million
    /// values (one per trace of the pool at most) and a `tenant` of five.
    pub search_attributes: bool,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        WorkloadOptions {
            seed: 1,
            batch_spans: 512,
            pool_spans: 200_000,
            services: 8,
            late_fraction: 0.05,
            error_fraction: 0.02,
            start_unix_nano: current_minute_unix_nano(),
            pass_shift_nanos: 0,
            trace_spacing_nanos: 1_000_000,
            search_attributes: false,
        }
    }
}

fn current_minute_unix_nano() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (now - now % 60) * 1_000_000_000
}

/// One pre-encoded request.
#[derive(Debug, Clone)]
pub struct Request {
    pub body: Bytes,
    pub spans: usize,
    /// Offsets of every span's 16 trace ID bytes in `body`.
    trace_id_offsets: Vec<usize>,
    /// Offsets of every time in `body` (span starts and ends, event times):
    /// 8 bytes each, little-endian.
    time_offsets: Vec<usize>,
    pass_shift_nanos: u64,
}

impl Request {
    /// The body for pass `pass` over the pool: trace IDs XORed with
    /// [`pass_mask`], times moved `pass` shifts later.
    pub fn body_for_pass(&self, pass: u64) -> Bytes {
        if pass == 0 {
            return self.body.clone();
        }
        let mut body = BytesMut::from(&self.body[..]);
        let mask = pass_mask(pass).to_be_bytes();
        for &offset in &self.trace_id_offsets {
            for (b, m) in body[offset..offset + 16].iter_mut().zip(mask) {
                *b ^= m;
            }
        }
        let shift = pass * self.pass_shift_nanos;
        if shift > 0 {
            for &offset in &self.time_offsets {
                let at = &mut body[offset..offset + 8];
                let t = u64::from_le_bytes(at.try_into().expect("8 bytes"));
                at.copy_from_slice(&(t + shift).to_le_bytes());
            }
        }
        body.freeze()
    }
}

/// What pass `pass` XORs into every trace ID: nothing in the first pass;
/// otherwise both halves come from a bijective mix of the pass number
/// (splitmix64's finalizer), so two passes never give one trace the same ID
/// and a trace's copies differ in their leading bytes.
pub fn pass_mask(pass: u64) -> u128 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    if pass == 0 {
        return 0;
    }
    u128::from(mix(pass)) << 64 | u128::from(mix(pass ^ 0x9e37_79b9_7f4a_7c15))
}

/// A trace of the pool: its ID in pass 0, how many spans it has, and which
/// requests carry them.
#[derive(Debug, Clone)]
pub struct TraceInfo {
    pub id: u128,
    pub spans: u32,
    pub requests: Vec<u32>,
}

impl TraceInfo {
    /// The trace's ID in pass `pass`.
    pub fn id_in_pass(&self, pass: u64) -> u128 {
        self.id ^ pass_mask(pass)
    }
}

/// The pre-encoded pool.
#[derive(Debug)]
pub struct Workload {
    pub requests: Vec<Request>,
    pub traces: Vec<TraceInfo>,
}

impl Workload {
    pub fn total_spans(&self) -> usize {
        self.requests.iter().map(|r| r.spans).sum()
    }
}

const ROUTES: &[&str] = &[
    "/api/cart",
    "/api/checkout",
    "/api/search",
    "/api/user",
    "/healthz",
];
/// Tenants of the search workload.
const TENANTS: &[&str] = &["acme", "globex", "initech", "umbrella", "hooli"];
/// Each operation of the search workload comes in this many names.
const SEARCH_NAME_VARIANTS: u32 = 40;

const OPERATIONS: &[&str] = &[
    "SELECT orders",
    "GET inventory",
    "publish event",
    "render",
    "cache get",
];

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    kv(key, Value::StringValue(value.into()))
}

/// Generates and encodes the pool.
pub fn generate(opts: &WorkloadOptions) -> anyhow::Result<Workload> {
    let mut rng = SmallRng::seed_from_u64(opts.seed);
    let services = opts.services.max(1);
    let base_time = opts.start_unix_nano;

    // Spans in sending order, each with its service; late spans are moved later.
    let mut queue: Vec<(usize, Span)> = Vec::with_capacity(opts.pool_spans);
    let mut late: Vec<(usize, usize, Span)> = Vec::new(); // (due position, service, span)
    let mut traces = Vec::new();
    let mut previous_trace: Option<(u128, u64)> = None;
    while queue.len() + late.len() < opts.pool_spans {
        let trace_id: u128 = rng.random::<u128>() | 1;
        let n = rng.random_range(5..=50u32);
        let start = base_time + traces.len() as u64 * opts.trace_spacing_nanos;
        let root_service = rng.random_range(0..services);
        let mut span_ids = Vec::with_capacity(n as usize);
        let mut spans = Vec::with_capacity(n as usize);
        for i in 0..n {
            let span_id: u64 = rng.random::<u64>() | 1;
            let parent = if i == 0 {
                None
            } else {
                Some(span_ids[rng.random_range(0..i as usize)])
            };
            span_ids.push(span_id);
            let service = if i == 0 {
                root_service
            } else {
                (root_service + rng.random_range(0..3)) % services
            };
            let offset = u64::from(i) * 20_000 + rng.random_range(0..10_000);
            let duration = rng.random_range(5_000..2_000_000);
            let error = rng.random_bool(opts.error_fraction);
            let kind = if i == 0 {
                span::SpanKind::Server
            } else if parent.is_some() && rng.random_bool(0.5) {
                span::SpanKind::Client
            } else {
                span::SpanKind::Internal
            };
            let mut attributes = Vec::new();
            if i == 0 && opts.search_attributes {
                attributes.push(string(
                    "user.id",
                    &format!("user-{}", rng.random_range(0..1_000_000u32)),
                ));
                attributes.push(string(
                    "tenant",
                    TENANTS[rng.random_range(0..TENANTS.len())],
                ));
            }
            attributes.extend([
                string(
                    "http.method",
                    if rng.random_bool(0.8) { "GET" } else { "POST" },
                ),
                string("http.route", ROUTES[rng.random_range(0..ROUTES.len())]),
                kv(
                    "http.status_code",
                    Value::IntValue(if error { 500 } else { 200 }),
                ),
            ]);
            if kind == span::SpanKind::Client {
                attributes.push(string("db.system", "postgresql"));
                attributes.push(kv("net.peer.port", Value::IntValue(5432)));
            }
            let mut events = Vec::new();
            if error || rng.random_bool(0.1) {
                events.push(span::Event {
                    time_unix_nano: start + offset + duration / 2,
                    name: if error {
                        "exception".into()
                    } else {
                        "cache miss".into()
                    },
                    attributes: vec![string("exception.message", "deadline exceeded")],
                    dropped_attributes_count: 0,
                });
            }
            let links = match (i, previous_trace) {
                (0, Some((t, s))) if rng.random_bool(0.1) => vec![span::Link {
                    trace_id: t.to_be_bytes().to_vec().into(),
                    span_id: s.to_be_bytes().to_vec().into(),
                    trace_state: String::new(),
                    attributes: vec![string("link.kind", "follows_from")],
                    dropped_attributes_count: 0,
                    flags: 1,
                }],
                _ => Vec::new(),
            };
            spans.push((
                service,
                Span {
                    trace_id: trace_id.to_be_bytes().to_vec().into(),
                    span_id: span_id.to_be_bytes().to_vec().into(),
                    parent_span_id: parent
                        .map(|p| p.to_be_bytes().to_vec())
                        .unwrap_or_default()
                        .into(),
                    name: if i == 0 {
                        ROUTES[rng.random_range(0..ROUTES.len())].into()
                    } else if opts.search_attributes {
                        format!(
                            "{} {}",
                            OPERATIONS[rng.random_range(0..OPERATIONS.len())],
                            rng.random_range(0..SEARCH_NAME_VARIANTS)
                        )
                    } else {
                        OPERATIONS[rng.random_range(0..OPERATIONS.len())].into()
                    },
                    kind: kind as i32,
                    start_time_unix_nano: start + offset,
                    end_time_unix_nano: start + offset + duration,
                    attributes,
                    events,
                    links,
                    status: error.then(|| Status {
                        message: "deadline exceeded".into(),
                        code: StatusCode::Error as i32,
                    }),
                    flags: 0x101,
                    ..Default::default()
                },
            ));
        }
        previous_trace = Some((trace_id, span_ids[0]));
        let late_one = rng.random_bool(opts.late_fraction);
        for (i, (service, span)) in spans.into_iter().enumerate() {
            if late_one && i == n as usize - 1 {
                // Two to three requests later.
                let due = queue.len() + opts.batch_spans * rng.random_range(2..=3);
                late.push((due, service, span));
            } else {
                queue.push((service, span));
            }
            while let Some(pos) = late.iter().position(|(due, _, _)| *due <= queue.len()) {
                let (_, s, sp) = late.swap_remove(pos);
                queue.push((s, sp));
            }
        }
        traces.push(TraceInfo {
            id: trace_id,
            spans: n,
            requests: Vec::new(),
        });
    }
    queue.extend(late.into_iter().map(|(_, s, sp)| (s, sp)));

    let resources: Vec<Resource> = (0..services)
        .map(|s| Resource {
            attributes: vec![
                string("service.name", &format!("service-{s}")),
                string("service.version", "1.4.2"),
                string("host.name", &format!("node-{}", s % 3)),
                string("telemetry.sdk.language", "rust"),
            ],
            ..Default::default()
        })
        .collect();
    let trace_index: std::collections::HashMap<u128, usize> =
        traces.iter().enumerate().map(|(i, t)| (t.id, i)).collect();

    let mut requests = Vec::new();
    for chunk in queue.chunks(opts.batch_spans.max(1)) {
        let mut by_service: BTreeMap<usize, Vec<Span>> = BTreeMap::new();
        for (service, span) in chunk {
            by_service.entry(*service).or_default().push(span.clone());
        }
        let request = ExportTraceServiceRequest {
            resource_spans: by_service
                .into_iter()
                .map(|(service, spans)| ResourceSpans {
                    resource: Some(resources[service].clone()),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "tracedb-bench".into(),
                            version: "0.1".into(),
                            ..Default::default()
                        }),
                        spans,
                        schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
                    }],
                    schema_url: String::new(),
                })
                .collect(),
        };
        let body = Bytes::from(request.encode_to_vec());
        let (offsets, times) = offsets(&body)?;
        let index = requests.len() as u32;
        for (_, span) in chunk {
            let id = u128::from_be_bytes(span.trace_id[..].try_into()?);
            let t = &mut traces[trace_index[&id]];
            if t.requests.last() != Some(&index) {
                t.requests.push(index);
            }
        }
        requests.push(Request {
            body,
            spans: chunk.len(),
            trace_id_offsets: offsets,
            time_offsets: times,
            pass_shift_nanos: opts.pass_shift_nanos,
        });
    }
    Ok(Workload { requests, traces })
}

/// Where each span's trace ID, and each time, sits in an encoded request,
/// found with the same scanner the server uses. prost writes `trace_id`
/// (field 1, 16 bytes) first; the times are Span fields 7 and 8 and
/// Span.Event field 1, all fixed64.
fn offsets(body: &Bytes) -> anyhow::Result<(Vec<usize>, Vec<usize>)> {
    let mut spans = Vec::new();
    tracedb_otlp::scan_export_request(body, &mut spans, tracedb_otlp::TimeRules::ANY)?;
    let mut ids = Vec::with_capacity(spans.len());
    let mut times = Vec::with_capacity(spans.len() * 3);
    for s in &spans {
        let start = s.payload.as_ptr() as usize - body.as_ptr() as usize;
        anyhow::ensure!(
            body[start..start + 2] == [0x0a, 16],
            "trace_id is not the first field"
        );
        ids.push(start + 2);
        fixed64_fields(&s.payload, start, &[7, 8], Some(11), &mut times)?;
    }
    Ok((ids, times))
}

/// Offsets (from `base`) of the fixed64 fields numbered in `fields` of the
/// message `msg`, and of field 1 of each message in field `nested`.
fn fixed64_fields(
    msg: &[u8],
    base: usize,
    fields: &[u64],
    nested: Option<u64>,
    out: &mut Vec<usize>,
) -> anyhow::Result<()> {
    let mut at = 0;
    let varint = |at: &mut usize| -> anyhow::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *msg
                .get(*at)
                .ok_or_else(|| anyhow::anyhow!("truncated varint"))?;
            *at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        anyhow::bail!("varint too long")
    };
    while at < msg.len() {
        let tag = varint(&mut at)?;
        match tag & 7 {
            0 => {
                varint(&mut at)?;
            }
            1 => {
                if fields.contains(&(tag >> 3)) {
                    out.push(base + at);
                }
                at += 8;
            }
            2 => {
                let len = varint(&mut at)? as usize;
                if Some(tag >> 3) == nested {
                    fixed64_fields(&msg[at..at + len], base + at, &[1], None, out)?;
                }
                at += len;
            }
            5 => at += 4,
            w => anyhow::bail!("wire type {w}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> WorkloadOptions {
        WorkloadOptions {
            pool_spans: 5_000,
            batch_spans: 100,
            ..WorkloadOptions::default()
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_requests() {
        let a = generate(&small()).expect("workload");
        let b = generate(&small()).expect("workload");
        assert_eq!(a.requests.len(), b.requests.len());
        assert!(a
            .requests
            .iter()
            .zip(&b.requests)
            .all(|(x, y)| x.body == y.body));
        let c = generate(&WorkloadOptions { seed: 2, ..small() }).expect("workload");
        assert_ne!(a.requests[0].body, c.requests[0].body);
    }

    #[test]
    fn every_span_is_in_exactly_one_request_and_traces_know_their_requests() {
        let w = generate(&small()).expect("workload");
        assert_eq!(
            w.total_spans(),
            w.traces.iter().map(|t| t.spans as usize).sum::<usize>()
        );
        assert!(w.traces.iter().all(|t| (5..=50).contains(&t.spans)));
        assert!(
            w.traces.iter().any(|t| t.requests.len() > 1),
            "some traces span requests"
        );
        let mut count = std::collections::HashMap::new();
        for r in &w.requests {
            let req = ExportTraceServiceRequest::decode(r.body.clone()).expect("valid");
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        *count
                            .entry(u128::from_be_bytes(s.trace_id[..].try_into().expect("16")))
                            .or_insert(0u32) += 1;
                    }
                }
            }
        }
        assert!(w.traces.iter().all(|t| count[&t.id] == t.spans));
    }

    #[test]
    fn traces_start_the_spacing_apart() {
        let spacing = 250_000_000;
        let w = generate(&WorkloadOptions {
            trace_spacing_nanos: spacing,
            ..small()
        })
        .expect("workload");
        let mut roots: Vec<u64> = w
            .requests
            .iter()
            .flat_map(|r| {
                ExportTraceServiceRequest::decode(r.body.clone())
                    .expect("valid")
                    .resource_spans
            })
            .flat_map(|rs| rs.scope_spans)
            .flat_map(|ss| ss.spans)
            .filter(|s| s.parent_span_id.is_empty())
            .map(|s| s.start_time_unix_nano)
            .collect();
        roots.sort_unstable();
        assert_eq!(roots.len(), w.traces.len());
        // A root starts within its trace's first 10 ms.
        for (i, pair) in roots.windows(2).enumerate() {
            let gap = pair[1] - pair[0];
            assert!(
                gap > spacing - 10_000_000 && gap < spacing + 10_000_000,
                "gap {i}: {gap}"
            );
        }
    }

    #[test]
    fn later_passes_move_every_time_and_the_search_workload_has_its_cardinalities() {
        let w = generate(&WorkloadOptions {
            pass_shift_nanos: 700_000_000,
            search_attributes: true,
            ..small()
        })
        .expect("workload");
        let r = &w.requests[0];
        let pass0 = ExportTraceServiceRequest::decode(r.body.clone()).expect("valid");
        let pass3 = ExportTraceServiceRequest::decode(r.body_for_pass(3)).expect("valid");
        let spans = |req: &ExportTraceServiceRequest| -> Vec<Span> {
            req.resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .flat_map(|ss| ss.spans.clone())
                .collect()
        };
        let (a, b) = (spans(&pass0), spans(&pass3));
        let shift = 3 * 700_000_000;
        assert!(!a.is_empty() && a.len() == b.len());
        assert!(a.iter().any(|s| !s.events.is_empty()));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.start_time_unix_nano + shift, y.start_time_unix_nano);
            assert_eq!(x.end_time_unix_nano + shift, y.end_time_unix_nano);
            for (e, f) in x.events.iter().zip(&y.events) {
                assert_eq!(e.time_unix_nano + shift, f.time_unix_nano);
            }
            // Nothing else moved.
            assert_eq!(x.attributes, y.attributes);
            assert_eq!(x.name, y.name);
        }
        let names: std::collections::BTreeSet<&str> = w
            .requests
            .iter()
            .flat_map(|r| spans(&ExportTraceServiceRequest::decode(r.body.clone()).expect("valid")))
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
            .leak()
            .iter()
            .map(String::as_str)
            .collect();
        assert!(names.len() > 100, "{} span names", names.len());
        assert!(a
            .iter()
            .filter(|s| s.parent_span_id.is_empty())
            .all(|s| s.attributes.iter().any(|kv| kv.key == "user.id")));
    }

    #[test]
    fn later_passes_rename_every_trace() {
        let w = generate(&small()).expect("workload");
        let r = &w.requests[0];
        let pass1 = ExportTraceServiceRequest::decode(r.body_for_pass(5)).expect("valid");
        let pass0 = ExportTraceServiceRequest::decode(r.body.clone()).expect("valid");
        let ids = |req: &ExportTraceServiceRequest| -> Vec<u128> {
            req.resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .flat_map(|ss| &ss.spans)
                .map(|s| u128::from_be_bytes(s.trace_id[..].try_into().expect("16")))
                .collect()
        };
        let (a, b) = (ids(&pass0), ids(&pass1));
        assert_eq!(a.len(), b.len());
        assert!(a.iter().zip(&b).all(|(x, y)| x ^ pass_mask(5) == *y));
        // A trace's copies differ in their leading bytes, so they do not
        // sort next to each other.
        assert!(a.iter().zip(&b).all(|(x, y)| x >> 64 != y >> 64));
        let sent = w
            .traces
            .iter()
            .find(|t| t.requests.contains(&0))
            .expect("request 0 carries a trace");
        assert!(b.contains(&sent.id_in_pass(5)));
    }

    #[test]
    fn pass_masks_are_distinct_and_only_the_first_is_zero() {
        assert_eq!(pass_mask(0), 0);
        let masks: std::collections::BTreeSet<u128> = (0..10_000).map(pass_mask).collect();
        assert_eq!(masks.len(), 10_000);
        let high: std::collections::BTreeSet<u64> =
            (1..10_000).map(|p| (pass_mask(p) >> 64) as u64).collect();
        assert_eq!(high.len(), 9_999);
        assert!(!high.contains(&0));
    }
}
