//! [`Reads`] over many storage nodes: what the query tier (`tracedb query`)
//! answers with. The nodes are given as replica groups: every group holds a
//! full copy of the data (the OpenTelemetry Collector's `load_balancing`
//! exporter, one per group, routes each trace by its ID to one node of the
//! group), and a trace may lie on two nodes of one group after the ring
//! changed.
//!
//! Every read asks every node at once over `tracedb.query.v1.QueryService`,
//! each call bounded by the node timeout, and merges what they answer. It
//! stops waiting as soon as one group has answered in full with something
//! found (a full copy: a hung node of another group costs nothing then);
//! otherwise, and always for dependencies, it waits for every node or its
//! timeout. It merges:
//!
//! - a trace: the union of the nodes' spans, each (trace ID, span ID) once.
//!   It is whole when some group answered in full (every node of it
//!   answered, none partial); otherwise each node that failed, timed out or
//!   answered partial is a reason in [`FoundTrace::partial`]. NOT_FOUND only
//!   when every node said so; no span and no full answer is UNAVAILABLE
//!   ([`Error::Unavailable`]): the trace may be on a node that did not answer;
//! - a search: one row per trace. Within a group a trace's rows from several
//!   nodes are parts of it (start, end, span and error counts combined);
//!   across groups they are copies (the row with the most spans is kept).
//!   Newest first, the limit applied after merging;
//! - services, operations, span names, tag keys and values: the union;
//! - dependencies: counted per copy (a group's nodes summed), never once per
//!   copy added up: each call is counted as the group that answered in full
//!   and saw most of it (a trace split over two nodes of a group loses the
//!   calls between its parts in that group).
//!
//! Lists and searches are partial on the same rule as traces, and
//! UNAVAILABLE when no node answered at all.
//!
//! What each node said and what an answer made of it is (whole, partial,
//! NOT_FOUND, UNAVAILABLE) is `gather`'s; combining their spans, lists and
//! search rows is `merge`'s. Who the nodes are is the `members` module's
//! business: fixed addresses, and
//! `dns:///` names resolved again and again. A group known to lack a node
//! (a name resolving to fewer addresses than it did lately) never answers
//! in full, and a trace is NOT_FOUND only when no group lacks one.

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use tonic::{
    codegen::http::uri::PathAndQuery,
    metadata::{Ascii, MetadataKey, MetadataValue},
    transport::Channel,
    Code, Response, Status,
};
use tracedb_lsm::{
    index::{TagScope, ValueKind},
    TimeRange, TraceId,
};
use tracedb_proto::{
    codec::{RawCodec, RawRequest},
    query::v1::{
        query_service_client::QueryServiceClient, GetOperationsRequest, GetTagValuesRequest,
        GetTraceRequest, SearchTracesRequest, TagScope as ProtoTagScope, TimeWindow,
    },
    tenant::Tenants,
};

mod gather;
mod members;
mod merge;

use gather::{found_in_full, join_in_order, CallerGone, Gathered, NodeOutcome, Outcome, Wait};
use members::Members;
pub use members::{
    Connect, Dial, Group, Membership, Source, DEFAULT_DNS_FORGET, DEFAULT_DNS_REFRESH,
};
use merge::{answered_by_group, merge_rows, spans_of, union};

use tracedb_traceql::metrics::MetricsEval;

use crate::{
    error::Error,
    metrics::MetricsRequest,
    read::{Answer, Dependencies, FoundTrace, Reads, TagKeys, TagValues},
    search::{Match, Search},
    service::{proto_scope, PARTIAL_REASON_HEADER},
};

/// The default bound on one node's answer: long enough for a cold GetTrace
/// of a large trace, short enough that a hung node does not hold an answer.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(3);
/// The bound on one node's answer to a metrics query, which reads the
/// spans of every trace in its window: far longer than a lookup's.
pub const METRICS_NODE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest message accepted from a node (nodes send under 4 MiB).
const MAX_NODE_MESSAGE: usize = 8 << 20;
/// QueryService's GetTrace, called with the raw codec.
const GET_TRACE_PATH: &str = "/tracedb.query.v1.QueryService/GetTrace";

