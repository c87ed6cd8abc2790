//! What is wrong with a malformed request, for the scanner and its callers.
//!
//! A malformed request is reported as a [`ScanError`]: what is wrong
//! ([`MalformedKind`]), where in the message tree (a [`FieldPath`] such as
//! `resource_spans[2].scope_spans[0].spans[5]`), and at which byte of the body.
//! The scanner runs on every span, so nothing here is built on the happy path:
//! the wire reader returns a small [`Malformed`] value, which becomes a boxed
//! [`ScanError`] only once something has failed, and each message level adds
//! its path segment while the error travels up.

use std::fmt;

use crate::wire::WireType;

/// What is wrong with the bytes of a protobuf message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MalformedKind {
    #[error("truncated varint")]
    TruncatedVarint,
    #[error("varint longer than 10 bytes or above 2^64")]
    VarintTooLong,
    #[error("invalid field key {key:#x}")]
    InvalidKey { key: u64 },
    #[error("field {field} has invalid wire type {wire_type}")]
    InvalidWireType { field: u32, wire_type: u8 },
    #[error("truncated {wire_type} field {field}")]
    Truncated { field: u32, wire_type: WireType },
    #[error("truncated length-delimited field {field}: length {len} but {available} bytes left")]
    TruncatedLength {
        field: u32,
        len: u64,
        available: usize,
    },
    #[error("field {field} is {actual} but the schema says {expected}")]
    WrongWireType {
        field: u32,
        expected: WireType,
        actual: WireType,
    },
    #[error("string field {field} is not valid UTF-8")]
    InvalidUtf8 { field: u32 },
    #[error("end-group tag of field {field} outside any group")]
    UnexpectedEndGroup { field: u32 },
    #[error("end-group tag of field {actual} closes group {expected}")]
    MismatchedEndGroup { expected: u32, actual: u32 },
    #[error("group {field} is not terminated")]
    UnterminatedGroup { field: u32 },
    #[error("groups nested deeper than {limit}")]
    GroupsTooDeep { limit: usize },
    #[error("AnyValue nested deeper than {limit}")]
    NestingTooDeep { limit: usize },
}

/// A [`MalformedKind`] at a byte offset of the body: what the wire reader
/// returns. Small and `Copy`, so returning it costs nothing on the happy path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed {
    pub kind: MalformedKind,
    /// Byte offset in the request body, usually of the offending field's key.
    pub offset: usize,
}

/// One step of a [`FieldPath`]: a field name and, for repeated fields, the
/// index of the element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathSegment {
    pub field: &'static str,
    pub index: Option<usize>,
}

/// Where in the message tree an error happened, outermost field first.
/// Empty means the top level of the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath(Vec<PathSegment>);

impl FieldPath {
    /// The segments, outermost first.
    pub fn segments(&self) -> &[PathSegment] {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("request");
        }
        for (i, segment) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(segment.field)?;
            if let Some(index) = segment.index {
                write!(f, "[{index}]")?;
            }
        }
        Ok(())
    }
}

/// A malformed request: what, where in the tree, and at which byte.
///
/// Boxed so that `Result<T, ScanError>` stays one word wider than `T` on the
/// scanner's hot path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {} at byte {}", .0.path, .0.kind, .0.offset)]
pub struct ScanError(Box<ScanErrorInner>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct ScanErrorInner {
    /// Innermost segment first while the error travels up; reversed by
    /// [`ScanError::finish`] before it leaves the scanner.
    path: FieldPath,
    kind: MalformedKind,
    offset: usize,
}

impl ScanError {
    /// What is wrong.
    pub fn kind(&self) -> MalformedKind {
        self.0.kind
    }

    /// Byte offset in the request body.
    pub fn offset(&self) -> usize {
        self.0.offset
    }

    /// Where in the message tree, outermost field first.
    pub fn path(&self) -> &FieldPath {
        &self.0.path
    }

    /// Records that the error happened inside `field` (element `index` of it
    /// when repeated). Called from the innermost level outwards.
    pub(crate) fn within(mut self, field: &'static str, index: Option<usize>) -> Self {
        self.0.path.0.push(PathSegment { field, index });
        self
    }

    /// Puts the path in outermost-first order once the error has reached the top.
    pub(crate) fn finish(mut self) -> Self {
        self.0.path.0.reverse();
        self
    }
}

impl From<Malformed> for ScanError {
    #[cold]
    fn from(m: Malformed) -> Self {
        ScanError(Box::new(ScanErrorInner {
            path: FieldPath::default(),
            kind: m.kind,
            offset: m.offset,
        }))
    }
}
