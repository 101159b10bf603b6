//! The session settings every connection pgcdc opens pins, in one place.
//!
//! Values arrive as text shaped by the session that produced them: the walsender prints
//! pgoutput's text columns with its own output settings, a snapshot connection prints the
//! columns it copies as text with its own. Unless both pin the same settings, one row can
//! have two images (`tstzrange` in the server's time zone, `point` rounded by
//! `extra_float_digits = 0`), and the text decoders expect exactly these. The replication
//! session and every SQL session ([`super::connect_sql`]) therefore start with
//! [`pinned_settings`], as startup parameters or `-c` options.
//!
//! The same sessions switch off the timeouts that would end them while they work as
//! designed: the walsender that exported a snapshot stays idle in a transaction for the
//! whole copy, a snapshot worker keeps one transaction open for the whole table, a COPY
//! of a large table runs for minutes. All of these settings are user-settable, so no
//! privilege is needed; settings only newer servers know are set after startup
//! ([`late_settings_query`]), as an unknown startup parameter would fail the connection.
//!
//! `lc_monetary` is deliberately left alone: `money` values are scaled by its fraction
//! digits, so another setting would change their meaning, not just their text. Every
//! session of one server inherits the same one.

/// Settings that shape the text output of values.
const OUTPUT_SETTINGS: &[(&str, &str)] = &[
    ("DateStyle", "ISO"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("TimeZone", "UTC"),
    ("bytea_output", "hex"),
];

/// Timeouts (every supported server version knows them) that would end a session that
/// is busy or idle by design.
const TIMEOUT_SETTINGS: &[(&str, &str)] = &[
    ("statement_timeout", "0"),
    ("lock_timeout", "0"),
    ("idle_in_transaction_session_timeout", "0"),
    ("idle_session_timeout", "0"),
];

/// Timeouts only newer servers know (`transaction_timeout`: 17+). An unknown startup
/// parameter fails the connection, so these are set after startup by
/// [`late_settings_query`], which skips those the server does not know.
const LATE_TIMEOUT_SETTINGS: &[(&str, &str)] = &[("transaction_timeout", "0")];

/// The timeouts pgcdc switches off in its own sessions, for `pgcdc check`'s report.
pub fn disabled_timeouts() -> impl Iterator<Item = &'static str> {
    TIMEOUT_SETTINGS
        .iter()
        .chain(LATE_TIMEOUT_SETTINGS)
        .map(|(name, _)| *name)
}

/// Every setting a session starts with, as `(name, value)`.
pub fn pinned_settings() -> impl Iterator<Item = (&'static str, &'static str)> {
    OUTPUT_SETTINGS
        .iter()
        .chain(TIMEOUT_SETTINGS)
        .map(|&(name, value)| (name, value))
}

/// The `options` startup parameter of an SQL session: the user's own `options` (if any)
/// followed by `-c name=value` for every pinned setting, so the pins win over the user's
/// options, the role's and the database's defaults.
pub fn startup_options(user_options: Option<&str>) -> String {
    let mut options = String::new();
    if let Some(user) = user_options.filter(|o| !o.trim().is_empty()) {
        options.push_str(user);
        options.push(' ');
    }
    let pins: Vec<String> = pinned_settings()
        .map(|(name, value)| format!("-c {name}={value}"))
        .collect();
    options.push_str(&pins.join(" "));
    options
}

/// One query, valid on every supported server version, that applies the late settings
/// the server knows; run right after startup on every session.
pub fn late_settings_query() -> String {
    let values: Vec<String> = LATE_TIMEOUT_SETTINGS
        .iter()
        .map(|(name, value)| format!("('{name}', '{value}')"))
        .collect();
    format!(
        "SELECT set_config(late.name, late.value, false) FROM (VALUES {}) AS late(name, value) \
         JOIN pg_catalog.pg_settings USING (name)",
        values.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_put_the_pins_after_the_users_options() {
        let options = startup_options(Some("-c search_path=app"));
        assert!(options.starts_with("-c search_path=app -c DateStyle=ISO"));
        assert!(options.contains("-c idle_in_transaction_session_timeout=0"));
        assert!(!startup_options(None).starts_with(' '));
        // Values must not need escaping in `options` (spaces separate switches).
        assert!(pinned_settings().all(|(n, v)| !n.contains(' ') && !v.contains(' ')));
    }

    #[test]
    fn late_settings_are_skipped_where_unknown_and_reported_as_disabled() {
        assert!(late_settings_query().contains("('transaction_timeout', '0')"));
        assert!(late_settings_query().contains("JOIN pg_catalog.pg_settings"));
        assert!(disabled_timeouts().any(|t| t == "transaction_timeout"));
        assert!(disabled_timeouts().any(|t| t == "idle_in_transaction_session_timeout"));
    }
}
