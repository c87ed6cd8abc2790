//! The manifest: the log of changes to the set of live sorted files, and the
//! truth about which files exist after a crash.
//!
//! Every change to the set of files (a flush adds one, a compaction replaces
//! some, retention drops some) is one [`Edit`], appended to `MANIFEST` and
//! fsynced *before* the engine installs the new [`crate::version::Version`].
//! So at any crash point the manifest names exactly the files of the last
//! installed version or of one that was about to be installed; every file it
//! names was fsynced and renamed into place before its edit was written.
//! Files in `tables/` that the manifest does not name are leftovers (outputs
//! of an interrupted compaction, or inputs whose deletion the crash cut
//! short) and are removed at open.
//!
//! Layout (byte by byte in `docs/FORMAT.md`, "Manifest"): a 16-byte header
//! (magic, version, crc), then records framed like WAL records: `len`, a
//! CRC-32C over `len` and the payload, the payload. A record cut short or
//! failing its checksum *at the end of the file* is a torn append: the edit
//! was never acknowledged, so it is cut off. Damage followed by more bytes
//! cannot come from a crash and stops the open with an error: guessing would
//! risk deleting live files.
//!
//! The log is rewritten as one edit that adds every live file (under
//! `MANIFEST.tmp`, fsynced, renamed) at open and whenever it has grown past
//! [`REWRITE_EDITS`] edits.

use std::{
    collections::BTreeMap,
    fs::{self, File},
    path::{Path, PathBuf},
};

use crate::{
    error::{Error, Result},
    fault::{FaultTarget, Faults},
    layout,
};

/// `"TDB-MAN\0"`.
pub const MAGIC: [u8; 8] = *b"TDB-MAN\0";
/// 1: an added file is (id, level, partition, size); 2: as 1, followed by a
/// flags byte (bit 0: the file is in the object store). Both are read; 2 is
/// written.
pub const VERSION: u32 = 2;
/// The oldest version still read.
const OLDEST_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 16;
/// Largest payload a record may claim; an edit naming a million files fits.
pub const MAX_RECORD_LEN: u32 = 64 << 20;
/// Edits after which the log is rewritten as one snapshot edit.
pub const REWRITE_EDITS: u64 = 4096;
/// Bytes of one added-file entry in an edit of version 1 (version 2 adds
/// a flags byte).
const ADDED_LEN: usize = 8 + 4 + 8 + 8;
/// Bit 0 of an added file's flags: the file is remote.
const FLAG_REMOTE: u8 = 1;

/// `partition` of a level-0 file, which is not time-partitioned.
pub const NO_PARTITION: u64 = u64::MAX;

/// Where a live file sits in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEntry {
    pub id: u64,
    pub level: u32,
    /// Time partition (span start time / partition length) for levels 1 and
    /// deeper; [`NO_PARTITION`] for level 0.
    pub partition: u64,
    /// Checked against the file at open: a mismatch means the file is not the
    /// one the edit was written for.
    pub file_size: u64,
    /// The file is in the object store (`crate::cold`), uploaded and
    /// verified; a local copy may or may not be kept.
    pub remote: bool,
}

/// One atomic change to the set of live files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edit {
    /// Lowest file ID not yet handed out when the edit was written.
    pub next_file_id: u64,
    pub removed: Vec<u64>,
    pub added: Vec<FileEntry>,
}

