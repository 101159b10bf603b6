//! The error type: each kind says what the caller should do.

use std::fmt;

/// A boxed error cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure happened, and so what to do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A temporary failure (connection lost, server restarting, too many connections):
    /// retry with backoff; resuming from the acknowledged position loses nothing.
    Transient,
    /// The stream cannot continue from where the token says (slot missing or invalidated,
    /// another server or timeline, a gap): a new snapshot is needed.
    ResyncRequired,
    /// The configuration or the source's setup is wrong: fix it, then restart.
    Config,
    /// The source sent something that violates the protocol: a bug or an incompatible
    /// server; report it.
    Protocol,
    /// The sink failed.
    Sink,
    /// A value the sink's policy refuses (e.g. NaN where the target has no NaN): change the
    /// policy or the data.
    Rejected,
}

impl ErrorKind {
    /// What the operator should do, in one sentence.
    pub fn advice(self) -> &'static str {
        match self {
            ErrorKind::Transient => "this is temporary; retrying resumes without loss",
            ErrorKind::ResyncRequired => {
                "the stream cannot resume from its saved position; start over with a new snapshot"
            }
            ErrorKind::Config => "fix the configuration or the source database, then restart",
            ErrorKind::Protocol => {
                "the server sent data this version cannot interpret; please report it with the server version"
            }
            ErrorKind::Sink => "check the sink; the stream resumes from its last checkpoint",
            ErrorKind::Rejected => "choose an explicit policy for such values, or change the data",
        }
    }

    fn label(self) -> &'static str {
        match self {
            ErrorKind::Transient => "transient error",
            ErrorKind::ResyncRequired => "resync required",
            ErrorKind::Config => "configuration error",
            ErrorKind::Protocol => "protocol error",
            ErrorKind::Sink => "sink error",
            ErrorKind::Rejected => "value rejected",
        }
    }
}

/// A pgcdc error: a kind that says what to do, a message that says what failed, and the
/// underlying cause (for server errors a [`ServerError`] with its SQLSTATE).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<BoxError>,
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// A [`ErrorKind::Transient`] error.
    pub fn transient(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Transient, message)
    }

    /// A [`ErrorKind::ResyncRequired`] error.
    pub fn resync_required(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::ResyncRequired, message)
    }

    /// A [`ErrorKind::Config`] error.
    pub fn config(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Config, message)
    }

    /// A [`ErrorKind::Protocol`] error.
    pub fn protocol(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Protocol, message)
    }

    /// A [`ErrorKind::Sink`] error.
    pub fn sink(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Sink, message)
    }

    /// A [`ErrorKind::Rejected`] error.
    pub fn rejected(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Rejected, message)
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without kind or cause.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }

    /// The server error in the cause chain, if any.
    pub fn server_error(&self) -> Option<&ServerError> {
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|e| e as _);
        while let Some(err) = cause {
            if let Some(server) = err.downcast_ref::<ServerError>() {
                return Some(server);
            }
            cause = err.source();
        }
        None
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.label(), self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

/// An error reported by the database server, with the fields a user needs to act on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerError {
    /// Severity (`ERROR`, `FATAL`, `PANIC`).
    pub severity: String,
    /// The five-character SQLSTATE, e.g. `42704`.
    pub code: String,
    /// The primary message.
    pub message: String,
    /// Optional detail.
    pub detail: Option<String>,
    /// Optional hint.
    pub hint: Option<String>,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " (detail: {detail})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ServerError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_kind_message_and_cause() {
        let err = Error::resync_required("slot \"s\" does not exist").with_source(ServerError {
            severity: "ERROR".into(),
            code: "42704".into(),
            message: "replication slot \"s\" does not exist".into(),
            detail: None,
            hint: Some("create it".into()),
        });
        let text = err.to_string();
        assert!(text.starts_with("resync required: slot"), "{text}");
        assert!(
            text.contains("42704") && text.contains("hint: create it"),
            "{text}"
        );
        assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("42704"));
        assert!(!err.is_transient());
    }
}
