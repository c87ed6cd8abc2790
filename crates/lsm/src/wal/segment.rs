//! One WAL segment file: its name, header, record framing, and recovery scan.
//!
//! Everything that knows the byte layout lives here so that the writer (the
//! sync thread) and the reader (replay at open) cannot drift apart. The layout
//! is written down in `docs/FORMAT.md` ("Write-ahead log segment").
//!
//! The scan reads a record's 8-byte frame first and checks its length against
//! both [`MAX_RECORD_LEN`] and the bytes left in the file before allocating
//! anything, so a hostile or garbage length costs nothing.
//!
//! # Recycled files
//!
//! Format version 2 lets a flushed segment's file be reused for a new segment
//! (see [`SegmentWriter::recycle`]): the new header overwrites the old one and
//! records overwrite the old records, so whatever the new segment has not
//! reached yet is stale bytes of the old one. Two things keep the scan from
//! reading them as records:
//!
//! - Each record's checksum is seeded with its segment's id. A stale record,
//!   written under another id, fails the checksum of the id it is read under
//!   and reads as damage, that is, the end of the log. Because CRC-32C is
//!   linear, the two checksums of the same bytes under ids `a` and `b` differ
//!   by the CRC of a message whose only set bits are those of `a ^ b`; when
//!   `a ^ b` fits in 32 bits (any two ids below 2^32) that polynomial has
//!   degree below 32, is not zero, and so is not a multiple of the CRC's
//!   degree-32 generator: a stale record can never pass. Only torn or garbage
//!   bytes keep the usual 2^-32 chance.
//! - A segment that is closed (rotation, or a clean close of the log) ends with
//!   an *end mark*: a frame with length [`END_MARK_LEN`] and the version-2
//!   checksum of that length and an empty payload. The scan stops there
//!   without calling what follows damage, so an older recycled segment does
//!   not look damaged for the stale bytes after its last record.
//!
//! Version-1 segments (unseeded checksums, no end mark) are still read, so a
//! data directory written by an older build replays.

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
/// The format version this build writes: checksums seeded with the segment
/// id, and an end mark at close.
pub(crate) const VERSION: u32 = 2;
/// The first format version: unseeded checksums, no end mark. Still read.
pub(crate) const VERSION_1: u32 = 1;
/// Magic, version, segment id, header checksum.
pub(crate) const HEADER_LEN: u64 = 8 + 4 + 8 + 4;
/// Payload length and checksum in front of every record.
pub(crate) const FRAME_LEN: usize = 4 + 4;
/// Longest payload a record may carry. A larger length field can only be
/// garbage, so the scan treats it as corruption instead of allocating it.
pub const MAX_RECORD_LEN: usize = 256 << 20;
/// The `len` field of an end mark (version 2). Above [`MAX_RECORD_LEN`], so
/// no record can have it.
pub(crate) const END_MARK_LEN: u32 = u32::MAX;

/// File name suffix of segment files.
use crate::layout::SEGMENT_SUFFIX as SUFFIX;
/// File name suffix of spare files: flushed segments kept for reuse, named by
/// their old id. [`list_segments`] does not see them.
use crate::layout::SPARE_SUFFIX;
/// Decimal digits in a segment file name; enough for any `u64`, and fixed width
/// so that a directory listing sorts in id order.
const ID_DIGITS: usize = 20;

/// Path of segment `id` in `dir`.
pub(crate) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:0width$}{SUFFIX}", width = ID_DIGITS))
}

/// Path of the spare file that was segment `id` in `dir`.
pub(crate) fn spare_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:0width$}{SPARE_SUFFIX}", width = ID_DIGITS))
}

