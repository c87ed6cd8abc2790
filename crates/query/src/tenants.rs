//! Reads scoped to the tenants a request names ([`ReadsFor`]): every
//! front-end (the query service, Jaeger, the Tempo API) asks for the
//! [`Reads`] of its request's tenants before anything else, so no read can
//! reach a store the request does not name.
//!
//! - [`StoreReads`]: the tenants' stores of this process
//!   ([`tracedb_lsm::Stores`]). One tenant reads its own store, or, with no
//!   store yet, [`NoStore`], which answers as an empty store would; several
//!   (`X-Scope-OrgID: a|b`) are read together by [`Together`].
//! - [`TierReads`]: the query tier's nodes, asked for the request's tenants.
//! - [`OneStore`]: one [`Reads`] for every request.

use std::{collections::BTreeMap, future::Future, sync::Arc};

use tonic::metadata::{Ascii, MetadataKey};
use tracedb_lsm::{index::TagScope, Stores, TimeRange, TraceId};
use tracedb_proto::tenant::{Tenants, SINGLE_TENANT};

use tracedb_traceql::metrics::MetricsEval;

use crate::{
    error::Error,
    fanout::NodeReads,
    metrics::MetricsRequest,
    read::{Answer, Dependencies, FoundTrace, LocalReads, Reads, TagKeys, TagValues},
    search::{Match, Search},
};

/// The [`Reads`] of the tenants a request names (`None`: the request came
/// without the tenancy layer, which only tests and tools do; it reads the
/// single tenant's store).
pub trait ReadsFor: Send + Sync + 'static {
    fn reads(&self, tenants: Option<&Tenants>) -> Arc<dyn Reads>;
}

/// The same [`Reads`] whatever the request names.
pub struct OneStore(pub Arc<dyn Reads>);

impl ReadsFor for OneStore {
    fn reads(&self, _: Option<&Tenants>) -> Arc<dyn Reads> {
        self.0.clone()
    }
}

/// The query tier's nodes: a request's tenants are named to every node in
/// the tenant header; without tenancy (`key` `None`) nothing is added.
pub struct TierReads {
    nodes: Arc<NodeReads>,
    key: Option<MetadataKey<Ascii>>,
}

impl TierReads {
    /// `header`: the tenant header of the nodes, with tenancy on.
    pub fn new(nodes: Arc<NodeReads>, header: Option<&str>) -> Result<Self, Error> {
        let key = header
            .map(|h| {
                MetadataKey::from_bytes(h.to_ascii_lowercase().as_bytes())
                    .map_err(|_| Error::InvalidArgument(format!("{h:?} is not a header name")))
            })
            .transpose()?;
        Ok(TierReads { nodes, key })
    }
}

impl ReadsFor for TierReads {
    fn reads(&self, tenants: Option<&Tenants>) -> Arc<dyn Reads> {
        match (&self.key, tenants) {
            (Some(key), Some(tenants)) => Arc::new(self.nodes.for_tenants(key, tenants)),
            _ => self.nodes.clone(),
        }
    }
}

/// The tenants' stores of this process.
pub struct StoreReads {
    stores: Arc<Stores>,
}

impl StoreReads {
    pub fn new(stores: Arc<Stores>) -> Self {
        StoreReads { stores }
    }

    fn one(&self, tenant: &tracedb_proto::tenant::TenantId) -> Arc<dyn Reads> {
        match self.stores.get(tenant) {
            Some(engine) => Arc::new(LocalReads::new(engine)),
            None => Arc::new(NoStore),
        }
    }
}

impl ReadsFor for StoreReads {
    fn reads(&self, tenants: Option<&Tenants>) -> Arc<dyn Reads> {
        match tenants.map(Tenants::ids) {
            None => {
                let single =
                    tracedb_proto::tenant::TenantId::new(SINGLE_TENANT).expect("a valid tenant ID");
                self.one(&single)
            }
            Some([one]) => self.one(one),
            Some(many) => Arc::new(Together(many.iter().map(|t| self.one(t)).collect())),
        }
    }
}

