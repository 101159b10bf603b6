//! Dates, times, timestamps and intervals in Postgres's own representation.
//!
//! Postgres counts dates in days and timestamps in microseconds from 2000-01-01 and has
//! `infinity`/`-infinity`, BC dates and years far past 9999. These types keep that
//! representation so nothing is narrowed on the way in; conversions to `chrono` are
//! offered where they are exact and return `None` otherwise. `Display` prints Postgres's
//! ISO text output (`DateStyle = ISO`, time zone UTC for the `tz` types).

use std::fmt::{self, Write as _};

/// Microseconds in one second.
pub const USECS_PER_SEC: i64 = 1_000_000;
/// Microseconds in one day.
pub const USECS_PER_DAY: i64 = 86_400 * USECS_PER_SEC;
/// Julian day number of 2000-01-01, Postgres's epoch.
pub const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;
/// Days from 1970-01-01 to 2000-01-01.
pub const UNIX_TO_POSTGRES_EPOCH_DAYS: i64 = 10_957;

/// A Postgres `date`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Date {
    /// `-infinity`, before every date.
    NegInfinity,
    /// Days since 2000-01-01 (negative before it). Covers 4713 BC to 5874897 AD.
    Days(i32),
    /// `infinity`, after every date.
    Infinity,
}

/// A Postgres `timestamp` (without time zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timestamp {
    /// `-infinity`.
    NegInfinity,
    /// Microseconds since 2000-01-01 00:00:00.
    Micros(i64),
    /// `infinity`.
    Infinity,
}

/// A Postgres `timestamptz`: an instant, kept in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimestampTz {
    /// `-infinity`.
    NegInfinity,
    /// Microseconds since 2000-01-01 00:00:00 UTC.
    Micros(i64),
    /// `infinity`.
    Infinity,
}

/// A Postgres `time`: microseconds since midnight, `0..=86_400_000_000` (`24:00:00` is a
/// valid Postgres time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub i64);

/// A Postgres `timetz`: a time of day with a UTC offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimeTz {
    /// Microseconds since midnight, local to the offset.
    pub time: Time,
    /// Offset from UTC in seconds, positive east of Greenwich (`+05:30` is 19800). Note that
    /// Postgres's binary format stores the opposite sign.
    pub offset_seconds: i32,
}

/// A Postgres `interval`: months, days and microseconds are independent fields, as in
/// Postgres (a month is not a fixed number of days, nor a day a fixed number of hours).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Interval {
    /// Months (years are 12 months).
    pub months: i32,
    /// Days.
    pub days: i32,
    /// Microseconds.
    pub micros: i64,
}

/// Calendar date from a Julian day number (Postgres's `j2date`). Years ≤ 0 are BC
/// (year 0 is 1 BC).
///
/// Checked against chrono for every day chrono can represent from Postgres's first day
/// (4714-11-24 BC) on, and against Postgres's own output across its whole range
/// (`cdc-pgoutput`'s `types_against_postgres`).
pub fn julian_to_ymd(jd: i64) -> (i64, u32, u32) {
    let mut julian = jd + 32044;
    let mut quad = julian.div_euclid(146_097);
    // `extra / 146097` is 1 only on the last day of a 400-year cycle (a Feb 29 of a year
    // divisible by 400), where it moves the day out of the cycle's count.
    let extra = (julian - quad * 146_097) * 4 + 3;
    julian += 60 + quad * 3 + extra.div_euclid(146_097);
    quad = julian.div_euclid(1461);
    julian -= quad * 1461;
    let mut y = julian * 4 / 1461;
    julian = if y != 0 {
        (julian + 305) % 365
    } else {
        (julian + 306) % 366
    } + 123;
    y += quad * 4;
    let year = y - 4800;
    let q = julian * 2141 / 65_536;
    let day = julian - 7834 * q / 256;
    let month = (q + 10) % 12 + 1;
    (year, month as u32, day as u32)
}

/// Julian day number of a calendar date (Postgres's `date2j`). Years ≤ 0 are BC.
pub fn ymd_to_julian(year: i64, month: u32, day: u32) -> i64 {
    let (mut y, mut m) = (year, i64::from(month));
    if m > 2 {
        m += 1;
        y += 4800;
    } else {
        m += 13;
        y += 4799;
    }
    let century = y.div_euclid(100);
    let mut julian = y * 365 - 32167;
    julian += y.div_euclid(4) - century + century.div_euclid(4);
    julian += 7834 * m / 256 + i64::from(day);
    julian
}

fn write_ymd(out: &mut impl fmt::Write, days_since_epoch: i64) -> Result<bool, fmt::Error> {
    let (year, month, day) = julian_to_ymd(days_since_epoch + POSTGRES_EPOCH_JDATE);
    let bc = year <= 0;
    let shown = if bc { 1 - year } else { year };
    write!(out, "{shown:04}-{month:02}-{day:02}")?;
    Ok(bc)
}