impl Edit {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.next_file_id.to_le_bytes());
        out.extend_from_slice(&(self.removed.len() as u32).to_le_bytes());
        for id in &self.removed {
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.extend_from_slice(&(self.added.len() as u32).to_le_bytes());
        for f in &self.added {
            out.extend_from_slice(&f.id.to_le_bytes());
            out.extend_from_slice(&f.level.to_le_bytes());
            out.extend_from_slice(&f.partition.to_le_bytes());
            out.extend_from_slice(&f.file_size.to_le_bytes());
            out.push(if f.remote { FLAG_REMOTE } else { 0 });
        }
    }

    /// Decodes a payload of manifest version `version`; `None` if it is
    /// malformed (short, counts that do not fit, unknown flags, bytes left
    /// over).
    pub fn decode(buf: &[u8], version: u32) -> Option<Edit> {
        let entry_len = ADDED_LEN + usize::from(version >= 2);
        let mut r = Reader(buf);
        let next_file_id = r.u64()?;
        let removed_n = r.u32()? as usize;
        if removed_n > r.0.len() / 8 {
            return None;
        }
        let removed = (0..removed_n).map(|_| r.u64()).collect::<Option<_>>()?;
        let added_n = r.u32()? as usize;
        if added_n > r.0.len() / entry_len {
            return None;
        }
        let added = (0..added_n)
            .map(|_| {
                let (id, level, partition, file_size) = (r.u64()?, r.u32()?, r.u64()?, r.u64()?);
                let flags = if version >= 2 { r.take::<1>()?[0] } else { 0 };
                if flags & !FLAG_REMOTE != 0 {
                    return None;
                }
                Some(FileEntry {
                    id,
                    level,
                    partition,
                    file_size,
                    remote: flags & FLAG_REMOTE != 0,
                })
            })
            .collect::<Option<_>>()?;
        r.0.is_empty().then_some(Edit {
            next_file_id,
            removed,
            added,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
}

/// What replaying the manifest produced.
#[derive(Debug, Clone, Default)]
pub struct ManifestState {
    /// Live files by ID.
    pub files: BTreeMap<u64, FileEntry>,
    pub next_file_id: u64,
    /// A torn last record was cut off.
    pub torn_tail: bool,
}

impl ManifestState {
    fn apply(&mut self, edit: &Edit) {
        for id in &edit.removed {
            self.files.remove(id);
        }
        for f in &edit.added {
            self.files.insert(f.id, *f);
        }
        self.next_file_id = self.next_file_id.max(edit.next_file_id);
    }
}

/// The open manifest log, appended to by the one thread holding the engine's
/// install lock.
#[derive(Debug)]
pub struct Manifest {
    path: PathBuf,
    file: File,
    edits: u64,
    faults: Faults,
    /// An append failed: the file may end in part of a record, or hold an
    /// edit whose fsync failed. Nothing more is appended to it; the engine
    /// rewrites it from the live version first ([`Manifest::is_damaged`]).
    damaged: bool,
}

fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

fn frame(edit: &Edit, out: &mut Vec<u8>) {
    let mut payload = Vec::new();
    edit.encode(&mut payload);
    let len = (payload.len() as u32).to_le_bytes();
    let mut crc = crc32c::crc32c(&len);
    crc = crc32c::crc32c_append(crc, &payload);
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&payload);
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        file: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// Reads the manifest at `path`: the state it describes and the length of its
/// intact prefix. `Ok(None)` if there is no manifest.
pub fn read(path: &Path) -> Result<Option<(ManifestState, u64)>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    parse(path, &bytes).map(Some)
}

/// The state the manifest `bytes` describe and the length of their intact
/// prefix; `path` names them in errors (a local file, or an object).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<(ManifestState, u64)> {
    if bytes.len() < HEADER_LEN || bytes[..8] != MAGIC {
        return Err(corrupt(
            path,
            0,
            "not a manifest: bad magic or short header",
        ));
    }
    let expected = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    let actual = crc32c::crc32c(&bytes[..12]);
    if expected != actual {
        return Err(Error::ChecksumMismatch {
            file: path.to_path_buf(),
            offset: 0,
            expected,
            actual,
        });
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(Error::UnsupportedVersion {
            file: path.to_path_buf(),
            version,
            supported: VERSION,
        });
    }
    let mut state = ManifestState::default();
    let mut at = HEADER_LEN;
    let mut records = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let damage = if rest.len() < 8 {
            Some("short record header")
        } else {
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
            if len > MAX_RECORD_LEN {
                Some("record length over the limit")
            } else if rest.len() - 8 < len as usize {
                Some("record cut short")
            } else {
                let payload = &rest[8..8 + len as usize];
                let sum = crc32c::crc32c_append(crc32c::crc32c(&rest[..4]), payload);
                let end = at + 8 + len as usize;
                if sum != crc {
                    if end == bytes.len() {
                        Some("checksum mismatch in the last record")
                    } else {
                        return Err(Error::ChecksumMismatch {
                            file: path.to_path_buf(),
                            offset: at as u64,
                            expected: crc,
                            actual: sum,
                        });
                    }
                } else {
                    let edit = Edit::decode(payload, version)
                        .ok_or_else(|| corrupt(path, at as u64, "undecodable edit"))?;
                    state.apply(&edit);
                    records += 1;
                    at = end;
                    continue;
                }
            }
        };
        // Only the tail can be torn: the record runs to (or past) the end.
        tracing::warn!(
            file = %path.display(),
            offset = at,
            reason = damage.unwrap_or("damaged"),
            "cutting the torn tail off the manifest"
        );
        state.torn_tail = true;
        break;
    }
    if records == 0 {
        // Written whole (temporary file, fsync, rename) with its first edit,
        // a manifest never lacks one: this one was cut. Reading it as "no
        // live files" would make the open delete every sorted file.
        return Err(corrupt(
            path,
            HEADER_LEN as u64,
            "no intact edit: a manifest always holds at least one, so this one was cut short",
        ));
    }
    Ok((state, at as u64))
}

