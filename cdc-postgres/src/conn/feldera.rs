//! The JSON shape of the source configuration: Feldera's `postgres_cdc` input connector
//! configuration, unchanged, plus pgcdc's own options beside it.
//!
//! ```json
//! {
//!   "uri": "postgres://cdc:secret@db:5432/shop?sslmode=verify-full",
//!   "publication": "shop_pub",
//!   "source_table": "public.orders",
//!   "ssl_ca_pem": "-----BEGIN CERTIFICATE-----\n...",
//!   "slot": "shop_orders",
//!   "snapshot": "online",
//!   "commit_mode": "checkpoint"
//! }
//! ```
//!
//! TLS fields follow Feldera: a CA (`ssl_ca_pem` or `ssl_ca_location`, the PEM text
//! winning when both are set) turns TLS on with verification — `verify-full`, or
//! `verify-ca` with `verify_hostname: false` — unless the URI sets `sslmode` itself, which
//! is then honoured (as are all its other parameters). The client certificate comes from
//! `ssl_certificate_chain_location` (leaf first, then the chain), `ssl_client_pem` or
//! `ssl_client_location`; its key from `ssl_client_key` or `ssl_client_key_location`.
//! Settings that contradict each other (a CA in both the URI and the JSON,
//! `verify_hostname: false` with `sslmode=verify-full`) are errors, not guesses. Feldera's
//! connector has no field for SCRAM channel binding: set `channel_binding` in the URI.
//!
//! Feldera's `streaming_ack_hold_ms`, `discard_shutdown_errors` and `discard_table_errors`
//! are accepted so a Feldera configuration deserializes unchanged; pgcdc's acknowledgement
//! follows `commit_mode` instead, so they have no effect. Unknown fields are errors.

use std::path::PathBuf;
use std::time::Duration;

use cdc_core::{BatchLimits, CommitMode, Error};
use serde::Deserialize;

use super::config::{PemSource, SnapshotMode, SourceConfig, SslMode, Streaming, TableRef};
use super::conninfo;
use super::secret::Secret;

/// The serde form of [`SourceConfig`] (see the module documentation).
///
/// `Debug` never shows the connection string (it may hold a password) or the inline
/// private key: both are [`Secret`]s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfigJson {
    /// libpq connection string, URI or key=value form (Feldera: `uri`).
    pub uri: Secret,
    /// The publication's exact name.
    pub publication: String,
    /// One table, schema-qualified (Feldera's field).
    #[serde(default)]
    pub source_table: Option<String>,
    /// Several tables, schema-qualified (pgcdc). With `source_table`, both are used.
    #[serde(default)]
    pub tables: Vec<String>,
    /// CA certificates, PEM text.
    #[serde(default)]
    pub ssl_ca_pem: Option<String>,
    /// File with CA certificates, PEM.
    #[serde(default)]
    pub ssl_ca_location: Option<String>,
    /// Client certificate, PEM text.
    #[serde(default)]
    pub ssl_client_pem: Option<String>,
    /// File with the client certificate, PEM.
    #[serde(default)]
    pub ssl_client_location: Option<String>,
    /// Client private key, PEM text.
    #[serde(default)]
    pub ssl_client_key: Option<Secret>,
    /// File with the client private key, PEM.
    #[serde(default)]
    pub ssl_client_key_location: Option<String>,
    /// File with the client certificate chain, leaf first.
    #[serde(default)]
    pub ssl_certificate_chain_location: Option<String>,
    /// Whether to check the host name (default true).
    #[serde(default)]
    pub verify_hostname: Option<bool>,
    /// Accepted for Feldera compatibility; no effect.
    #[serde(default)]
    pub streaming_ack_hold_ms: Option<u64>,
    /// Accepted for Feldera compatibility; no effect.
    #[serde(default)]
    pub discard_shutdown_errors: Option<bool>,
    /// Accepted for Feldera compatibility; no effect.
    #[serde(default)]
    pub discard_table_errors: Option<bool>,
    /// Replication slot name; default derived from host, port, database and publication.
    #[serde(default)]
    pub slot: Option<String>,
    /// `online` (default), `initial` (alias `consistent`), `initial_only` (copy, then
    /// stop) or `never`.
    #[serde(default)]
    pub snapshot: SnapshotMode,
    /// `checkpoint` (default) or `completion`.
    #[serde(default)]
    pub commit_mode: Option<String>,
    /// Batch limit: events (default 10000).
    #[serde(default)]
    pub max_batch_events: Option<usize>,
    /// Batch limit: approximate bytes (default 8 MiB).
    #[serde(default)]
    pub max_batch_bytes: Option<usize>,
    /// Batch limit: milliseconds the first event waits (default 100).
    #[serde(default)]
    pub max_batch_latency_ms: Option<u64>,
    /// Streaming of large in-progress transactions: `auto` (default: `parallel` on
    /// PostgreSQL 16+, `on` on 14 and 15), `off`, `on` or `parallel`.
    #[serde(default)]
    pub streaming: Streaming,
    /// Decode prepared transactions at PREPARE (PostgreSQL 15+); they are delivered at
    /// COMMIT PREPARED either way (default false).
    #[serde(default)]
    pub two_phase: bool,
    /// Create the slot as a failover slot (PostgreSQL 17+; default false).
    #[serde(default)]
    pub failover: bool,
}

