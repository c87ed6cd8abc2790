//! Splits a query into tokens, each with the byte range it came from, so the
//! parser can point its errors at the text.
//!
//! The lexer knows nothing of context. Words (`status`, `count`, `error`,
//! `cart`) stay words, and the parser decides what they mean where they
//! stand; operators that mean two things (`>` is "greater than" in a filter
//! and "child" between spansets, `!~` is "does not match" and "not sibling")
//! are one token each for the same reason.
//!
//! What it does decide, as Tempo's lexer does: a `.` or a scope word followed
//! by `.` starts an attribute name, which runs to the next whitespace or one
//! of `{ } ( ) = ~ ! < > & | ^ ,` (so `.http.status_code` and `.a+b` are
//! single names), with `"..."` parts for any other character; a number
//! directly followed by duration units (`1.5s`, `1h30m`, `2d`) is a
//! duration; `//` and `/* */` are comments.
//!
//! A lexing error ends the token list with [`TokenKind::Invalid`]; the
//! parser reports it when it gets there, so an earlier syntax error wins.

use crate::ast::Scope;
use crate::error::ParseError;

/// Operators and punctuation, named for their spelling: what `>` means is
/// the parser's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Punct {
    OpenBrace,
    CloseBrace,
    OpenParen,
    CloseParen,
    Comma,
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `=~`
    Re,
    /// `!~`
    NotRe,
    /// `&&`
    And,
    /// `||`
    Or,
    /// `!`
    Not,
    /// `|`
    Pipe,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    /// `^`
    Pow,
    /// `>>`
    Desc,
    /// `<<`
    Ance,
    /// `~`
    Tilde,
    /// `!>`
    NotGt,
    /// `!>>`
    NotDesc,
    /// `!<`
    NotLt,
    /// `!<<`
    NotAnce,
    /// `&>`
    AmpGt,
    /// `&>>`
    AmpDesc,
    /// `&<`
    AmpLt,
    /// `&<<`
    AmpAnce,
    /// `&~`
    AmpTilde,
}

/// The prefix of a colon-form intrinsic: `span:`, `trace:`, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntrinsicScope {
    Span,
    Trace,
    Event,
    Link,
    Instrumentation,
}

impl IntrinsicScope {
    pub(crate) fn name(self) -> &'static str {
        match self {
            IntrinsicScope::Span => "span",
            IntrinsicScope::Trace => "trace",
            IntrinsicScope::Event => "event",
            IntrinsicScope::Link => "link",
            IntrinsicScope::Instrumentation => "instrumentation",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    /// A `"..."` or `` `...` `` literal, unescaped.
    Str(String),
    Int(i64),
    Float(f64),
    /// Nanoseconds.
    Duration(i64),
    /// Any identifier: keywords, intrinsics, enum values, unknown names.
    Word(String),
    /// `.name`, `span.name`, `resource."a b"`, ...
    Attr {
        scope: Scope,
        name: String,
    },
    /// `span:` and the like; an intrinsic name follows.
    ScopeColon(IntrinsicScope),
    Punct(Punct),
    /// Where lexing failed; the error is returned beside the tokens.
    Invalid,
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    /// Byte range in the query.
    pub start: usize,
    pub end: usize,
}

/// The tokens of `text`, always ending with [`TokenKind::Eof`] or, when
/// lexing failed, [`TokenKind::Invalid`] together with the error.
pub(crate) fn tokenize(text: &str) -> (Vec<Token>, Option<ParseError>) {
    let mut lexer = Lexer { text, pos: 0 };
    let mut tokens = Vec::new();
    loop {
        match lexer.next_token() {
            Ok(Some(token)) => tokens.push(token),
            Ok(None) => {
                tokens.push(Token {
                    kind: TokenKind::Eof,
                    start: text.len(),
                    end: text.len(),
                });
                return (tokens, None);
            }
            Err(e) => {
                tokens.push(Token {
                    kind: TokenKind::Invalid,
                    start: e.offset,
                    end: e.offset,
                });
                return (tokens, Some(e));
            }
        }
    }
}

/// Characters that end an unquoted attribute name (besides whitespace).
fn ends_attribute(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '{' | '}' | '(' | ')' | '=' | '~' | '!' | '<' | '>' | '&' | '|' | '^' | ','
        )
}