/// A whole manifest holding one edit that adds every file of `state`: what
/// [`Manifest::create`] writes, and the copy kept in the object store.
pub fn snapshot_bytes(state: &ManifestState) -> Vec<u8> {
    let mut buf = header().to_vec();
    frame(
        &Edit {
            next_file_id: state.next_file_id,
            removed: Vec::new(),
            added: state.files.values().copied().collect(),
        },
        &mut buf,
    );
    buf
}

impl Manifest {
    /// Writes a fresh manifest holding one edit with every file of `state`,
    /// atomically (temporary file, fsync, rename, directory fsync), and opens
    /// it for appending.
    pub fn create(dir: &Path, state: &ManifestState, faults: &Faults) -> Result<Manifest> {
        let path = layout::manifest_path(dir);
        let tmp = layout::manifest_tmp_path(dir);
        let buf = snapshot_bytes(state);
        let written = (|| {
            let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
            faults.write_all(FaultTarget::Manifest, &mut f, &tmp, &buf)?;
            faults.sync_all(FaultTarget::Manifest, &f, &tmp)
        })();
        if let Err(e) = written {
            // The old manifest is untouched; a leftover is replaced next time.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
        faults.sync_dir(FaultTarget::Manifest, dir)?;
        let file = File::options()
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Manifest {
            path,
            file,
            edits: 1,
            faults: faults.clone(),
            damaged: false,
        })
    }

    /// Appends one edit and fsyncs it. After `Ok` the edit survives a crash.
    /// After an error the edit may or may not be durable, and the manifest is
    /// damaged: further appends are refused until it is rewritten.
    pub fn append(&mut self, edit: &Edit) -> Result<()> {
        let mut buf = Vec::new();
        frame(edit, &mut buf);
        self.append_raw(&buf)?;
        self.edits += 1;
        Ok(())
    }

    /// Appends only the first `n` bytes of an edit's record, as a crash in
    /// the middle of an append would leave it. For crash tests.
    pub fn append_torn(&mut self, edit: &Edit, n: usize) -> Result<()> {
        let mut buf = Vec::new();
        frame(edit, &mut buf);
        buf.truncate(n);
        self.append_raw(&buf)
    }

    fn append_raw(&mut self, buf: &[u8]) -> Result<()> {
        if self.damaged {
            return Err(Error::ManifestDamaged(self.path.clone()));
        }
        let done = self
            .faults
            .write_all(FaultTarget::Manifest, &mut self.file, &self.path, buf)
            .and_then(|()| {
                self.faults
                    .sync_data(FaultTarget::Manifest, &self.file, &self.path)
            });
        if done.is_err() {
            self.damaged = true;
        }
        done
    }

    /// True after a failed append: the file must be rewritten (by
    /// [`Manifest::create`] from the live version) before the next edit.
    pub fn is_damaged(&self) -> bool {
        self.damaged
    }

    /// Marks the manifest as needing a rewrite before the next append: a
    /// rewrite that failed may have replaced the file this one appends to.
    pub fn mark_damaged(&mut self) {
        self.damaged = true;
    }

    /// True once the log holds enough edits to be worth rewriting.
    pub fn wants_rewrite(&self) -> bool {
        self.edits >= REWRITE_EDITS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, level: u32) -> FileEntry {
        FileEntry {
            id,
            level,
            partition: if level == 0 { NO_PARTITION } else { 7 },
            file_size: 1000 + id,
            remote: id.is_multiple_of(3),
        }
    }

    fn state_of(files: &[FileEntry], next: u64) -> ManifestState {
        ManifestState {
            files: files.iter().map(|f| (f.id, *f)).collect(),
            next_file_id: next,
            torn_tail: false,
        }
    }

