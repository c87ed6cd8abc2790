//! Who the nodes of each replica group are. A group's entries are node
//! addresses (`host:port`, one node each) or `dns:///HOST:PORT` names (a
//! Kubernetes headless Service, say): every address HOST resolves to (A and
//! AAAA records, through the system resolver) is a node, and the name is
//! resolved again every refresh interval.
//!
//! A name that resolves to fewer addresses than it did within the forget
//! window leaves its group *missing* nodes: their data cannot be read, so
//! the group no longer answers in full and answers are marked partial
//! unless another group does. A pod that restarts under a new address is
//! not missed once the new address appears; a group scaled down is missed
//! until the window passes (the data on the removed node is gone from
//! reads). A name that cannot be resolved keeps the nodes it resolved to
//! last; one never resolved is missing everything.
//!
//! Readers take a snapshot ([`Membership`]) and never wait on a refresh.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use super::{Node, NodeStats, MAX_NODE_MESSAGE};
use crate::error::Error;
use tonic::transport::Channel;
use tracedb_proto::query::v1::query_service_client::QueryServiceClient;

/// Default time between two resolutions of a `dns:///` name.
pub const DEFAULT_DNS_REFRESH: Duration = Duration::from_secs(10);
/// Default time a `dns:///` name's larger answer is remembered.
pub const DEFAULT_DNS_FORGET: Duration = Duration::from_secs(600);

/// One entry of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// One node at `host:port`.
    Addr(String),
    /// Every address `host` resolves to, each at `port`.
    Dns { host: String, port: u16 },
}

impl Source {
    /// Reads an entry of `--nodes`: `host:port` or `dns:///HOST:PORT`.
    pub fn parse(entry: &str) -> Result<Source, String> {
        if let Some(rest) = entry.strip_prefix("dns:") {
            let Some(target) = rest.strip_prefix("///") else {
                return Err(format!(
                    "{entry:?}: give dns:///HOST:PORT (three slashes: the system resolver is \
                     asked; a DNS server of its own is not supported)"
                ));
            };
            let (host, port) = target
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
                .filter(|(h, _)| !h.is_empty() && !h.contains('/'))
                .ok_or_else(|| {
                    format!(
                        "{entry:?} is not dns:///HOST:PORT (such as dns:///tracedb.ns.svc:4317)"
                    )
                })?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            return Ok(Source::Dns {
                host: host.to_owned(),
                port,
            });
        }
        if entry.contains("://") || !entry.contains(':') {
            return Err(format!(
                "{entry:?} is not host:port (a node's gRPC address, such as 10.0.0.5:4317) \
                 nor dns:///HOST:PORT"
            ));
        }
        Ok(Source::Addr(entry.to_owned()))
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Addr(addr) => f.write_str(addr),
            Source::Dns { host, port } => write!(f, "dns:///{host}:{port}"),
        }
    }
}

/// How to reach one node.
#[derive(Debug, Clone, Copy)]
pub struct Dial<'a> {
    /// What to connect to: `host:port`.
    pub addr: &'a str,
    /// For a node found through DNS, the name it was found under: the
    /// name its TLS certificate is checked against (its address would
    /// not be in the certificate).
    pub name: Option<&'a str>,
}

