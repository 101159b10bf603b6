//! From server, I/O and TLS failures to [`cdc_core::Error`]s whose kind says what to do.
//!
//! Server errors keep their SQLSTATE, message, detail and hint as a [`ServerError`] source.
//! The kind comes from the SQLSTATE ([`classify_sqlstate`]), refined where the same code
//! means different things depending on what we were doing ([`Activity`]).

use std::io;

use cdc_core::{Error, ErrorKind, ServerError};
use postgres_protocol::message::backend::ErrorFields;

/// What the connection was doing when the server reported an error; decides how overloaded
/// SQLSTATEs (`42704`, `55000`, `55006`) are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Connecting and authenticating.
    Connect,
    /// A replication command about a slot (`START_REPLICATION`, `DROP_REPLICATION_SLOT`,
    /// `READ_REPLICATION_SLOT`): `42704` means the slot is gone.
    SlotCommand,
    /// Any other command or query.
    Command,
    /// Streaming (after `START_REPLICATION` succeeded): `42704` here is pgoutput's
    /// "publication does not exist".
    Streaming,
}

/// The kind for a SQLSTATE in general:
///
/// - `28000`, `28P01` (authentication), `3D000` (no such database), `42501` (insufficient
///   privilege), class `0A` (not supported), `53400` (configuration limit such as all slots
///   in use): [`ErrorKind::Config`];
/// - `57P01` admin shutdown, `57P02` crash shutdown, `57P03` cannot connect now,
///   `53300` too many connections, other class `53` (resources), class `08` (connection),
///   class `58` (system I/O), `40001`/`40P01`, and a session ended by a timeout
///   (`25P03` idle in transaction, `25P04` transaction, `57P05` idle session — pgcdc
///   switches these off in its sessions, so they mean a pooler or proxy in between):
///   [`ErrorKind::Transient`];
/// - anything else: [`ErrorKind::Config`] — an unexpected server error is surfaced, not
///   retried forever.
pub fn classify_sqlstate(code: &str) -> ErrorKind {
    match code {
        "28000" | "28P01" | "3D000" | "42501" | "53400" => ErrorKind::Config,
        "57P01" | "57P02" | "57P03" | "57P05" | "53300" | "40001" | "40P01" | "25P03" | "25P04" => {
            ErrorKind::Transient
        }
        _ if code.starts_with("08") || code.starts_with("53") || code.starts_with("58") => {
            ErrorKind::Transient
        }
        _ => ErrorKind::Config,
    }
}

/// The kind for a server error seen during `activity` (see [`Activity`]).
pub fn classify(server: &ServerError, activity: Activity) -> ErrorKind {
    match (server.code.as_str(), activity) {
        // The slot does not exist.
        ("42704", Activity::SlotCommand) => ErrorKind::ResyncRequired,
        // An invalidated slot: PG15 says "cannot read from logical replication slot", 16+
        // "can no longer get changes from replication slot", both with a detail saying
        // it was invalidated.
        ("55000", Activity::SlotCommand | Activity::Streaming) if is_invalidated_slot(server) => {
            ErrorKind::ResyncRequired
        }
        // "replication slot ... is active for PID n": usually our own previous connection
        // that the server has not noticed is gone yet (it will within wal_sender_timeout).
        ("55006", Activity::SlotCommand) => ErrorKind::Transient,
        (code, _) => classify_sqlstate(code),
    }
}

fn is_invalidated_slot(server: &ServerError) -> bool {
    let message = server.message.as_str();
    message.contains("invalidated")
        || message.contains("can no longer get changes")
        || message.contains("cannot read from logical replication slot")
        || server
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("invalidated"))
}

/// Reads an ErrorResponse or NoticeResponse body into a [`ServerError`]. Fields that are
/// missing or not UTF-8 become empty or lossy strings; this never fails.
pub(crate) fn server_error_from_fields(mut fields: ErrorFields<'_>) -> ServerError {
    use fallible_iterator::FallibleIterator;
    let mut server = ServerError {
        severity: String::new(),
        code: String::new(),
        message: String::new(),
        detail: None,
        hint: None,
    };
    let mut localized_severity = String::new();
    while let Ok(Some(field)) = fields.next() {
        let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'V' => server.severity = value,
            b'S' => localized_severity = value,
            b'C' => server.code = value,
            b'M' => server.message = value,
            b'D' => server.detail = Some(value),
            b'H' => server.hint = Some(value),
            _ => {}
        }
    }
    if server.severity.is_empty() {
        server.severity = localized_severity;
    }
    server
}

/// A [`cdc_core::Error`] for a server error during `activity`, with `context` (what we
/// were doing) as the message and the server error as its source. Slot-related kinds get a
/// message that says what to do.
pub(crate) fn server_error(server: ServerError, activity: Activity, context: &str) -> Error {
    let kind = classify(&server, activity);
    let advice = match (server.code.as_str(), kind) {
        ("28P01" | "28000", _) => {
            ": check the user name and password (and pg_hba.conf for this host, database and user)"
        }
        ("42704", ErrorKind::ResyncRequired) => {
            ": the replication slot does not exist (it was dropped or never created); the stream cannot resume from it"
        }
        ("55000", ErrorKind::ResyncRequired) => {
            ": the replication slot was invalidated (it fell too far behind and its WAL was removed); drop it and start over with a new snapshot"
        }
        ("55006", _) => {
            ": another connection is streaming from this slot; if this persists, stop the other consumer (see active_pid in pg_replication_slots)"
        }
        ("42704", _) if activity == Activity::Streaming => {
            ": the publication does not exist (it was dropped, or is spelled differently)"
        }
        _ => "",
    };
    Error::new(kind, format!("{context}{advice}")).with_source(server)
}