    #[test]
    fn edits_replay_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Manifest::create(dir.path(), &state_of(&[entry(1, 0)], 2), &Faults::default())
            .expect("create");
        m.append(&Edit {
            next_file_id: 4,
            removed: vec![],
            added: vec![entry(2, 0), entry(3, 0)],
        })
        .expect("append");
        m.append(&Edit {
            next_file_id: 5,
            removed: vec![1, 2],
            added: vec![entry(4, 1)],
        })
        .expect("append");
        let (state, _) = read(&layout::manifest_path(dir.path()))
            .expect("read")
            .expect("exists");
        assert_eq!(state.next_file_id, 5);
        assert_eq!(
            state.files.values().copied().collect::<Vec<_>>(),
            vec![entry(3, 0), entry(4, 1)]
        );
        assert!(!state.torn_tail);
    }

    #[test]
    fn a_torn_last_record_is_ignored_at_every_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = layout::manifest_path(dir.path());
        let mut m = Manifest::create(dir.path(), &state_of(&[entry(1, 0)], 2), &Faults::default())
            .expect("create");
        let good_len = fs::metadata(&path).expect("meta").len();
        let edit = Edit {
            next_file_id: 9,
            removed: vec![1],
            added: vec![entry(8, 1)],
        };
        let mut full = Vec::new();
        frame(&edit, &mut full);
        for cut in 1..full.len() {
            let f = File::options().write(true).open(&path).expect("open");
            f.set_len(good_len).expect("truncate");
            m.append_torn(&edit, cut).expect("torn append");
            let (state, intact) = read(&path).expect("read").expect("exists");
            assert!(state.torn_tail, "cut {cut}");
            assert_eq!(intact, good_len);
            assert_eq!(state.files.keys().copied().collect::<Vec<_>>(), vec![1]);
        }
    }

    #[test]
    fn damage_before_the_tail_is_an_error_not_a_guess() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = layout::manifest_path(dir.path());
        let mut m = Manifest::create(dir.path(), &state_of(&[entry(1, 0)], 2), &Faults::default())
            .expect("create");
        m.append(&Edit {
            next_file_id: 3,
            removed: vec![],
            added: vec![entry(2, 0)],
        })
        .expect("append");
        let mut bytes = fs::read(&path).expect("read");
        bytes[HEADER_LEN + 10] ^= 0xff; // inside the first record's payload
        fs::write(&path, &bytes).expect("write");
        assert!(matches!(
            read(&path),
            Err(Error::ChecksumMismatch { offset, .. }) if offset == HEADER_LEN as u64
        ));
    }

    #[test]
    fn hostile_counts_are_refused() {
        let mut buf = Vec::new();
        Edit {
            next_file_id: 1,
            removed: vec![5],
            added: vec![entry(1, 0)],
        }
        .encode(&mut buf);
        assert!(Edit::decode(&buf, VERSION).is_some());
        for cut in 0..buf.len() {
            assert!(Edit::decode(&buf[..cut], VERSION).is_none(), "cut {cut}");
        }
        let mut huge = buf.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Edit::decode(&huge, VERSION).is_none());
        let mut flagged = buf.clone();
        *flagged.last_mut().expect("flags") = 0x80;
        assert!(Edit::decode(&flagged, VERSION).is_none(), "unknown flag");
        buf.push(0);
        assert!(Edit::decode(&buf, VERSION).is_none());
    }

    #[test]
    fn version_1_edits_still_read_and_remote_files_round_trip() {
        let mut v1 = Vec::new();
        let old = entry(4, 1);
        // Version 1 wrote no flags byte.
        v1.extend_from_slice(&9u64.to_le_bytes());
        v1.extend_from_slice(&0u32.to_le_bytes());
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&old.id.to_le_bytes());
        v1.extend_from_slice(&old.level.to_le_bytes());
        v1.extend_from_slice(&old.partition.to_le_bytes());
        v1.extend_from_slice(&old.file_size.to_le_bytes());
        let read = Edit::decode(&v1, 1).expect("version 1");
        assert_eq!(
            read.added,
            vec![FileEntry {
                remote: false,
                ..old
            }]
        );
        assert!(Edit::decode(&v1, 2).is_none(), "a flags byte is missing");

        let state = state_of(&[entry(3, 2), entry(4, 1)], 9);
        let bytes = snapshot_bytes(&state);
        let (back, len) = parse(Path::new("snapshot"), &bytes).expect("parse");
        assert_eq!(len, bytes.len() as u64);
        assert_eq!(back.files, state.files);
        assert!(back.files[&3].remote && !back.files[&4].remote);
    }
}
