//! The values of one attribute read from a sidecar block's bytes, for
//! `Engine::tag_values`: from the block's columns when they list the key,
//! else by scanning each part's times, operations and tags in place, with
//! the query's needs looked up once in the block's strings ([`LocalNeed`]).

use std::path::Path;

use super::{
    format::{scope_kind, split_block, split_head, BlockBody, Column, Reader},
    OpNeed, TagScope, ValueKind, MAX_TAGS_PER_TRACE,
};
use crate::{error::Result, table::corrupt};

/// Calls `f` once with each distinct value (and its type) of the attribute
/// `key` (in `scope`, or either) held by a part of a block's `body` that may
/// lie in `start..=end` (0: open) and meets every one of `needs` on its own
/// (as [`super::tag_values`] decides), without building the parts: listing
/// a key's values reads only each part's times, operations and tags, and
/// allocates nothing per part. Values the index does not keep are left out.
#[allow(clippy::too_many_arguments)]
pub(super) fn block_tag_values(
    path: &Path,
    at: u64,
    body: &[u8],
    ns: usize,
    parts: u32,
    scope: Option<TagScope>,
    key: &str,
    (start, end): (u64, u64),
    needs: &[OpNeed],
    f: impl FnMut(&str, ValueKind),
) -> Result<()> {
    let block = split_block(path, at, body, ns, parts)?;
    let local_id = |text: &str| block.place(text);
    let Some(k) = local_id(key) else {
        return Ok(());
    };
    let needs: Vec<LocalNeed<'_>> = needs.iter().map(|n| LocalNeed::new(n, local_id)).collect();
    if needs.iter().any(|n| n.ops.is_some() && n.unknown) {
        return Ok(());
    }
    let local = block.strings.len();
    // Per string of the block, a bit per value type already met.
    let mut met = vec![0u8; local];
    // The part's values of the key, kept until its needs are decided.
    let mut found: Vec<(u32, ValueKind)> = Vec::new();
    // Per need: its operation, and each of its attributes, met by the part.
    let mut op_met = vec![false; needs.len()];
    let mut tag_met: Vec<Vec<bool>> = needs.iter().map(|n| vec![false; n.tags.len()]).collect();
    for range in block.parts.iter().cloned() {
        let mut r = Reader {
            path,
            buf: &body[..range.end],
            at: range.start,
        };
        r.bytes(16)?;
        let first = r.u64()?;
        let last = first.wrapping_add(r.varint()?);
        if (start != 0 && last < start) || (end != 0 && first > end) {
            continue;
        }
        r.u32()?;
        let errors = r.u32()?;
        if errors == 0 && needs.iter().any(|n| n.need.error) {
            continue;
        }
        if r.u32()? != 0 {
            r.string(local)?;
        }
        for (i, n) in needs.iter().enumerate() {
            op_met[i] = n.ops.is_none();
        }
        for _ in 0..r.count(3)? {
            let (service, name) = (r.string(local)?, r.string(local)?);
            let kind = r.bytes(1)?[0] & 0x7f;
            for (i, n) in needs.iter().enumerate() {
                op_met[i] = op_met[i] || n.op_meets(service, name, kind);
            }
        }
        // A part without a need's operation is passed over unread.
        if !op_met.iter().all(|&m| m) {
            continue;
        }
        let count = r.count(3)?;
        // A part whose tags were cut may hold any attribute.
        let cut = count >= MAX_TAGS_PER_TRACE;
        for met in &mut tag_met {
            met.iter_mut().for_each(|m| *m = cut);
        }
        found.clear();
        for _ in 0..count {
            let (s, kind) = scope_kind(&mut r)?;
            let (g, v) = (r.string(local)?, r.string(local)?);
            if g == k && kind != ValueKind::Unindexed && scope.is_none_or(|x| x == s) {
                found.push((v, kind));
            }
            for (n, met) in needs.iter().zip(&mut tag_met) {
                for (t, m) in n.tags.iter().zip(met.iter_mut()) {
                    *m = *m || t.held_by(s, g, v, kind);
                }
            }
        }
        // Errors and operations were checked above: what is left are the
        // attributes.
        if tag_met.iter().all(|met| met.iter().all(|&m| m)) {
            for &(v, kind) in &found {
                met[v as usize] |= 1 << kind as u8;
            }
        }
    }
    each_met(path, at, &block, &met, f)?;
    Ok(())
}

