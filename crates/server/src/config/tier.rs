//! The options of `tracedb query`, the stateless read tier over many
//! storage nodes: the nodes by replica group, how long a node may take, and
//! the same listener, TLS and logging options as `tracedb serve`.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

use super::{
    check_listener, check_tenancy, tenancy_rule, ConfigError, Options, DEFAULT_GRPC_ADDR,
    DEFAULT_HTTP_ADDR,
};
use crate::{
    cli::ClientTls,
    tenancy::{CertField, Rule, Tenancy},
    tls::TlsFiles,
};

/// Everything `tracedb query` can be told.
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// One replica group of storage nodes, comma-separated: gRPC addresses
    /// (host:port), or dns:///HOST:PORT for every address HOST resolves to
    /// (a Kubernetes headless Service), resolved again every
    /// --node-dns-refresh-ms. Give the flag once per group (each group a
    /// full copy of the data, fed by its own load_balancing exporter). In
    /// the environment, groups are separated by semicolons.
    #[arg(long, env = "TRACEDB_NODES", value_delimiter = ';')]
    pub nodes: Vec<String>,

    /// How long one node may take to answer one call, in milliseconds; a
    /// node that takes longer counts as not answering.
    #[arg(long, env = "TRACEDB_NODE_TIMEOUT_MS", default_value_t = 3_000)]
    pub node_timeout_ms: u64,

    /// How often each dns:///HOST:PORT entry is resolved again, in
    /// milliseconds.
    #[arg(long, env = "TRACEDB_NODE_DNS_REFRESH_MS", default_value_t = 10_000)]
    pub node_dns_refresh_ms: u64,

    /// How long a dns:/// name that resolves to fewer addresses than before
    /// leaves its group short, in milliseconds: until then answers that
    /// needed the group whole are marked partial (a node that left may hold
    /// data). Once passed, the smaller group is taken as whole.
    #[arg(long, env = "TRACEDB_NODE_DNS_FORGET_MS", default_value_t = 600_000)]
    pub node_dns_forget_ms: u64,

    /// PEM CA certificates that sign the nodes' certificates: with it, the
    /// tier connects to the nodes over TLS (nodes run with --tls-cert)
    /// [default: none: plaintext].
    #[arg(long, env = "TRACEDB_NODE_TLS_CA", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_tls_ca: Option<PathBuf>,

    /// PEM certificate chain the tier presents to nodes that require client
    /// certificates (mutual TLS); with --node-tls-key [default: none].
    #[arg(long, env = "TRACEDB_NODE_TLS_CERT", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_tls_cert: Option<PathBuf>,

    /// PEM private key of --node-tls-cert [default: none].
    #[arg(long, env = "TRACEDB_NODE_TLS_KEY", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_tls_key: Option<PathBuf>,

    /// gRPC address: tracedb.query.v1.QueryService, Jaeger's TraceReader and
    /// DependencyReader, health, reflection.
    #[arg(long, env = "TRACEDB_GRPC_ADDR", default_value = DEFAULT_GRPC_ADDR)]
    pub grpc_addr: SocketAddr,

    /// HTTP address: the Tempo API, GET /metrics, GET /ready.
    #[arg(long, env = "TRACEDB_HTTP_ADDR", default_value = DEFAULT_HTTP_ADDR)]
    pub http_addr: SocketAddr,

    /// On SIGTERM or ctrl-c, how many seconds in-flight reads get to finish.
    #[arg(long, env = "TRACEDB_SHUTDOWN_TIMEOUT_SECS", default_value_t = 10)]
    pub shutdown_timeout_secs: u64,

    /// PEM certificate chain; with --tls-key both listeners serve TLS only,
    /// as for `tracedb serve` [default: none: plaintext].
    #[arg(long, env = "TRACEDB_TLS_CERT", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert [default: none].
    #[arg(long, env = "TRACEDB_TLS_KEY", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,

    /// PEM CAs whose client certificates are required (mutual TLS)
    /// [default: none].
    #[arg(long, env = "TRACEDB_TLS_CLIENT_CA", value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,

    /// How requests name their tenant: "off", "header" (each request names
    /// its tenants in --tenant-header) or "certificate" (with mutual TLS, a
    /// field of the client's certificate names it); the tier names them to
    /// every node in --tenant-header (the nodes' tenancy is "header").
    #[arg(long, env = "TRACEDB_TENANCY", value_enum, default_value = "off")]
    pub tenancy: Tenancy,

    /// With --tenancy header: the header that names a request's tenants,
    /// the same as the nodes'.
    #[arg(long, env = "TRACEDB_TENANT_HEADER", default_value = tracedb_proto::tenant::DEFAULT_HEADER_NAME)]
    pub tenant_header: String,

    /// With --tenancy header: the tenant of requests that name none
    /// [default: none: they are refused, gRPC UNAUTHENTICATED, HTTP 401].
    #[arg(long, env = "TRACEDB_DEFAULT_TENANT", value_name = "TENANT")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_tenant: Option<String>,

    /// With --tenancy certificate: the field of the client's certificate
    /// that names its tenant (named to the nodes in --tenant-header).
    #[arg(
        long,
        env = "TRACEDB_TENANT_CERT_FIELD",
        value_enum,
        default_value = "cn"
    )]
    pub tenant_cert_field: CertField,

    /// Log filter: error, warn, info, debug, trace, or RUST_LOG directives.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_level: String,
}