/// One storage node and what the tier counts of it.
pub struct Node {
    /// `host:port`: as given in `--nodes`, or an address a `dns:///` name
    /// resolved to.
    pub addr: String,
    /// Index of its replica group.
    pub group: usize,
    channel: Channel,
    client: QueryServiceClient<Channel>,
    stats: NodeStats,
}

/// Calls to one node since start.
#[derive(Debug, Default)]
pub struct NodeStats {
    pub calls: AtomicU64,
    /// Calls that failed (an error other than NOT_FOUND) or timed out.
    pub errors: AtomicU64,
    pub timeouts: AtomicU64,
    /// Summed time from call to full answer, in microseconds.
    pub micros: AtomicU64,
}

impl Node {
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// The connection to the node, for other services (health checks).
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }
}

/// [`Reads`] over replica groups of storage nodes.
pub struct NodeReads {
    members: Arc<Members>,
    options: Options,
    /// The header and value naming the tenants of the request this is for
    /// (see [`NodeReads::for_tenants`]); every call to a node carries it.
    tenants: Option<(MetadataKey<Ascii>, MetadataValue<Ascii>)>,
}

/// How the tier treats its nodes.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The bound on one node's answer to one call.
    pub node_timeout: Duration,
    /// How often `dns:///` names are resolved again.
    pub dns_refresh: Duration,
    /// How long a `dns:///` name's larger answer is remembered: until then,
    /// fewer addresses leave its group missing nodes.
    pub dns_forget: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            node_timeout: DEFAULT_NODE_TIMEOUT,
            dns_refresh: DEFAULT_DNS_REFRESH,
            dns_forget: DEFAULT_DNS_FORGET,
        }
    }
}

impl NodeReads {
    /// Clients for `groups` of node entries (`host:port` or
    /// `dns:///HOST:PORT`, plaintext). The connections are made on first
    /// use, so a node that is down at start only fails its own calls.
    pub fn new(groups: Vec<Vec<String>>, timeout: Duration) -> Result<Self, Error> {
        let options = Options {
            node_timeout: timeout,
            ..Options::default()
        };
        Self::with_channels(groups, options, move |dial| {
            Ok(Channel::from_shared(format!("http://{}", dial.addr))
                .map_err(|e| format!("{e}"))?
                .connect_timeout(timeout)
                .tcp_nodelay(true)
                .connect_lazy())
        })
    }