/// As [`block_tag_values`] for a block every part of which lies in the
/// window and `needs` that each name a service alone, from the block's
/// `head` (its first frame, `format::inflate_head`): the key's columns are read
/// instead of the parts. `false`, with `f` not called, when the block has
/// no column for the key or a need names more than a service.
#[allow(clippy::too_many_arguments)]
pub(super) fn block_column_values(
    path: &Path,
    at: u64,
    head: &[u8],
    ns: usize,
    parts: u32,
    scope: Option<TagScope>,
    key: &str,
    needs: &[OpNeed],
    f: impl FnMut(&str, ValueKind),
) -> Result<bool> {
    let (block, r) = split_head(path, at, head, ns, parts)?;
    if r.at != head.len() {
        return Err(r.err("bytes left over after the block's columns"));
    }
    let local_id = |text: &str| block.place(text);
    let Some(k) = local_id(key) else {
        return Ok(true);
    };
    let needs: Vec<LocalNeed<'_>> = needs.iter().map(|n| LocalNeed::new(n, local_id)).collect();
    let Some(services) = needs
        .iter()
        .map(LocalNeed::service_alone)
        .collect::<Option<Vec<u32>>>()
    else {
        // A service the block lacks is no place in its table.
        if needs.iter().any(|n| n.ops.is_some() && n.unknown) {
            return Ok(true);
        }
        return Ok(false);
    };
    let mut met = vec![0u8; block.strings.len()];
    if !column_values(path, at, head, &block, k, scope, &services, &mut met)? {
        return Ok(false);
    }
    each_met(path, at, &block, &met, f)?;
    Ok(true)
}

/// Calls `f` with each (string, type) of a block (at `at`) set in `met`.
fn each_met(
    path: &Path,
    at: u64,
    block: &BlockBody<'_>,
    met: &[u8],
    mut f: impl FnMut(&str, ValueKind),
) -> Result<()> {
    for (v, &kinds) in met.iter().enumerate().filter(|m| *m.1 != 0) {
        let text = block.text(path, at, v)?;
        for code in 0..8u8 {
            if kinds & (1 << code) != 0 {
                let kind = ValueKind::from_code(code).expect("a code set from a ValueKind");
                f(text, kind);
            }
        }
    }
    Ok(())
}