/// Whether `name` can be written unquoted after a scope's `.`.
pub(crate) fn is_plain_attribute_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| ends_attribute(c) || c == '"')
}

fn is_word_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Characters that may follow a number in a duration (Tempo's set: the
/// unit letters, `µ`, digits and the decimal point).
fn is_duration_char(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, '.' | 'n' | 's' | 'u' | 'm' | 'h' | 'µ' | 'd' | 'w' | 'y')
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_at(&self, skip: usize) -> Option<char> {
        self.text[self.pos..].chars().nth(skip)
    }

    fn error(&self, offset: usize, message: impl Into<String>) -> ParseError {
        ParseError::at(self.text, offset, message)
    }

    fn skip_space_and_comments(&mut self) -> Result<(), ParseError> {
        loop {
            let rest = &self.text[self.pos..];
            if let Some(c) = rest.chars().next().filter(|c| c.is_whitespace()) {
                self.pos += c.len_utf8();
            } else if rest.starts_with("//") {
                self.pos += rest.find('\n').unwrap_or(rest.len());
            } else if let Some(body) = rest.strip_prefix("/*") {
                match body.find("*/") {
                    Some(i) => self.pos += i + 4,
                    None => return Err(self.error(self.pos, "a comment \"/*\" is not closed")),
                }
            } else {
                return Ok(());
            }
        }
    }

    fn next_token(&mut self) -> Result<Option<Token>, ParseError> {
        self.skip_space_and_comments()?;
        let start = self.pos;
        let Some(c) = self.peek() else {
            return Ok(None);
        };
        let kind = if c.is_ascii_digit()
            || (c == '.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit()))
        {
            self.number()?
        } else if c == '.' {
            self.pos += 1;
            self.attribute(Scope::Unscoped, start)?
        } else if c == '"' {
            TokenKind::Str(self.string()?)
        } else if c == '`' {
            TokenKind::Str(self.raw_string()?)
        } else if is_word_start(c) {
            self.word()?
        } else {
            TokenKind::Punct(self.punct()?)
        };
        Ok(Some(Token {
            kind,
            start,
            end: self.pos,
        }))
    }

    fn punct(&mut self) -> Result<Punct, ParseError> {
        use Punct::*;
        let rest = &self.text[self.pos..];
        // Longest spelling first.
        const TABLE: &[(&str, Punct)] = &[
            ("!>>", NotDesc),
            ("!<<", NotAnce),
            ("&>>", AmpDesc),
            ("&<<", AmpAnce),
            ("!=", Ne),
            ("!~", NotRe),
            ("!>", NotGt),
            ("!<", NotLt),
            ("=~", Re),
            (">=", Ge),
            (">>", Desc),
            ("<=", Le),
            ("<<", Ance),
            ("&&", And),
            ("&>", AmpGt),
            ("&<", AmpLt),
            ("&~", AmpTilde),
            ("||", Or),
            ("{", OpenBrace),
            ("}", CloseBrace),
            ("(", OpenParen),
            (")", CloseParen),
            (",", Comma),
            ("=", Eq),
            (">", Gt),
            ("<", Lt),
            ("!", Not),
            ("|", Pipe),
            ("+", Add),
            ("-", Sub),
            ("*", Mul),
            ("/", Div),
            ("%", Mod),
            ("^", Pow),
            ("~", Tilde),
        ];
        for (spelling, punct) in TABLE {
            if rest.starts_with(spelling) {
                self.pos += spelling.len();
                return Ok(*punct);
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        Err(self.error(self.pos, format!("unexpected character {c:?}")))
    }

    fn word(&mut self) -> Result<TokenKind, ParseError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += self.peek().map_or(1, char::len_utf8);
        }
        let word = &self.text[start..self.pos];
        match self.peek() {
            Some('.') => {
                let scope =
                    match word {
                        "resource" => Scope::Resource,
                        "span" => Scope::Span,
                        "event" => Scope::Event,
                        "link" => Scope::Link,
                        "instrumentation" => Scope::Instrumentation,
                        "parent" => return Err(self.error(
                            start,
                            "the \"parent.\" scope is not supported by tracedb (nor run by Tempo)",
                        )),
                        _ => return Ok(TokenKind::Word(word.to_string())),
                    };
                self.pos += 1;
                self.attribute(scope, start)
            }
            Some(':') => {
                let scope = match word {
                    "span" => IntrinsicScope::Span,
                    "trace" => IntrinsicScope::Trace,
                    "event" => IntrinsicScope::Event,
                    "link" => IntrinsicScope::Link,
                    "instrumentation" => IntrinsicScope::Instrumentation,
                    _ => return Ok(TokenKind::Word(word.to_string())),
                };
                self.pos += 1;
                Ok(TokenKind::ScopeColon(scope))
            }
            _ => Ok(TokenKind::Word(word.to_string())),
        }
    }

    /// The name after `.` or `scope.`: unquoted characters and `"..."`
    /// parts (with `\"` and `\\` escapes), run together.
    fn attribute(&mut self, scope: Scope, start: usize) -> Result<TokenKind, ParseError> {
        let mut name = String::new();
        let mut quoted = false;
        while let Some(c) = self.peek() {
            if c == '"' {
                quoted = true;
                let quote_at = self.pos;
                self.pos += 1;
                loop {
                    let Some(c) = self.peek() else {
                        return Err(self.error(quote_at, "the quoted attribute name is not closed"));
                    };
                    self.pos += c.len_utf8();
                    match c {
                        '"' => break,
                        '\\' => {
                            match self.peek() {
                                Some(e @ ('"' | '\\')) => {
                                    name.push(e);
                                    self.pos += 1;
                                }
                                _ => return Err(self.error(
                                    self.pos - 1,
                                    "only \\\" and \\\\ escapes are allowed in an attribute name",
                                )),
                            }
                        }
                        c => name.push(c),
                    }
                }
            } else if ends_attribute(c) {
                break;
            } else {
                name.push(c);
                self.pos += c.len_utf8();
            }
        }
        if name.is_empty() && !quoted {
            let prefix = &self.text[start..self.pos];
            let found = self
                .peek()
                .map_or("the end of the query".to_string(), |c| format!("{c:?}"));
            return Err(self.error(
                self.pos,
                format!("expected an attribute name after \"{prefix}\", found {found}"),
            ));
        }
        Ok(TokenKind::Attr { scope, name })
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error(start, "the string is not closed"));
            };
            let at = self.pos;
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\n' => return Err(self.error(start, "the string is not closed on its line")),
                '\\' => out.push(self.escape(at)?),
                c => out.push(c),
            }
        }
    }

    /// The character of the escape whose `\` is at `at` (Go's escapes).
    fn escape(&mut self, at: usize) -> Result<char, ParseError> {
        let bad = |l: &Self| l.error(at, "invalid escape sequence in the string");
        let Some(c) = self.peek() else {
            return Err(bad(self));
        };
        self.pos += c.len_utf8();
        let simple = match c {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            '\\' => Some('\\'),
            '"' => Some('"'),
            _ => None,
        };
        if let Some(s) = simple {
            return Ok(s);
        }
        let (digits, radix) = match c {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => {
                self.pos -= 1;
                (3, 8)
            }
            _ => return Err(bad(self)),
        };
        let end = self.pos + digits;
        let code = self
            .text
            .get(self.pos..end)
            .and_then(|s| u32::from_str_radix(s, radix).ok())
            .ok_or_else(|| bad(self))?;
        self.pos = end;
        // \x and octal escapes are bytes in Go; only ASCII ones make text.
        if matches!(c, 'x' | '0'..='7') && code > 0x7f {
            return Err(self.error(at, "a byte escape above \\x7f is not valid UTF-8 text"));
        }
        char::from_u32(code).ok_or_else(|| bad(self))
    }

    fn raw_string(&mut self) -> Result<String, ParseError> {
        let start = self.pos;
        let rest = &self.text[start + 1..];
        match rest.find('`') {
            Some(i) => {
                self.pos = start + 1 + i + 1;
                Ok(rest[..i].chars().filter(|&c| c != '\r').collect())
            }
            None => Err(self.error(start, "the raw string is not closed")),
        }
    }

    /// An integer, a float, or a duration.
    fn number(&mut self) -> Result<TokenKind, ParseError> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let digits = |mut i: usize| {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            i
        };
        let mut end = digits(start);
        let mut float = false;
        if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
            end = digits(end + 1);
            float = true;
        }
        if matches!(bytes.get(end), Some(b'e' | b'E')) {
            let mut e = end + 1;
            if matches!(bytes.get(e), Some(b'+' | b'-')) {
                e += 1;
            }
            if bytes.get(e).is_some_and(u8::is_ascii_digit) {
                end = digits(e);
                float = true;
            }
        }
        // A duration when the characters that follow make one.
        let run_end = self.text[end..]
            .char_indices()
            .find(|&(_, c)| !is_duration_char(c))
            .map_or(self.text.len(), |(i, _)| end + i);
        if run_end > end {
            if let Some(ns) = parse_duration(&self.text[start..run_end]) {
                self.pos = run_end;
                return ns.map(TokenKind::Duration).ok_or_else(|| {
                    self.error(start, "the duration is out of range (about ±292 years)")
                });
            }
        }
        self.pos = end;
        let text = &self.text[start..end];
        if float {
            match text.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(TokenKind::Float(f)),
                _ => Err(self.error(start, format!("the number {text} is out of range"))),
            }
        } else {
            text.parse::<i64>()
                .map(TokenKind::Int)
                .map_err(|_| self.error(start, format!("the integer {text} is out of range")))
        }
    }
}

