//! Unix nanoseconds as a UTC calendar time, for the messages and listings
//! that show a span's time to a person.

/// A UTC time to the millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millis: u32,
}

impl Utc {
    /// The calendar time of `nanos` after 1970-01-01T00:00:00Z.
    pub fn from_unix_nanos(nanos: u64) -> Utc {
        let secs = nanos / 1_000_000_000;
        let (days, rem) = (secs / 86_400, (secs % 86_400) as u32);
        // Days to a proleptic Gregorian date, by 400-year eras of 146,097
        // days counted from March 1st (Howard Hinnant's algorithm).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Utc {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rem / 3_600,
            minute: rem / 60 % 60,
            second: rem % 60,
            millis: (nanos / 1_000_000 % 1_000) as u32,
        }
    }
}

/// Unix nanoseconds of an RFC 3339 time (`2024-01-02T03:04:05Z`, with an
/// optional fraction of a second and a `Z` or `±hh:mm` offset); `None` for
/// anything else or a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = text.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = num(at + 1, digits)? * 10i64.pow(9 - digits as u32);
        at += 1 + digits;
    }
    let offset = match &text[at..] {
        "Z" | "z" => 0,
        rest if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let minutes = num(at + 1, 2)? * 60 + num(at + 4, 2)?;
            if rest.starts_with('-') {
                -minutes
            } else {
                minutes
            }
        }
        _ => return None,
    };
    // Days from 1970-01-01 of a proleptic Gregorian date (the inverse of
    // from_unix_nanos's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset * 60;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos as u64)
}

/// RFC 3339: `2023-11-14T22:13:20.250Z`.
impl std::fmt::Display for Utc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millis
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_parse_back_to_unix_nanoseconds() {
        for nanos in [
            0,
            1_700_000_000_250_000_000,
            951_782_400_000_000_000,
            4_102_444_799_999_000_000,
        ] {
            let text = Utc::from_unix_nanos(nanos).to_string();
            assert_eq!(parse_rfc3339(&text), Some(nanos), "{text}");
        }
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_003_600_500_000_000 - 3_600_000_000_000)
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20-00:30"),
            Some(1_700_001_800_000_000_000)
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-13-14T22:13:20Z",
            "2023-11-14T22:13:20",
            "1969-12-31T23:59:59Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14 22:13:20Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn calendar_times_are_rfc3339() {
        let text = |nanos| Utc::from_unix_nanos(nanos).to_string();
        assert_eq!(text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(text(1_700_000_000_250_000_000), "2023-11-14T22:13:20.250Z");
        assert_eq!(text(1_709_164_800_000_000_000), "2024-02-29T00:00:00.000Z");
        assert_eq!(text(4_102_444_799_999_000_000), "2099-12-31T23:59:59.999Z");
    }
}
