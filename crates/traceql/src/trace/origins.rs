//! Resources and scopes decoded once ([`Origins`]), by their stored bytes,
//! and shared by every span that has them.

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher},
    sync::Arc,
};

use super::{decode_origin, DecodeError, Origin};

/// Most bytes a cache holds, its keys and the origins decoded as
/// `held_bytes` counts them; past it, it starts over. A caller that
/// admits memory counts this much for it.
pub const MAX_HELD_BYTES: usize = 1 << 20;

/// About the bytes one origin kept holds: its resource's and scope's bytes
/// twice (the key, and the strings decoded from them), and each decoded
/// attribute's key, value and place in its list.
fn held_bytes(resource: &[u8], scope: &[u8], o: &Origin) -> usize {
    2 * (resource.len() + scope.len()) + 128 + 96 * (o.resource.len() + o.scope.len())
}

/// An origin kept, with its resource's and scope's bytes.
type Kept = (Box<[u8]>, Box<[u8]>, Arc<Origin>);

/// Decoded resources and scopes by their stored bytes. A trace's decode
/// keeps one for its spans; a scan of many traces keeps one for all of
/// them ([`super::Trace::decode_with`]), as a store's traces share a few
/// dozen resources: each was decoded again for every trace, with its
/// bytes hashed, a tenth of such a scan's CPU.
#[derive(Default)]
pub struct Origins {
    /// By the hash of (resource, scope): each origin with those bytes.
    by_hash: HashMap<u64, Vec<Kept>, foldhash::fast::FixedState>,
    /// What they hold ([`held_bytes`]).
    bytes: usize,
}

impl Origins {
    pub fn new() -> Origins {
        Origins::default()
    }

    /// The origin of `resource` and `scope` (empty when not sent), decoded
    /// the first time they are met.
    pub(super) fn get(
        &mut self,
        resource: &[u8],
        scope: &[u8],
    ) -> Result<Arc<Origin>, DecodeError> {
        let mut h = self.by_hash.hasher().build_hasher();
        h.write(resource);
        h.write_u8(0xff);
        h.write(scope);
        let hash = h.finish();
        if let Some(o) = self.by_hash.get(&hash).and_then(|same| {
            same.iter()
                .find(|(r, s, _)| **r == *resource && **s == *scope)
                .map(|(_, _, o)| o.clone())
        }) {
            return Ok(o);
        }
        let o = Arc::new(decode_origin(
            (!resource.is_empty()).then_some(resource),
            (!scope.is_empty()).then_some(scope),
        )?);
        let bytes = held_bytes(resource, scope, &o);
        if self.bytes + bytes > MAX_HELD_BYTES {
            self.by_hash.clear();
            self.bytes = 0;
        }
        self.bytes += bytes;
        self.by_hash
            .entry(hash)
            .or_default()
            .push((resource.into(), scope.into(), o.clone()));
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;
    use tracedb_proto::{
        common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
        resource::v1::Resource,
        trace::v1::Span,
    };

    use super::*;
    use crate::trace::{EncodedSpan, Projection, Trace};

    fn text(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.to_owned())),
            }),
        }
    }

    /// Traces of a few shared resources and scopes, and of resources each
    /// its own, more of them than the cache keeps: decoded with one cache
    /// for them all, each is the trace decoded alone, and the shared ones
    /// share their origin.
    #[test]
    fn traces_decoded_with_one_cache_are_those_decoded_alone() {
        let resource = |name: &str, pad: usize| {
            Resource {
                attributes: vec![text("service.name", name), text("pad", &"p".repeat(pad))],
                ..Resource::default()
            }
            .encode_to_vec()
        };
        let shared: Vec<Vec<u8>> = (0..4).map(|i| resource(&format!("svc-{i}"), 10)).collect();
        let scope = InstrumentationScope {
            name: "lib".into(),
            version: "1.2".into(),
            attributes: vec![text("a", "b")],
            ..InstrumentationScope::default()
        }
        .encode_to_vec();
        let scopes: [Option<&[u8]>; 3] = [None, Some(&[]), Some(&scope)];
        let mut cache = Origins::new();
        let mut shared_origins: Vec<Arc<crate::trace::Origin>> = Vec::new();
        for t in 0..400u32 {
            // Every other trace has a resource of its own, 8 KiB: 200 of
            // them pass the cache's bytes three times.
            let own = resource(&format!("own-{t}"), 8192);
            let payloads: Vec<Vec<u8>> = (0..3u8)
                .map(|i| {
                    Span {
                        trace_id: vec![1; 16].into(),
                        span_id: vec![i + 1; 8].into(),
                        name: format!("op-{i}"),
                        start_time_unix_nano: u64::from(t) * 10 + u64::from(i),
                        ..Span::default()
                    }
                    .encode_to_vec()
                })
                .collect();
            let spans: Vec<EncodedSpan<'_>> = payloads
                .iter()
                .enumerate()
                .map(|(i, p)| EncodedSpan {
                    payload: p,
                    resource: Some(if t % 2 == 1 && i == 0 {
                        &own[..]
                    } else {
                        &shared[(t as usize + i) % 4][..]
                    }),
                    scope: scopes[(t as usize + i) % 3],
                })
                .collect();
            let all = Projection::all();
            let alone = Trace::decode_for([1; 16], spans.iter().copied(), &all).expect("decodes");
            let cached = Trace::decode_with([1; 16], spans.iter().copied(), &all, &mut cache)
                .expect("decodes");
            assert_eq!(cached, alone, "trace {t}");
            if t % 2 == 0 {
                shared_origins.push(cached.spans[0].origin.clone());
            }
        }
        assert!(cache.bytes <= MAX_HELD_BYTES);
        // The same resource and scope, met in another trace, is one origin
        // (unless the cache started over between them).
        let shared_pairs = shared_origins
            .windows(7)
            .filter(|w| Arc::ptr_eq(&w[0], &w[6]))
            .count();
        assert!(shared_pairs > 100, "{shared_pairs}");
    }
}
