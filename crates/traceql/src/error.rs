//! The one error a query can get: where it went wrong and what was expected.
//!
//! A query is typed by a person, so the error points at the token to fix
//! (1-based line and column, in characters, as an editor counts them) and
//! says what was expected there and what was found instead.

use thiserror::Error;

/// A query that does not parse or does not type-check.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("parse error at line {line}, column {column}: {message}")]
pub struct ParseError {
    /// Byte offset of the offending token in the query.
    pub offset: usize,
    /// 1-based line of `offset`.
    pub line: usize,
    /// 1-based column of `offset`, counted in characters.
    pub column: usize,
    pub message: String,
}

impl ParseError {
    /// An error at byte `offset` of `text`; the offset is clamped to the
    /// text and moved back to a character boundary, so any offset is safe.
    pub(crate) fn at(text: &str, offset: usize, message: impl Into<String>) -> ParseError {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        ParseError {
            offset,
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            message: message.into(),
        }
    }
}

/// Results of the parser.
pub type Result<T, E = ParseError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_characters() {
        let e = ParseError::at("{ .a = \"é\"\n  x }", 14, "m");
        assert_eq!((e.line, e.column), (2, 3));
        let e = ParseError::at("é=", 2, "m");
        assert_eq!((e.line, e.column), (1, 2));
        assert_eq!(e.to_string(), "parse error at line 1, column 2: m");
        // An offset inside a character is moved back to its start.
        let e = ParseError::at("é", 1, "m");
        assert_eq!((e.offset, e.column), (0, 1));
    }
}
