//! The bloom filter over a file's distinct trace IDs, which lets a lookup skip
//! a file without touching any data block.
//!
//! Probe positions come from double hashing: `k` positions `h1 + i * h2`
//! (wrapping `u64` arithmetic) modulo the number of bits. `h1` and `h2` are
//! derived from the two halves of the 16 ID bytes, `lo` (bytes 0..8) and `hi`
//! (bytes 8..16), each read as a little-endian `u64`, through the murmur3
//! 64-bit finalizer `fmix64`: `m = fmix64(hi)`, `h1 = fmix64(lo ^ m)`,
//! `h2 = fmix64((lo + m) ^ 0x9e3779b97f4a7c15)`. The IDs are meant to be random, but not every client makes them
//! so: some pad 64-bit IDs with zeros, some put a timestamp in the first bytes.
//! Mixing both halves into both hashes keeps such IDs spread over the filter.
//! This hash is part of the file format (`docs/FORMAT.md`, "Bloom filter"): changing it
//! makes existing files answer "absent" for IDs they hold.
//!
//! Region layout: probe count (`u32`), the bit array (bit `p` is bit `p % 8`
//! of byte `p / 8`), then a crc32c of both.

use std::path::Path;

use crate::{error::Result, span::TraceId};

use super::{check_crc, corrupt, footer::u32_at};

/// Most probes a reader accepts; a filter needing more is not worth having.
const MAX_PROBES: u32 = 30;

/// Fewest bits a filter has, so tiny files still get a useful one.
const MIN_BITS: usize = 64;

/// 2^64 divided by the golden ratio: keeps `h2` apart from `h1`.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The murmur3 64-bit finalizer: every input bit affects every output bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The two base hashes of an ID (see the module docs).
fn hash_pair(id: &TraceId) -> (u64, u64) {
    let lo = u64::from_le_bytes(id.0[0..8].try_into().expect("8 of 16 bytes"));
    let hi = u64::from_le_bytes(id.0[8..16].try_into().expect("8 of 16 bytes"));
    let m = fmix64(hi);
    let h1 = fmix64(lo ^ m);
    let h2 = fmix64(lo.wrapping_add(m) ^ GOLDEN);
    (h1, h2)
}

/// Bit positions probed for a hash pair in a filter of `num_bits` bits.
fn probes(h1: u64, h2: u64, k: u32, num_bits: u64) -> impl Iterator<Item = u64> {
    (0..u64::from(k)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % num_bits)
}

/// Collects the distinct trace IDs of a file being written.
#[derive(Debug, Default)]
pub struct BloomBuilder {
    hashes: Vec<(u64, u64)>,
}

impl BloomBuilder {
    /// Adds one trace ID; the caller adds each distinct ID once.
    pub fn add(&mut self, id: &TraceId) {
        self.hashes.push(hash_pair(id));
    }