fn write_time_of_day(out: &mut impl fmt::Write, micros: i64) -> fmt::Result {
    let secs = micros.div_euclid(USECS_PER_SEC);
    let frac = micros.rem_euclid(USECS_PER_SEC);
    write!(
        out,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )?;
    write_fraction(out, frac)
}

/// Writes `.ffffff` with trailing zeros removed, or nothing for a whole second.
fn write_fraction(out: &mut impl fmt::Write, frac_micros: i64) -> fmt::Result {
    if frac_micros == 0 {
        return Ok(());
    }
    let mut digits = format!("{frac_micros:06}");
    while digits.ends_with('0') {
        digits.pop();
    }
    write!(out, ".{digits}")
}

impl Date {
    /// The date as `chrono::NaiveDate`, or `None` for ±infinity and dates outside chrono's
    /// range.
    pub fn to_chrono(self) -> Option<chrono::NaiveDate> {
        match self {
            Date::Days(days) => chrono::NaiveDate::from_num_days_from_ce_opt(
                i32::try_from(i64::from(days) + 730_120).ok()?,
            ),
            _ => None,
        }
    }

    /// The date for a chrono date.
    pub fn from_chrono(date: chrono::NaiveDate) -> Self {
        use chrono::Datelike;
        Date::Days(date.num_days_from_ce() - 730_120)
    }

    /// The calendar date `(year, month, day)` (year ≤ 0 is BC), `None` for ±infinity.
    pub fn ymd(self) -> Option<(i64, u32, u32)> {
        match self {
            Date::Days(days) => Some(julian_to_ymd(i64::from(days) + POSTGRES_EPOCH_JDATE)),
            _ => None,
        }
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Date::NegInfinity => f.write_str("-infinity"),
            Date::Infinity => f.write_str("infinity"),
            Date::Days(days) => {
                if write_ymd(f, i64::from(days))? {
                    f.write_str(" BC")?;
                }
                Ok(())
            }
        }
    }
}

fn fmt_timestamp(f: &mut fmt::Formatter<'_>, micros: i64, utc_suffix: bool) -> fmt::Result {
    let days = micros.div_euclid(USECS_PER_DAY);
    let bc = write_ymd(f, days)?;
    f.write_char(' ')?;
    write_time_of_day(f, micros.rem_euclid(USECS_PER_DAY))?;
    if utc_suffix {
        f.write_str("+00")?;
    }
    if bc {
        f.write_str(" BC")?;
    }
    Ok(())
}

fn micros_to_chrono(micros: i64) -> Option<chrono::NaiveDateTime> {
    let epoch = chrono::NaiveDate::from_ymd_opt(2000, 1, 1)?.and_hms_opt(0, 0, 0)?;
    epoch.checked_add_signed(chrono::TimeDelta::microseconds(micros))
}

impl Timestamp {
    /// The timestamp as chrono, or `None` for ±infinity and values outside chrono's range.
    pub fn to_chrono(self) -> Option<chrono::NaiveDateTime> {
        match self {
            Timestamp::Micros(us) => micros_to_chrono(us),
            _ => None,
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Timestamp::NegInfinity => f.write_str("-infinity"),
            Timestamp::Infinity => f.write_str("infinity"),
            Timestamp::Micros(us) => fmt_timestamp(f, us, false),
        }
    }
}

impl TimestampTz {
    /// The instant as chrono UTC, or `None` for ±infinity and values outside chrono's range.
    pub fn to_chrono(self) -> Option<chrono::DateTime<chrono::Utc>> {
        match self {
            TimestampTz::Micros(us) => micros_to_chrono(us).map(|t| t.and_utc()),
            _ => None,
        }
    }

    /// Microseconds since 1970-01-01 UTC, `None` for ±infinity or on overflow.
    pub fn unix_micros(self) -> Option<i64> {
        match self {
            TimestampTz::Micros(us) => us.checked_add(UNIX_TO_POSTGRES_EPOCH_DAYS * USECS_PER_DAY),
            _ => None,
        }
    }
}

impl fmt::Display for TimestampTz {
    /// Postgres's output with `TimeZone = UTC`, e.g. `2024-01-02 03:04:05.5+00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TimestampTz::NegInfinity => f.write_str("-infinity"),
            TimestampTz::Infinity => f.write_str("infinity"),
            TimestampTz::Micros(us) => fmt_timestamp(f, us, true),
        }
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_time_of_day(f, self.0)
    }
}

