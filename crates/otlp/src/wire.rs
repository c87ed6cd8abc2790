//! A minimal reader of the protobuf wire format.
//!
//! The ingest path keeps each span's encoded bytes as its stored payload and
//! only needs to *look at* a request, never to build an owned tree from it. So
//! instead of a decoder this is a cursor over the request body that reads keys,
//! varints, fixed-width values and length-delimited ranges, and skips whatever
//! the caller does not care about.
//!
//! Invariants:
//! - Every read is bounds-checked against the end of the current message and
//!   returns a [`Malformed`] on truncated or hostile input; nothing panics and
//!   nothing allocates (a length prefix of 2^32 is an error, not a reservation).
//! - Positions are absolute offsets into the whole body, so a range read here
//!   can be turned into a zero-copy `Bytes::slice` of the body, and an error
//!   points at the byte where it happened.
//! - Groups (wire types 3 and 4, proto2 only, never used by OTLP) are skipped
//!   the way protobuf decoders skip them, with start and end tags matched,
//!   iteratively and with a depth limit, so the reader never recurses.

use std::{fmt, ops::Range};

use crate::error::{Malformed, MalformedKind};

/// How deeply groups may nest inside an unknown field before the input is
/// declared malformed.
pub const MAX_GROUP_DEPTH: usize = 32;

/// The six wire types of protobuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireType {
    Varint,
    Fixed64,
    Len,
    StartGroup,
    EndGroup,
    Fixed32,
}

impl WireType {
    fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits {
            0 => WireType::Varint,
            1 => WireType::Fixed64,
            2 => WireType::Len,
            3 => WireType::StartGroup,
            4 => WireType::EndGroup,
            5 => WireType::Fixed32,
            _ => return None,
        })
    }
}

impl fmt::Display for WireType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WireType::Varint => "varint",
            WireType::Fixed64 => "fixed64",
            WireType::Len => "length-delimited",
            WireType::StartGroup => "start-group",
            WireType::EndGroup => "end-group",
            WireType::Fixed32 => "fixed32",
        })
    }
}

/// A cursor over one message: `buf` is the whole body, `pos..end` the part of
/// it not read yet. `pos <= end <= buf.len()` always holds.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
    /// Offset of the key of the field being read, for error positions.
    key_pos: usize,
}

type WireResult<T> = Result<T, Malformed>;

