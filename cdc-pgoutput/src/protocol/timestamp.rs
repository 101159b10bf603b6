//! Protocol timestamps: microseconds since the PostgreSQL epoch, 2000-01-01 00:00:00 UTC.
//!
//! Messages keep them as raw `i64` so nothing is rounded on the way through; these helpers
//! convert at the edges (the clock fields we send, log lines we print).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds from the Unix epoch to the PostgreSQL epoch (2000-01-01 UTC).
pub const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// `time` as microseconds since the PostgreSQL epoch, truncated to the microsecond and
/// saturating at the `i64` range (a clock that far off is a bug elsewhere, not a reason to
/// fail a status update).
pub fn pg_timestamp_from_system_time(time: SystemTime) -> i64 {
    let unix_micros = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_micros())
            .map(|m| -m)
            .unwrap_or(i64::MIN),
    };
    unix_micros.saturating_sub(PG_EPOCH_UNIX_MICROS)
}

/// The current time as a protocol timestamp, for the clock field of client messages.
pub fn pg_timestamp_now() -> i64 {
    pg_timestamp_from_system_time(SystemTime::now())
}

/// The `SystemTime` of a protocol timestamp, or `None` if the platform cannot represent it.
pub fn system_time_from_pg_timestamp(micros: i64) -> Option<SystemTime> {
    let unix_micros = i128::from(micros) + i128::from(PG_EPOCH_UNIX_MICROS);
    let magnitude = Duration::from_micros(u64::try_from(unix_micros.unsigned_abs()).ok()?);
    if unix_micros >= 0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_epoch_is_zero() {
        let epoch = UNIX_EPOCH + Duration::from_secs(946_684_800);
        assert_eq!(pg_timestamp_from_system_time(epoch), 0);
        assert_eq!(system_time_from_pg_timestamp(0), Some(epoch));
    }

    #[test]
    fn timestamps_round_trip_through_system_time() {
        for micros in [-1_234_567_890_123, -1, 1, 765_432_109_876_543] {
            let t = system_time_from_pg_timestamp(micros).unwrap();
            assert_eq!(pg_timestamp_from_system_time(t), micros);
        }
    }

    #[test]
    fn extreme_values_do_not_panic() {
        let _ = system_time_from_pg_timestamp(i64::MIN);
        let _ = system_time_from_pg_timestamp(i64::MAX);
        assert!(pg_timestamp_now() > 0);
    }
}