fn parse_commit_mode(text: &str) -> Result<CommitMode, Error> {
    match text {
        "checkpoint" => Ok(CommitMode::Checkpoint),
        "completion" => Ok(CommitMode::Completion),
        other => Err(Error::config(format!(
            "invalid commit_mode {other:?}: expected \"checkpoint\" (default) or \"completion\""
        ))),
    }
}

/// PEM text if given, else the file.
fn pem_or_file(pem: &Option<String>, file: &Option<String>, what: &str) -> Option<PemSource> {
    match (pem, file) {
        (Some(pem), Some(_)) => {
            tracing::warn!("both {what} PEM text and location are set; using the PEM text");
            Some(PemSource::Inline(pem.clone()))
        }
        (Some(pem), None) => Some(PemSource::Inline(pem.clone())),
        (None, Some(file)) => Some(PemSource::File(PathBuf::from(file))),
        (None, None) => None,
    }
}

fn uri_sets(pairs: &[(String, String)], key: &str) -> bool {
    pairs.iter().any(|(k, v)| k == key && !v.is_empty())
}

impl TryFrom<SourceConfigJson> for SourceConfig {
    type Error = Error;

    fn try_from(json: SourceConfigJson) -> Result<Self, Error> {
        let pairs = conninfo::parse_pairs(json.uri.expose())?;
        let mut connection = conninfo::parse(json.uri.expose())?;

        let ca = pem_or_file(&json.ssl_ca_pem, &json.ssl_ca_location, "CA (ssl_ca_*)");
        if let Some(ca) = ca {
            if uri_sets(&pairs, "sslrootcert") {
                return Err(Error::config(
                    "the CA is set twice: by sslrootcert in the uri and by ssl_ca_pem/ssl_ca_location; keep one",
                ));
            }
            connection.tls.root_cert = Some(ca);
            if !uri_sets(&pairs, "sslmode") {
                connection.tls.mode = if json.verify_hostname == Some(false) {
                    SslMode::VerifyCa
                } else {
                    SslMode::VerifyFull
                };
            }
        }
        if json.verify_hostname == Some(false) && connection.tls.mode == SslMode::VerifyFull {
            return Err(Error::config(
                "verify_hostname is false but the uri asks for sslmode=verify-full, which checks the host name; use sslmode=verify-ca or drop verify_hostname",
            ));
        }

        let client_cert = match &json.ssl_certificate_chain_location {
            Some(chain) => Some(PemSource::File(PathBuf::from(chain))),
            None => pem_or_file(
                &json.ssl_client_pem,
                &json.ssl_client_location,
                "client certificate (ssl_client_*)",
            ),
        };
        let client_key = pem_or_file(
            &json.ssl_client_key.clone().map(Secret::into_exposed),
            &json.ssl_client_key_location,
            "client key (ssl_client_key*)",
        );
        if client_cert.is_some() || client_key.is_some() {
            if uri_sets(&pairs, "sslcert") || uri_sets(&pairs, "sslkey") {
                return Err(Error::config(
                    "the client certificate is set twice: by sslcert/sslkey in the uri and by the ssl_client_* fields; keep one",
                ));
            }
            connection.tls.client_cert = client_cert;
            connection.tls.client_key = client_key;
        }

        let mut tables = Vec::new();
        for name in json.source_table.iter().chain(json.tables.iter()) {
            let table = TableRef::parse(name)?;
            if !tables.contains(&table) {
                tables.push(table);
            }
        }

        let mut batch = BatchLimits::default();
        batch.max_events = json.max_batch_events.unwrap_or(batch.max_events);
        batch.max_bytes = json.max_batch_bytes.unwrap_or(batch.max_bytes);
        batch.max_latency = json
            .max_batch_latency_ms
            .map_or(batch.max_latency, Duration::from_millis);
        if batch.max_events == 0 || batch.max_bytes == 0 {
            return Err(Error::config(
                "max_batch_events and max_batch_bytes must be positive",
            ));
        }

        let config = SourceConfig {
            connection,
            publication: json.publication,
            slot: json.slot,
            tables,
            snapshot: json.snapshot,
            commit_mode: json
                .commit_mode
                .as_deref()
                .map_or(Ok(CommitMode::default()), parse_commit_mode)?,
            batch,
            streaming: json.streaming,
            two_phase: json.two_phase,
            failover: json.failover,
        };
        config.validate()?;
        Ok(config)
    }
}