/// `text` as a duration: `None` if it is not one, `Some(None)` if it is
/// one that overflows.
///
/// Tempo accepts what Go's `time.ParseDuration` accepts (decimal numbers with
/// units `ns us µs ms s m h`, in any order, like `1.5h` or `1h30m`) or what
/// Prometheus accepts (whole numbers with units `y w d h m s ms` in
/// decreasing order, like `1d12h`); so does this.
fn parse_duration(text: &str) -> Option<Option<i64>> {
    const UNITS: &[(&str, u128)] = &[
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("d", 86_400_000_000_000),
        ("w", 7 * 86_400_000_000_000),
        ("y", 365 * 86_400_000_000_000),
    ];
    let mut rest = text;
    let mut total: u128 = 0;
    let mut overflow = false;
    let mut has_fraction = false;
    let mut has_day_units = false;
    let mut last_unit = u128::MAX;
    let mut ordered = true;
    while !rest.is_empty() {
        let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(whole_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                has_fraction = true;
                f.split_at(n)
            }
            None => ("", after),
        };
        if whole.is_empty() && frac.is_empty() {
            return None;
        }
        // Longest unit spelling that matches ("ms" before "m").
        let (unit, scale) = UNITS
            .iter()
            .filter(|(u, _)| after.starts_with(u))
            .max_by_key(|(u, _)| u.len())?;
        rest = &after[unit.len()..];
        has_day_units |= matches!(*unit, "d" | "w" | "y");
        ordered &= *scale < last_unit;
        last_unit = *scale;
        let whole = if whole.is_empty() {
            Some(0)
        } else {
            whole.parse::<u128>().ok()
        };
        let mut value = whole.and_then(|w| w.checked_mul(*scale));
        // Fractions: as Go does, exact to the nanosecond, truncated.
        let mut frac_scale = *scale;
        for d in frac.bytes() {
            frac_scale /= 10;
            value = value.and_then(|v| v.checked_add(u128::from(d - b'0') * frac_scale));
        }
        match value.and_then(|v| total.checked_add(v)) {
            Some(t) => total = t,
            None => overflow = true,
        }
    }
    // Day units are Prometheus's: whole numbers in decreasing order.
    if has_day_units && (has_fraction || !ordered) {
        return None;
    }
    if overflow {
        return Some(None);
    }
    Some(i64::try_from(total).ok())
}

