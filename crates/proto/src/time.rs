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
    fn calendar_times_are_rfc3339() {
        let text = |nanos| Utc::from_unix_nanos(nanos).to_string();
        assert_eq!(text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(text(1_700_000_000_250_000_000), "2023-11-14T22:13:20.250Z");
        assert_eq!(text(1_709_164_800_000_000_000), "2024-02-29T00:00:00.000Z");
        assert_eq!(text(4_102_444_799_999_000_000), "2099-12-31T23:59:59.999Z");
    }
}