/// A tenant with no store: it has no spans, and answers as an empty store.
pub struct NoStore;

#[tonic::async_trait]
impl Reads for NoStore {
    async fn trace(&self, trace_id: TraceId, _: TimeRange) -> Result<FoundTrace, Error> {
        Err(Error::NotFound(trace_id))
    }

    async fn find(&self, _: Search) -> Result<Answer<Vec<Match>>, Error> {
        Ok(Answer::whole(Vec::new()))
    }

    async fn services(&self, _: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        Ok(Answer::whole(Vec::new()))
    }

    async fn operations(
        &self,
        _: String,
        _: Option<u8>,
        _: TimeRange,
    ) -> Result<Answer<Vec<(String, u8)>>, Error> {
        Ok(Answer::whole(Vec::new()))
    }

    async fn span_names(&self, _: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        Ok(Answer::whole(Vec::new()))
    }

    async fn tag_keys(&self, _: TimeRange) -> Result<Answer<TagKeys>, Error> {
        Ok(Answer::whole(TagKeys::new()))
    }

    async fn tag_values(
        &self,
        _: Option<TagScope>,
        _: String,
        _: TimeRange,
        _: String,
        _: usize,
    ) -> Result<Answer<TagValues>, Error> {
        Ok(Answer::whole(TagValues::new()))
    }

    async fn dependencies(&self, _: TimeRange) -> Result<Answer<Dependencies>, Error> {
        Ok(Answer::whole(Dependencies::new()))
    }

    async fn metrics(&self, request: MetricsRequest) -> Result<Answer<MetricsEval>, Error> {
        MetricsEval::new(
            &request.query,
            request.grid,
            request.max_series,
            request.max_exemplars,
        )
        .map(Answer::whole)
        .map_err(|e| Error::InvalidArgument(e.to_string()))
    }
}

/// Several tenants' stores read as one: a trace is the spans of it in each
/// (each span once), a search the newest matches of all (a trace in several
/// stores once, its matches combined), the lists their union and the
/// dependencies their sum. An answer is partial if any store's is. Each
/// store evaluates a query on its own part of a trace, as Tempo evaluates
/// each tenant's.
pub struct Together(pub Vec<Arc<dyn Reads>>);

impl Together {
    /// `f` of every store, one after another, and the partial reasons of all.
    async fn each<T, F>(
        &self,
        f: impl Fn(Arc<dyn Reads>) -> F + Send + Sync,
    ) -> Result<(Vec<T>, Vec<String>), Error>
    where
        T: Send,
        F: Future<Output = Result<Answer<T>, Error>> + Send,
    {
        let mut values = Vec::with_capacity(self.0.len());
        let mut partial = Vec::new();
        for reads in &self.0 {
            let answer = f(reads.clone()).await?;
            values.push(answer.value);
            partial.extend(answer.partial);
        }
        Ok((values, partial))
    }

    /// The sorted union of the lists `f` answers for each store.
    async fn union<T, F>(
        &self,
        f: impl Fn(Arc<dyn Reads>) -> F + Send + Sync,
    ) -> Result<Answer<Vec<T>>, Error>
    where
        T: Ord + Send,
        F: Future<Output = Result<Answer<Vec<T>>, Error>> + Send,
    {
        let (lists, partial) = self.each(f).await?;
        let mut all: Vec<T> = lists.into_iter().flatten().collect();
        all.sort();
        all.dedup();
        Ok(Answer {
            value: all,
            partial,
        })
    }
}

