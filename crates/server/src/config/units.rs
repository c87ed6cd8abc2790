//! The units `tracedb serve`'s options are written in: byte counts and ages.

use std::{fmt, str::FromStr, time::Duration};

use serde::{Deserialize, Serialize};

/// A byte count that reads `1048576`, `64KiB`, `512MiB`, `1GiB` (also `KB`,
/// `MB`, `GB` and `K`, `M`, `G`, all powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 >= 1 << shift && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("{s:?} is not a byte size such as 1048576, 64KiB or 1GiB"))?;
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            other => {
                return Err(format!(
                    "unknown unit {other:?} in {s:?}: use KiB, MiB or GiB"
                ))
            }
        };
        n.checked_mul(1 << shift)
            .map(ByteSize)
            .ok_or_else(|| format!("{s:?} is too large"))
    }
}

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A period such as `90s`, `15m`, `12h` or `7d`; `off` (or `0`) means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Age(pub Option<Duration>);

impl fmt::Display for Age {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(d) = self.0 else {
            return f.write_str("off");
        };
        let secs = d.as_secs();
        for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if secs >= size && secs.is_multiple_of(size) {
                return write!(f, "{}{unit}", secs / size);
            }
        }
        write!(f, "{secs}s")
    }
}

impl FromStr for Age {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") || s == "0" {
            return Ok(Age(None));
        }
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("{s:?} is not a period such as 90s, 15m, 12h, 7d or off"))?;
        let size = match unit.trim() {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            other => return Err(format!("unknown unit {other:?} in {s:?}: use s, m, h or d")),
        };
        n.checked_mul(size)
            .map(|secs| Age(Some(Duration::from_secs(secs))))
            .ok_or_else(|| format!("{s:?} is too long"))
    }
}

impl Serialize for Age {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Age {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}
