//! The fixed-size header at the start of a sorted span file and the fixed-size
//! footer at its end.
//!
//! The header lets a reader (or a person with `xxd`) tell what the file is and
//! which format version wrote it before trusting anything else. The footer is
//! where reading starts: it locates the index and the bloom filter and carries
//! the file's summary (ID and time range, counts), so opening a file never scans
//! it. The footer repeats the magic and version, so a file cut short (whose last
//! bytes are then not a footer) is caught before any offset in it is followed.
//! Layout: `docs/FORMAT.md`, "Header (16 bytes)" and "Footer (120 bytes)" under
//! "Sorted span file".

use std::path::Path;

use crate::{
    error::{Error, Result},
    span::TraceId,
};

use super::corrupt;

/// The first eight bytes of every sorted span file, repeated in its footer.
pub(crate) const MAGIC: [u8; 8] = *b"TDBSPANS";

/// The format version this build writes, and the newest it reads. Version 2
/// data blocks hold columnar batches; version 1 files (row batches) are
/// still read.
pub(crate) const VERSION: u32 = 2;

/// The oldest format version this build reads.
const OLDEST_READ: u32 = 1;

/// Bytes of the header: magic, version, reserved flags.
pub(crate) const HEADER_LEN: usize = 16;

/// Bytes of the footer.
pub(crate) const FOOTER_LEN: usize = 120;

/// Bytes of the footer covered by its checksum (all but the checksum itself).
const FOOTER_CRC_AT: usize = FOOTER_LEN - 4;

/// The header bytes of a file written by this build.
pub(crate) fn encode_header() -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[0..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    // Bytes 12..16: flags, all zero in versions 1 and 2.
    out
}

/// Checks the header at the start of `file`.
pub(crate) fn check_header(path: &Path, file: &[u8]) -> Result<()> {
    let header = file.get(..HEADER_LEN).ok_or_else(|| {
        corrupt(
            path,
            0,
            format!("{} bytes is too short for a header", file.len()),
        )
    })?;
    if header[0..8] != MAGIC {
        return Err(corrupt(path, 0, "bad magic: not a sorted span file"));
    }
    check_version(path, u32_at(header, 8))?;
    let flags = u32_at(header, 12);
    if flags != 0 {
        return Err(corrupt(
            path,
            12,
            format!("unknown header flags {flags:#x}"),
        ));
    }
    Ok(())
}

fn check_version(path: &Path, version: u32) -> Result<()> {
    if (OLDEST_READ..=VERSION).contains(&version) {
        Ok(())
    } else {
        Err(Error::UnsupportedVersion {
            file: path.to_path_buf(),
            version,
            supported: VERSION,
        })
    }
}

/// Everything the footer records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Footer {
    pub index_offset: u64,
    /// Length of the index including its checksum.
    pub index_len: u64,
    pub bloom_offset: u64,
    /// Length of the bloom filter including its checksum.
    pub bloom_len: u64,
    pub min_trace_id: TraceId,
    pub max_trace_id: TraceId,
    /// Smallest span start time in the file.
    pub min_start_unix_nano: u64,
    /// Largest span end time in the file.
    pub max_end_unix_nano: u64,
    pub span_count: u64,
    /// Distinct trace IDs in the file.
    pub trace_count: u64,
    pub block_count: u64,
}