/// The id in a file name `{id:020}{suffix}`, or `None` for any other name.
fn parse_name(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != ID_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The segment id a file name stands for, or `None` for any other file.
fn parse_segment_name(name: &str) -> Option<u64> {
    parse_name(name, SUFFIX)
}

/// The old segment id of a spare file's name, or `None` for any other file.
fn parse_spare_name(name: &str) -> Option<u64> {
    parse_name(name, SPARE_SUFFIX)
}

/// Ids in the names of the files in `dir` that `parse` accepts, ascending.
fn list_ids(dir: &Path, parse: fn(&str) -> Option<u64>) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if let Some(id) = entry.file_name().to_str().and_then(parse) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Ids of the segment files in `dir`, ascending. Other files, spares
/// included, are ignored.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    list_ids(dir, parse_segment_name)
}

/// Old ids of the spare files in `dir`, ascending.
pub(crate) fn list_spares(dir: &Path) -> Result<Vec<u64>> {
    list_ids(dir, parse_spare_name)
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

/// Checks a header read from `path`, which should be segment `id`, and
/// returns its format version.
fn check_header(path: &Path, id: u64, h: &[u8; HEADER_LEN as usize]) -> Result<u32> {
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
    if version != VERSION && version != VERSION_1 {
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
    Ok(version)
}

/// Checksum of a record in a version-2 segment: over the segment id's 8
/// little-endian bytes, then the 4 length bytes, then the payload; not masked.
/// The seed is what makes a stale record of a recycled file fail (module docs).
fn record_crc(segment: u64, len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    let seeded = crc32c::crc32c_append(crc32c::crc32c(&segment.to_le_bytes()), &len_bytes);
    crc32c::crc32c_append(seeded, payload)
}

/// Checksum of a record in a version-1 segment: over its 4 length bytes, then
/// its payload; not masked.
fn record_crc_v1(len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len_bytes), payload)
}

