//! Values of flags that clap cannot check alone: durations and rates within their
//! bounds, and the bounds themselves.

use std::time::Duration;

/// `--checkpoint-interval`: a timer must not spin (zero makes tokio's interval panic), and
/// an hour between checkpoints is already more than any sink should hold back.
pub const CHECKPOINT_INTERVAL: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(3600));
/// `--status-interval`: the display does not refresh faster than 100ms anyway.
pub const STATUS_INTERVAL: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(3600));
/// `demo --duration`: up to 30 days; without the flag the demo runs until Ctrl-C.
pub const DEMO_DURATION: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(720 * 3600));
/// `demo --rate`, transactions per second: the workload's timer period is `1 / rate`,
/// which must be a duration (a rate of 1e-300 overflowed it, and panicked).
pub const DEMO_RATE: (f64, f64) = (0.01, 10_000.0);
/// `demo --seed-rows`: more would take the demo's setup minutes and gigabytes.
pub const MAX_SEED_ROWS: i64 = 10_000_000;

/// A value parser for a duration flag ([`parse_duration`]) from `bounds.0` to `bounds.1`
/// inclusive. clap puts the flag's name before its message.
pub fn duration_between(
    bounds: (Duration, Duration),
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    let (min, max) = bounds;
    move |text| {
        let range = format!(
            "a duration between {} and {}",
            show_duration(min),
            show_duration(max)
        );
        match parse_duration(text) {
            Ok(duration) if (min..=max).contains(&duration) => Ok(duration),
            Ok(_) => Err(format!("must be {range}")),
            Err(e) => Err(format!("{e}; expected {range}")),
        }
    }
}

/// `demo --rate`: a finite number of transactions per second within [`DEMO_RATE`].
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let (min, max) = DEMO_RATE;
    match text.trim().parse::<f64>() {
        // NaN is in no range.
        Ok(rate) if (min..=max).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "must be a number of transactions per second between {min} and {max}"
        )),
    }
}

/// `d` in the largest unit [`parse_duration`] reads back exactly (`10ms`, `5s`, `1h`).
fn show_duration(d: Duration) -> String {
    let seconds = d.as_secs();
    if d.subsec_nanos() != 0 {
        format!("{}ms", d.as_millis())
    } else if seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// Parses `500ms`, `1s`, `2.5s`, `3m`, `1h`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 500ms, 1s, 2m)"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn ranges_are_checked_and_shown() {
        let check = duration_between(CHECKPOINT_INTERVAL);
        assert_eq!(check("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(check("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(check("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["0", "9ms", "61m", "1e9h", "-1s", "NaN"] {
            let err = check(bad).unwrap_err();
            assert!(err.contains("between 10ms and 1h"), "{bad}: {err}");
        }
        assert_eq!(show_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show_duration(Duration::from_secs(90)), "90s");
        assert_eq!(show_duration(Duration::from_secs(120)), "2m");
        assert_eq!(parse_rate("2.5"), Ok(2.5));
        for bad in ["0", "-1", "1e-300", "1e300", "NaN", "inf", "-inf", "x"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
