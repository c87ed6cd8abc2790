//! Cutting a file's summary set into a sidecar: parts sorted newest start
//! first into blocks of at most `block_parts`, each block's strings,
//! columns and digest, the blocks' frames after the digest's (the bytes as
//! `format` and `docs/FORMAT.md` lay them out).

use std::{collections::HashSet, path::Path};

use tracedb_proto::wire::put_varint;

use super::{
    blocks,
    format::{
        decode_part, put_part, put_places, put_str, remap_part, strings_of, tag_byte, Reader,
        HEAD_BYTES, MAGIC, SERVICES_COLUMN, VERSION, ZSTD_LEVEL,
    },
    SummarySet, TraceSummary, ValueKind,
};

/// Encodes a set; see `docs/FORMAT.md`.
/// `block_parts`: most parts per block (at least 1).
pub fn encode(set: &SummarySet, block_parts: usize) -> Vec<u8> {
    let mut parts = Vec::with_capacity(set.traces.len() * 96);
    let mut placed = Vec::with_capacity(set.traces.len());
    for t in &set.traces {
        let at = parts.len();
        put_part(&mut parts, t);
        placed.push((t.start_unix_nano, at, parts.len() - at));
    }
    encode_parts(&set.strings, &parts, placed, block_parts)
}

/// A sidecar of `strings` and the parts encoded in `parts` by [`put_part`]
/// at `placed`: (start, offset, length) each, in trace-ID order.
pub(super) fn encode_parts(
    strings: &[String],
    parts: &[u8],
    mut placed: Vec<(u64, usize, usize)>,
    block_parts: usize,
) -> Vec<u8> {
    // Newest first; a stable sort keeps equal starts in trace-ID order.
    placed.sort_by_key(|p| std::cmp::Reverse(p.0));
    let mut hashes: Vec<Option<u64>> = vec![None; strings.len()];
    let mut hash = |id: u32| {
        *hashes[id as usize]
            .get_or_insert_with(|| blocks::text_hash(strings[id as usize].as_bytes()))
    };
    let path = Path::new("(sidecar being written)");
    let mut digests = Vec::new();
    let mut frames: Vec<u8> = Vec::new();
    let mut decoded = Vec::new();
    // A string's place in the table of the block being written.
    let mut local = vec![0u32; strings.len()];
    for block in placed.chunks(block_parts.max(1)) {
        decoded.clear();
        let mut used: Vec<u32> = Vec::new();
        for &(_, at, len) in block {
            let mut r = Reader {
                path,
                buf: &parts[at..at + len],
                at: 0,
            };
            let part =
                decode_part(&mut r, strings.len()).expect("parts encoded by put_part decode");
            strings_of(&part, &mut used);
            decoded.push(part);
        }
        used.sort_unstable();
        used.dedup();
        let mut d = blocks::digest_of(&decoded, &mut hash, |id| strings[id as usize].as_str());
        // The block's parts name its strings by their place in its own
        // table, which keeps the order of the sidecar's.
        for (i, &id) in used.iter().enumerate() {
            local[id as usize] = i as u32;
        }
        let mut encoded = Vec::with_capacity(block.iter().map(|p| p.2).sum::<usize>());
        let mut lens = Vec::with_capacity(block.len());
        for part in &mut decoded {
            remap_part(part, |id| local[id as usize]);
            let at = encoded.len();
            put_part(&mut encoded, part);
            lens.push(encoded.len() - at);
        }
        let mut body = Vec::with_capacity(encoded.len() + 2 * lens.len() + used.len() * 16);
        put_varint(&mut body, used.len() as u64);
        for &id in &used {
            put_varint(&mut body, u64::from(id));
            put_varint(&mut body, strings[id as usize].len() as u64);
            body.extend_from_slice(strings[id as usize].as_bytes());
        }
        put_varint(&mut body, block.len() as u64);
        put_columns(&mut body, &decoded);
        // The head (strings, columns) and the rest (the parts) are two
        // frames one after the other: a key's values inflate the head alone.
        let mut rest = Vec::with_capacity(encoded.len() + 2 * lens.len());
        for len in lens {
            put_varint(&mut rest, len as u64);
        }
        rest.extend_from_slice(&encoded);
        let mut frame =
            zstd::bulk::compress(&body, ZSTD_LEVEL).expect("zstd compresses into memory");
        d.head_len = frame.len() as u32;
        d.head_crc = crc32c::crc32c(&frame);
        frame.extend(zstd::bulk::compress(&rest, ZSTD_LEVEL).expect("zstd compresses into memory"));
        d.offset = frames.len() as u64;
        d.frame_len = frame.len() as u32;
        d.body_len = (body.len() + rest.len()) as u32;
        d.crc = crc32c::crc32c(&frame);
        frames.extend_from_slice(&frame);
        digests.push(d);
    }
    let mut digest = Vec::with_capacity(16 + digests.len() * 64);
    put_varint(&mut digest, strings.len() as u64);
    put_varint(&mut digest, digests.len() as u64);
    for d in &digests {
        digest.extend_from_slice(&d.max_start.to_le_bytes());
        digest.extend_from_slice(&d.min_start.to_le_bytes());
        digest.extend_from_slice(&d.max_end.to_le_bytes());
        put_varint(&mut digest, u64::from(d.parts));
        put_varint(&mut digest, d.offset);
        put_varint(&mut digest, u64::from(d.frame_len));
        put_varint(&mut digest, u64::from(d.body_len));
        digest.extend_from_slice(&d.crc.to_le_bytes());
        put_varint(&mut digest, u64::from(d.head_len));
        digest.extend_from_slice(&d.head_crc.to_le_bytes());
        digest.push(d.kinds);
        digest.push(d.flags);
        put_varint(&mut digest, d.bloom.words().len() as u64);
        for w in d.bloom.words() {
            digest.extend_from_slice(&w.to_le_bytes());
        }
        put_varint(&mut digest, d.tags.len() as u64);
        for t in &d.tags {
            digest.push(t.scope as u8 | (t.kind as u8) << 4);
            put_str(&mut digest, &t.key);
            match &t.values {
                None => put_varint(&mut digest, 0),
                Some(values) => {
                    put_varint(&mut digest, values.len() as u64 + 1);
                    for v in values.iter() {
                        put_str(&mut digest, v);
                    }
                }
            }
        }
    }
    let digest_frame =
        zstd::bulk::compress(&digest, ZSTD_LEVEL).expect("zstd compresses into memory");
    let mut out = Vec::with_capacity(HEAD_BYTES + digest_frame.len() + frames.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(digest_frame.len() as u32).to_le_bytes());
    out.extend_from_slice(&(digest.len() as u32).to_le_bytes());
    let mut crc = crc32c::crc32c(&out[..16]);
    crc = crc32c::crc32c_append(crc, &digest_frame);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&digest_frame);
    out.extend_from_slice(&frames);
    out
}