    /// The encoded filter region for the IDs added.
    pub fn finish(&self, bits_per_key: usize) -> Vec<u8> {
        let bits_per_key = bits_per_key.max(1);
        let num_bits = self
            .hashes
            .len()
            .saturating_mul(bits_per_key)
            .max(MIN_BITS)
            .div_ceil(8)
            * 8;
        // ln 2 * bits per key minimises the false-positive rate.
        let k =
            ((bits_per_key as f64 * std::f64::consts::LN_2).round() as u32).clamp(1, MAX_PROBES);
        let mut out = Vec::with_capacity(4 + num_bits / 8 + 4);
        out.extend_from_slice(&k.to_le_bytes());
        out.resize(4 + num_bits / 8, 0);
        let bits = &mut out[4..];
        for &(h1, h2) in &self.hashes {
            for p in probes(h1, h2, k, num_bits as u64) {
                bits[(p / 8) as usize] |= 1 << (p % 8);
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// A decoded, checked filter.
#[derive(Debug)]
pub struct Bloom {
    k: u32,
    bits: Vec<u8>,
}

impl Bloom {
    /// Checks and copies the filter region `region`, found at `offset` in `path`.
    pub fn decode(path: &Path, offset: u64, region: &[u8]) -> Result<Bloom> {
        if region.len() < 4 + MIN_BITS / 8 + 4 {
            return Err(corrupt(
                path,
                offset,
                format!("bloom filter of {} bytes is too short", region.len()),
            ));
        }
        let body = check_crc(path, offset, region)?;
        let k = u32_at(body, 0);
        if !(1..=MAX_PROBES).contains(&k) {
            return Err(corrupt(
                path,
                offset,
                format!("bloom filter has {k} probes"),
            ));
        }
        Ok(Bloom {
            k,
            bits: body[4..].to_vec(),
        })
    }

    /// False when `id` is certainly not in the file.
    pub fn may_contain(&self, id: &TraceId) -> bool {
        let (h1, h2) = hash_pair(id);
        let num_bits = self.bits.len() as u64 * 8;
        probes(h1, h2, self.k, num_bits).all(|p| self.bits[(p / 8) as usize] & (1 << (p % 8)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    use super::*;

    fn filter(ids: &[TraceId], bits_per_key: usize) -> Bloom {
        let mut b = BloomBuilder::default();
        ids.iter().for_each(|id| b.add(id));
        Bloom::decode(Path::new("t"), 0, &b.finish(bits_per_key)).expect("own filter decodes")
    }

    #[test]
    fn members_are_always_found_and_strangers_mostly_not() {
        let mut rng = SmallRng::seed_from_u64(7);
        let ids: Vec<TraceId> = (0..5_000).map(|_| TraceId(rng.random())).collect();
        let bloom = filter(&ids, 10);
        assert!(ids.iter().all(|id| bloom.may_contain(id)));
        let hits = (0..20_000)
            .filter(|_| bloom.may_contain(&TraceId(rng.random())))
            .count();
        assert!(hits < 20_000 * 3 / 100, "{hits} false positives in 20000");
    }

    #[test]
    fn zero_padded_64_bit_ids_spread_as_well() {
        // Sequential IDs in the low half only: the worst case for an unmixed hash.
        let ids: Vec<TraceId> = (0..5_000u128).map(|i| TraceId(i.to_be_bytes())).collect();
        let bloom = filter(&ids, 10);
        assert!(ids.iter().all(|id| bloom.may_contain(id)));
        let hits = (10_000..30_000u128)
            .filter(|&i| bloom.may_contain(&TraceId(i.to_be_bytes())))
            .count();
        assert!(hits < 20_000 * 3 / 100, "{hits} false positives in 20000");
    }

    #[test]
    fn the_hash_is_pinned() {
        // Files on disk depend on these exact probe positions.
        let id = TraceId(std::array::from_fn(|i| i as u8));
        let bloom = filter(&[id], 10);
        let set: Vec<usize> = (0..bloom.bits.len() * 8)
            .filter(|&p| bloom.bits[p / 8] & (1 << (p % 8)) != 0)
            .collect();
        assert_eq!(bloom.k, 7);
        assert_eq!(hash_pair(&TraceId([0; 16])), (0, fmix64(GOLDEN)));
        assert_eq!(hash_pair(&id), PINNED_PAIR);
        assert_eq!(set, PINNED_BITS);
    }

    // Computed outside Rust (a few lines of Python following the module docs),
    // so the test checks the docs as well as the code.
    const PINNED_BITS: &[usize] = &[1, 9, 17, 25, 33, 41, 57];
    const PINNED_PAIR: (u64, u64) = (9_475_239_730_751_497_401, 7_524_000_797_120_663_560);

    #[test]
    fn bad_probe_count_and_flipped_bits_are_rejected() {
        let mut b = BloomBuilder::default();
        b.add(&TraceId([1; 16]));
        let good = b.finish(10);
        let mut flipped = good.clone();
        flipped[6] ^= 1;
        assert!(Bloom::decode(Path::new("t"), 0, &flipped).is_err());
        let mut zero_k = good.clone();
        zero_k[0..4].copy_from_slice(&0u32.to_le_bytes());
        let n = zero_k.len() - 4;
        let crc = crc32c::crc32c(&zero_k[..n]);
        zero_k[n..].copy_from_slice(&crc.to_le_bytes());
        assert!(Bloom::decode(Path::new("t"), 0, &zero_k).is_err());
        assert!(Bloom::decode(Path::new("t"), 0, &good[..8]).is_err());
    }
}