    /// [`NodeReads::new`] with the channels `connect` makes for each node
    /// (TLS, for one); each should connect lazily. `dns:///` names are not
    /// resolved until [`NodeReads::resolve`].
    pub fn with_channels(
        groups: Vec<Vec<String>>,
        options: Options,
        connect: impl Fn(Dial<'_>) -> Result<Channel, String> + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        Ok(NodeReads {
            members: Arc::new(Members::new(groups, options.dns_forget, Box::new(connect))?),
            options,
            tenants: None,
        })
    }

    /// The same nodes, read for `tenants`: every call names them in the
    /// metadata `key` (`a|b` for several), as the nodes' tenancy expects.
    pub fn for_tenants(&self, key: &MetadataKey<Ascii>, tenants: &Tenants) -> NodeReads {
        let value = MetadataValue::try_from(tenants.to_string()).expect("tenant IDs are ASCII");
        NodeReads {
            members: self.members.clone(),
            options: self.options,
            tenants: Some((key.clone(), value)),
        }
    }

    /// `message` as a call to a node, naming this read's tenants.
    fn call<T>(&self, message: T) -> tonic::Request<T> {
        scoped(&self.tenants, message)
    }

    /// The replica groups as they are now.
    pub fn groups(&self) -> Arc<Membership> {
        self.members.current()
    }

    /// Every node now, group by group.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.groups()
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter().cloned())
            .collect()
    }

    pub fn node_timeout(&self) -> Duration {
        self.options.node_timeout
    }

    /// Resolves the `dns:///` names once.
    pub async fn resolve(&self) {
        self.members.resolve(self.options.node_timeout).await;
    }

    /// Resolves the `dns:///` names every refresh interval until `stop`
    /// resolves; returns at once if there are none.
    pub async fn keep_resolving(&self, stop: impl Future<Output = ()>) {
        if !self.members.has_names() {
            return;
        }
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.options.dns_refresh) => self.resolve().await,
                _ = &mut stop => return,
            }
        }
    }

    /// [`NodeReads::ask_nodes`] with each node's QueryService client, done
    /// once one group answered in full.
    async fn ask<T, F, Fut>(&self, call: F) -> Gathered<T>
    where
        T: Send + 'static,
        F: Fn(QueryServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<(T, Option<String>), Status>> + Send + 'static,
    {
        self.ask_nodes(Wait::FirstFullGroup, |node| call(node.client.clone()))
            .await
    }

    /// Asks every node at once; `call` makes one node's request and reads
    /// its whole answer. `wait` says when the answer is complete.
    async fn ask_nodes<T, F, Fut>(&self, wait: Wait, call: F) -> Gathered<T>
    where
        T: Send + 'static,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = Result<(T, Option<String>), Status>> + Send + 'static,
    {
        self.ask_nodes_within(wait, self.options.node_timeout, call)
            .await
    }

    /// [`NodeReads::ask_nodes`] with each call bounded by `timeout` (at
    /// least the tier's node timeout).
    async fn ask_nodes_within<T, F, Fut>(
        &self,
        wait: Wait,
        timeout: Duration,
        call: F,
    ) -> Gathered<T>
    where
        T: Send + 'static,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = Result<(T, Option<String>), Status>> + Send + 'static,
    {
        let timeout = timeout.max(self.options.node_timeout);
        let membership = self.members.current();
        // Each call is a task of its own that runs to its end even when the
        // answer no longer waits for it, so a hung node's timeouts are
        // counted however soon another group answered; but not when the
        // caller went away (this future dropped): then it is dropped, and
        // its node stops.
        let gone = CallerGone::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut calls = 0;
        for (g, group) in membership.groups.iter().enumerate() {
            for (n, node) in group.nodes.iter().enumerate() {
                let answer = call(node);
                let node = node.clone();
                let done = done_tx.clone();
                let caller_gone = gone.watch();
                calls += 1;
                tokio::spawn(async move {
                    let started = Instant::now();
                    let answer = tokio::select! {
                        answer = tokio::time::timeout(timeout, answer) => answer,
                        () = caller_gone => return,
                    };
                    let outcome = match answer {
                        Ok(Ok((value, partial))) => Outcome::Answered(value, partial),
                        Ok(Err(status)) if status.code() == Code::NotFound => Outcome::NotFound,
                        Ok(Err(status)) => {
                            node.stats.errors.fetch_add(1, Ordering::Relaxed);
                            Outcome::Failed(format!("{:?}: {}", status.code(), status.message()))
                        }
                        Err(_) => {
                            node.stats.errors.fetch_add(1, Ordering::Relaxed);
                            node.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                            Outcome::Failed(format!("no answer within {timeout:?}"))
                        }
                    };
                    let stats = &node.stats;
                    stats.calls.fetch_add(1, Ordering::Relaxed);
                    stats
                        .micros
                        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    // The receiver is gone once the answer was whole without it.
                    let _ = done.send((g, n, node, outcome));
                });
            }
        }
        let mut groups: Vec<Vec<Option<NodeOutcome<T>>>> = membership
            .groups
            .iter()
            .map(|group| group.nodes.iter().map(|_| None).collect())
            .collect();
        drop(done_tx);
        for _ in 0..calls {
            // None only if a call's task panicked (the runtime is shutting down).
            let Some((g, n, node, outcome)) = done_rx.recv().await else {
                break;
            };
            groups[g][n] = Some((node, outcome));
            if wait == Wait::FirstFullGroup
                && membership.groups[g].missing.is_empty()
                && found_in_full(&groups[g])
            {
                // A group holds a full copy: the answer is whole without the
                // other groups, however slow they are.
                break;
            }
        }
        gone.answered();
        Gathered {
            missing: membership
                .groups
                .iter()
                .map(|g| g.missing.clone())
                .collect(),
            groups: groups
                .into_iter()
                .zip(&membership.groups)
                .map(|(answers, group)| {
                    answers
                        .into_iter()
                        .zip(&group.nodes)
                        .map(|(a, node)| {
                            a.unwrap_or_else(|| {
                                (
                                    node.clone(),
                                    Outcome::Failed(
                                        "not waited for: another group answered in full".into(),
                                    ),
                                )
                            })
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

/// Candidate traces [`NodeReads::find_whole`] reads at once.
const WHOLE_READS_AT_ONCE: usize = 8;

/// A node response's value and its partial reason, if it marked one.
fn with_partial<T>(response: Response<T>) -> (T, Option<String>) {
    let partial = response
        .metadata()
        .get(PARTIAL_REASON_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            response
                .metadata()
                .get(crate::service::PARTIAL_HEADER)
                .map(|_| "partial answer".to_owned())
        });
    (response.into_inner(), partial)
}

fn window(range: TimeRange) -> TimeWindow {
    TimeWindow {
        start_time_unix_nano: range.start_unix_nano,
        end_time_unix_nano: range.end_unix_nano,
    }
}

/// GetTrace from one node, each `TracesData` message as the bytes it came
/// in: the spans are cut out of them without decoding ([`spans_of`]).
async fn raw_trace(
    channel: Channel,
    request: tonic::Request<GetTraceRequest>,
) -> Result<(Vec<Bytes>, Option<String>), Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_NODE_MESSAGE);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("connecting: {e}")))?;
    let response = grpc
        .server_streaming(
            request,
            PathAndQuery::from_static(GET_TRACE_PATH),
            RawCodec::<GetTraceRequest, RawRequest>::default(),
        )
        .await?;
    let (mut stream, partial) = with_partial(response);
    let mut messages = Vec::new();
    while let Some(RawRequest(bytes)) = stream.message().await? {
        messages.push(bytes);
    }
    Ok((messages, partial))
}

impl NodeReads {
    /// A TraceQL search whose filters each hold on one span
    /// ([`crate::search::per_span_only`]): asked of the nodes, the parts of
    /// a trace combined within a group, the fullest copy across groups.
    async fn find_per_span(&self, search: &Search) -> Result<Answer<Vec<Match>>, Error> {
        let limit = search.limit.clamp(1, crate::search::MAX_LIMIT);
        let spss = search.spans_per_spanset;
        let request = SearchTracesRequest {
            query: search.text.clone(),
            start_time_unix_nano: search.start_unix_nano,
            end_time_unix_nano: search.end_unix_nano,
            // As asked: a node marks an answer cut at the most one search
            // answers.
            limit: u32::try_from(search.limit.max(1)).unwrap_or(u32::MAX),
            spans_per_spanset: u32::try_from(spss).unwrap_or(u32::MAX),
            candidates_only: search.candidates_only,
            span_window: search.span_window,
            ..SearchTracesRequest::default()
        };
        let gathered = self
            .ask(|mut client| {
                let request = self.call(request.clone());
                async move { Ok(with_partial(client.search_traces(request).await?)) }
            })
            .await;
        // Within a group, the parts of a trace on several nodes combine
        // (exactly, for the queries `per_span_only` admits).
        gathered.answer(|gathered| {
            merge_rows(
                &answered_by_group(&gathered.groups),
                crate::search::from_proto,
                |m| (m.trace_id, m.start_unix_nano, m.span_count),
                |m, other| crate::search::combine(m, other, spss),
                limit,
            )
        })
    }

    /// Any other TraceQL search, exactly: the nodes find candidates with the
    /// query's per-span relaxation ([`crate::search::relaxed`]), newest first
    /// in pages, and the tier reads each candidate whole and evaluates the
    /// query on it, as a node does with its own candidates. A candidate's
    /// start as the nodes report it is never earlier than the trace's (a part
    /// starts no earlier than its trace), so once `limit` matches are newer
    /// than the next candidate, no later one can be newer.
    async fn find_whole(&self, search: &Search) -> Result<Answer<Vec<Match>>, Error> {
        let mut answer = self.find_whole_within(search).await?;
        answer
            .partial
            .extend(crate::search::over_limit(search.limit, answer.value.len()));
        Ok(answer)
    }

    /// [`NodeReads::find_whole`], but for the mark of a `limit` over the
    /// most one search answers.
    async fn find_whole_within(&self, search: &Search) -> Result<Answer<Vec<Match>>, Error> {
        let limit = search.limit.clamp(1, crate::search::MAX_LIMIT);
        let relaxed = search.query.relaxed();
        let text = relaxed.to_string();
        let compiled = Arc::new(
            tracedb_traceql::Compiled::new(relaxed).map_err(|e| Error::Internal(e.to_string()))?,
        );
        let newest_first = |a: (u64, TraceId), b: (u64, TraceId)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        let mut found: Vec<Match> = Vec::new();
        let mut partial: Vec<String> = Vec::new();
        let mut seen: std::collections::HashSet<TraceId> = std::collections::HashSet::new();
        // A node answers at most MAX_LIMIT rows: a page asked larger would
        // come back short and read as the last, ending the search early.
        let most = crate::search::MAX_LIMIT;
        let mut page = (4 * limit).clamp(128, most);
        let mut end = search.end_unix_nano;
        loop {
            let candidates = self
                .find_per_span(&Search {
                    query: compiled.clone(),
                    text: text.clone(),
                    start_unix_nano: search.start_unix_nano,
                    end_unix_nano: end,
                    limit: page,
                    spans_per_spanset: 1,
                    // The nodes name candidates from their indexes; the
                    // query is evaluated here on each trace read whole.
                    candidates_only: true,
                    span_window: search.span_window,
                })
                .await?;
            for reason in candidates.partial {
                if !partial.contains(&reason) {
                    partial.push(reason);
                }
            }
            let exhausted = candidates.value.len() < page;
            let last = candidates.value.last().map(|m| m.start_unix_nano);
            let fresh: Vec<Match> = candidates
                .value
                .into_iter()
                .filter(|c| seen.insert(c.trace_id))
                .collect();
            let new = fresh.len();
            // At most MAX_INSPECTED traces read whole, as on a node.
            let allowed = crate::search::MAX_INSPECTED.saturating_sub(seen.len() - new);
            let capped = new > allowed;
            let fresh = &fresh[..new.min(allowed)];
            // Whether no candidate from this one on can be newer than the
            // `limit`th match: candidates come newest first.
            let done = |found: &[Match], candidate: &Match| {
                found.len() >= limit && {
                    let kth = &found[limit - 1];
                    newest_first(
                        (kth.start_unix_nano, kth.trace_id),
                        (candidate.start_unix_nano, candidate.trace_id),
                    )
                    .is_lt()
                }
            };
            // A few candidates are read at once (the nodes answer each in
            // about a round trip); they are evaluated in order, so the answer
            // and where the walk stops are those of reading one at a time.
            for batch in fresh.chunks(WHOLE_READS_AT_ONCE) {
                let wanted = batch.iter().take_while(|c| !done(&found, c)).count();
                let traces = join_in_order(
                    batch[..wanted]
                        .iter()
                        .map(|c| self.trace(c.trace_id, TimeRange::ALL)),
                )
                .await;
                for (candidate, trace) in batch.iter().zip(traces) {
                    if done(&found, candidate) {
                        return Ok(Answer {
                            value: found,
                            partial,
                        });
                    }
                    let trace = match trace {
                        Ok(trace) => trace,
                        // Gone since it was found (retention).
                        Err(Error::NotFound(_)) => continue,
                        Err(e) => return Err(e),
                    };
                    for reason in trace.partial() {
                        if !partial.contains(reason) {
                            partial.push(reason.clone());
                        }
                    }
                    match crate::search::evaluate(search, candidate.trace_id, trace.spans()) {
                        Ok(Some(m)) => {
                            let at = found.partition_point(|f| {
                                newest_first(
                                    (f.start_unix_nano, f.trace_id),
                                    (m.start_unix_nano, m.trace_id),
                                )
                                .is_lt()
                            });
                            found.insert(at, m);
                            found.truncate(limit);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            partial.push(format!("trace {} not evaluated: {e}", candidate.trace_id))
                        }
                    }
                }
                if wanted < batch.len() {
                    // The rest of the batch, and of the page, is older.
                    return Ok(Answer {
                        value: found,
                        partial,
                    });
                }
            }
            if capped {
                partial.push(crate::search::stopped_inspecting(
                    crate::search::MAX_INSPECTED,
                ));
                break;
            }
            if exhausted {
                break;
            }
            if new == 0 {
                partial.push(format!(
                    "more than {page} candidate traces start at the same nanosecond; older ones were not searched"
                ));
                break;
            }
            // The next page: candidates starting no later than the last one
            // (those seen are skipped).
            end = last.unwrap_or(0);
            page = (page * 2).min(most);
        }
        Ok(Answer {
            value: found,
            partial,
        })
    }
}

#[tonic::async_trait]
impl Reads for NodeReads {
    async fn trace(&self, trace_id: TraceId, range: TimeRange) -> Result<FoundTrace, Error> {
        let request = GetTraceRequest {
            trace_id: Bytes::copy_from_slice(&trace_id.0),
            start_time_unix_nano: range.start_unix_nano,
            end_time_unix_nano: range.end_unix_nano,
        };
        let gathered = self
            .ask_nodes(Wait::FirstFullGroup, |node| {
                raw_trace(node.channel(), self.call(request.clone()))
            })
            .await;
        let mut spans = Vec::new();
        let mut unreadable = Vec::new();
        for messages in gathered.answered() {
            unreadable.extend(spans_of(messages, &mut spans)?);
        }
        let mut partial = gathered.partial();
        partial.extend(unreadable);
        FoundTrace::new(trace_id, spans, partial, |partial| {
            if gathered.all_not_found() {
                Error::NotFound(trace_id)
            } else if partial.is_empty() {
                Error::Unavailable(format!("trace {trace_id}: a node answered without spans"))
            } else {
                Error::Unavailable(format!(
                    "trace {trace_id} may be on a node that did not answer: {}",
                    crate::read::describe(&partial)
                ))
            }
        })
    }

    async fn find(&self, search: Search) -> Result<Answer<Vec<Match>>, Error> {
        // A query whose text means something else to the nodes (a Jaeger
        // `exists` on a typed column) is evaluated here.
        if crate::search::per_span_only(&search.query.query) && search.query.text_means_it() {
            self.find_per_span(&search).await
        } else {
            self.find_whole(&search).await
        }
    }

    async fn services(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        let gathered = self
            .ask(|mut client| {
                let request = self.call(window(range));
                async move {
                    let (names, partial) = with_partial(client.get_services(request).await?);
                    Ok((names.names, partial))
                }
            })
            .await;
        gathered.answer(|g| union(g.answered().cloned()).into_iter().collect())
    }

    async fn operations(
        &self,
        service: String,
        kind: Option<u8>,
        range: TimeRange,
    ) -> Result<Answer<Vec<(String, u8)>>, Error> {
        let request = GetOperationsRequest {
            service,
            span_kind: kind.map_or(0, u32::from),
            window: Some(window(range)),
        };
        let gathered = self
            .ask(|mut client| {
                let request = self.call(request.clone());
                async move {
                    let (ops, partial) = with_partial(client.get_operations(request).await?);
                    let ops: Vec<(String, u8)> = ops
                        .operations
                        .into_iter()
                        .map(|o| (o.name, u8::try_from(o.span_kind).unwrap_or(0)))
                        .collect();
                    Ok((ops, partial))
                }
            })
            .await;
        gathered.answer(|g| union(g.answered().cloned()).into_iter().collect())
    }

    async fn span_names(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        let gathered = self
            .ask(|mut client| {
                let request = self.call(window(range));
                async move {
                    let (names, partial) = with_partial(client.get_span_names(request).await?);
                    Ok((names.names, partial))
                }
            })
            .await;
        gathered.answer(|g| union(g.answered().cloned()).into_iter().collect())
    }

    async fn tag_keys(&self, range: TimeRange) -> Result<Answer<TagKeys>, Error> {
        let gathered = self
            .ask(|mut client| {
                let request = self.call(window(range));
                async move {
                    let (keys, partial) = with_partial(client.get_tag_keys(request).await?);
                    let keys: Vec<(TagScope, String)> = keys
                        .keys
                        .into_iter()
                        .filter_map(|k| {
                            let scope = match ProtoTagScope::try_from(k.scope).ok()? {
                                ProtoTagScope::Resource => TagScope::Resource,
                                ProtoTagScope::Span => TagScope::Span,
                                ProtoTagScope::Any => return None,
                            };
                            Some((scope, k.key))
                        })
                        .collect();
                    Ok((keys, partial))
                }
            })
            .await;
        gathered.answer(|g| union(g.answered().cloned()))
    }

    async fn tag_values(
        &self,
        scope: Option<TagScope>,
        key: String,
        range: TimeRange,
        query: String,
        limit: usize,
    ) -> Result<Answer<TagValues>, Error> {
        let request = GetTagValuesRequest {
            scope: proto_scope(scope).into(),
            key,
            window: Some(window(range)),
            query,
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        };
        let gathered = self
            .ask(|mut client| {
                let request = self.call(request.clone());
                async move {
                    let (names, partial) = with_partial(client.get_tag_values(request).await?);
                    // A node that names no types (an older one) lists strings.
                    let kind = |i: usize| match names.types.get(i).map(String::as_str) {
                        Some("int") => ValueKind::Int,
                        Some("float") => ValueKind::Float,
                        Some("bool") => ValueKind::Bool,
                        _ => ValueKind::Str,
                    };
                    let values: Vec<(String, ValueKind)> = names
                        .names
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (v.clone(), kind(i)))
                        .collect();
                    Ok((values, partial))
                }
            })
            .await;
        let mut answer = gathered.answer(|g| union(g.answered().cloned()))?;
        // The nodes' answers together: the same limits as one node's.
        crate::read::limit_values(&mut answer, limit);
        Ok(answer)
    }

    async fn dependencies(&self, range: TimeRange) -> Result<Answer<Dependencies>, Error> {
        let gathered = self
            .ask_nodes(Wait::Every, |node| {
                let mut client = node.client.clone();
                let request = self.call(window(range));
                async move {
                    let (found, partial) = with_partial(client.get_dependencies(request).await?);
                    Ok((found.dependencies, partial))
                }
            })
            .await;
        gathered.answer(|g| {
            // Each group's calls are one copy's, summed over its nodes. A
            // trace split over two nodes of a group loses the calls between
            // its parts there, so each call is counted as the copy that saw
            // most of it: the most per (parent, child) over the groups that
            // answered in full (over all groups when none did).
            let full: Vec<usize> = (0..g.groups.len()).filter(|&i| g.is_full(i)).collect();
            let candidates: Vec<usize> = if full.is_empty() {
                (0..g.groups.len()).collect()
            } else {
                full
            };
            let mut out: Dependencies = BTreeMap::new();
            for group in candidates {
                let mut calls: Dependencies = BTreeMap::new();
                for (_, outcome) in &g.groups[group] {
                    if let Outcome::Answered(found, _) = outcome {
                        for d in found {
                            *calls
                                .entry((d.parent.clone(), d.child.clone()))
                                .or_insert(0) += d.call_count;
                        }
                    }
                }
                for (edge, n) in calls {
                    let best = out.entry(edge).or_insert(0);
                    *best = (*best).max(n);
                }
            }
            out
        })
    }

    /// Each node counts the spans it holds and sends its series raw; the
    /// series of one replica group's nodes are added (a trace split over two
    /// nodes is counted span by span where each span lies), and one group
    /// answers: the first that answered in full, else the one with the most
    /// nodes answering, marked partial. A query whose spans depend on other
    /// spans of their trace (structural operators, trace-level fields, the
    /// nested-set numbers) would count a split trace's parts apart: refused.
    async fn metrics(&self, request: MetricsRequest) -> Result<Answer<MetricsEval>, Error> {
        if !crate::search::per_span_only(&request.query.query) {
            return Err(Error::InvalidArgument(
                "through tracedb query, metrics answer queries whose conditions each hold on one span; \
                 structural operators, pipelines, trace-level fields and nested-set intrinsics \
                 (other than nestedSetParent < 0) are not answered here yet: ask a storage node"
                    .into(),
            ));
        }
        let message = crate::metrics::node_request(&request);
        let gathered = self
            .ask_nodes_within(Wait::FirstFullGroup, METRICS_NODE_TIMEOUT, |node| {
                let mut client = node.client.clone();
                let request = self.call(message.clone());
                async move {
                    let (found, partial) = with_partial(client.query_metrics(request).await?);
                    Ok((found, partial))
                }
            })
            .await;
        if gathered.none_answered() {
            return Err(gathered.unavailable());
        }
        let fresh = || {
            MetricsEval::new(
                &request.query,
                request.grid,
                request.max_series,
                request.max_exemplars,
            )
            .map_err(|e| Error::InvalidArgument(e.to_string()))
        };
        let answered = |g: usize| {
            gathered.groups[g]
                .iter()
                .filter(|(_, o)| matches!(o, Outcome::Answered(..)))
                .count()
        };
        let chosen = gathered.full_group().unwrap_or_else(|| {
            (0..gathered.groups.len())
                .max_by_key(|&g| (answered(g), std::cmp::Reverse(g)))
                .unwrap_or(0)
        });
        let mut partial = gathered.partial();
        let mut value = fresh()?;
        for (node, outcome) in &gathered.groups[chosen] {
            if let Outcome::Answered(found, _) = outcome {
                let raw = crate::metrics::raw_from_proto(found.raw_series.clone())
                    .and_then(|raw| value.add_raw(raw, found.series_capped));
                if let Err(why) = raw {
                    partial.push(format!("node {}: series not added: {why}", node.addr));
                }
                partial.extend(found.partial.iter().cloned());
            }
        }
        partial.sort();
        partial.dedup();
        Ok(Answer { value, partial })
    }
}

/// `message` as a call naming `tenants` (header and value), if any.
fn scoped<T>(
    tenants: &Option<(MetadataKey<Ascii>, MetadataValue<Ascii>)>,
    message: T,
) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some((key, value)) = tenants {
        request.metadata_mut().insert(key.clone(), value.clone());
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracedb_lsm::SpanId;

    #[test]
    fn node_answers_are_cut_into_spans_and_unreadable_ones_are_named() {
        use prost::Message;
        use tracedb_proto::trace::v1::{ResourceSpans, ScopeSpans, Span as OtlpSpan, TracesData};
        let span = |id: u8| OtlpSpan {
            trace_id: vec![7; 16].into(),
            span_id: vec![id; 8].into(),
            name: format!("op-{id}"),
            start_time_unix_nano: 1_000,
            end_time_unix_nano: 2_000,
            ..Default::default()
        };
        let data = TracesData {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(1), span(0)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let mut out = Vec::new();
        let left_out = spans_of(&[Bytes::from(data.encode_to_vec())], &mut out).expect("scan");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].span_id, SpanId([1; 8]));
        assert_eq!(out[0].payload, Bytes::from(span(1).encode_to_vec()));
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert!(
            left_out[0].starts_with("1 spans from a node"),
            "{left_out:?}"
        );
        assert!(spans_of(&[Bytes::from_static(&[0x0a, 0x05, 1])], &mut out).is_err());
    }
}
