//! The attributes a file's attribute cells count ([`CellAttributes`]), and
//! how one span's values of them are found.
//!
//! A metrics query whose conditions compare one span or resource
//! attribute (`{ span.http.status_code = 500 } | rate() by(resource.service.name)`)
//! cannot be answered from the named or unnamed cells, whose keys hold no
//! attribute. Attribute cells add, for each attribute of a configured
//! list, the attribute's value to the unnamed key: a span carrying
//! `http.status_code = 500` and `http.route = "/cart"` is counted in one
//! cell of each. A query that needs the attribute present adds the cells
//! of that attribute's values and of no other (the query crate decides).
//!
//! Only a list's attributes are counted, and in each file only those whose
//! values stay few, short and plain: an attribute past [`MAX_VALUES`]
//! values, with a value over [`MAX_VALUE_BYTES`], or with one that is not a
//! string, bool, int or double, is left out of the file's cells,
//! which say which attributes they counted, so a query of one left out
//! reads the spans.

use std::fmt;

/// Scope byte of a span attribute in a counted attribute's name and value.
pub const SPAN_SCOPE: u8 = 1;
/// Scope byte of a resource attribute.
pub const RESOURCE_SCOPE: u8 = 2;

/// Most values one attribute has in one file's cells: each value is a key
/// per service, kind, status and parent, so an attribute of many values
/// (a user ID) would multiply the cells.
pub const MAX_VALUES: usize = 1024;
/// Longest encoded `KeyValue` counted.
pub const MAX_VALUE_BYTES: usize = 256;
/// Most attributes of one scope a list holds.
pub const MAX_ATTRIBUTES: usize = 64;

/// The span and resource attributes counted into attribute cells, each
/// named by its scope byte ([`SPAN_SCOPE`], [`RESOURCE_SCOPE`]) and key.
#[derive(Clone, PartialEq, Eq)]
pub struct CellAttributes {
    /// Scope byte then key, span attributes first, then resource ones.
    names: Vec<Box<[u8]>>,
    /// How many of `names` are span attributes.
    spans: usize,
    /// Bit `n` (`n` at most 63) set when a span attribute's key is `n`
    /// bytes long (63 or more): most keys a span carries are of a length
    /// no counted one has, and are passed over on it alone.
    span_lengths: u64,
}

/// Attributes of OpenTelemetry's semantic conventions whose values are few
/// (methods, routes, status codes, systems, environments): what a
/// dashboard breaks requests down by.
pub const DEFAULT_ATTRIBUTES: &[&str] = &[
    "span.http.request.method",
    "span.http.method",
    "span.http.response.status_code",
    "span.http.status_code",
    "span.http.route",
    "span.rpc.system",
    "span.rpc.service",
    "span.rpc.method",
    "span.rpc.grpc.status_code",
    "span.db.system",
    "span.db.system.name",
    "span.db.operation.name",
    "span.messaging.system",
    "span.messaging.operation.type",
    "span.error.type",
    "resource.deployment.environment",
    "resource.deployment.environment.name",
    "resource.service.namespace",
    "resource.k8s.namespace.name",
    "resource.cloud.region",
];

impl Default for CellAttributes {
    fn default() -> Self {
        CellAttributes::parse(DEFAULT_ATTRIBUTES.iter().copied())
            .expect("the default attributes are valid")
    }
}

impl fmt::Debug for CellAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.names.iter().map(|n| display(n)))
            .finish()
    }
}

/// The bit of [`CellAttributes::span_lengths`] for a key `len` bytes long.
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

/// A counted attribute's name as TraceQL writes it (`span.http.route`).
pub fn display(name: &[u8]) -> String {
    let scope = match name.first() {
        Some(&SPAN_SCOPE) => "span",
        Some(&RESOURCE_SCOPE) => "resource",
        _ => "?",
    };
    format!(
        "{scope}.{}",
        String::from_utf8_lossy(name.get(1..).unwrap_or_default())
    )
}