impl SourceConfig {
    /// Parses the JSON configuration (see [`SourceConfigJson`]). Errors are Config errors.
    pub fn from_json(json: &str) -> Result<Self, Error> {
        let raw: SourceConfigJson = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("invalid source configuration: {e}")))?;
        SourceConfig::try_from(raw)
    }
}

/// Deserializes the JSON shape of Feldera's `postgres_cdc` connector ([`SourceConfigJson`]).
impl<'de> Deserialize<'de> for SourceConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = SourceConfigJson::deserialize(deserializer)?;
        SourceConfig::try_from(raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::config::Host;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<SourceConfig, Error> {
        SourceConfig::from_json(&value.to_string())
    }

    #[test]
    fn feldera_config_deserializes_unchanged() {
        let config = parse(json!({
            "uri": "postgres://cdc:p%40ss@db.example:5432/shop",
            "publication": "shop_pub",
            "source_table": "public.orders",
            "streaming_ack_hold_ms": 2000,
            "discard_shutdown_errors": true,
            "discard_table_errors": false,
        }))
        .unwrap();
        assert_eq!(config.connection.password.as_deref(), Some("p@ss"));
        assert_eq!(config.connection.host, Host::Tcp("db.example".into()));
        assert_eq!(
            config.tables,
            vec![TableRef::parse("public.orders").unwrap()]
        );
        assert_eq!(config.connection.tls.mode, SslMode::Prefer);
        assert_eq!(config.snapshot, SnapshotMode::Online);
        assert_eq!(config.commit_mode, CommitMode::Checkpoint);
        assert_eq!(config.streaming, Streaming::Auto);
        assert!(!config.two_phase);
        assert!(config.slot_name().starts_with("pgcdc_"));
    }

    #[test]
    fn a_ca_turns_on_verification() {
        let config = parse(json!({
            "uri": "postgres://u@db/shop",
            "publication": "p",
            "source_table": "public.t",
            "ssl_ca_pem": "-----BEGIN CERTIFICATE-----",
        }))
        .unwrap();
        assert_eq!(config.connection.tls.mode, SslMode::VerifyFull);
        assert!(matches!(
            config.connection.tls.root_cert,
            Some(PemSource::Inline(_))
        ));

        let config = parse(json!({
            "uri": "postgres://u@db/shop",
            "publication": "p",
            "source_table": "public.t",
            "ssl_ca_location": "/etc/ca.pem",
            "verify_hostname": false,
        }))
        .unwrap();
        assert_eq!(config.connection.tls.mode, SslMode::VerifyCa);
        assert_eq!(
            config.connection.tls.root_cert,
            Some(PemSource::File("/etc/ca.pem".into()))
        );
    }

    #[test]
    fn uri_sslmode_and_parameters_are_honoured() {
        let config = parse(json!({
            "uri": "postgres://u@db/shop?sslmode=require&application_name=feldera&connect_timeout=5",
            "publication": "p",
            "source_table": "public.t",
            "ssl_ca_pem": "-----BEGIN CERTIFICATE-----",
        }))
        .unwrap();
        assert_eq!(config.connection.tls.mode, SslMode::Require);
        assert_eq!(
            config.connection.application_name.as_deref(),
            Some("feldera")
        );
        assert_eq!(
            config.connection.connect_timeout,
            Some(Duration::from_secs(5))
        );
        let config = parse(json!({
            "uri": "postgres://u@db/shop?sslmode=disable",
            "publication": "p",
            "source_table": "public.t",
        }))
        .unwrap();
        assert_eq!(config.connection.tls.mode, SslMode::Disable);
    }

    #[test]
    fn channel_binding_comes_from_the_uri() {
        use crate::conn::config::ChannelBinding;
        let config = parse(json!({
            "uri": "postgres://u@db/shop?sslmode=require&channel_binding=require",
            "publication": "p",
            "source_table": "public.t",
        }))
        .unwrap();
        assert_eq!(
            config.connection.tls.channel_binding,
            ChannelBinding::Require
        );
        assert!(
            parse(json!({
                "uri": "postgres://u@db/shop",
                "publication": "p",
                "channel_binding": "require",
            }))
            .is_err()
        );
    }

    #[test]
    fn client_certificates_come_through() {
        let config = parse(json!({
            "uri": "postgres://u@db/shop",
            "publication": "p",
            "source_table": "public.t",
            "ssl_ca_location": "/ca.pem",
            "ssl_client_pem": "CERT",
            "ssl_client_key_location": "/key.pem",
        }))
        .unwrap();
        assert_eq!(
            config.connection.tls.client_cert,
            Some(PemSource::Inline("CERT".into()))
        );
        assert_eq!(
            config.connection.tls.client_key,
            Some(PemSource::File("/key.pem".into()))
        );
        let config = parse(json!({
            "uri": "postgres://u@db/shop",
            "publication": "p",
            "source_table": "public.t",
            "ssl_ca_location": "/ca.pem",
            "ssl_certificate_chain_location": "/chain.pem",
            "ssl_client_key": "KEY",
        }))
        .unwrap();
        assert_eq!(
            config.connection.tls.client_cert,
            Some(PemSource::File("/chain.pem".into()))
        );
        let err = parse(json!({
            "uri": "postgres://u@db/shop",
            "publication": "p",
            "ssl_client_pem": "CERT",
        }))
        .unwrap_err();
        assert!(err.message().contains("sslkey"), "{err}");
    }

    #[test]
    fn our_options_sit_beside_feldera_fields() {
        let config = parse(json!({
            "uri": "host=db user=u dbname=shop",
            "publication": "p",
            "source_table": "public.a",
            "tables": ["public.b", "public.a"],
            "slot": "shop_slot",
            "snapshot": "never",
            "commit_mode": "completion",
            "max_batch_events": 10,
            "max_batch_latency_ms": 5,
            "streaming": "on",
            "two_phase": true,
        }))
        .unwrap();
        assert_eq!(config.streaming, Streaming::On);
        assert!(config.two_phase);
        assert_eq!(config.tables.len(), 2);
        assert_eq!(config.slot_name(), "shop_slot");
        assert_eq!(config.snapshot, SnapshotMode::Never);
        assert_eq!(config.commit_mode, CommitMode::Completion);
        assert_eq!(config.batch.max_events, 10);
        assert_eq!(config.batch.max_latency, Duration::from_millis(5));
    }

    #[test]
    fn every_snapshot_spelling_parses() {
        for (text, mode) in [
            ("online", SnapshotMode::Online),
            ("initial", SnapshotMode::Initial),
            ("consistent", SnapshotMode::Initial),
            ("initial_only", SnapshotMode::InitialOnly),
            ("never", SnapshotMode::Never),
        ] {
            let config =
                parse(json!({"uri": "host=db user=u", "publication": "p", "snapshot": text}))
                    .unwrap();
            assert_eq!(config.snapshot, mode, "{text}");
        }
    }

    #[test]
    fn contradictions_and_unknown_fields_are_errors() {
        for bad in [
            json!({"uri": "postgres://u@db/s?sslrootcert=/a.pem", "publication": "p", "ssl_ca_pem": "X"}),
            json!({"uri": "postgres://u@db/s?sslmode=verify-full", "publication": "p", "ssl_ca_pem": "X", "verify_hostname": false}),
            json!({"uri": "postgres://u@db/s", "publication": "p", "sourcetable": "public.t"}),
            json!({"uri": "postgres://u@db/s", "publication": "p", "commit_mode": "fast"}),
            json!({"uri": "postgres://u@db/s", "publication": "p", "snapshot": "sometimes"}),
            json!({"uri": "postgres://u@db/s", "publication": "p", "streaming": "yes"}),
            json!({"uri": "postgres://u@db/s", "publication": "p", "two_phase": "true"}),
            json!({"uri": "postgres://u@db/s", "publication": "p", "slot": "Bad-Slot"}),
            json!({"uri": "postgres://u@db/s?bogus=1", "publication": "p"}),
            json!({"uri": "postgres://u@db/s", "publication": ""}),
            json!({"uri": "postgres://u@db/s", "publication": "p", "source_table": "a.b.c"}),
            json!({"publication": "p"}),
        ] {
            let err = parse(bad.clone()).unwrap_err();
            assert_eq!(err.kind(), cdc_core::ErrorKind::Config, "{bad}: {err}");
        }
    }
}