/// A [`cdc_core::Error`] for an I/O failure while `context`. TLS failures (certificate
/// verification, handshake) are Config errors; every other I/O error is Transient.
pub(crate) fn io_error(err: io::Error, context: &str) -> Error {
    if let Some(tls) = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        use rustls::CertificateError as Cert;
        let hint = match tls {
            rustls::Error::InvalidCertificate(
                Cert::NotValidForName | Cert::NotValidForNameContext { .. },
            ) => {
                " (the server's certificate is not valid for this host name: connect by a name the certificate lists, or use sslmode=verify-ca)"
            }
            rustls::Error::InvalidCertificate(Cert::UnknownIssuer | Cert::BadSignature) => {
                " (the server's certificate is not signed by a CA in sslrootcert)"
            }
            rustls::Error::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => {
                " (the server's certificate has expired)"
            }
            _ => "",
        };
        return Error::config(format!("{context}: TLS failed{hint}")).with_source(err);
    }
    let what = match err.kind() {
        io::ErrorKind::UnexpectedEof => "the server closed the connection unexpectedly",
        io::ErrorKind::TimedOut => "timed out",
        _ => "I/O error",
    };
    Error::transient(format!("{context}: {what}")).with_source(err)
}

/// A [`cdc_core::Error`] for a failure reported by `tokio-postgres`.
pub(crate) fn from_tokio_postgres(
    err: tokio_postgres::Error,
    activity: Activity,
    context: &str,
) -> Error {
    if let Some(db) = err.as_db_error() {
        let server = ServerError {
            severity: db.severity().to_owned(),
            code: db.code().code().to_owned(),
            message: db.message().to_owned(),
            detail: db.detail().map(str::to_owned),
            hint: db.hint().map(str::to_owned),
        };
        return server_error(server, activity, context);
    }
    if err.is_closed() {
        return Error::transient(format!("{context}: the connection is closed")).with_source(err);
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&err);
    while let Some(inner) = cause {
        // tokio-postgres's only way to say it (its error kinds are private); its own
        // Display is just "invalid configuration".
        if inner.to_string() == "password missing" {
            return Error::config(format!(
                "{context}: the server requires a password, but no password is configured: add password=... to the connection string (or, with ConnectionConfig::parse_with_env, set PGPASSWORD or a ~/.pgpass entry)"
            ));
        }
        if inner.downcast_ref::<rustls::Error>().is_some() {
            return Error::config(format!("{context}: TLS failed")).with_source(err);
        }
        if inner.downcast_ref::<io::Error>().is_some() {
            return Error::transient(format!("{context}: I/O error")).with_source(err);
        }
        cause = inner.source();
    }
    Error::config(context.to_owned()).with_source(err)
}

/// Whether `err` (from our connection code) came from the server rejecting the connection
/// during startup or authentication — the case in which libpq's `allow` and `prefer` retry
/// with the other transport.
pub(crate) fn is_server_rejection(err: &Error) -> bool {
    err.server_error().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, message: &str) -> ServerError {
        ServerError {
            severity: "ERROR".into(),
            code: code.into(),
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    #[test]
    fn sqlstates_map_to_what_to_do() {
        for code in [
            "28P01", "28000", "3D000", "42501", "0A000", "53400", "42601",
        ] {
            assert_eq!(classify_sqlstate(code), ErrorKind::Config, "{code}");
        }
        for code in [
            "57P01", "57P03", "53300", "08006", "08P01", "58030", "53100", "25P03", "57P05",
        ] {
            assert_eq!(classify_sqlstate(code), ErrorKind::Transient, "{code}");
        }
    }

    #[test]
    fn undefined_object_depends_on_activity() {
        let missing = server("42704", "replication slot \"s\" does not exist");
        assert_eq!(
            classify(&missing, Activity::SlotCommand),
            ErrorKind::ResyncRequired
        );
        let publication = server("42704", "publication \"p\" does not exist");
        assert_eq!(
            classify(&publication, Activity::Streaming),
            ErrorKind::Config
        );
        let err = server_error(publication, Activity::Streaming, "streaming failed");
        assert!(
            err.message().contains("publication does not exist"),
            "{err}"
        );
    }

    #[test]
    fn invalidated_and_active_slots() {
        let lost = server(
            "55000",
            "can no longer get changes from replication slot \"s\"",
        );
        assert_eq!(
            classify(&lost, Activity::SlotCommand),
            ErrorKind::ResyncRequired
        );
        let mut pg15 = server("55000", "cannot read from logical replication slot \"s\"");
        pg15.detail = Some(
            "This slot has been invalidated because it exceeded the maximum reserved size.".into(),
        );
        assert_eq!(
            classify(&pg15, Activity::SlotCommand),
            ErrorKind::ResyncRequired
        );
        let wrong_db = server(
            "55000",
            "replication slot \"s\" was not created in this database",
        );
        assert_eq!(
            classify(&wrong_db, Activity::SlotCommand),
            ErrorKind::Config
        );
        let active = server("55006", "replication slot \"s\" is active for PID 42");
        let err = server_error(active, Activity::SlotCommand, "START_REPLICATION failed");
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("55006"));
    }

    #[test]
    fn io_errors_are_transient() {
        let err = io_error(io::Error::from(io::ErrorKind::ConnectionReset), "reading");
        assert_eq!(err.kind(), ErrorKind::Transient);
        let tls = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(io_error(tls, "handshake").kind(), ErrorKind::Config);
    }
}