impl TierConfig {
    /// How each request's tenants are found; `None` with tenancy off.
    pub fn tenancy_rule(&self) -> Option<Arc<Rule>> {
        tenancy_rule(
            self.tenancy,
            &self.tenant_header,
            self.default_tenant.as_deref(),
            self.tenant_cert_field,
        )
    }

    /// The nodes of each replica group, in the order given.
    pub fn groups(&self) -> Vec<Vec<String>> {
        self.nodes
            .iter()
            .map(|group| {
                group
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    }

    pub fn node_timeout(&self) -> Duration {
        Duration::from_millis(self.node_timeout_ms)
    }

    /// How the fan-out treats the nodes.
    pub fn fanout(&self) -> tracedb_query::fanout::Options {
        tracedb_query::fanout::Options {
            node_timeout: self.node_timeout(),
            dns_refresh: Duration::from_millis(self.node_dns_refresh_ms),
            dns_forget: Duration::from_millis(self.node_dns_forget_ms),
        }
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_secs)
    }

    /// TLS to the nodes, if `--node-tls-ca` is set: the files, read and checked.
    pub fn node_tls(&self) -> Result<Option<ClientTls>, crate::tls::TlsError> {
        let Some(ca) = &self.node_tls_ca else {
            return Ok(None);
        };
        let identity = self
            .node_tls_cert
            .as_deref()
            .zip(self.node_tls_key.as_deref());
        ClientTls::load_as(
            ["--node-tls-ca", "--node-tls-cert", "--node-tls-key"],
            ca,
            identity,
        )
        .map(Some)
    }

    /// The TLS files, if both a certificate and a key are set.
    pub fn tls_files(&self) -> Option<TlsFiles<'_>> {
        Some(TlsFiles {
            cert: self.tls_cert.as_deref()?,
            key: self.tls_key.as_deref()?,
            client_ca: self.tls_client_ca.as_deref(),
        })
    }
}

impl Options for TierConfig {
    const COMMAND: &'static str = "query";