impl fmt::Display for TimeTz {
    /// Postgres's output, e.g. `12:00:00+05:30`, `01:02:03-08`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.time)?;
        let sign = if self.offset_seconds < 0 { '-' } else { '+' };
        let abs = self.offset_seconds.unsigned_abs();
        write!(f, "{sign}{:02}", abs / 3600)?;
        if !abs.is_multiple_of(3600) {
            write!(f, ":{:02}", abs / 60 % 60)?;
            if !abs.is_multiple_of(60) {
                write!(f, ":{:02}", abs % 60)?;
            }
        }
        Ok(())
    }
}

impl Interval {
    /// Whether this is Postgres 17's `infinity` interval.
    pub fn is_infinity(&self) -> bool {
        self.months == i32::MAX && self.days == i32::MAX && self.micros == i64::MAX
    }

    /// Whether this is Postgres 17's `-infinity` interval.
    pub fn is_neg_infinity(&self) -> bool {
        self.months == i32::MIN && self.days == i32::MIN && self.micros == i64::MIN
    }
}

impl fmt::Display for Interval {
    /// Postgres's output with `IntervalStyle = postgres`, e.g.
    /// `1 year 2 mons -3 days +04:05:06.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_infinity() {
            return f.write_str("infinity");
        }
        if self.is_neg_infinity() {
            return f.write_str("-infinity");
        }
        let mut is_zero = true;
        let mut is_before = false;
        let mut part = |f: &mut fmt::Formatter<'_>, value: i64, unit: &str| -> fmt::Result {
            if value == 0 {
                return Ok(());
            }
            let space = if is_zero { "" } else { " " };
            let plus = if is_before && value > 0 { "+" } else { "" };
            let plural = if value != 1 { "s" } else { "" };
            write!(f, "{space}{plus}{value} {unit}{plural}")?;
            is_before = value < 0;
            is_zero = false;
            Ok(())
        };
        part(f, i64::from(self.months / 12), "year")?;
        part(f, i64::from(self.months % 12), "mon")?;
        part(f, i64::from(self.days), "day")?;
        if is_zero || self.micros != 0 {
            let minus = self.micros < 0;
            let abs = self.micros.unsigned_abs();
            let space = if is_zero { "" } else { " " };
            let sign = if minus {
                "-"
            } else if is_before {
                "+"
            } else {
                ""
            };
            let secs = abs / 1_000_000;
            write!(
                f,
                "{space}{sign}{:02}:{:02}:{:02}",
                secs / 3600,
                secs / 60 % 60,
                secs % 60
            )?;
            write_fraction(f, (abs % 1_000_000) as i64)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn epoch_and_bc_dates() {
        assert_eq!(Date::Days(0).to_string(), "2000-01-01");
        assert_eq!(Date::Days(-1).to_string(), "1999-12-31");
        let jd = ymd_to_julian(-43, 3, 15) - POSTGRES_EPOCH_JDATE;
        assert_eq!(Date::Days(jd as i32).to_string(), "0044-03-15 BC");
        let jd = ymd_to_julian(12345, 6, 7) - POSTGRES_EPOCH_JDATE;
        assert_eq!(Date::Days(jd as i32).to_string(), "12345-06-07");
        assert_eq!(Date::Infinity.to_string(), "infinity");
    }

    #[test]
    fn timestamps() {
        assert_eq!(Timestamp::Micros(0).to_string(), "2000-01-01 00:00:00");
        assert_eq!(
            Timestamp::Micros(-1).to_string(),
            "1999-12-31 23:59:59.999999"
        );
        assert_eq!(
            TimestampTz::Micros(1_500_000).to_string(),
            "2000-01-01 00:00:01.5+00"
        );
        assert_eq!(TimestampTz::NegInfinity.to_string(), "-infinity");
        let bc = (ymd_to_julian(0, 1, 1) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY;
        assert_eq!(Timestamp::Micros(bc).to_string(), "0001-01-01 00:00:00 BC");
    }

    #[test]
    fn times() {
        assert_eq!(Time(USECS_PER_DAY).to_string(), "24:00:00");
        let t = TimeTz {
            time: Time(3_723_000_001),
            offset_seconds: 19_800,
        };
        assert_eq!(t.to_string(), "01:02:03.000001+05:30");
        let t = TimeTz {
            time: Time(0),
            offset_seconds: -8 * 3600,
        };
        assert_eq!(t.to_string(), "00:00:00-08");
    }

    #[test]
    fn intervals_like_postgres() {
        let iv = |months, days, micros| {
            Interval {
                months,
                days,
                micros,
            }
            .to_string()
        };
        assert_eq!(iv(0, 0, 0), "00:00:00");
        assert_eq!(
            iv(14, 3, 14_706_789_000),
            "1 year 2 mons 3 days 04:05:06.789"
        );
        assert_eq!(iv(-1, 0, 0), "-1 mons");
        assert_eq!(iv(0, -3, 3_600_000_000), "-3 days +01:00:00");
        assert_eq!(iv(0, 1, -1), "1 day -00:00:00.000001");
        assert_eq!(iv(12, 0, 0), "1 year");
    }

    #[test]
    fn chrono_conversions() {
        let d = chrono::NaiveDate::from_ymd_opt(2024, 2, 29).unwrap();
        assert_eq!(Date::from_chrono(d).to_chrono(), Some(d));
        assert_eq!(Date::from_chrono(d).to_string(), "2024-02-29");
        assert_eq!(Date::Infinity.to_chrono(), None);
        assert_eq!(
            TimestampTz::Micros(0).unix_micros(),
            Some(946_684_800 * USECS_PER_SEC)
        );
    }

    /// Postgres's first day, 4714-11-24 BC (Julian day 0), as days since 2000-01-01.
    const FIRST_POSTGRES_DAY: i64 = -POSTGRES_EPOCH_JDATE;

    /// Every day from Postgres's first to chrono's last (262142-12-31) against chrono's
    /// calendar, both ways: the oracle is an implementation nobody here wrote. (Postgres's
    /// own output covers the rest of its range in `cdc-pgoutput`'s `types_against_postgres`.)
    #[test]
    fn every_day_chrono_can_represent_matches_chrono() {
        use chrono::Datelike;
        let first = chrono::NaiveDate::from_ymd_opt(-4713, 11, 24).unwrap();
        assert_eq!(
            Date::from_chrono(first),
            Date::Days(FIRST_POSTGRES_DAY as i32)
        );
        let mut day = first;
        let mut days = FIRST_POSTGRES_DAY;
        let mut checked = 0u64;
        loop {
            let expected = (i64::from(day.year()), day.month(), day.day());
            let jd = days + POSTGRES_EPOCH_JDATE;
            let got = julian_to_ymd(jd);
            if got != expected || ymd_to_julian(expected.0, expected.1, expected.2) != jd {
                panic!(
                    "day {days} (Julian {jd}): chrono says {expected:?}, julian_to_ymd says {got:?}, \
                     ymd_to_julian says {}",
                    ymd_to_julian(expected.0, expected.1, expected.2)
                );
            }
            checked += 1;
            match day.succ_opt() {
                Some(next) => day = next,
                None => break,
            }
            days += 1;
        }
        assert_eq!(day, chrono::NaiveDate::MAX);
        assert!(checked > 97_000_000, "{checked}");
    }

    /// Every date of 0001–9999 as text (and as chrono) against chrono's formatting,
    /// including the 24 February 29ths of years divisible by 400 that once came out as
    /// March 1.
    #[test]
    fn every_date_of_years_1_to_9999_displays_like_chrono() {
        let mut day = chrono::NaiveDate::from_ymd_opt(1, 1, 1).unwrap();
        let last = chrono::NaiveDate::from_ymd_opt(9999, 12, 31).unwrap();
        let mut text = String::new();
        loop {
            let date = Date::from_chrono(day);
            text.clear();
            write!(text, "{date}").unwrap();
            assert_eq!(text, day.format("%Y-%m-%d").to_string());
            assert_eq!(date.to_chrono(), Some(day));
            if day == last {
                break;
            }
            day = day.succ_opt().unwrap();
        }
    }

    #[test]
    fn leap_days_of_years_divisible_by_400() {
        for year in [-400, 0, 400, 1600, 2000, 2400, 9600, 10_000, 294_000] {
            let jd = ymd_to_julian(year, 2, 29);
            assert_eq!(julian_to_ymd(jd), (year, 2, 29), "{year}");
            assert_eq!(julian_to_ymd(jd + 1), (year, 3, 1), "{year}");
        }
        let days = (ymd_to_julian(2000, 2, 29) - POSTGRES_EPOCH_JDATE) as i32;
        assert_eq!(Date::Days(days).to_string(), "2000-02-29");
        let micros = i64::from(days) * USECS_PER_DAY + 3_723_000_000;
        assert_eq!(Timestamp::Micros(micros).to_string(), "2000-02-29 01:02:03");
        assert_eq!(
            TimestampTz::Micros(micros).to_string(),
            "2000-02-29 01:02:03+00"
        );
    }

    proptest! {
        #[test]
        fn julian_round_trip(days in -2_451_545i64..2_000_000_000) {
            let (y, m, d) = julian_to_ymd(days + POSTGRES_EPOCH_JDATE);
            prop_assert_eq!(ymd_to_julian(y, m, d), days + POSTGRES_EPOCH_JDATE);
        }

        #[test]
        fn date_display_matches_chrono(days in -700_000i32..2_900_000) {
            let date = Date::Days(days);
            if let Some(c) = date.to_chrono() {
                use chrono::Datelike;
                if c.year() > 0 {
                    prop_assert_eq!(date.to_string(), c.format("%Y-%m-%d").to_string());
                }
            }
        }
    }
}
