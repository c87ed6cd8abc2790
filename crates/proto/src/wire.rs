//! The varint writer: base-128 varints as protobuf encodes keys, lengths and
//! integers. The storage engine's own formats (span batches, index sidecars)
//! write theirs with it, and tests build protobuf messages byte by byte with
//! it. One other copy of the loop remains: `tracedb_query::traces_data`, which
//! assembles GetTrace answers in a `BytesMut` rather than a `Vec<u8>`.
//!
//! The readers stay with their callers: the ingest scanner's strict
//! `tracedb_otlp::wire::Reader`, whose speed depends on being inlined into
//! the scanner's crate, and the search index's lenient field iterator in
//! `tracedb-lsm`.

/// Appends `v` as a base-128 varint (1 to 10 bytes).
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_take_seven_bits_a_byte_low_first() {
        for (v, bytes) in [
            (0, &[0x00][..]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "value {v}");
        }
    }
}
