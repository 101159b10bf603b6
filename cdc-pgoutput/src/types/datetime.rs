//! Dates, times, timestamps and intervals.
//!
//! Text is Postgres's output with `DateStyle = ISO` (`2024-01-02 03:04:05.5+05:30`, with
//! `infinity`, a ` BC` suffix and years past 9999) and `IntervalStyle = postgres`
//! (`1 year 2 mons -3 days +04:05:06.789`). `timestamptz` text carries the offset of the
//! sender's `TimeZone`, which is applied to get the UTC instant. Binary is microseconds
//! or days since 2000-01-01, with the type's extreme values meaning ±infinity.

use bytes::{BufMut, BytesMut};
use cdc_core::value::{
    Date, Interval, POSTGRES_EPOCH_JDATE, Time, TimeTz, Timestamp, TimestampTz, USECS_PER_DAY,
    USECS_PER_SEC, ymd_to_julian,
};

use super::error::DecodeErrorKind as Kind;

/// Largest magnitude of a `timetz` zone Postgres accepts (`TZDISP_LIMIT`, exclusive).
const TZDISP_LIMIT: i32 = 16 * 3600;
/// Longest year Postgres prints (5874897 AD for dates) plus headroom; bounds arithmetic.
const MAX_YEAR_DIGITS: usize = 9;

const DATE_SYNTAX: &str = "YYYY-MM-DD[ BC], infinity or -infinity";
const TIME_SYNTAX: &str = "HH:MM:SS[.ffffff]";
const OFFSET_SYNTAX: &str = "a UTC offset like +05, -08:00 or +05:53:28";
const TIMESTAMP_SYNTAX: &str = "YYYY-MM-DD HH:MM:SS[.ffffff][ BC], infinity or -infinity";
const TIMESTAMPTZ_SYNTAX: &str =
    "YYYY-MM-DD HH:MM:SS[.ffffff]+HH[:MM[:SS]][ BC], infinity or -infinity";
const INTERVAL_SYNTAX: &str = "an interval like `1 year 2 mons -3 days +04:05:06.789` \
     (IntervalStyle postgres)";