#[tonic::async_trait]
impl Reads for Together {
    async fn trace(&self, trace_id: TraceId, range: TimeRange) -> Result<FoundTrace, Error> {
        let mut spans = Vec::new();
        let mut partial = Vec::new();
        let mut unreadable = None;
        for reads in &self.0 {
            match reads.trace(trace_id, range).await {
                Ok(found) => {
                    let (s, p) = found.into_parts();
                    spans.extend(s);
                    partial.extend(p);
                }
                Err(Error::NotFound(_)) => {}
                Err(e @ Error::Unreadable { .. }) => {
                    partial.push(e.to_string());
                    unreadable = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        FoundTrace::new(trace_id, spans, partial, |_| {
            unreadable.unwrap_or(Error::NotFound(trace_id))
        })
    }

    async fn find(&self, search: Search) -> Result<Answer<Vec<Match>>, Error> {
        let limit = search.limit;
        let (lists, partial) = self
            .each(|reads| {
                let search = search.clone();
                async move { reads.find(search).await }
            })
            .await?;
        // A trace with spans in several stores is one row: its matches
        // combined, as the parts of a trace on several nodes are.
        let mut all: Vec<Match> = Vec::new();
        let mut at: std::collections::HashMap<TraceId, usize> = std::collections::HashMap::new();
        for m in lists.into_iter().flatten() {
            match at.get(&m.trace_id) {
                Some(&i) => crate::search::combine(&mut all[i], &m, search.spans_per_spanset),
                None => {
                    at.insert(m.trace_id, all.len());
                    all.push(m);
                }
            }
        }
        all.sort_by(|a, b| {
            b.start_unix_nano
                .cmp(&a.start_unix_nano)
                .then(a.trace_id.cmp(&b.trace_id))
        });
        if limit > 0 {
            all.truncate(limit);
        }
        Ok(Answer {
            value: all,
            partial,
        })
    }

    async fn services(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        self.union(|r| async move { r.services(range).await }).await
    }

    async fn operations(
        &self,
        service: String,
        kind: Option<u8>,
        range: TimeRange,
    ) -> Result<Answer<Vec<(String, u8)>>, Error> {
        self.union(|r| {
            let service = service.clone();
            async move { r.operations(service, kind, range).await }
        })
        .await
    }

    async fn span_names(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        self.union(|r| async move { r.span_names(range).await })
            .await
    }

    async fn tag_keys(&self, range: TimeRange) -> Result<Answer<TagKeys>, Error> {
        let (sets, partial) = self
            .each(|r| async move { r.tag_keys(range).await })
            .await?;
        Ok(Answer {
            value: sets.into_iter().flatten().collect(),
            partial,
        })
    }

    async fn tag_values(
        &self,
        scope: Option<TagScope>,
        key: String,
        range: TimeRange,
        query: String,
        limit: usize,
    ) -> Result<Answer<TagValues>, Error> {
        let (sets, partial) = self
            .each(|r| {
                let (key, query) = (key.clone(), query.clone());
                async move { r.tag_values(scope, key, range, query, limit).await }
            })
            .await?;
        let mut answer = Answer {
            value: sets.into_iter().flatten().collect(),
            partial,
        };
        // The stores' answers together: the same limits as one store's.
        crate::read::limit_values(&mut answer, limit);
        Ok(answer)
    }

    async fn dependencies(&self, range: TimeRange) -> Result<Answer<Dependencies>, Error> {
        let (maps, partial) = self
            .each(|r| async move { r.dependencies(range).await })
            .await?;
        let mut value = BTreeMap::new();
        for (edge, calls) in maps.into_iter().flatten() {
            *value.entry(edge).or_insert(0) += calls;
        }
        Ok(Answer { value, partial })
    }

    /// Each tenant's series, added: a series of several stores is one.
    async fn metrics(&self, request: MetricsRequest) -> Result<Answer<MetricsEval>, Error> {
        let (evals, partial) = self
            .each(|r| {
                let request = request.clone();
                async move { r.metrics(request).await }
            })
            .await?;
        let mut evals = evals.into_iter();
        let mut value = match evals.next() {
            Some(first) => first,
            None => return NoStore.metrics(request).await,
        };
        for other in evals {
            value.merge(other);
        }
        Ok(Answer { value, partial })
    }
}
