//! One WAL segment file: its name, header, record framing, and recovery scan.
//!
//! Everything that knows the byte layout lives here so that the writer (the
//! sync thread) and the reader (replay at open) cannot drift apart. The layout
//! is written down in `docs/FORMAT.md` ("Write-ahead log segment").
//!
//! The scan reads a record's 8-byte frame first and checks its length against
//! both [`MAX_RECORD_LEN`] and the bytes left in the file before allocating
//! anything, so a hostile or garbage length costs nothing.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufReader, Read},
    path::{Path, PathBuf},
};

use bytes::Bytes;

use crate::{
    error::{Error, Result},
    fault::{FaultTarget, Faults},
};

/// First bytes of every segment file.
pub(crate) const MAGIC: [u8; 8] = *b"TDB-WAL\0";
/// The one format version this build writes and reads.
pub(crate) const VERSION: u32 = 1;
/// Magic, version, segment id, header checksum.
pub(crate) const HEADER_LEN: u64 = 8 + 4 + 8 + 4;
/// Payload length and checksum in front of every record.
pub(crate) const FRAME_LEN: usize = 4 + 4;
/// Longest payload a record may carry. A larger length field can only be
/// garbage, so the scan treats it as corruption instead of allocating it.
pub const MAX_RECORD_LEN: usize = 256 << 20;

/// File name suffix of segment files.
const SUFFIX: &str = ".wal";
/// Decimal digits in a segment file name; enough for any `u64`, and fixed width
/// so that a directory listing sorts in id order.
const ID_DIGITS: usize = 20;

/// Path of segment `id` in `dir`.
pub(crate) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:0width$}{SUFFIX}", width = ID_DIGITS))
}

/// The segment id a file name stands for, or `None` for any other file.
fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != ID_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Ids of the segment files in `dir`, ascending. Other files are ignored.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if let Some(id) = entry.file_name().to_str().and_then(parse_segment_name) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Flushes `dir`'s entries, so that files created or removed in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// The header bytes of segment `id`.
fn encode_header(id: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&id.to_le_bytes());
    let crc = crc32c::crc32c(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a header read from `path`, which should be segment `id`.
fn check_header(path: &Path, id: u64, h: &[u8; HEADER_LEN as usize]) -> Result<()> {
    let corrupt = |offset: u64, reason: String| Error::Corrupt {
        file: path.to_owned(),
        offset,
        reason,
    };
    if h[0..8] != MAGIC {
        return Err(corrupt(
            0,
            "not a write-ahead log segment (bad magic)".into(),
        ));
    }
    let expected = u32::from_le_bytes(h[20..24].try_into().expect("4 bytes"));
    let actual = crc32c::crc32c(&h[..20]);
    if expected != actual {
        return Err(Error::ChecksumMismatch {
            file: path.to_owned(),
            offset: 0,
            expected,
            actual,
        });
    }
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            file: path.to_owned(),
            version,
            supported: VERSION,
        });
    }
    let stored = u64::from_le_bytes(h[12..20].try_into().expect("8 bytes"));
    if stored != id {
        return Err(corrupt(
            12,
            format!("header names segment {stored}, file name says {id}"),
        ));
    }
    Ok(())
}

/// Checksum of a record: over its 4 length bytes, then its payload; not masked.
fn record_crc(len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len_bytes), payload)
}