/// `text` as Go's `time.ParseDuration` reads it (`300ms`, `1.5h`,
/// `-2h45m`, `0`), in nanoseconds, exact and truncated as Go's is; `None`
/// for anything else (Prometheus's day units included) or on overflow.
pub fn parse_go_duration(text: &str) -> Option<i64> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() || rest.contains(['d', 'w', 'y']) {
        return None;
    }
    let ns = parse_duration(rest)??;
    Some(if negative { -ns } else { ns })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_exactly_as_go_does() {
        assert_eq!(parse_go_duration("0.3s"), Some(300_000_000));
        assert_eq!(parse_go_duration("1.7ns"), Some(1));
        assert_eq!(parse_go_duration("2h45m"), Some(9_900_000_000_000));
        assert_eq!(parse_go_duration("-2us"), Some(-2_000));
        assert_eq!(parse_go_duration("3μs"), Some(3_000));
        assert_eq!(parse_go_duration("+0"), Some(0));
        for bad in ["", "1d", "10", "3 s", "s", "1.5.5s", "9999999999h"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    fn kinds(text: &str) -> Vec<TokenKind> {
        let (tokens, err) = tokenize(text);
        assert_eq!(err, None, "{text}");
        tokens.into_iter().map(|t| t.kind).collect()
    }

    fn attr(scope: Scope, name: &str) -> TokenKind {
        TokenKind::Attr {
            scope,
            name: name.to_string(),
        }
    }

    #[test]
    fn operators_take_the_longest_spelling() {
        use Punct::*;
        let got = kinds("!>>!<<&>>&<<!=!~!>!<=~>=>><=<<&&&>&<&~||{}(),=><!|+-*/%^~");
        let want: Vec<TokenKind> = [
            NotDesc, NotAnce, AmpDesc, AmpAnce, Ne, NotRe, NotGt, NotLt, Re, Ge, Desc, Le, Ance,
            And, AmpGt, AmpLt, AmpTilde, Or, OpenBrace, CloseBrace, OpenParen, CloseParen, Comma,
            Eq, Gt, Lt, Not, Pipe, Add, Sub, Mul, Div, Mod, Pow, Tilde,
        ]
        .into_iter()
        .map(TokenKind::Punct)
        .chain([TokenKind::Eof])
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn attribute_names_run_to_a_terminal_character() {
        assert_eq!(
            kinds(".a span.http.status_code resource.k8s.pod.name .a+b-c event.x link.y instrumentation.z"),
            vec![
                attr(Scope::Unscoped, "a"),
                attr(Scope::Span, "http.status_code"),
                attr(Scope::Resource, "k8s.pod.name"),
                attr(Scope::Unscoped, "a+b-c"),
                attr(Scope::Event, "x"),
                attr(Scope::Link, "y"),
                attr(Scope::Instrumentation, "z"),
                TokenKind::Eof
            ]
        );
        assert_eq!(
            kinds(r#"span."my attr" ."a b" resource."x.y" .a"b c"d ."q\"\\""#),
            vec![
                attr(Scope::Span, "my attr"),
                attr(Scope::Unscoped, "a b"),
                attr(Scope::Resource, "x.y"),
                attr(Scope::Unscoped, "ab cd"),
                attr(Scope::Unscoped, "q\"\\"),
                TokenKind::Eof
            ]
        );
        assert_eq!(kinds(".a}")[1], TokenKind::Punct(Punct::CloseBrace));
    }

    #[test]
    fn words_and_colon_scopes() {
        let (tokens, err) = tokenize("span:name trace :x");
        let got: Vec<TokenKind> = tokens.into_iter().map(|t| t.kind).collect();
        assert_eq!(
            got,
            vec![
                TokenKind::ScopeColon(IntrinsicScope::Span),
                TokenKind::Word("name".into()),
                TokenKind::Word("trace".into()),
                TokenKind::Invalid,
            ]
        );
        assert_eq!(err.map(|e| e.offset), Some(16));
        assert_eq!(
            kinds("foo.bar")[..2],
            [TokenKind::Word("foo".into()), attr(Scope::Unscoped, "bar")]
        );
    }

    #[test]
    fn numbers_and_durations() {
        assert_eq!(
            kinds("1 2.5 1e3 .5 10ns 3us 3µs 4ms 1.5s 2m 1h30m 2d 1w 1y 007"),
            vec![
                TokenKind::Int(1),
                TokenKind::Float(2.5),
                TokenKind::Float(1000.0),
                TokenKind::Float(0.5),
                TokenKind::Duration(10),
                TokenKind::Duration(3_000),
                TokenKind::Duration(3_000),
                TokenKind::Duration(4_000_000),
                TokenKind::Duration(1_500_000_000),
                TokenKind::Duration(120_000_000_000),
                TokenKind::Duration(5_400_000_000_000),
                TokenKind::Duration(2 * 86_400_000_000_000),
                TokenKind::Duration(7 * 86_400_000_000_000),
                TokenKind::Duration(365 * 86_400_000_000_000),
                TokenKind::Int(7),
                TokenKind::Eof,
            ]
        );
        // Not durations: the number stands alone and the rest lexes on.
        assert_eq!(
            kinds("1.5d")[..2],
            [TokenKind::Float(1.5), TokenKind::Word("d".into())]
        );
        assert_eq!(
            kinds("1x")[..2],
            [TokenKind::Int(1), TokenKind::Word("x".into())]
        );
        let (_, err) = tokenize("99999999999999999999");
        assert!(err.is_some_and(|e| e.message.contains("out of range")));
        let (_, err) = tokenize("999999999h");
        assert!(err.is_some_and(|e| e.message.contains("out of range")));
    }

    #[test]
    fn strings_unescape() {
        assert_eq!(
            kinds(r#""a\"b\\c\nd\te" `raw\n"x"` "\u00e9\x41""#),
            vec![
                TokenKind::Str("a\"b\\c\nd\te".into()),
                TokenKind::Str("raw\\n\"x\"".into()),
                TokenKind::Str("éA".into()),
                TokenKind::Eof,
            ]
        );
        for bad in ["\"abc", "\"a\\qb\"", "`abc", "\"\\xff\"", "\"a\nb\""] {
            let (tokens, err) = tokenize(bad);
            assert!(err.is_some(), "{bad}");
            assert_eq!(tokens.last().map(|t| &t.kind), Some(&TokenKind::Invalid));
        }
    }

    #[test]
    fn comments_are_skipped_and_offsets_kept() {
        let (tokens, err) = tokenize("{ // c\n .a /* x */ = 1 }");
        assert_eq!(err, None);
        let starts: Vec<usize> = tokens.iter().map(|t| t.start).collect();
        assert_eq!(starts, vec![0, 8, 19, 21, 23, 24]);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for bad in [
            "&",
            "#",
            "span.",
            ". ",
            "parent.x",
            "/* open",
            "span.\"open",
        ] {
            let (_, err) = tokenize(bad);
            assert!(err.is_some(), "{bad}");
        }
    }
}