impl Footer {
    pub(crate) fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut out = [0u8; FOOTER_LEN];
        out[0..8].copy_from_slice(&self.index_offset.to_le_bytes());
        out[8..16].copy_from_slice(&self.index_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.bloom_offset.to_le_bytes());
        out[24..32].copy_from_slice(&self.bloom_len.to_le_bytes());
        out[32..48].copy_from_slice(&self.min_trace_id.0);
        out[48..64].copy_from_slice(&self.max_trace_id.0);
        out[64..72].copy_from_slice(&self.min_start_unix_nano.to_le_bytes());
        out[72..80].copy_from_slice(&self.max_end_unix_nano.to_le_bytes());
        out[80..88].copy_from_slice(&self.span_count.to_le_bytes());
        out[88..96].copy_from_slice(&self.trace_count.to_le_bytes());
        out[96..104].copy_from_slice(&self.block_count.to_le_bytes());
        out[104..112].copy_from_slice(&MAGIC);
        out[112..116].copy_from_slice(&VERSION.to_le_bytes());
        let crc = crc32c::crc32c(&out[..FOOTER_CRC_AT]);
        out[FOOTER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads and checks the footer at the end of `file`: magic, version and
    /// checksum. Its offsets are checked against each other by the caller.
    pub(crate) fn decode(path: &Path, file: &[u8]) -> Result<Footer> {
        let min_len = HEADER_LEN + FOOTER_LEN;
        if file.len() < min_len {
            return Err(corrupt(
                path,
                0,
                format!(
                    "{} bytes is shorter than header and footer ({min_len})",
                    file.len()
                ),
            ));
        }
        let start = file.len() - FOOTER_LEN;
        let at = start as u64;
        let b = &file[start..];
        if b[104..112] != MAGIC {
            return Err(corrupt(
                path,
                at + 104,
                "bad footer magic: file truncated or not a sorted span file",
            ));
        }
        let expected = u32_at(b, FOOTER_CRC_AT);
        let actual = crc32c::crc32c(&b[..FOOTER_CRC_AT]);
        if expected != actual {
            return Err(Error::ChecksumMismatch {
                file: path.to_path_buf(),
                offset: at,
                expected,
                actual,
            });
        }
        // The version is checked after the checksum, so a flipped bit reads as
        // corruption and only a real newer file as a version problem.
        check_version(path, u32_at(b, 112))?;
        Ok(Footer {
            index_offset: u64_at(b, 0),
            index_len: u64_at(b, 8),
            bloom_offset: u64_at(b, 16),
            bloom_len: u64_at(b, 24),
            min_trace_id: trace_id_at(b, 32),
            max_trace_id: trace_id_at(b, 48),
            min_start_unix_nano: u64_at(b, 64),
            max_end_unix_nano: u64_at(b, 72),
            span_count: u64_at(b, 80),
            trace_count: u64_at(b, 88),
            block_count: u64_at(b, 96),
        })
    }
}

// Fixed-width little-endian reads from buffers whose length the caller has
// already checked; an out-of-range position is a bug in this module, not input.

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4-byte slice"))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8-byte slice"))
}

pub(crate) fn trace_id_at(b: &[u8], at: usize) -> TraceId {
    TraceId(b[at..at + 16].try_into().expect("16-byte slice"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Footer {
        Footer {
            index_offset: 100,
            index_len: 68,
            bloom_offset: 168,
            bloom_len: 20,
            min_trace_id: TraceId([1; 16]),
            max_trace_id: TraceId([9; 16]),
            min_start_unix_nano: 5,
            max_end_unix_nano: 50,
            span_count: 7,
            trace_count: 3,
            block_count: 1,
        }
    }

    fn file_with(footer: &[u8]) -> Vec<u8> {
        let mut file = encode_header().to_vec();
        file.extend_from_slice(footer);
        file
    }

    #[test]
    fn footer_round_trips() {
        let file = file_with(&sample().encode());
        let path = Path::new("t.sst");
        check_header(path, &file).expect("header");
        assert_eq!(Footer::decode(path, &file).expect("footer"), sample());
    }

    #[test]
    fn every_flipped_footer_byte_is_detected() {
        let good = sample().encode();
        for i in 0..FOOTER_LEN {
            let mut bad = good;
            bad[i] ^= 0x10;
            let file = file_with(&bad);
            let err = Footer::decode(Path::new("t.sst"), &file).expect_err("flip must be caught");
            assert!(
                matches!(err, Error::ChecksumMismatch { .. } | Error::Corrupt { .. }),
                "byte {i}: {err}"
            );
        }
    }

    #[test]
    fn newer_version_is_reported_as_such_and_version_1_still_opens() {
        let mut header = encode_header();
        assert_eq!(u32_at(&header, 8), 2, "this build writes version 2");
        header[8..12].copy_from_slice(&3u32.to_le_bytes());
        let err = check_header(Path::new("t.sst"), &header).expect_err("version 3");
        assert!(matches!(
            err,
            Error::UnsupportedVersion {
                version: 3,
                supported: 2,
                ..
            }
        ));
        header[8..12].copy_from_slice(&1u32.to_le_bytes());
        check_header(Path::new("t.sst"), &header).expect("version 1 is read");
        header[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            check_header(Path::new("t.sst"), &header),
            Err(Error::UnsupportedVersion { version: 0, .. })
        ));
    }
}