/// Sets in `met` the values of the key at place `k` (in `scope`, or either)
/// of every part of `block` that has each of `services` (places), read from
/// the block's columns; `false`, with nothing set, when the key has none.
#[allow(clippy::too_many_arguments)]
fn column_values(
    path: &Path,
    at: u64,
    body: &[u8],
    block: &BlockBody<'_>,
    k: u32,
    scope: Option<TagScope>,
    services: &[u32],
    met: &mut [u8],
) -> Result<bool> {
    let reader = |c: &Column| Reader {
        path,
        buf: &body[..c.data.end],
        at: c.data.start,
    };
    if !block
        .columns
        .iter()
        .any(|c| c.key.is_some_and(|(key, ..)| key == k))
    {
        return Ok(false);
    }
    let Some(held) = block.columns.iter().find(|c| c.key.is_none()) else {
        return Err(corrupt(path, at, "block without its services column"));
    };
    let local = block.strings.len();
    // The parts that have every service, a bit each; `None`: all.
    let mut meets: Option<Vec<u8>> = None;
    if !services.is_empty() {
        let bytes = block.count.div_ceil(8);
        let mut r = reader(held);
        let mut found = vec![false; services.len()];
        let mut mask = vec![0xffu8; bytes];
        let mut last = None;
        while r.at < r.buf.len() {
            let service = r.string(local)?;
            if last.is_some_and(|l| l >= service) {
                return Err(r.err("services column out of order"));
            }
            last = Some(service);
            let bits = r.bytes(bytes)?;
            if let Some(i) = services.iter().position(|&s| s == service) {
                found[i] = true;
                mask.iter_mut().zip(bits).for_each(|(m, b)| *m &= b);
            }
        }
        if !found.iter().all(|&f| f) || mask.iter().all(|&m| m == 0) {
            // No part has every service.
            return Ok(true);
        }
        meets = Some(mask);
    }
    let mut columns: Vec<(ValueKind, Reader<'_>)> = block
        .columns
        .iter()
        .filter_map(|c| match c.key {
            Some((key, s, kind))
                if key == k && kind != ValueKind::Unindexed && scope.is_none_or(|x| x == s) =>
            {
                Some((kind, reader(c)))
            }
            _ => None,
        })
        .collect();
    for i in 0..block.count {
        let part_meets = meets
            .as_ref()
            .is_none_or(|m| m[i / 8] & (1 << (i % 8)) != 0);
        for (kind, r) in &mut columns {
            for _ in 0..r.count(1)? {
                let v = r.string(local)?;
                if part_meets {
                    met[v as usize] |= 1 << *kind as u8;
                }
            }
        }
    }
    if let Some((_, r)) = columns.iter().find(|(_, r)| r.at != r.buf.len()) {
        return Err(r.err("column longer than its block's parts"));
    }
    Ok(true)
}

/// A need of a tag-values query with its strings looked up in one block's
/// table, to be checked against the block's parts where they lie.
struct LocalNeed<'a> {
    need: &'a OpNeed,
    /// The (service, name) an operation must have (`None` in either: any);
    /// `None` when the need names no operation.
    ops: Option<(Option<u32>, Option<u32>)>,
    /// A service or name the need names is not in the block: no part meets it.
    unknown: bool,
    tags: Vec<LocalTag<'a>>,
}

/// An attribute a need names, with its key and value looked up.
struct LocalTag<'a> {
    tag: &'a super::TagNeed,
    key: Option<u32>,
    value: Option<u32>,
}

impl<'a> LocalNeed<'a> {
    fn new(need: &'a OpNeed, id: impl Fn(&str) -> Option<u32>) -> LocalNeed<'a> {
        let mut unknown = false;
        let mut look = |s: &Option<String>| match s {
            None => None,
            Some(s) => {
                let found = id(s);
                unknown |= found.is_none();
                found
            }
        };
        let (service, name) = (look(&need.service), look(&need.name));
        let names_op = need.service.is_some() || need.name.is_some() || need.kind.is_some();
        LocalNeed {
            need,
            ops: names_op.then_some((service, name)),
            unknown,
            tags: need
                .tags
                .iter()
                .map(|t| LocalTag {
                    tag: t,
                    key: id(&t.key),
                    value: id(&t.value),
                })
                .collect(),
        }
    }

    /// The service (its place) the need names, when it names nothing else.
    fn service_alone(&self) -> Option<u32> {
        match self.ops {
            Some((Some(service), None)) if self.need.names_a_service_alone() => Some(service),
            _ => None,
        }
    }

    /// Whether an operation of a part meets the need's operation.
    fn op_meets(&self, service: u32, name: u32, kind: u8) -> bool {
        let Some((s, n)) = self.ops else {
            return true;
        };
        !self.unknown
            && (self.need.service.is_none() || s == Some(service))
            && (self.need.name.is_none() || n == Some(name))
            && self.need.kind.is_none_or(|k| k == kind)
    }
}

impl LocalTag<'_> {
    /// Whether a part's attribute (scope, key, value, type) may be this one:
    /// a value the index did not keep may be any.
    fn held_by(&self, scope: TagScope, key: u32, value: u32, kind: ValueKind) -> bool {
        self.key == Some(key)
            && self.tag.scope.is_none_or(|s| s == scope)
            && (kind == ValueKind::Unindexed
                || (kind == self.tag.kind && self.value == Some(value)))
    }
}