/// A tiny cursor over ASCII text.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn new(rest: &'a [u8]) -> Self {
        Cursor { rest }
    }

    fn eat(&mut self, byte: u8) -> bool {
        match self.rest.split_first() {
            Some((&b, tail)) if b == byte => {
                self.rest = tail;
                true
            }
            _ => false,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// 1 to `max_digits` decimal digits: (value, number of digits).
    fn number(&mut self, max_digits: usize) -> Option<(u64, usize)> {
        let count = self.rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if count == 0 || count > max_digits {
            return None;
        }
        let (digits, tail) = self.rest.split_at_checked(count)?;
        self.rest = tail;
        Some((
            digits
                .iter()
                .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0')),
            count,
        ))
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Strips the ` BC` suffix Postgres appends to dates and timestamps before year 1.
fn strip_bc(data: &[u8]) -> (&[u8], bool) {
    match data.strip_suffix(b" BC") {
        Some(rest) => (rest, true),
        None => (data, false),
    }
}

/// `YYYY-MM-DD` as days since 2000-01-01; `bc` says the year counts backwards from 1 BC.
fn ymd(c: &mut Cursor<'_>, bc: bool, syntax: &'static str) -> Result<i64, Kind> {
    let err = || Kind::Syntax(syntax);
    let (year, _) = c.number(MAX_YEAR_DIGITS).ok_or_else(err)?;
    if !c.eat(b'-') {
        return Err(err());
    }
    let (month, _) = c.number(2).ok_or_else(err)?;
    if !c.eat(b'-') {
        return Err(err());
    }
    let (day, _) = c.number(2).ok_or_else(err)?;
    let year = year as i64; // at most 9 digits
    if year == 0 {
        return Err(Kind::OutOfRange(
            "year 0 does not exist (1 BC precedes 1 AD)",
        ));
    }
    let year = if bc { 1 - year } else { year };
    let month = month as u32; // at most 2 digits
    let day = day as u32;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(Kind::OutOfRange("no such day in the calendar"));
    }
    Ok(ymd_to_julian(year, month, day) - POSTGRES_EPOCH_JDATE)
}

/// `HH:MM:SS[.ffffff]` as microseconds; up to `max_hour_digits` hour digits.
fn hms(c: &mut Cursor<'_>, max_hour_digits: usize) -> Result<i128, Kind> {
    let syntax = || Kind::Syntax(TIME_SYNTAX);
    let (hours, _) = c.number(max_hour_digits).ok_or_else(syntax)?;
    if !c.eat(b':') {
        return Err(syntax());
    }
    let (minutes, _) = c.number(2).ok_or_else(syntax)?;
    if !c.eat(b':') {
        return Err(syntax());
    }
    let (seconds, _) = c.number(2).ok_or_else(syntax)?;
    let mut micros = 0;
    if c.eat(b'.') {
        let (fraction, digits) = c
            .number(6)
            .ok_or_else(|| Kind::Syntax("at most 6 fractional digits of seconds (microseconds)"))?;
        micros = fraction * 10u64.pow(6 - digits as u32);
    }
    if minutes >= 60 || seconds >= 60 {
        return Err(Kind::OutOfRange("minutes and seconds must be below 60"));
    }
    Ok(i128::from(hours) * 3_600_000_000
        + i128::from(minutes) * 60_000_000
        + i128::from(seconds) * 1_000_000
        + i128::from(micros))
}

/// A time of day, `00:00:00` to `24:00:00` inclusive.
fn time_of_day(c: &mut Cursor<'_>) -> Result<i64, Kind> {
    let micros = hms(c, 2)?;
    if micros > i128::from(USECS_PER_DAY) {
        return Err(Kind::OutOfRange("time of day after 24:00:00"));
    }
    Ok(micros as i64) // at most USECS_PER_DAY
}

/// `+HH[:MM[:SS]]` / `-HH…` as seconds east of UTC.
fn utc_offset(c: &mut Cursor<'_>) -> Result<i32, Kind> {
    let syntax = || Kind::Syntax(OFFSET_SYNTAX);
    let negative = match c.peek() {
        Some(b'+') => false,
        Some(b'-') => true,
        _ => return Err(syntax()),
    };
    c.rest = c.rest.get(1..).unwrap_or_default();
    let (hours, _) = c.number(2).ok_or_else(syntax)?;
    let mut minutes = 0;
    let mut seconds = 0;
    if c.eat(b':') {
        minutes = c.number(2).ok_or_else(syntax)?.0;
        if c.eat(b':') {
            seconds = c.number(2).ok_or_else(syntax)?.0;
        }
    }
    if minutes >= 60 || seconds >= 60 {
        return Err(Kind::OutOfRange(
            "offset minutes and seconds must be below 60",
        ));
    }
    let magnitude = (hours * 3600 + minutes * 60 + seconds) as i32; // at most 99:59:59
    Ok(if negative { -magnitude } else { magnitude })
}

fn finished(c: &Cursor<'_>, syntax: &'static str) -> Result<(), Kind> {
    if c.is_empty() {
        Ok(())
    } else {
        Err(Kind::Syntax(syntax))
    }
}

// ---- date ----

pub(crate) fn date_from_text(data: &[u8]) -> Result<Date, Kind> {
    match data {
        b"infinity" => return Ok(Date::Infinity),
        b"-infinity" => return Ok(Date::NegInfinity),
        _ => {}
    }
    let (body, bc) = strip_bc(data);
    let mut c = Cursor::new(body);
    let days = ymd(&mut c, bc, DATE_SYNTAX)?;
    finished(&c, DATE_SYNTAX)?;
    match i32::try_from(days) {
        // The extremes are the binary form of ±infinity; no real date is there.
        Ok(days) if days != i32::MIN && days != i32::MAX => Ok(Date::Days(days)),
        _ => Err(Kind::OutOfRange("date beyond what a date can hold")),
    }
}

pub(crate) fn date_from_binary(data: &[u8]) -> Result<Date, Kind> {
    Ok(match super::scalar::int4_from_binary(data)? {
        i32::MIN => Date::NegInfinity,
        i32::MAX => Date::Infinity,
        days => Date::Days(days),
    })
}

pub(crate) fn date_to_binary(v: Date, out: &mut BytesMut) {
    out.put_i32(match v {
        Date::NegInfinity => i32::MIN,
        Date::Infinity => i32::MAX,
        Date::Days(days) => days,
    });
}

// ---- time, timetz ----

pub(crate) fn time_from_text(data: &[u8]) -> Result<Time, Kind> {
    let mut c = Cursor::new(data);
    let micros = time_of_day(&mut c)?;
    finished(&c, TIME_SYNTAX)?;
    Ok(Time(micros))
}

pub(crate) fn time_from_binary(data: &[u8]) -> Result<Time, Kind> {
    let micros = super::scalar::int8_from_binary(data)?;
    if !(0..=USECS_PER_DAY).contains(&micros) {
        return Err(Kind::OutOfRange("time outside 00:00:00..=24:00:00"));
    }
    Ok(Time(micros))
}

fn check_zone(offset_seconds: i32) -> Result<(), Kind> {
    if offset_seconds.unsigned_abs() >= TZDISP_LIMIT.unsigned_abs() {
        return Err(Kind::OutOfRange("time zone offset of 16 hours or more"));
    }
    Ok(())
}

pub(crate) fn timetz_from_text(data: &[u8]) -> Result<TimeTz, Kind> {
    let mut c = Cursor::new(data);
    let micros = time_of_day(&mut c)?;
    let offset_seconds = utc_offset(&mut c)?;
    finished(&c, "HH:MM:SS[.ffffff]+HH[:MM[:SS]]")?;
    check_zone(offset_seconds)?;
    Ok(TimeTz {
        time: Time(micros),
        offset_seconds,
    })
}

/// `timetz_send`: i64 microseconds, then i32 zone in seconds *west* of UTC.
pub(crate) fn timetz_from_binary(data: &[u8]) -> Result<TimeTz, Kind> {
    let bytes: [u8; 12] = <[u8; 12]>::try_from(data).map_err(|_| Kind::WrongLength {
        expected: 12,
        actual: data.len(),
    })?;
    let (time, zone) = bytes.split_at(8);
    let time = time_from_binary(time)?;
    let zone = super::scalar::int4_from_binary(zone)?;
    let offset_seconds = zone
        .checked_neg()
        .ok_or(Kind::OutOfRange("time zone offset"))?;
    check_zone(offset_seconds)?;
    Ok(TimeTz {
        time,
        offset_seconds,
    })
}

pub(crate) fn timetz_to_binary(v: TimeTz, out: &mut BytesMut) {
    out.put_i64(v.time.0);
    out.put_i32(v.offset_seconds.wrapping_neg());
}

// ---- timestamp, timestamptz ----

/// Date and time (and, for `timestamptz`, the offset) as microseconds since 2000-01-01
/// in UTC.
fn timestamp_micros(data: &[u8], with_offset: bool, syntax: &'static str) -> Result<i64, Kind> {
    let (body, bc) = strip_bc(data);
    let mut c = Cursor::new(body);
    let days = ymd(&mut c, bc, syntax)?;
    if !c.eat(b' ') {
        return Err(Kind::Syntax(syntax));
    }
    let time = time_of_day(&mut c)?;
    let offset = if with_offset { utc_offset(&mut c)? } else { 0 };
    finished(&c, syntax)?;
    let micros = i128::from(days) * i128::from(USECS_PER_DAY) + i128::from(time)
        - i128::from(offset) * i128::from(USECS_PER_SEC);
    match i64::try_from(micros) {
        // The extremes are the binary form of ±infinity; no real instant is there.
        Ok(m) if m != i64::MIN && m != i64::MAX => Ok(m),
        _ => Err(Kind::OutOfRange(
            "timestamp beyond what a timestamp can hold",
        )),
    }
}

pub(crate) fn timestamp_from_text(data: &[u8]) -> Result<Timestamp, Kind> {
    match data {
        b"infinity" => Ok(Timestamp::Infinity),
        b"-infinity" => Ok(Timestamp::NegInfinity),
        _ => timestamp_micros(data, false, TIMESTAMP_SYNTAX).map(Timestamp::Micros),
    }
}

pub(crate) fn timestamp_from_binary(data: &[u8]) -> Result<Timestamp, Kind> {
    Ok(match super::scalar::int8_from_binary(data)? {
        i64::MIN => Timestamp::NegInfinity,
        i64::MAX => Timestamp::Infinity,
        micros => Timestamp::Micros(micros),
    })
}

pub(crate) fn timestamp_to_binary(v: Timestamp, out: &mut BytesMut) {
    out.put_i64(match v {
        Timestamp::NegInfinity => i64::MIN,
        Timestamp::Infinity => i64::MAX,
        Timestamp::Micros(micros) => micros,
    });
}

pub(crate) fn timestamptz_from_text(data: &[u8]) -> Result<TimestampTz, Kind> {
    match data {
        b"infinity" => Ok(TimestampTz::Infinity),
        b"-infinity" => Ok(TimestampTz::NegInfinity),
        _ => timestamp_micros(data, true, TIMESTAMPTZ_SYNTAX).map(TimestampTz::Micros),
    }
}

pub(crate) fn timestamptz_from_binary(data: &[u8]) -> Result<TimestampTz, Kind> {
    Ok(match super::scalar::int8_from_binary(data)? {
        i64::MIN => TimestampTz::NegInfinity,
        i64::MAX => TimestampTz::Infinity,
        micros => TimestampTz::Micros(micros),
    })
}

pub(crate) fn timestamptz_to_binary(v: TimestampTz, out: &mut BytesMut) {
    out.put_i64(match v {
        TimestampTz::NegInfinity => i64::MIN,
        TimestampTz::Infinity => i64::MAX,
        TimestampTz::Micros(micros) => micros,
    });
}

// ---- interval ----

/// `IntervalStyle = postgres` output: `[N year[s]] [N mon[s]] [N day[s]] [±HH:MM:SS[.f]]`
/// (each number signed), `infinity` and `-infinity` (Postgres 17).
pub(crate) fn interval_from_text(data: &[u8]) -> Result<Interval, Kind> {
    match data {
        b"infinity" => {
            return Ok(Interval {
                months: i32::MAX,
                days: i32::MAX,
                micros: i64::MAX,
            });
        }
        b"-infinity" => {
            return Ok(Interval {
                months: i32::MIN,
                days: i32::MIN,
                micros: i64::MIN,
            });
        }
        _ => {}
    }
    let syntax = || Kind::Syntax(INTERVAL_SYNTAX);
    let mut months: i64 = 0;
    let mut days: i64 = 0;
    let mut micros: i64 = 0;
    let mut seen_any = false;
    let mut seen_time = false;
    let mut tokens = data.split(|&b| b == b' ');
    while let Some(token) = tokens.next() {
        if seen_time {
            // The time part comes last.
            return Err(syntax());
        }
        seen_any = true;
        let (negative, unsigned) = match token.split_first() {
            Some((b'-', rest)) => (true, rest),
            Some((b'+', rest)) => (false, rest),
            _ => (false, token),
        };
        if unsigned.contains(&b':') {
            let mut c = Cursor::new(unsigned);
            let magnitude = hms(&mut c, 12)?;
            finished(&c, INTERVAL_SYNTAX)?;
            micros = i64::try_from(if negative { -magnitude } else { magnitude })
                .map_err(|_| Kind::OutOfRange("interval time"))?;
            seen_time = true;
            continue;
        }
        let mut c = Cursor::new(unsigned);
        let (magnitude, _) = c.number(10).ok_or_else(syntax)?;
        finished(&c, INTERVAL_SYNTAX)?;
        let value = if negative {
            -(magnitude as i64)
        } else {
            magnitude as i64
        };
        let overflow = || Kind::OutOfRange("interval field");
        match tokens.next() {
            Some(b"year" | b"years") => {
                months = months.checked_add(value * 12).ok_or_else(overflow)?;
            }
            Some(b"mon" | b"mons") => months = months.checked_add(value).ok_or_else(overflow)?,
            Some(b"day" | b"days") => days = days.checked_add(value).ok_or_else(overflow)?,
            _ => return Err(syntax()),
        }
    }
    if !seen_any {
        return Err(syntax());
    }
    Ok(Interval {
        months: i32::try_from(months).map_err(|_| Kind::OutOfRange("interval months"))?,
        days: i32::try_from(days).map_err(|_| Kind::OutOfRange("interval days"))?,
        micros,
    })
}

/// `interval_send`: i64 microseconds, i32 days, i32 months.
pub(crate) fn interval_from_binary(data: &[u8]) -> Result<Interval, Kind> {
    let bytes: [u8; 16] = <[u8; 16]>::try_from(data).map_err(|_| Kind::WrongLength {
        expected: 16,
        actual: data.len(),
    })?;
    let (micros, rest) = bytes.split_at(8);
    let (days, months) = rest.split_at(4);
    Ok(Interval {
        months: super::scalar::int4_from_binary(months)?,
        days: super::scalar::int4_from_binary(days)?,
        micros: super::scalar::int8_from_binary(micros)?,
    })
}

pub(crate) fn interval_to_binary(v: Interval, out: &mut BytesMut) {
    out.put_i64(v.micros);
    out.put_i32(v.days);
    out.put_i32(v.months);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(year: i64, month: u32, day: u32) -> i32 {
        (ymd_to_julian(year, month, day) - POSTGRES_EPOCH_JDATE) as i32
    }

    #[test]
    fn dates_with_infinity_bc_and_big_years() {
        assert_eq!(date_from_text(b"2000-01-01"), Ok(Date::Days(0)));
        assert_eq!(date_from_text(b"infinity"), Ok(Date::Infinity));
        assert_eq!(date_from_text(b"-infinity"), Ok(Date::NegInfinity));
        assert_eq!(
            date_from_text(b"0044-03-15 BC"),
            Ok(Date::Days(days(-43, 3, 15)))
        );
        assert_eq!(
            date_from_text(b"12345-06-07"),
            Ok(Date::Days(days(12345, 6, 7)))
        );
        assert_eq!(
            date_from_text(b"5874897-12-31"),
            Ok(Date::Days(days(5_874_897, 12, 31)))
        );
        assert_eq!(
            date_from_text(b"4714-11-24 BC"),
            Ok(Date::Days(-(POSTGRES_EPOCH_JDATE as i32)))
        );
        for bad in [
            &b"2024-02-30"[..],
            b"2023-02-29",
            b"0000-01-01",
            b"2024-13-01",
            b"2024-01-01 ",
            b"2024-1-1x",
            b"Infinity",
            b"",
            b"01/02/2024",
        ] {
            assert!(
                date_from_text(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            date_from_text(b"2024-02-29"),
            Ok(Date::Days(days(2024, 2, 29)))
        );
        assert_eq!(
            date_from_binary(&i32::MIN.to_be_bytes()),
            Ok(Date::NegInfinity)
        );
        assert_eq!(
            date_from_binary(&i32::MAX.to_be_bytes()),
            Ok(Date::Infinity)
        );
        assert_eq!(date_from_binary(&(-1i32).to_be_bytes()), Ok(Date::Days(-1)));
    }

    #[test]
    fn times_and_timetz_offsets() {
        assert_eq!(time_from_text(b"00:00:00"), Ok(Time(0)));
        assert_eq!(time_from_text(b"24:00:00"), Ok(Time(USECS_PER_DAY)));
        assert_eq!(time_from_text(b"01:02:03.5"), Ok(Time(3_723_500_000)));
        assert_eq!(
            time_from_text(b"23:59:59.999999"),
            Ok(Time(USECS_PER_DAY - 1))
        );
        assert!(time_from_text(b"24:00:00.000001").is_err());
        assert!(time_from_text(b"12:60:00").is_err());
        assert!(time_from_text(b"12:00:00.1234567").is_err());
        let tz = timetz_from_text(b"12:00:00+05:30").unwrap();
        assert_eq!(tz.offset_seconds, 19_800);
        assert_eq!(
            timetz_from_text(b"00:00:00-08").unwrap().offset_seconds,
            -28_800
        );
        assert_eq!(
            timetz_from_text(b"12:00:00+05:30:15")
                .unwrap()
                .offset_seconds,
            19_815
        );
        assert!(timetz_from_text(b"12:00:00").is_err());
        assert!(timetz_from_text(b"12:00:00+16").is_err());
        // Captured from Postgres 15: timetz_send('12:00+05:30').
        let bin = [0, 0, 0, 0x0a, 0x0e, 0xeb, 0xb0, 0, 0xff, 0xff, 0xb2, 0xa8];
        assert_eq!(timetz_from_binary(&bin), Ok(tz));
        let mut out = BytesMut::new();
        timetz_to_binary(tz, &mut out);
        assert_eq!(out.as_ref(), bin);
        assert!(time_from_binary(&(-1i64).to_be_bytes()).is_err());
    }

    #[test]
    fn timestamps_apply_offsets_and_suffixes() {
        let noon = 12 * 3_600_000_000;
        assert_eq!(
            timestamp_from_text(b"2000-01-01 12:00:00"),
            Ok(Timestamp::Micros(noon))
        );
        assert_eq!(
            timestamptz_from_text(b"2000-01-01 17:30:00+05:30"),
            Ok(TimestampTz::Micros(noon))
        );
        assert_eq!(
            timestamptz_from_text(b"2000-01-01 04:00:00-08"),
            Ok(TimestampTz::Micros(noon))
        );
        // Local mean time offsets have seconds (Postgres prints them for old dates).
        let lmt = timestamptz_from_text(b"1800-01-01 05:53:28+05:53:28").unwrap();
        assert_eq!(
            lmt,
            TimestampTz::Micros(i64::from(days(1800, 1, 1)) * USECS_PER_DAY)
        );
        let bc = timestamptz_from_text(b"0044-03-15 12:00:00+00 BC").unwrap();
        assert_eq!(
            bc,
            TimestampTz::Micros(i64::from(days(-43, 3, 15)) * USECS_PER_DAY + noon)
        );
        assert_eq!(
            timestamp_from_text(b"12345-06-07 00:00:00.000001"),
            Ok(Timestamp::Micros(
                i64::from(days(12345, 6, 7)) * USECS_PER_DAY + 1
            ))
        );
        assert_eq!(timestamp_from_text(b"infinity"), Ok(Timestamp::Infinity));
        assert_eq!(
            timestamptz_from_text(b"-infinity"),
            Ok(TimestampTz::NegInfinity)
        );
        assert!(timestamp_from_text(b"2000-01-01T12:00:00").is_err());
        assert!(timestamp_from_text(b"2000-01-01 12:00:00+00").is_err());
        assert!(timestamptz_from_text(b"2000-01-01 12:00:00").is_err());
        assert!(timestamptz_from_text(b"999999999-01-01 00:00:00+00").is_err());
        assert_eq!(
            timestamptz_from_binary(&i64::MAX.to_be_bytes()),
            Ok(TimestampTz::Infinity)
        );
        assert_eq!(
            timestamp_from_binary(&i64::MIN.to_be_bytes()),
            Ok(Timestamp::NegInfinity)
        );
        assert!(timestamp_from_binary(&[0; 4]).is_err());
    }

    fn iv(months: i32, days: i32, micros: i64) -> Interval {
        Interval {
            months,
            days,
            micros,
        }
    }

    #[test]
    fn intervals_in_postgres_style() {
        assert_eq!(
            interval_from_text(b"1 year 2 mons -3 days +04:05:06.789"),
            Ok(iv(14, -3, 14_706_789_000))
        );
        assert_eq!(interval_from_text(b"-00:00:00.000001"), Ok(iv(0, 0, -1)));
        assert_eq!(interval_from_text(b"00:00:00"), Ok(iv(0, 0, 0)));
        assert_eq!(
            interval_from_text(b"-1 days +01:00:00"),
            Ok(iv(0, -1, 3_600_000_000))
        );
        assert_eq!(interval_from_text(b"-1 years -2 mons"), Ok(iv(-14, 0, 0)));
        assert_eq!(interval_from_text(b"1 day"), Ok(iv(0, 1, 0)));
        assert_eq!(
            interval_from_text(
                b"-178956970 years -8 mons -2147483648 days -2562047788:00:54.775808"
            ),
            Ok(iv(i32::MIN, i32::MIN, i64::MIN))
        );
        assert_eq!(
            interval_from_text(b"178956970 years 7 mons 2147483647 days 2562047788:00:54.775807"),
            Ok(iv(i32::MAX, i32::MAX, i64::MAX))
        );
        assert!(interval_from_text(b"infinity").unwrap().is_infinity());
        assert!(interval_from_text(b"-infinity").unwrap().is_neg_infinity());
        for bad in [
            &b""[..],
            b"1 fortnight",
            b"1",
            b"01:00:00 1 day",
            b"@ 1 year",
            b"P1Y",
            b"1 day  2 mons",
            b"2147483648 days",
            b"2562047788:00:54.775808",
        ] {
            assert!(
                interval_from_text(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut out = BytesMut::new();
        interval_to_binary(iv(-14, 3, -1), &mut out);
        assert_eq!(interval_from_binary(&out), Ok(iv(-14, 3, -1)));
        assert!(interval_from_binary(&out[..15]).is_err());
    }
}