/// Appends the framed record of `payload` to `out`. The caller has checked
/// `payload.len() <= MAX_RECORD_LEN`.
pub(crate) fn encode_record(payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&record_crc(len, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Bytes a record of `payload_len` occupies in a segment.
pub(crate) fn framed_len(payload_len: usize) -> u64 {
    (FRAME_LEN + payload_len) as u64
}

/// A segment file open for appends, owned by the sync thread.
pub(crate) struct SegmentWriter {
    pub(crate) id: u64,
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    /// Bytes written since the last `sync_data`.
    pub(crate) unsynced: bool,
    /// Length of the file up to the end of the last record that was fsynced.
    pub(crate) synced_len: u64,
    /// Length of the file once every write so far has landed.
    pub(crate) len: u64,
}

impl SegmentWriter {
    /// Creates segment `id` with its header and makes both the file and its
    /// directory entry durable before any record goes in, so a segment that
    /// records were acknowledged from cannot vanish in a crash. Returns the
    /// writer and the number of fsyncs it took. If any step fails the file is
    /// removed, best effort, and the id is never used again.
    pub(crate) fn create(dir: &Path, id: u64, faults: &Faults) -> Result<(SegmentWriter, u64)> {
        let path = segment_path(dir, id);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let made = faults
            .write_all(FaultTarget::Wal, &mut file, &path, &encode_header(id))
            .and_then(|()| faults.sync_all(FaultTarget::Wal, &file, &path))
            .and_then(|()| faults.sync_dir(FaultTarget::Wal, dir));
        if let Err(e) = made {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        let writer = SegmentWriter {
            id,
            path,
            file,
            unsynced: false,
            synced_len: HEADER_LEN,
            len: HEADER_LEN,
        };
        Ok((writer, 2))
    }

    /// After a failed write or fsync: cuts the file back to what the last good
    /// fsync covered, so replay finds no garbage. Best effort; see the module
    /// docs of [`crate::wal`] for what happens if this fails too.
    pub(crate) fn abandon(self) {
        let cut = self
            .file
            .set_len(self.synced_len)
            .and_then(|()| self.file.sync_all());
        match cut {
            Ok(()) => tracing::warn!(
                file = %self.path.display(),
                len = self.synced_len,
                "abandoned write-ahead log segment after a failure; cut back to its last fsync"
            ),
            Err(e) => tracing::error!(
                file = %self.path.display(),
                error = %e,
                "abandoned write-ahead log segment after a failure; could not cut its unsynced tail"
            ),
        }
    }
}

/// What the scan of one segment found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ScanOutcome {
    pub(crate) records: u64,
    pub(crate) payload_bytes: u64,
    /// Offset just past the last intact record.
    pub(crate) good_len: u64,
    /// Where and why the scan stopped early; `None` if it read to the end.
    pub(crate) damage: Option<Damage>,
}

/// The first bad record of a segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Damage {
    pub(crate) offset: u64,
    pub(crate) reason: String,
}

/// How a segment's header turned out.
pub(crate) enum Header {
    Valid,
    /// Shorter than a header: the process died while creating the segment.
    Short {
        len: u64,
    },
}

/// Reads segment `id` at `path`, calling `replay` for each intact record in
/// order, and stops at the first damaged record. A bad header is an error
/// unless the file is too short to hold one (reported as [`Header::Short`]).
pub(crate) fn scan(
    path: &Path,
    id: u64,
    replay: &mut dyn FnMut(u64, Bytes) -> Result<()>,
) -> Result<(Header, ScanOutcome)> {
    let io_err = |e: io::Error| Error::io(path, e);
    let file = File::open(path).map_err(io_err)?;
    let file_len = file.metadata().map_err(io_err)?.len();
    if file_len < HEADER_LEN {
        return Ok((Header::Short { len: file_len }, ScanOutcome::default()));
    }
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut header = [0u8; HEADER_LEN as usize];
    reader.read_exact(&mut header).map_err(io_err)?;
    check_header(path, id, &header)?;

    let mut out = ScanOutcome {
        good_len: HEADER_LEN,
        ..ScanOutcome::default()
    };
    loop {
        let offset = out.good_len;
        let left = file_len - offset;
        if left == 0 {
            return Ok((Header::Valid, out));
        }
        let mut damaged = |reason: String| {
            out.damage = Some(Damage { offset, reason });
        };
        if left < FRAME_LEN as u64 {
            damaged(format!(
                "record frame cut short ({left} of {FRAME_LEN} bytes)"
            ));
            return Ok((Header::Valid, out));
        }
        let mut frame = [0u8; FRAME_LEN];
        reader.read_exact(&mut frame).map_err(io_err)?;
        let len_bytes: [u8; 4] = frame[0..4].try_into().expect("4 bytes");
        let len = u32::from_le_bytes(len_bytes) as usize;
        let expected = u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes"));
        if len > MAX_RECORD_LEN {
            damaged(format!(
                "record length {len} exceeds the limit of {MAX_RECORD_LEN}"
            ));
            return Ok((Header::Valid, out));
        }
        if len as u64 > left - FRAME_LEN as u64 {
            damaged(format!(
                "record of {len} bytes runs past the end of the file ({} bytes left)",
                left - FRAME_LEN as u64
            ));
            return Ok((Header::Valid, out));
        }
        let mut payload = vec![0u8; len];
        reader.read_exact(&mut payload).map_err(io_err)?;
        let actual = record_crc(len_bytes, &payload);
        if actual != expected {
            damaged(format!(
                "record checksum mismatch: stored {expected:#010x}, computed {actual:#010x}"
            ));
            return Ok((Header::Valid, out));
        }
        replay(id, Bytes::from(payload))?;
        out.records += 1;
        out.payload_bytes += len as u64;
        out.good_len = offset + framed_len(len);
    }
}

/// Cuts segment `path` down to `len` bytes and makes the cut durable.
pub(crate) fn truncate(path: &Path, len: u64) -> Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| {
            f.set_len(len)?;
            f.sync_all()
        })
        .map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_foreign_files_are_ignored() {
        let path = segment_path(Path::new("/x"), 42);
        assert_eq!(path, Path::new("/x/00000000000000000042.wal"));
        let name = path.file_name().and_then(|n| n.to_str()).expect("utf-8");
        assert_eq!(parse_segment_name(name), Some(42));
        assert_eq!(parse_segment_name("42.wal"), None);
        assert_eq!(parse_segment_name("0000000000000000004x.wal"), None);
        assert_eq!(parse_segment_name("00000000000000000042.tmp"), None);
    }

    #[test]
    fn header_checks_catch_each_kind_of_damage() {
        let p = Path::new("seg");
        let good = encode_header(7);
        assert!(check_header(p, 7, &good).is_ok());
        assert!(matches!(
            check_header(p, 8, &good),
            Err(Error::Corrupt { offset: 12, .. })
        ));
        let mut bad_magic = good;
        bad_magic[0] ^= 1;
        assert!(matches!(
            check_header(p, 7, &bad_magic),
            Err(Error::Corrupt { offset: 0, .. })
        ));
        let mut bad_crc = good;
        bad_crc[13] ^= 1;
        assert!(matches!(
            check_header(p, 7, &bad_crc),
            Err(Error::ChecksumMismatch { .. })
        ));
        let mut v2 = good;
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&v2[..20]);
        v2[20..24].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            check_header(p, 7, &v2),
            Err(Error::UnsupportedVersion { version: 2, .. })
        ));
    }

    #[test]
    fn record_checksum_covers_the_length_field() {
        let mut a = Vec::new();
        encode_record(b"abc", &mut a);
        assert_eq!(a.len() as u64, framed_len(3));
        assert_eq!(&a[0..4], &3u32.to_le_bytes());
        // A record of zeros (a zero-filled tail) must not pass as an empty record.
        assert_eq!(record_crc([0; 4], b""), 0x4867_4bc7);
        let mut b = Vec::new();
        encode_record(b"", &mut b);
        assert_ne!(a[4..8], b[4..8]);
    }
}