/// Appends the framed record of `payload`, bound for segment `segment`, to
/// `out`. The caller has checked `payload.len() <= MAX_RECORD_LEN`.
pub(crate) fn encode_record(segment: u64, payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&record_crc(segment, len, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// The end mark that closes segment `segment`: a frame with length
/// [`END_MARK_LEN`] and the checksum of that length and no payload.
pub(crate) fn end_mark(segment: u64) -> [u8; FRAME_LEN] {
    let len = END_MARK_LEN.to_le_bytes();
    let mut mark = [0u8; FRAME_LEN];
    mark[0..4].copy_from_slice(&len);
    mark[4..8].copy_from_slice(&record_crc(segment, len, &[]).to_le_bytes());
    mark
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
        Ok((SegmentWriter::after_header(id, path, file), 2))
    }

    /// Starts segment `id` in the spare file `spare` instead of a new file: the
    /// file is opened without truncating, the header of `id` is written over the
    /// old one and fdatasynced, and only then is the file renamed to the
    /// segment's name and the directory fsynced. Records then overwrite the old
    /// ones from [`HEADER_LEN`] on, into blocks the file system has already
    /// allocated, so their fdatasyncs commit data only, no new file size.
    ///
    /// Header first, rename second: a crash between the two leaves a spare with
    /// a new header, which is harmless; the other order could leave a segment
    /// file whose header names another id, which `open` refuses. The caller
    /// has made the spare's own name durable before handing it in, for the
    /// same reason. Returns the writer and the number of fsyncs it took. If any
    /// step fails, the file is removed (under whichever name it has), best
    /// effort, and the caller may create `id` afresh.
    pub(crate) fn recycle(
        dir: &Path,
        spare: &Path,
        id: u64,
        faults: &Faults,
    ) -> Result<(SegmentWriter, u64)> {
        let path = segment_path(dir, id);
        let mut file = OpenOptions::new()
            .write(true)
            .open(spare)
            .map_err(|e| Error::io(spare, e))?;
        let renamed = faults
            .write_all(FaultTarget::Wal, &mut file, spare, &encode_header(id))
            .and_then(|()| faults.sync_data(FaultTarget::Wal, &file, spare))
            .and_then(|()| fs::rename(spare, &path).map_err(|e| Error::io(spare, e)));
        if let Err(e) = renamed {
            drop(file);
            let _ = fs::remove_file(spare);
            return Err(e);
        }
        if let Err(e) = faults.sync_dir(FaultTarget::Wal, dir) {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        // The file position is just past the header: records go on from there.
        Ok((SegmentWriter::after_header(id, path, file), 2))
    }

    /// A writer for segment `id` whose header is written and synced, with the
    /// file position just past it.
    fn after_header(id: u64, path: PathBuf, file: File) -> SegmentWriter {
        SegmentWriter {
            id,
            path,
            file,
            unsynced: false,
            synced_len: HEADER_LEN,
            len: HEADER_LEN,
        }
    }

    /// After a failed write or fsync: cuts the file back to what the last good
    /// fsync covered, so replay finds no garbage (in a recycled file, no stale
    /// bytes either). Best effort; see the module docs of [`crate::wal`] for
    /// what happens if this fails too.
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
    /// Format version in the header.
    pub(crate) version: u32,
    pub(crate) records: u64,
    pub(crate) payload_bytes: u64,
    /// Offset just past the last intact record.
    pub(crate) good_len: u64,
    /// A valid end mark follows the last record at `good_len`: the segment was
    /// closed cleanly, and whatever follows the mark is not part of it.
    pub(crate) end_mark: bool,
    /// Where and why the scan stopped early; `None` if it read to the end or
    /// to an end mark.
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
/// order, and stops at an end mark or at the first damaged record. A bad
/// header is an error unless the file is too short to hold one (reported as
/// [`Header::Short`]).
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
    let version = check_header(path, id, &header)?;
    let crc = |len_bytes: [u8; 4], payload: &[u8]| match version {
        VERSION_1 => record_crc_v1(len_bytes, payload),
        _ => record_crc(id, len_bytes, payload),
    };

    let mut out = ScanOutcome {
        version,
        good_len: HEADER_LEN,
        ..ScanOutcome::default()
    };
    loop {
        let offset = out.good_len;
        let left = file_len - offset;
        if left == 0 {
            return Ok((Header::Valid, out));
        }
        let damaged = |reason: String| Some(Damage { offset, reason });
        if left < FRAME_LEN as u64 {
            out.damage = damaged(format!(
                "record frame cut short ({left} of {FRAME_LEN} bytes)"
            ));
            return Ok((Header::Valid, out));
        }
        let mut frame = [0u8; FRAME_LEN];
        reader.read_exact(&mut frame).map_err(io_err)?;
        let len_bytes: [u8; 4] = frame[0..4].try_into().expect("4 bytes");
        let len = u32::from_le_bytes(len_bytes) as usize;
        let expected = u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes"));
        if version != VERSION_1 && len_bytes == END_MARK_LEN.to_le_bytes() {
            let actual = crc(len_bytes, &[]);
            if actual == expected {
                out.end_mark = true;
            } else {
                out.damage = damaged(format!(
                    "record length {len} exceeds the limit of {MAX_RECORD_LEN} \
                     and the frame is not a valid end mark (checksum {expected:#010x}, \
                     expected {actual:#010x})"
                ));
            }
            return Ok((Header::Valid, out));
        }
        if len > MAX_RECORD_LEN {
            out.damage = damaged(format!(
                "record length {len} exceeds the limit of {MAX_RECORD_LEN}"
            ));
            return Ok((Header::Valid, out));
        }
        if len as u64 > left - FRAME_LEN as u64 {
            out.damage = damaged(format!(
                "record of {len} bytes runs past the end of the file ({} bytes left)",
                left - FRAME_LEN as u64
            ));
            return Ok((Header::Valid, out));
        }
        let mut payload = vec![0u8; len];
        reader.read_exact(&mut payload).map_err(io_err)?;
        let actual = crc(len_bytes, &payload);
        if actual != expected {
            out.damage = damaged(format!(
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

        let spare = spare_path(Path::new("/x"), 42);
        assert_eq!(spare, Path::new("/x/00000000000000000042.wal.spare"));
        let name = spare.file_name().and_then(|n| n.to_str()).expect("utf-8");
        assert_eq!(parse_segment_name(name), None, "a spare is not a segment");
        assert_eq!(parse_spare_name(name), Some(42));
        assert_eq!(parse_spare_name("00000000000000000042.wal"), None);
    }

    /// A header of `id` claiming format `version`, with a valid checksum.
    fn header_with_version(id: u64, version: u32) -> [u8; HEADER_LEN as usize] {
        let mut h = encode_header(id);
        h[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&h[..20]);
        h[20..24].copy_from_slice(&crc.to_le_bytes());
        h
    }

    #[test]
    fn header_checks_catch_each_kind_of_damage() {
        let p = Path::new("seg");
        let good = encode_header(7);
        assert_eq!(check_header(p, 7, &good).expect("valid"), VERSION);
        assert_eq!(VERSION, 2);
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
        assert_eq!(
            check_header(p, 7, &header_with_version(7, 1)).expect("version 1 is still read"),
            VERSION_1
        );
        for version in [0, 3] {
            assert!(matches!(
                check_header(p, 7, &header_with_version(7, version)),
                Err(Error::UnsupportedVersion { version: v, supported: VERSION, .. }) if v == version
            ));
        }
    }

    #[test]
    fn record_checksum_covers_the_length_field_and_the_segment_id() {
        let mut a = Vec::new();
        encode_record(5, b"abc", &mut a);
        assert_eq!(a.len() as u64, framed_len(3));
        assert_eq!(&a[0..4], &3u32.to_le_bytes());
        assert_eq!(&a[8..], b"abc");
        let mut b = Vec::new();
        encode_record(5, b"", &mut b);
        assert_ne!(a[4..8], b[4..8]);
        // The same record bound for another segment differs only in its checksum.
        let mut c = Vec::new();
        encode_record(6, b"abc", &mut c);
        assert_eq!(a[0..4], c[0..4]);
        assert_eq!(a[8..], c[8..]);
        assert_ne!(a[4..8], c[4..8]);
        assert_eq!(
            u32::from_le_bytes(a[4..8].try_into().expect("4 bytes")),
            crc32c::crc32c(&[&5u64.to_le_bytes()[..], &3u32.to_le_bytes(), b"abc"].concat())
        );

        // A record of zeros (a zero-filled tail) must not pass as an empty
        // record. In version 1 the CRC of four zero bytes is not zero; in
        // version 2 it is zero for exactly one id below 2^32 (the map from an
        // id's low 32 bits to the checksum is one to one), far beyond any id a
        // log reaches: 1.7e9 segments of 64 MiB.
        assert_eq!(record_crc_v1([0; 4], b""), 0x4867_4bc7);
        assert_eq!(record_crc(1_761_899_360, [0; 4], b""), 0);
        assert!((0..100_000u64).all(|id| record_crc(id, [0; 4], b"") != 0));
    }

    #[test]
    fn an_end_mark_is_a_checksummed_frame_no_record_can_be() {
        let mark = end_mark(9);
        assert_eq!(mark[0..4], END_MARK_LEN.to_le_bytes());
        assert!(END_MARK_LEN as usize > MAX_RECORD_LEN);
        assert_eq!(
            u32::from_le_bytes(mark[4..8].try_into().expect("4 bytes")),
            record_crc(9, END_MARK_LEN.to_le_bytes(), b"")
        );
        assert_ne!(
            end_mark(9),
            end_mark(10),
            "an end mark is bound to its segment"
        );
    }

    /// Writes `bytes` to a file in `dir` named as segment `id` and scans it.
    fn scan_bytes(dir: &Path, id: u64, bytes: &[u8]) -> (Vec<Vec<u8>>, ScanOutcome) {
        let path = segment_path(dir, id);
        fs::write(&path, bytes).expect("write segment");
        let mut seen = Vec::new();
        let (header, outcome) = scan(&path, id, &mut |seg, p| {
            assert_eq!(seg, id);
            seen.push(p.to_vec());
            Ok(())
        })
        .expect("scan");
        assert!(matches!(header, Header::Valid));
        (seen, outcome)
    }

    #[test]
    fn the_scan_stops_cleanly_at_an_end_mark_and_ignores_what_follows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut bytes = encode_header(3).to_vec();
        encode_record(3, b"first", &mut bytes);
        encode_record(3, b"second", &mut bytes);
        let records_end = bytes.len() as u64;
        bytes.extend_from_slice(&end_mark(3));
        // Stale bytes of an earlier use of the file: garbage, and a record
        // that would be valid in this segment, which must not be replayed.
        bytes.extend_from_slice(&[0xa5; 13]);
        encode_record(3, b"after the mark", &mut bytes);

        let (seen, outcome) = scan_bytes(dir.path(), 3, &bytes);
        assert_eq!(seen, vec![b"first".to_vec(), b"second".to_vec()]);
        assert_eq!(outcome.damage, None);
        assert!(outcome.end_mark);
        assert_eq!(outcome.good_len, records_end);
        assert_eq!(outcome.version, VERSION);

        // Without the mark, the same garbage is damage.
        let mut unmarked = bytes.clone();
        unmarked.drain(records_end as usize..records_end as usize + FRAME_LEN);
        let (seen, outcome) = scan_bytes(dir.path(), 3, &unmarked);
        assert_eq!(seen.len(), 2);
        assert!(!outcome.end_mark);
        assert_eq!(outcome.damage.expect("damage").offset, records_end);

        // Another segment's end mark, or a torn one, is damage too.
        let mut foreign = bytes.clone();
        foreign[records_end as usize..][..FRAME_LEN].copy_from_slice(&end_mark(4));
        let (seen, outcome) = scan_bytes(dir.path(), 3, &foreign);
        assert_eq!(seen.len(), 2);
        assert!(!outcome.end_mark);
        let damage = outcome.damage.expect("damage");
        assert_eq!(damage.offset, records_end);
        assert!(
            damage.reason.contains("not a valid end mark"),
            "{}",
            damage.reason
        );
        let torn = &bytes[..records_end as usize + FRAME_LEN - 1];
        let (_, outcome) = scan_bytes(dir.path(), 3, torn);
        assert!(!outcome.end_mark);
        assert_eq!(outcome.damage.expect("damage").offset, records_end);
    }

    #[test]
    fn a_version_1_segment_has_unseeded_checksums_and_no_end_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut bytes = header_with_version(2, VERSION_1).to_vec();
        for payload in [&b"old"[..], b"", b"format"] {
            let len = (payload.len() as u32).to_le_bytes();
            bytes.extend_from_slice(&len);
            bytes.extend_from_slice(&record_crc_v1(len, payload).to_le_bytes());
            bytes.extend_from_slice(payload);
        }
        let (seen, outcome) = scan_bytes(dir.path(), 2, &bytes);
        assert_eq!(
            seen,
            vec![b"old".to_vec(), b"".to_vec(), b"format".to_vec()]
        );
        assert_eq!(outcome.damage, None);
        assert_eq!(outcome.version, VERSION_1);

        // Version 2 framing in a version-1 file does not pass, end mark
        // included: in version 1 that length is only ever damage.
        let end = bytes.len() as u64;
        let mut marked = bytes.clone();
        marked.extend_from_slice(&end_mark(2));
        let (seen, outcome) = scan_bytes(dir.path(), 2, &marked);
        assert_eq!(seen.len(), 3);
        assert!(!outcome.end_mark);
        assert_eq!(outcome.damage.expect("damage").offset, end);
        let mut seeded = bytes;
        encode_record(2, b"new", &mut seeded);
        let (seen, outcome) = scan_bytes(dir.path(), 2, &seeded);
        assert_eq!(seen.len(), 3);
        assert_eq!(outcome.damage.expect("damage").offset, end);
    }
}