impl CellAttributes {
    /// No attribute: files get no attribute cells.
    pub fn none() -> CellAttributes {
        CellAttributes {
            names: Vec::new(),
            spans: 0,
            span_lengths: 0,
        }
    }

    /// The attributes named as TraceQL names them, `span.<key>` or
    /// `resource.<key>`; an error says which name is not one.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<CellAttributes, String> {
        let (mut spans, mut resources) = (Vec::new(), Vec::new());
        for n in names {
            let n = n.trim();
            let (scope, key) = if let Some(k) = n.strip_prefix("span.") {
                (SPAN_SCOPE, k)
            } else if let Some(k) = n.strip_prefix("resource.") {
                (RESOURCE_SCOPE, k)
            } else {
                return Err(format!(
                    "metrics attribute {n:?} is neither span.<key> nor resource.<key>"
                ));
            };
            if key.is_empty() {
                return Err(format!("metrics attribute {n:?} names no key"));
            }
            if scope == RESOURCE_SCOPE && key == "service.name" {
                // Every cell key holds the service already.
                continue;
            }
            let mut name = vec![scope];
            name.extend_from_slice(key.as_bytes());
            let list = if scope == SPAN_SCOPE {
                &mut spans
            } else {
                &mut resources
            };
            if !list.contains(&name) {
                list.push(name);
            }
        }
        if spans.len().max(resources.len()) > MAX_ATTRIBUTES {
            return Err(format!(
                "more than {MAX_ATTRIBUTES} metrics attributes of one scope"
            ));
        }
        let n = spans.len();
        let span_lengths = spans
            .iter()
            .fold(0, |bits, s| bits | length_bit(s.len() - 1));
        Ok(CellAttributes {
            names: spans.into_iter().chain(resources).map(Box::from).collect(),
            spans: n,
            span_lengths,
        })
    }

    /// Every attribute, scope byte then key.
    pub fn names(&self) -> &[Box<[u8]>] {
        &self.names
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The index among [`CellAttributes::names`] of the span attribute `key`.
    pub(super) fn span_index(&self, key: &[u8]) -> Option<usize> {
        if self.span_lengths & length_bit(key.len()) == 0 {
            return None;
        }
        self.names[..self.spans].iter().position(|n| n[1..] == *key)
    }

    /// The index of the resource attribute `key`.
    pub(super) fn resource_index(&self, key: &[u8]) -> Option<usize> {
        self.names[self.spans..]
            .iter()
            .position(|n| n[1..] == *key)
            .map(|i| i + self.spans)
    }

    pub(super) fn has_spans(&self) -> bool {
        self.spans > 0
    }

    pub(super) fn has_resources(&self) -> bool {
        self.names.len() > self.spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_named_as_traceql_names_them() {
        let a = CellAttributes::parse(["span.http.route", "resource.cloud.region", "span.x"])
            .expect("attributes");
        assert_eq!(a.span_index(b"http.route"), Some(0));
        assert_eq!(a.span_index(b"x"), Some(1));
        assert_eq!(a.resource_index(b"cloud.region"), Some(2));
        assert_eq!(a.span_index(b"cloud.region"), None);
        assert_eq!(display(&a.names()[2]), "resource.cloud.region");
        // Keys of 63 bytes or more share one length bit.
        let long = format!("span.{}", "k".repeat(70));
        let a = CellAttributes::parse([long.as_str()]).expect("attributes");
        assert_eq!(a.span_index(&long.as_bytes()[5..]), Some(0));
        assert_eq!(a.span_index("k".repeat(65).as_bytes()), None);
        for bad in ["http.route", "span.", "event.x"] {
            assert!(CellAttributes::parse([bad]).is_err(), "{bad}");
        }
        // The service is in every key already.
        assert!(CellAttributes::parse(["resource.service.name"])
            .expect("attributes")
            .is_empty());
    }
}