impl<'a> Reader<'a> {
    /// A reader over the whole of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            end: buf.len(),
            key_pos: 0,
        }
    }

    /// A reader over `range` of the same buffer, typically a length-delimited
    /// field returned by [`Reader::len_field`]. The range is clamped to the buffer.
    pub fn sub(&self, range: Range<usize>) -> Reader<'a> {
        let end = range.end.min(self.buf.len());
        let pos = range.start.min(end);
        Reader {
            buf: self.buf,
            pos,
            end,
            key_pos: pos,
        }
    }

    /// The absolute offset of the next unread byte.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes of `range` (empty if out of bounds, which a range returned by
    /// this reader never is).
    pub fn bytes(&self, range: Range<usize>) -> &'a [u8] {
        self.buf.get(range).unwrap_or_default()
    }

    fn remaining(&self) -> &'a [u8] {
        self.buf.get(self.pos..self.end).unwrap_or_default()
    }

    #[cold]
    fn error(&self, kind: MalformedKind) -> Malformed {
        Malformed {
            kind,
            offset: self.key_pos,
        }
    }

    /// Reads the next field key, or `None` at the end of the message.
    #[inline]
    pub fn read_key(&mut self) -> WireResult<Option<(u32, WireType)>> {
        if self.pos >= self.end {
            return Ok(None);
        }
        self.key_pos = self.pos;
        let key = self.read_varint()?;
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(self.error(MalformedKind::InvalidKey { key }));
        }
        let number = number as u32;
        let bits = (key & 7) as u8;
        match WireType::from_bits(bits) {
            Some(wire_type) => Ok(Some((number, wire_type))),
            None => Err(self.error(MalformedKind::InvalidWireType {
                field: number,
                wire_type: bits,
            })),
        }
    }

    /// Reads a base-128 varint of at most 10 bytes.
    #[inline]
    pub fn read_varint(&mut self) -> WireResult<u64> {
        let rest = self.remaining();
        if let Some(&b) = rest.first() {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.read_varint_slow(rest)
    }

    fn read_varint_slow(&mut self, rest: &[u8]) -> WireResult<u64> {
        let mut value = 0u64;
        for (i, &b) in rest.iter().take(10).enumerate() {
            // The tenth byte holds the 64th bit only.
            if i == 9 && b > 1 {
                return Err(self.error(MalformedKind::VarintTooLong));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.pos += i + 1;
                return Ok(value);
            }
        }
        Err(self.error(MalformedKind::TruncatedVarint))
    }

    fn take<const N: usize>(&mut self, field: u32, wire_type: WireType) -> WireResult<[u8; N]> {
        match self.remaining().first_chunk::<N>() {
            Some(bytes) => {
                self.pos += N;
                Ok(*bytes)
            }
            None => Err(self.error(MalformedKind::Truncated { field, wire_type })),
        }
    }

    /// Reads the length prefix of a length-delimited field and returns the
    /// absolute range of its contents, leaving the cursor after them.
    #[inline]
    fn read_len(&mut self, field: u32) -> WireResult<Range<usize>> {
        let len = self.read_varint()?;
        let available = self.end - self.pos;
        if len > available as u64 {
            return Err(self.error(MalformedKind::TruncatedLength {
                field,
                len,
                available,
            }));
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok(start..self.pos)
    }

    #[inline]
    fn expect(&self, field: u32, actual: WireType, expected: WireType) -> WireResult<()> {
        if actual == expected {
            Ok(())
        } else {
            Err(self.error(MalformedKind::WrongWireType {
                field,
                expected,
                actual,
            }))
        }
    }

    /// Reads a field the schema declares length-delimited (bytes or a
    /// message) and returns the range of its contents.
    #[inline(always)]
    pub fn len_field(&mut self, field: u32, wire_type: WireType) -> WireResult<Range<usize>> {
        self.expect(field, wire_type, WireType::Len)?;
        self.read_len(field)
    }

    /// Reads a `string` field, checking that it is UTF-8, and returns the
    /// range of its contents.
    #[inline]
    pub fn string_field(&mut self, field: u32, wire_type: WireType) -> WireResult<Range<usize>> {
        let range = self.len_field(field, wire_type)?;
        let bytes = self.bytes(range.clone());
        // Keys and names are nearly always ASCII; checking that inline is
        // much cheaper than a call to the general UTF-8 validator.
        if bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() {
            Ok(range)
        } else {
            Err(self.error(MalformedKind::InvalidUtf8 { field }))
        }
    }

    /// Reads a field the schema declares a varint (ints, enums, bools).
    #[inline]
    pub fn varint_field(&mut self, field: u32, wire_type: WireType) -> WireResult<u64> {
        self.expect(field, wire_type, WireType::Varint)?;
        self.read_varint()
    }

    /// Reads a `fixed64` or `double` field.
    #[inline]
    pub fn fixed64_field(&mut self, field: u32, wire_type: WireType) -> WireResult<u64> {
        self.expect(field, wire_type, WireType::Fixed64)?;
        self.take::<8>(field, wire_type).map(u64::from_le_bytes)
    }

    /// Reads a `fixed32` field.
    #[inline]
    pub fn fixed32_field(&mut self, field: u32, wire_type: WireType) -> WireResult<u32> {
        self.expect(field, wire_type, WireType::Fixed32)?;
        self.take::<4>(field, wire_type).map(u32::from_le_bytes)
    }

    /// Skips the value of a field whose key was just read, whatever its wire
    /// type. A group is skipped up to its matching end tag.
    pub fn skip(&mut self, field: u32, wire_type: WireType) -> WireResult<()> {
        match wire_type {
            WireType::StartGroup => self.skip_group(field),
            WireType::EndGroup => Err(self.error(MalformedKind::UnexpectedEndGroup { field })),
            _ => self.skip_scalar(field, wire_type),
        }
    }

    fn skip_scalar(&mut self, field: u32, wire_type: WireType) -> WireResult<()> {
        match wire_type {
            WireType::Varint => self.read_varint().map(drop),
            WireType::Fixed64 => self.take::<8>(field, wire_type).map(drop),
            WireType::Fixed32 => self.take::<4>(field, wire_type).map(drop),
            WireType::Len => self.read_len(field).map(drop),
            WireType::StartGroup | WireType::EndGroup => {
                unreachable!("groups are handled by the caller")
            }
        }
    }

    /// Skips the body of group `field` and its end tag. Nested groups are
    /// tracked on a fixed stack rather than by recursion.
    fn skip_group(&mut self, field: u32) -> WireResult<()> {
        let group_pos = self.key_pos;
        let mut open = [0u32; MAX_GROUP_DEPTH];
        open[0] = field;
        let mut depth = 1;
        loop {
            let Some((number, wire_type)) = self.read_key()? else {
                self.key_pos = group_pos;
                return Err(self.error(MalformedKind::UnterminatedGroup {
                    field: open[depth - 1],
                }));
            };
            match wire_type {
                WireType::StartGroup => {
                    if depth == MAX_GROUP_DEPTH {
                        return Err(self.error(MalformedKind::GroupsTooDeep {
                            limit: MAX_GROUP_DEPTH,
                        }));
                    }
                    open[depth] = number;
                    depth += 1;
                }
                WireType::EndGroup => {
                    if number != open[depth - 1] {
                        return Err(self.error(MalformedKind::MismatchedEndGroup {
                            expected: open[depth - 1],
                            actual: number,
                        }));
                    }
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => self.skip_scalar(number, wire_type)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(v: u64, out: &mut Vec<u8>) {
        tracedb_proto::wire::put_varint(out, v);
    }

    fn key(field: u32, wire_type: u8, out: &mut Vec<u8>) {
        varint(u64::from(field) << 3 | u64::from(wire_type), out);
    }

    #[test]
    fn varints_round_trip_at_every_width() {
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::from(u32::MAX), u64::MAX] {
            let mut buf = Vec::new();
            varint(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(r.read_varint(), Ok(v), "value {v}");
            assert_eq!(r.position(), buf.len());
        }
    }

    #[test]
    fn bad_varints_are_errors() {
        let truncated = [0x80, 0x80];
        assert_eq!(
            Reader::new(&truncated).read_varint().map_err(|e| e.kind),
            Err(MalformedKind::TruncatedVarint)
        );
        // Ten bytes whose last one carries more than the 64th bit.
        let too_big = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(
            Reader::new(&too_big).read_varint().map_err(|e| e.kind),
            Err(MalformedKind::VarintTooLong)
        );
        let eleven = [0xff; 11];
        assert_eq!(
            Reader::new(&eleven).read_varint().map_err(|e| e.kind),
            Err(MalformedKind::VarintTooLong)
        );
    }

    #[test]
    fn bad_keys_are_errors() {
        // Field number 0.
        assert_eq!(
            Reader::new(&[0x00]).read_key().map_err(|e| e.kind),
            Err(MalformedKind::InvalidKey { key: 0 })
        );
        // Wire type 6 on field 1.
        assert_eq!(
            Reader::new(&[0x0e]).read_key().map_err(|e| e.kind),
            Err(MalformedKind::InvalidWireType {
                field: 1,
                wire_type: 6
            })
        );
        // A key above 2^32.
        let mut big = Vec::new();
        varint(1 << 33, &mut big);
        assert!(matches!(
            Reader::new(&big).read_key().map_err(|e| e.kind),
            Err(MalformedKind::InvalidKey { .. })
        ));
        assert_eq!(Reader::new(&[]).read_key(), Ok(None));
    }

    #[test]
    fn fixed_values_are_little_endian_and_bounds_checked() {
        let buf = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut r = Reader::new(&buf);
        assert_eq!(
            r.fixed64_field(7, WireType::Fixed64),
            Ok(0x0807_0605_0403_0201)
        );
        let mut r = Reader::new(&buf[..7]);
        assert_eq!(
            r.fixed64_field(7, WireType::Fixed64).map_err(|e| e.kind),
            Err(MalformedKind::Truncated {
                field: 7,
                wire_type: WireType::Fixed64
            })
        );
        let mut r = Reader::new(&buf[..3]);
        assert!(r.fixed32_field(16, WireType::Fixed32).is_err());
        let mut r = Reader::new(&buf);
        assert_eq!(
            r.fixed32_field(16, WireType::Varint).map_err(|e| e.kind),
            Err(MalformedKind::WrongWireType {
                field: 16,
                expected: WireType::Fixed32,
                actual: WireType::Varint
            })
        );
    }

    #[test]
    fn huge_length_prefix_is_an_error() {
        let mut buf = Vec::new();
        varint(1 << 32, &mut buf);
        buf.extend_from_slice(b"abc");
        let mut r = Reader::new(&buf);
        assert_eq!(
            r.len_field(9, WireType::Len).map_err(|e| e.kind),
            Err(MalformedKind::TruncatedLength {
                field: 9,
                len: 1 << 32,
                available: 3
            })
        );
    }

    #[test]
    fn sub_readers_stop_at_their_end() {
        let buf = [0x08, 0x01, 0x08, 0x02];
        let r = Reader::new(&buf);
        let mut first = r.sub(0..2);
        assert_eq!(first.read_key(), Ok(Some((1, WireType::Varint))));
        assert_eq!(first.read_varint(), Ok(1));
        assert_eq!(first.read_key(), Ok(None));
        // Out-of-bounds ranges are clamped rather than trusted.
        let mut clamped = r.sub(3..100);
        assert_eq!(clamped.read_varint(), Ok(2));
        assert_eq!(clamped.read_key(), Ok(None));
    }

    #[test]
    fn nested_groups_are_skipped_to_their_end_tag() {
        let mut buf = Vec::new();
        key(5, 3, &mut buf); // start group 5
        key(1, 0, &mut buf);
        varint(42, &mut buf);
        key(6, 3, &mut buf); // start group 6
        key(2, 2, &mut buf);
        varint(2, &mut buf);
        buf.extend_from_slice(b"hi");
        key(6, 4, &mut buf); // end group 6
        key(3, 1, &mut buf);
        buf.extend_from_slice(&[0; 8]);
        key(5, 4, &mut buf); // end group 5
        key(9, 0, &mut buf);
        varint(7, &mut buf);

        let mut r = Reader::new(&buf);
        let (field, wire_type) = r.read_key().ok().flatten().expect("a key");
        assert_eq!((field, wire_type), (5, WireType::StartGroup));
        r.skip(field, wire_type).expect("well-formed group");
        assert_eq!(r.read_key(), Ok(Some((9, WireType::Varint))));
        assert_eq!(r.read_varint(), Ok(7));
    }

    #[test]
    fn broken_groups_are_errors() {
        let skip_first = |buf: &[u8]| {
            let mut r = Reader::new(buf);
            let (field, wire_type) = r.read_key().ok().flatten().expect("a key");
            r.skip(field, wire_type).map_err(|e| e.kind)
        };
        let mut mismatched = Vec::new();
        key(5, 3, &mut mismatched);
        key(6, 4, &mut mismatched);
        assert_eq!(
            skip_first(&mismatched),
            Err(MalformedKind::MismatchedEndGroup {
                expected: 5,
                actual: 6
            })
        );
        let mut unterminated = Vec::new();
        key(5, 3, &mut unterminated);
        key(1, 0, &mut unterminated);
        varint(1, &mut unterminated);
        assert_eq!(
            skip_first(&unterminated),
            Err(MalformedKind::UnterminatedGroup { field: 5 })
        );
        let mut stray_end = Vec::new();
        key(5, 4, &mut stray_end);
        assert_eq!(
            skip_first(&stray_end),
            Err(MalformedKind::UnexpectedEndGroup { field: 5 })
        );
        let mut deep = Vec::new();
        for _ in 0..=MAX_GROUP_DEPTH {
            key(5, 3, &mut deep);
        }
        for _ in 0..=MAX_GROUP_DEPTH {
            key(5, 4, &mut deep);
        }
        assert_eq!(
            skip_first(&deep),
            Err(MalformedKind::GroupsTooDeep {
                limit: MAX_GROUP_DEPTH
            })
        );
    }

    #[test]
    fn invalid_utf8_string_is_an_error() {
        let buf = [0x02, 0xff, 0xfe];
        let mut r = Reader::new(&buf);
        assert_eq!(
            r.string_field(5, WireType::Len).map_err(|e| e.kind),
            Err(MalformedKind::InvalidUtf8 { field: 5 })
        );
        let buf = [0x02, b'o', b'k'];
        let mut r = Reader::new(&buf);
        assert_eq!(r.string_field(5, WireType::Len), Ok(1..3));
    }
}