/// Makes a node's channel; it should connect lazily.
pub type Connect = dyn Fn(Dial<'_>) -> Result<Channel, String> + Send + Sync;

/// The groups as they are now: what one read asks.
#[derive(Default)]
pub struct Membership {
    pub groups: Vec<Group>,
}

/// One replica group.
pub struct Group {
    /// Its nodes, each address once.
    pub nodes: Vec<Arc<Node>>,
    /// Why it is known to lack nodes: a name not resolved, or resolving to
    /// fewer addresses than it did within the forget window. A group with
    /// a reason here never answers in full.
    pub missing: Vec<String>,
}

impl Group {
    pub fn is_missing_nodes(&self) -> bool {
        !self.missing.is_empty()
    }
}

/// The groups' entries and what they resolve to.
pub(super) struct Members {
    connect: Box<Connect>,
    forget: Duration,
    /// Per group, per entry.
    slots: Mutex<Vec<Vec<Slot>>>,
    current: RwLock<Arc<Membership>>,
}

enum Slot {
    Node(Arc<Node>),
    Dns(DnsName),
}

impl Members {
    pub(super) fn new(
        groups: Vec<Vec<String>>,
        forget: Duration,
        connect: Box<Connect>,
    ) -> Result<Members, Error> {
        let slots = groups
            .into_iter()
            .enumerate()
            .map(|(group, entries)| {
                entries
                    .iter()
                    .map(
                        |entry| match Source::parse(entry).map_err(Error::Internal)? {
                            Source::Addr(addr) => {
                                let node = make_node(&*connect, group, &addr, None)?;
                                Ok(Slot::Node(node))
                            }
                            Source::Dns { host, port } => Ok(Slot::Dns(DnsName::new(host, port))),
                        },
                    )
                    .collect::<Result<Vec<_>, Error>>()
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let members = Members {
            connect,
            forget,
            slots: Mutex::new(slots),
            current: RwLock::default(),
        };
        members.publish(&members.slots.lock().expect("members lock"));
        Ok(members)
    }

    /// The groups now.
    pub(super) fn current(&self) -> Arc<Membership> {
        self.current.read().expect("members lock").clone()
    }

    /// Whether any entry is a `dns:///` name.
    pub(super) fn has_names(&self) -> bool {
        self.slots
            .lock()
            .expect("members lock")
            .iter()
            .flatten()
            .any(|s| matches!(s, Slot::Dns(_)))
    }

    /// Resolves every `dns:///` name once (each bounded by `timeout`) and
    /// publishes the groups that follow.
    pub(super) async fn resolve(&self, timeout: Duration) {
        let names: Vec<(usize, usize, String, u16)> = {
            let slots = self.slots.lock().expect("members lock");
            slots
                .iter()
                .enumerate()
                .flat_map(|(g, entries)| {
                    entries
                        .iter()
                        .enumerate()
                        .filter_map(move |(i, s)| match s {
                            Slot::Dns(n) => Some((g, i, n.host.clone(), n.port)),
                            Slot::Node(_) => None,
                        })
                })
                .collect()
        };
        if names.is_empty() {
            return;
        }
        let mut lookups = tokio::task::JoinSet::new();
        for (g, i, host, port) in names {
            lookups.spawn(async move {
                let found = match tokio::time::timeout(
                    timeout,
                    tokio::net::lookup_host((host, port)),
                )
                .await
                {
                    Ok(Ok(addrs)) => Ok(addrs.collect::<Vec<SocketAddr>>()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer from the resolver within {timeout:?}")),
                };
                (g, i, found)
            });
        }
        let mut found = Vec::new();
        while let Some(done) = lookups.join_next().await {
            if let Ok(one) = done {
                found.push(one);
            }
        }
        let now = Instant::now();
        let mut slots = self.slots.lock().expect("members lock");
        for (g, i, result) in found {
            if let Slot::Dns(name) = &mut slots[g][i] {
                name.update(result, now, self.forget, |addr, host| {
                    make_node(&*self.connect, g, addr, Some(host))
                });
            }
        }
        self.publish(&slots);
    }

    fn publish(&self, slots: &[Vec<Slot>]) {
        let groups = slots
            .iter()
            .map(|entries| {
                let mut nodes: BTreeMap<&str, Arc<Node>> = BTreeMap::new();
                let mut missing = Vec::new();
                for slot in entries {
                    match slot {
                        Slot::Node(node) => {
                            nodes.entry(&node.addr).or_insert_with(|| node.clone());
                        }
                        Slot::Dns(name) => {
                            for node in &name.nodes {
                                nodes.entry(&node.addr).or_insert_with(|| node.clone());
                            }
                            missing.extend(name.missing(self.forget));
                        }
                    }
                }
                Group {
                    nodes: nodes.into_values().collect(),
                    missing,
                }
            })
            .collect();
        *self.current.write().expect("members lock") = Arc::new(Membership { groups });
    }
}

fn make_node(
    connect: &Connect,
    group: usize,
    addr: &str,
    name: Option<&str>,
) -> Result<Arc<Node>, Error> {
    let channel = connect(Dial { addr, name })
        .map_err(|e| Error::Internal(format!("node address {addr:?}: {e}")))?;
    Ok(Arc::new(Node {
        client: QueryServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_NODE_MESSAGE),
        channel,
        addr: addr.to_owned(),
        group,
        stats: NodeStats::default(),
    }))
}

/// A `dns:///HOST:PORT` entry and what it resolved to.
struct DnsName {
    host: String,
    port: u16,
    /// The nodes of the last answer, by address.
    nodes: Vec<Arc<Node>>,
    resolved: bool,
    /// Why the last resolution failed.
    error: Option<String>,
    /// The most addresses within the forget window, and when that many
    /// (or more) were last seen.
    most: usize,
    most_seen: Instant,
}

impl DnsName {
    fn new(host: String, port: u16) -> DnsName {
        DnsName {
            host,
            port,
            nodes: Vec::new(),
            resolved: false,
            error: Some("not resolved yet".into()),
            most: 0,
            most_seen: Instant::now(),
        }
    }

    fn entry(&self) -> Source {
        Source::Dns {
            host: self.host.clone(),
            port: self.port,
        }
    }

    /// Takes one resolution's result; `make` connects a new address.
    fn update(
        &mut self,
        result: Result<Vec<SocketAddr>, String>,
        now: Instant,
        forget: Duration,
        make: impl Fn(&str, &str) -> Result<Arc<Node>, Error>,
    ) {
        let addrs = match result {
            Ok(mut addrs) => {
                addrs.sort();
                addrs.dedup();
                addrs
            }
            Err(why) => {
                if self.error.as_deref() != Some(why.as_str()) {
                    tracing::warn!(
                        name = %self.entry(),
                        error = %why,
                        kept = self.nodes.len(),
                        "cannot resolve a node name; keeping the nodes it resolved to last"
                    );
                }
                self.error = Some(why);
                return;
            }
        };
        let mut nodes = Vec::with_capacity(addrs.len());
        for addr in &addrs {
            let addr = addr.to_string();
            match self.nodes.iter().find(|n| n.addr == addr) {
                Some(node) => nodes.push(node.clone()),
                None => match make(&addr, &self.host) {
                    Ok(node) => nodes.push(node),
                    Err(e) => {
                        tracing::warn!(name = %self.entry(), error = %e, "cannot use a node address")
                    }
                },
            }
        }
        let before: Vec<&str> = self.nodes.iter().map(|n| n.addr.as_str()).collect();
        let after: Vec<&str> = nodes.iter().map(|n| n.addr.as_str()).collect();
        if before != after || !self.resolved {
            tracing::info!(name = %self.entry(), nodes = ?after, was = ?before, "node name resolved");
        }
        if nodes.len() >= self.most || now.duration_since(self.most_seen) >= forget {
            self.most = nodes.len();
            self.most_seen = now;
        }
        self.nodes = nodes;
        self.resolved = true;
        self.error = None;
    }

    /// Why this name leaves its group short of nodes, if it does.
    fn missing(&self, forget: Duration) -> Option<String> {
        let name = self.entry();
        if !self.resolved {
            let why = self.error.as_deref().unwrap_or("not resolved yet");
            return Some(format!("{name} not resolved: {why}"));
        }
        if self.nodes.len() < self.most {
            return Some(format!(
                "{name} resolves to {} nodes, {} within the last {}s: a node that left may \
                 hold data (--node-dns-forget-ms)",
                self.nodes.len(),
                self.most,
                forget.as_secs()
            ));
        }
        if self.nodes.is_empty() {
            return Some(format!("{name} resolves to no address"));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(last_octets: &[u8]) -> Result<Vec<SocketAddr>, String> {
        Ok(last_octets
            .iter()
            .map(|o| SocketAddr::from(([127, 0, 0, *o], 4317)))
            .collect())
    }

    fn node(addr: &str, _host: &str) -> Result<Arc<Node>, Error> {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| Error::Internal(e.to_string()))?
            .connect_lazy();
        Ok(Arc::new(Node {
            client: QueryServiceClient::new(channel.clone()),
            channel,
            addr: addr.to_owned(),
            group: 0,
            stats: NodeStats::default(),
        }))
    }

    #[test]
    fn entries_parse_as_addresses_or_names() {
        assert_eq!(
            Source::parse("dns:///tracedb.ns.svc:4317"),
            Ok(Source::Dns {
                host: "tracedb.ns.svc".into(),
                port: 4317
            })
        );
        assert_eq!(
            Source::parse("10.0.0.5:4317"),
            Ok(Source::Addr("10.0.0.5:4317".into()))
        );
        for bad in [
            "dns://8.8.8.8/tracedb:4317",
            "dns:///tracedb",
            "dns:///:4317",
            "dns:///tracedb:port",
            "http://a:4317",
            "a",
        ] {
            assert!(Source::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Source::parse("dns:///[::1]:4317").map(|s| s.to_string()),
            Ok("dns:///::1:4317".into())
        );
    }

    #[tokio::test]
    async fn a_name_that_shrinks_is_missing_nodes_until_the_window_passes() {
        let forget = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut name = DnsName::new("nodes".into(), 4317);
        let unresolved = name.missing(forget).expect("unresolved");
        assert!(
            unresolved.contains("dns:///nodes:4317 not resolved"),
            "{unresolved}"
        );

        name.update(addrs(&[2, 3, 4]), t0, forget, node);
        assert_eq!(name.missing(forget), None);
        let first = name.nodes[0].clone();

        // A node leaves: missing until the window passes.
        name.update(addrs(&[2, 3]), t0 + Duration::from_secs(5), forget, node);
        let short = name.missing(forget).expect("short");
        assert!(short.contains("resolves to 2 nodes, 3 within"), "{short}");
        name.update(addrs(&[3, 2]), t0 + Duration::from_secs(59), forget, node);
        assert!(name.missing(forget).is_some());
        name.update(addrs(&[2, 3]), t0 + Duration::from_secs(61), forget, node);
        assert_eq!(name.missing(forget), None, "scaled down for good");
        assert!(
            Arc::ptr_eq(&first, &name.nodes[0]),
            "a known address keeps its node"
        );

        // A restart under a new address: whole again once it appears.
        name.update(addrs(&[2, 5]), t0 + Duration::from_secs(62), forget, node);
        assert_eq!(name.missing(forget), None);
        assert_eq!(name.nodes[1].addr, "127.0.0.5:4317");

        // The resolver fails: the last nodes stay, nothing is missed.
        name.update(
            Err("timed out".into()),
            t0 + Duration::from_secs(63),
            forget,
            node,
        );
        assert_eq!(name.nodes.len(), 2);
        assert_eq!(name.missing(forget), None);

        // No address at all.
        name.update(addrs(&[]), t0 + Duration::from_secs(200), forget, node);
        let none = name.missing(forget).expect("none");
        assert!(none.contains("resolves to no address"), "{none}");
    }
}