    fn check(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let groups = self.groups();
        if groups.is_empty() || groups.iter().any(Vec::is_empty) {
            problems.push(
                "nodes: give --nodes once per replica group, each naming at least one node \
                 (host:port, comma-separated)"
                    .to_string(),
            );
        }
        for node in groups.iter().flatten() {
            if let Err(why) = tracedb_query::fanout::Source::parse(node) {
                problems.push(format!("nodes: {why}"));
            }
        }
        if !(100..=3_600_000).contains(&self.node_dns_refresh_ms) {
            problems.push(format!(
                "node_dns_refresh_ms is {}: give 100 to 3600000",
                self.node_dns_refresh_ms
            ));
        }
        if !(10..=600_000).contains(&self.node_timeout_ms) {
            problems.push(format!(
                "node_timeout_ms is {}: give 10 to 600000",
                self.node_timeout_ms
            ));
        }
        if self.shutdown_timeout_secs == 0 {
            problems.push("shutdown_timeout_secs is 0: it must be at least 1 second".to_string());
        }
        match (&self.node_tls_ca, &self.node_tls_cert, &self.node_tls_key) {
            (_, Some(_), None) | (_, None, Some(_)) => problems.push(
                "node_tls_cert and node_tls_key go together: give both for mutual TLS to the \
                 nodes, or neither"
                    .to_string(),
            ),
            (None, Some(_), Some(_)) => problems.push(
                "node_tls_cert is set without node_tls_ca: the tier speaks TLS to the nodes \
                 only with the CA that signs their certificates"
                    .to_string(),
            ),
            _ => {
                if let Err(e) = self.node_tls() {
                    problems.push(e.to_string());
                }
            }
        }
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
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::*;
    use crate::config::merge_file;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: TierConfig,
    }

    fn parse(args: &[&str], file: &str) -> Result<TierConfig, String> {
        let matches = Cli::command()
            .mut_args(|a| a.env(None::<&str>))
            .try_get_matches_from(std::iter::once("query").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let cli = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
        let merged = merge_file(cli.settings, &matches, file)?;
        merged.check().map_err(|e| e.to_string())?;
        Ok(merged)
    }

    #[test]
    fn each_nodes_flag_is_a_replica_group() {
        let c = parse(
            &[
                "--nodes",
                "10.0.0.1:4317, 10.0.0.2:4317",
                "--nodes",
                "10.0.1.1:4317",
            ],
            "",
        )
        .expect("valid");
        assert_eq!(
            c.groups(),
            [
                vec!["10.0.0.1:4317", "10.0.0.2:4317"],
                vec!["10.0.1.1:4317"]
            ]
        );
        assert_eq!(c.node_timeout(), Duration::from_secs(3));
        let from_file = parse(
            &["--nodes", "a:1"],
            "nodes = [\"b:1,c:1\", \"d:1\"]\nnode_timeout_ms = 700",
        )
        .expect("valid file");
        assert_eq!(from_file.groups(), [vec!["a:1"]], "a flag beats the file");
        assert_eq!(from_file.node_timeout(), Duration::from_millis(700));
        let file_only = parse(&[], "nodes = [\"b:1,c:1\", \"d:1\"]").expect("nodes from the file");
        assert_eq!(file_only.groups(), [vec!["b:1", "c:1"], vec!["d:1"]]);
    }

    #[test]
    fn bad_node_lists_are_refused_with_what_to_write() {
        let missing = parse(&[], "").expect_err("nodes are required");
        assert!(missing.contains("--nodes"), "{missing}");
        let dns = parse(&["--nodes", "dns:///tracedb.ns.svc:4317,a:1"], "").expect("dns");
        assert_eq!(dns.groups(), [vec!["dns:///tracedb.ns.svc:4317", "a:1"]]);
        let authority = parse(&["--nodes", "dns://10.0.0.2/tracedb:4317"], "").expect_err("dns");
        assert!(authority.contains("three slashes"), "{authority}");
        let url = parse(&["--nodes", "http://a:4317"], "").expect_err("a URL");
        assert!(url.contains("is not host:port"), "{url}");
        let empty = parse(&["--nodes", " , "], "").expect_err("empty group");
        assert!(empty.contains("at least one node"), "{empty}");
        let fast = parse(&["--nodes", "a:1", "--node-timeout-ms", "1"], "").expect_err("1 ms");
        assert!(fast.contains("node_timeout_ms is 1"), "{fast}");
        let key = parse(&["--nodes", "a:1"], "data_dir = \"/x\"").expect_err("serve's key");
        assert!(key.contains("see tracedb query --help"), "{key}");
    }
}