/// Appends a block's columns (`docs/FORMAT.md`): the services of each of its
/// `parts` (strings as places in the block's table), then the values of each
/// part for every key of which one (scope, type) has more values in the
/// block than its digest lists.
pub(super) fn put_columns(out: &mut Vec<u8>, parts: &[TraceSummary]) {
    let mut column = Vec::with_capacity(parts.len() * 4);
    let mut places = Vec::new();
    let mut services: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
    for (i, p) in parts.iter().enumerate() {
        for o in &p.ops {
            let bits = services
                .entry(o.service)
                .or_insert_with(|| vec![0; parts.len().div_ceil(8)]);
            bits[i / 8] |= 1 << (i % 8);
        }
    }
    for (service, bits) in &services {
        put_varint(&mut column, u64::from(*service));
        column.extend_from_slice(bits);
    }
    let mut distinct: std::collections::BTreeMap<(u32, u8), Vec<u32>> = Default::default();
    for p in parts {
        for g in p.tags.iter().filter(|g| g.kind != ValueKind::Unindexed) {
            distinct
                .entry((g.key, tag_byte(g)))
                .or_default()
                .push(g.value);
        }
    }
    for values in distinct.values_mut() {
        values.sort_unstable();
        values.dedup();
    }
    // The keys with a (scope, type) of too many values to list, and with
    // them every other (scope, type) of the same key.
    let wide: HashSet<u32> = distinct
        .iter()
        .filter(|(_, values)| values.len() > blocks::DIGEST_VALUES)
        .map(|(&(key, _), _)| key)
        .collect();
    // A part that ends before it starts is left out of some windows that
    // hold its start, so its block has no key columns: it is read part by
    // part.
    let backwards = parts.iter().any(|p| p.end_unix_nano < p.start_unix_nano);
    let keys: Vec<(u32, u8)> = distinct
        .keys()
        .filter(|(key, _)| !backwards && wide.contains(key))
        .copied()
        .collect();
    put_varint(out, 1 + keys.len() as u64);
    out.push(SERVICES_COLUMN);
    put_varint(out, column.len() as u64);
    out.extend_from_slice(&column);
    for &(key, byte) in &keys {
        column.clear();
        for p in parts {
            places.clear();
            places.extend(
                p.tags
                    .iter()
                    .filter(|g| g.key == key && tag_byte(g) == byte)
                    .map(|g| g.value),
            );
            places.sort_unstable();
            places.dedup();
            put_places(&mut column, &places);
        }
        out.push(byte);
        put_varint(out, u64::from(key));
        put_varint(out, column.len() as u64);
        out.extend_from_slice(&column);
    }
}
