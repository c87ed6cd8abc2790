//! A family's cell keys as a key list holds them (docs/FORMAT.md, "Metrics
//! cells"): each key written, checked and looked up by its bytes.

use std::path::Path;

use tracedb_proto::wire::put_varint;

use super::{put_optional, small};
use crate::{
    error::Result,
    index::{
        cells::{CellKey, Family, Parent},
        format::Reader,
    },
};

pub(super) fn put_key(body: &mut Vec<u8>, k: &CellKey) {
    put_optional(body, k.service.as_deref());
    // The name's place holds the attribute in the attribute family, marked
    // 2, so no attribute key's bytes are a named key's.
    match (&k.name, &k.attr) {
        (_, Some(attr)) => {
            put_varint(body, 2);
            put_varint(body, attr.len() as u64);
            body.extend_from_slice(attr);
        }
        (name, None) => put_optional(body, name.as_deref()),
    }
    put_varint(body, u64::from(k.kind));
    put_varint(body, u64::from(k.status));
    body.push(k.parent as u8);
}

/// A family's keys as a key list holds them: each key's bytes, so a query
/// looks a key up by its bytes and decodes it only when it first meets it.
pub struct KeyList<'a> {
    body: std::borrow::Cow<'a, [u8]>,
    /// Where each key's bytes end in `body` (each starts where the one
    /// before ends).
    ends: Vec<usize>,
    family: Family,
}

impl KeyList<'_> {
    /// `keys` as a key list holds them.
    pub fn of(keys: &[CellKey], family: Family) -> KeyList<'static> {
        let mut body = Vec::new();
        let mut ends = Vec::with_capacity(keys.len());
        for k in keys {
            put_key(&mut body, k);
            ends.push(body.len());
        }
        KeyList {
            body: body.into(),
            ends,
            family,
        }
    }

    /// Checks `n` keys of `family` in a key list's inflated `body`.
    pub(super) fn read(
        path: &Path,
        body: Vec<u8>,
        family: Family,
        n: u64,
    ) -> Result<KeyList<'static>> {
        let mut r = Reader {
            path,
            buf: &body,
            at: 0,
        };
        let mut ends = Vec::with_capacity((n as usize).min(body.len() / 5));
        for _ in 0..n {
            key_at(&mut r, family)?;
            ends.push(r.at);
        }
        if r.at != body.len() {
            return Err(r.err("bytes left over after the cell keys"));
        }
        Ok(KeyList {
            body: body.into(),
            ends,
            family,
        })
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Key `i`'s bytes: equal for equal keys.
    pub fn bytes(&self, i: usize) -> &[u8] {
        let from = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        &self.body[from..self.ends[i]]
    }

    /// Every key, decoded.
    pub fn to_keys(&self) -> Vec<CellKey> {
        (0..self.len()).map(|i| self.key(i)).collect()
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> CellKey {
        decode_key(self.bytes(i), self.family)
    }

    /// The family of the keys.
    pub fn family(&self) -> Family {
        self.family
    }
}

/// A key of `family` from its bytes in a key list that was checked.
///
/// # Panics
/// If `bytes` are not one key of `family`.
pub(in crate::index::cells) fn decode_key(bytes: &[u8], family: Family) -> CellKey {
    let mut r = Reader {
        path: Path::new("a checked key list"),
        buf: bytes,
        at: 0,
    };
    key_at(&mut r, family)
        .expect("keys are checked when listed")
        .key(bytes)
}

/// Where an optional field's bytes are, if it is present.
fn optional(r: &mut Reader<'_>) -> Result<Option<std::ops::Range<usize>>> {
    Ok(marked(r, 1)?.map(|(_, at)| at))
}

/// Where a field's bytes are and its mark (1 up to `most`), if present.
fn marked(r: &mut Reader<'_>, most: u64) -> Result<Option<(u64, std::ops::Range<usize>)>> {
    match r.varint()? {
        0 => Ok(None),
        mark if mark <= most => {
            let len = r.count(1)?;
            let from = r.at;
            r.bytes(len)?;
            Ok(Some((mark, from..from + len)))
        }
        _ => Err(r.err("a cell key's field is neither absent nor present")),
    }
}

/// One key of a key list, its service and name where they are in the list.
pub(super) struct KeyAt {
    service: Option<std::ops::Range<usize>>,
    name: Option<std::ops::Range<usize>>,
    attr: Option<std::ops::Range<usize>>,
    kind: u32,
    status: u32,
    parent: Parent,
}

impl KeyAt {
    /// The key, from the bytes it was read from.
    pub(super) fn key(self, body: &[u8]) -> CellKey {
        CellKey {
            service: self.service.map(|at| Box::from(&body[at])),
            name: self.name.map(|at| Box::from(&body[at])),
            attr: self.attr.map(|at| Box::from(&body[at])),
            kind: self.kind,
            status: self.status,
            parent: self.parent,
        }
    }
}

/// The next key of `family` in a key list.
pub(super) fn key_at(r: &mut Reader<'_>, family: Family) -> Result<KeyAt> {
    let service = optional(r)?;
    let (name, attr) = match marked(r, 2)? {
        None => (None, None),
        Some((1, at)) => (Some(at), None),
        Some((_, at)) => (None, Some(at)),
    };
    let kind = small(r)?;
    let status = small(r)?;
    let parent = match r.bytes(1)?[0] {
        0 => Parent::None,
        1 => Parent::Zero,
        2 => Parent::Some,
        _ => return Err(r.err("a cell key's parent is not 0, 1 or 2")),
    };
    let named = matches!(family, Family::Named | Family::AnyService);
    if name.is_some() != named || attr.is_some() != (family == Family::Attr) {
        return Err(r.err("a cell key with a name or attribute its family's keys do not have"));
    }
    if service.is_some() && family == Family::AnyService {
        return Err(r.err("a cell key of every service with a service"));
    }
    Ok(KeyAt {
        service,
        name,
        attr,
        kind,
        status,
        parent,
    })
}
