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
//! ([`late_settings_sql`]), as an unknown startup parameter would fail the connection.
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

/// Timeouts only newer servers know: `(first server_version_num, name, value)`.
const LATE_TIMEOUT_SETTINGS: &[(u32, &str, &str)] = &[(170000, "transaction_timeout", "0")];

/// The timeouts pgcdc switches off in its own sessions, for `pgcdc check`'s report.
pub fn disabled_timeouts() -> impl Iterator<Item = &'static str> {
    TIMEOUT_SETTINGS
        .iter()
        .map(|(name, _)| *name)
        .chain(LATE_TIMEOUT_SETTINGS.iter().map(|(_, name, _)| *name))
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

/// The `SET` commands for settings the server (of `server_version_num`) knows but that
/// cannot be startup parameters on every supported version; `None` when there are none.
pub fn late_settings_sql(server_version_num: u32) -> Option<String> {
    let commands: Vec<String> = LATE_TIMEOUT_SETTINGS
        .iter()
        .filter(|(since, _, _)| server_version_num >= *since)
        .map(|(_, name, value)| format!("SET {name} = {value}"))
        .collect();
    (!commands.is_empty()).then(|| commands.join("; "))
}

/// One query, valid on every supported server version, that applies the late settings
/// the server knows (for sessions that do not know the server version yet).
pub fn late_settings_query() -> String {
    let names: Vec<String> = LATE_TIMEOUT_SETTINGS
        .iter()
        .map(|(_, name, _)| format!("'{name}'"))
        .collect();
    format!(
        "SELECT set_config(name, CASE name {} END, false) FROM pg_catalog.pg_settings WHERE name IN ({})",
        LATE_TIMEOUT_SETTINGS
            .iter()
            .map(|(_, name, value)| format!("WHEN '{name}' THEN '{value}'"))
            .collect::<Vec<_>>()
            .join(" "),
        names.join(", ")
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
    fn late_settings_depend_on_the_server_version() {
        assert_eq!(late_settings_sql(160004), None);
        assert_eq!(
            late_settings_sql(170000).as_deref(),
            Some("SET transaction_timeout = 0")
        );
        assert!(disabled_timeouts().any(|t| t == "transaction_timeout"));
    }
}
