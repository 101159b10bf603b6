//! [`Secret`]: a string that must never be printed, and [`REDACTED`], what every `Debug`
//! in pgcdc prints instead of a secret.
//!
//! A connection string may hold a password and a PEM text may be a private key, so every
//! configuration field that holds one (and the command line's `--uri`) is a [`Secret`]:
//! its `Debug` prints [`REDACTED`], and it has no `Display`, so neither a derived `Debug`
//! of a struct around it, nor a log line, nor an error message can show it by accident.
//! Reading it takes [`Secret::expose`], which is easy to find in a review.

use std::fmt;

use serde::Deserialize;

/// What `Debug` prints in place of a secret (the password of a
/// [`super::ConnectionConfig`], a [`Secret`], an inline [`super::PemSource`]).
pub const REDACTED: &str = "***";

/// A string that must never be printed: a password, a connection string that may contain
/// one, a private key.
///
/// `Debug` prints `"***"` ([`REDACTED`]); there is no `Display`. Deserializes from (and
/// converts from) a plain string. The text is not wiped from memory on drop.
#[derive(Clone, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The secret text. Never print it or put it into an error message.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The secret text, unwrapped.
    pub fn into_exposed(self) -> String {
        self.0
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As a string literal, so a struct around it reads `uri: "***"`.
        fmt::Debug::fmt(REDACTED, f)
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Self {
        Secret(text)
    }
}

impl From<&str> for Secret {
    fn from(text: &str) -> Self {
        Secret(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_only_the_marker() {
        let secret = Secret::from("hunter2");
        assert_eq!(format!("{secret:?}"), "\"***\"");
        assert_eq!(format!("{:#?}", Some(&secret)), "Some(\n    \"***\",\n)");
        assert_eq!(secret.expose(), "hunter2");
        let parsed: Secret = serde_json::from_str("\"hunter2\"").unwrap_or_default();
        assert_eq!(parsed, secret);
    }
}
