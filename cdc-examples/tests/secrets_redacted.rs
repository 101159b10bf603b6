//! No `Debug` output of a configuration contains a secret: every type that can hold a
//! password or a private key — the library's configurations and the command line's
//! argument structs — is built with a distinctive password and inline key, formatted with
//! `{:?}` and `{:#?}`, and searched for them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Debug;

use cdc_examples::cli::Cli;
use cdc_postgres::conn::pgpass::PassFile;
use cdc_postgres::conn::{
    ChannelBinding, ConnectionConfig, PemSource, PgEnv, SourceConfig, SourceConfigJson, SslMode,
    TlsConfig,
};
use cdc_postgres::source::PgSourceOptions;
use clap::Parser;

/// Only RFC 3986 unreserved characters, so its URI form is the password itself and a
/// search for it cannot miss an encoded copy.
const PASSWORD: &str = "Tr0ub4dor-Zq7-horse";
/// The distinctive part of the inline private key.
const KEY_BODY: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDSecretKeyZq7";

fn private_key() -> String {
    format!("-----BEGIN PRIVATE KEY-----\n{KEY_BODY}\n-----END PRIVATE KEY-----\n")
}

fn uri() -> String {
    format!("postgres://cdc:{PASSWORD}@db.example:5432/shop?sslmode=require")
}

fn key_value() -> String {
    format!("host=db.example port=5432 dbname=shop user=cdc password='{PASSWORD}'")
}

/// Asserts neither `{:?}` nor `{:#?}` of `value` shows the password, a part of it, or the
/// key; returns the compact form (for checks that something *is* shown).
#[track_caller]
fn assert_redacted(what: &str, value: &impl Debug) -> String {
    let compact = format!("{value:?}");
    let pretty = format!("{value:#?}");
    for text in [&compact, &pretty] {
        for secret in [PASSWORD, "Tr0ub4dor", "horse", KEY_BODY, "SecretKey"] {
            assert!(
                !text.contains(secret),
                "{what}: Debug shows {secret:?}:\n{text}"
            );
        }
    }
    compact
}

#[test]
fn connection_and_source_configs_redact_the_password() {
    for conninfo in [uri(), key_value()] {
        let connection = ConnectionConfig::parse(&conninfo).unwrap();
        assert_eq!(connection.password.as_deref(), Some(PASSWORD));
        let shown = assert_redacted("ConnectionConfig", &connection);
        assert!(shown.contains("db.example"), "still useful: {shown}");

        let source = SourceConfig::new(&conninfo, "pub").unwrap();
        assert_redacted("SourceConfig", &source);
        assert_redacted("PgSourceOptions", &PgSourceOptions::new(source));
    }
}

#[test]
fn tls_settings_redact_inline_keys() {
    let tls = TlsConfig {
        mode: SslMode::VerifyFull,
        root_cert: Some(PemSource::File("/etc/ca.pem".into())),
        client_cert: Some(PemSource::Inline("-----BEGIN CERTIFICATE-----".into())),
        client_key: Some(PemSource::Inline(private_key())),
        channel_binding: ChannelBinding::Require,
    };
    let shown = assert_redacted("TlsConfig", &tls);
    assert!(shown.contains("/etc/ca.pem"), "paths are shown: {shown}");
    assert_redacted("PemSource", &PemSource::Inline(private_key()));
}

#[test]
fn the_json_configuration_redacts_uri_and_inline_key() {
    for conninfo in [uri(), key_value()] {
        let json = serde_json::json!({
            "uri": conninfo,
            "publication": "pub",
            "source_table": "public.orders",
            "ssl_ca_pem": "-----BEGIN CERTIFICATE-----",
            "ssl_client_pem": "-----BEGIN CERTIFICATE-----",
            "ssl_client_key": private_key(),
        })
        .to_string();
        let raw: SourceConfigJson = serde_json::from_str(&json).unwrap();
        let shown = assert_redacted("SourceConfigJson", &raw);
        assert!(shown.contains("public.orders"), "still useful: {shown}");
        let config = SourceConfig::from_json(&json).unwrap();
        assert!(matches!(
            config.connection.tls.client_key,
            Some(PemSource::Inline(_))
        ));
        assert_redacted("SourceConfig (from JSON)", &config);
    }
}

#[test]
fn command_line_arguments_redact_the_connection_string() {
    for conninfo in [uri(), key_value()] {
        let c = conninfo.as_str();
        let argvs: [&[&str]; 6] = [
            &["pgcdc", "stream", "--uri", c, "--publication", "p"],
            &["pgcdc", "check", "--uri", c, "--publication", "p"],
            &["pgcdc", "slots", "--uri", c],
            &["pgcdc", "drop-slot", "s", "--uri", c],
            &["pgcdc", "demo", "--uri", c],
            &[
                "pgcdc",
                "--quiet",
                "stream",
                "--publication=p",
                &format!("--uri={c}"),
            ],
        ];
        for argv in argvs {
            let cli = Cli::try_parse_from(argv).unwrap();
            assert_redacted(argv[1], &cli);
            assert_redacted(argv[1], &cli.command);
        }
    }
}

#[test]
fn the_environment_redacts_pgpassword_and_the_password_file() {
    let pass_file = format!("db.example:5432:shop:cdc:{PASSWORD}\n");
    let env = PgEnv::new()
        .with_var("PGPASSWORD", PASSWORD)
        .unwrap()
        .with_var("PGHOST", "db.example")
        .unwrap()
        .with_pass_file(&pass_file);
    let shown = assert_redacted("PgEnv", &env);
    assert!(shown.contains("db.example"), "still useful: {shown}");
    assert_redacted("PassFile", &PassFile::parse(&pass_file));
    let env = PgEnv::new()
        .with_var("PGUSER", "cdc")
        .unwrap()
        .with_pass_file(&pass_file);
    let connection = ConnectionConfig::parse_with_env("host=db.example dbname=shop", &env).unwrap();
    assert_eq!(connection.password.as_deref(), Some(PASSWORD));
    assert_redacted("ConnectionConfig (from the password file)", &connection);
}
