//! The values of one attribute read from a sidecar block's bytes, for
//! `Engine::tag_values`: from the block's columns when they list the key,
//! else by scanning each part's times, operations and tags in place, with
//! the query's needs looked up once in the block's strings
//! ([`ResolvedNeed`]).

use std::path::Path;

use super::{
    format::{scope_kind, split_block, split_head, BlockBody, Column, Reader},
    OpNeed, ResolvedNeed, TagScope, ValueKind, MAX_TAGS_PER_TRACE,
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
    let needs: Vec<ResolvedNeed> = needs
        .iter()
        .map(|n| ResolvedNeed::new(n, local_id))
        .collect();
    if needs.iter().any(ResolvedNeed::met_nowhere) {
        return Ok(());
    }
    let local = block.strings.len();
    // Per string of the block, a bit per value type already met.
    let mut met = vec![0u8; local];
    // The part's values of the key, kept until its needs are decided.
    let mut found: Vec<(u32, ValueKind)> = Vec::new();
    // Per need: its operation, and each of its attributes, met by the part.
    let mut op_met = vec![false; needs.len()];
    let mut tag_met: Vec<Vec<bool>> = needs.iter().map(|n| vec![false; n.tags().len()]).collect();
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
        if errors == 0 && needs.iter().any(ResolvedNeed::error) {
            continue;
        }
        if r.u32()? != 0 {
            r.string(local)?;
        }
        for (i, n) in needs.iter().enumerate() {
            op_met[i] = !n.names_op();
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
                for (t, m) in n.tags().iter().zip(met.iter_mut()) {
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
    let needs: Vec<ResolvedNeed> = needs
        .iter()
        .map(|n| ResolvedNeed::new(n, local_id))
        .collect();
    let Some(services) = needs
        .iter()
        .map(ResolvedNeed::service_alone)
        .collect::<Option<Vec<u32>>>()
    else {
        // A service the block lacks is no place in its table.
        if needs.iter().any(ResolvedNeed::met_nowhere) {
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
