//! Parsing libpq connection strings, URI and key=value form, into a [`ConnectionConfig`].
//!
//! URI form: `postgres[ql]://[user[:password]@][host][:port][/dbname][?param=value&...]`.
//! User, password, host, database and every parameter name and value are percent-decoded
//! (a `%` must be followed by two hex digits; `%00` and invalid UTF-8 are rejected). An
//! IPv6 host is written in brackets (`[::1]`). A host that decodes to an absolute path
//! (`postgres://%2Ftmp%2Fpg/db`, or `?host=/tmp/pg`) is a Unix socket directory.
//!
//! key=value form: `key = value` pairs separated by whitespace. A value containing spaces,
//! or an empty value, is written in single quotes; inside or outside quotes, `\'` and `\\`
//! stand for `'` and `\`.
//!
//! Supported parameters: see [`SUPPORTED_PARAMETERS`]. Anything else is a Config error that
//! lists them — an ignored parameter (`sslmode` above all) would silently change what the
//! user asked for. Later occurrences of a parameter override earlier ones, as in libpq.
//! Environment variables (`PGHOST`, ...) and files (`~/.pgpass`, `~/.postgresql/`) are not
//! consulted: the configuration says everything.
//!
//! Not supported, with an error that says so: several hosts (`host=a,b`) and
//! `sslrootcert=system`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use cdc_core::{BatchLimits, CommitMode, Error, Result};
use percent_encoding::percent_decode_str;

use super::config::{
    ConnectionConfig, DEFAULT_HOST, DEFAULT_PORT, Host, PemSource, SnapshotMode, SourceConfig,
    TlsConfig,
};

/// The parameters a connection string may contain.
pub const SUPPORTED_PARAMETERS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "channel_binding",
    "application_name",
    "connect_timeout",
    "options",
];

/// Parses a connection string in either form without the cross-parameter checks of
/// [`ConnectionConfig::validate`] (callers that merge further settings validate after).
pub fn parse(conninfo: &str) -> Result<ConnectionConfig> {
    let pairs = parse_pairs(conninfo)?;
    build(pairs)
}

/// Splits a connection string into decoded `(key, value)` pairs, in order, without
/// interpreting them.
pub fn parse_pairs(conninfo: &str) -> Result<Vec<(String, String)>> {
    let trimmed = conninfo.trim_start();
    if let Some(rest) = trimmed
        .strip_prefix("postgresql://")
        .or_else(|| trimmed.strip_prefix("postgres://"))
    {
        parse_uri(rest)
    } else {
        parse_key_value(conninfo)
    }
}

fn config_error(message: impl Into<String>) -> Error {
    Error::config(message)
}

/// Percent-decodes one URI component.
fn decode(component: &str, what: &str) -> Result<String> {
    let bytes = component.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
            match hex {
                None => {
                    return Err(config_error(format!(
                        "invalid percent-encoding in the {what} of the connection URI: '%' must be followed by two hexadecimal digits (write '%25' for a literal '%')"
                    )));
                }
                Some(h) if h == b"00" => {
                    return Err(config_error(format!(
                        "forbidden %00 in the {what} of the connection URI"
                    )));
                }
                Some(_) => i += 3,
            }
        } else {
            i += 1;
        }
    }
    percent_decode_str(component)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            config_error(format!(
                "the {what} of the connection URI is not valid UTF-8 after percent-decoding"
            ))
        })
}

/// Parses the part after `postgres://`.
fn parse_uri(rest: &str) -> Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    // Credentials end at the last '@' before the first '/' or '?': a raw '/' or '?' inside
    // a password must be percent-encoded (a raw '@' happens to work, but encode it too).
    let netloc_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let mut remaining = rest;
    if let Some(at) = rest[..netloc_end].rfind('@') {
        let userinfo = &rest[..at];
        remaining = &rest[at + 1..];
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (userinfo, None),
        };
        if !user.is_empty() {
            pairs.push(("user".to_owned(), decode(user, "user name")?));
        }
        if let Some(p) = password {
            pairs.push(("password".to_owned(), decode(p, "password")?));
        }
    }

    // Host and port.
    let hostport_end = remaining.find(['/', '?']).unwrap_or(remaining.len());
    let hostport = &remaining[..hostport_end];
    remaining = &remaining[hostport_end..];
    if hostport.contains(',') {
        return Err(multiple_hosts());
    }
    let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
        let (addr, after) = bracketed.split_once(']').ok_or_else(|| {
            config_error("unterminated IPv6 address in the connection URI: expected ']'")
        })?;
        if addr.is_empty() {
            return Err(config_error("empty IPv6 address in the connection URI"));
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| {
                config_error(format!(
                    "unexpected {p:?} after the IPv6 address in the connection URI"
                ))
            })?),
        };
        (addr.to_owned(), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (decode(h, "host")?, Some(p)),
            None => (decode(hostport, "host")?, None),
        }
    };
    if !host.is_empty() {
        pairs.push(("host".to_owned(), host));
    }
    if let Some(port) = port {
        pairs.push(("port".to_owned(), decode(port, "port")?));
    }

    // Database.
    if let Some(path) = remaining.strip_prefix('/') {
        let end = path.find('?').unwrap_or(path.len());
        let dbname = &path[..end];
        if !dbname.is_empty() {
            pairs.push(("dbname".to_owned(), decode(dbname, "database name")?));
        }
        remaining = &path[end..];
    }

    // Parameters.
    if let Some(query) = remaining.strip_prefix('?') {
        for param in query.split('&') {
            if param.is_empty() {
                continue;
            }
            let (key, value) = param.split_once('=').ok_or_else(|| {
                config_error(format!(
                    "connection URI parameter {param:?} has no value: expected name=value"
                ))
            })?;
            if value.contains('=') {
                return Err(config_error(format!(
                    "connection URI parameter {key:?} contains a second '=': percent-encode it as %3D"
                )));
            }
            pairs.push((
                decode(key, "parameter name")?,
                decode(value, "parameter value")?,
            ));
        }
    } else if !remaining.is_empty() {
        return Err(config_error(format!(
            "unexpected {remaining:?} in the connection URI"
        )));
    }
    Ok(pairs)
}

/// Parses `key = value` pairs.
fn parse_key_value(conninfo: &str) -> Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(config_error(format!(
                "missing \"=\" after {key:?} in the connection string (expected key=value pairs or a postgres:// URI)"
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => {
                        return Err(config_error(format!(
                            "unterminated quoted value of {key:?} in the connection string"
                        )));
                    }
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => {
                            return Err(config_error(format!(
                                "unterminated quoted value of {key:?} in the connection string"
                            )));
                        }
                    },
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

fn multiple_hosts() -> Error {
    config_error(
        "several hosts in one connection string (host=a,b) are not supported: a replication slot lives on one server; name exactly one host",
    )
}

fn unknown_parameter(key: &str) -> Error {
    config_error(format!(
        "unknown connection parameter {key:?}; supported parameters are: {}",
        SUPPORTED_PARAMETERS.join(", ")
    ))
}

fn non_empty(key: &str, value: String) -> Result<Option<String>> {
    if value.contains('\0') {
        return Err(config_error(format!(
            "connection parameter {key} contains a NUL character"
        )));
    }
    Ok((!value.is_empty()).then_some(value))
}

/// Interprets the pairs. Later pairs override earlier ones.
fn build(pairs: Vec<(String, String)>) -> Result<ConnectionConfig> {
    let mut host: Option<String> = None;
    let mut hostaddr: Option<IpAddr> = None;
    let mut port = DEFAULT_PORT;
    let mut dbname = None;
    let mut user = None;
    let mut password = None;
    let mut tls = TlsConfig::default();
    let mut application_name = None;
    let mut connect_timeout = None;
    let mut options = None;

    for (key, value) in pairs {
        match key.as_str() {
            "host" => {
                if value.contains(',') {
                    return Err(multiple_hosts());
                }
                host = non_empty("host", value)?;
            }
            "hostaddr" => {
                if value.contains(',') {
                    return Err(multiple_hosts());
                }
                hostaddr = match non_empty("hostaddr", value)? {
                    None => None,
                    Some(v) => Some(v.parse().map_err(|_| {
                        config_error(format!(
                            "invalid hostaddr {v:?}: expected a numeric IPv4 or IPv6 address"
                        ))
                    })?),
                };
            }
            "port" => {
                if value.contains(',') {
                    return Err(multiple_hosts());
                }
                port = match value.trim() {
                    "" => DEFAULT_PORT,
                    v => v.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                        config_error(format!(
                            "invalid port {v:?}: expected a number from 1 to 65535"
                        ))
                    })?,
                };
            }
            "dbname" => dbname = non_empty("dbname", value)?,
            "user" => user = non_empty("user", value)?,
            "password" => {
                // An empty password is a password (the server decides), unlike other keys.
                if value.contains('\0') {
                    return Err(config_error("the password contains a NUL character"));
                }
                password = Some(value);
            }
            "sslmode" => tls.mode = value.parse()?,
            "sslrootcert" => {
                tls.root_cert = match non_empty("sslrootcert", value)? {
                    Some(v) if v == "system" => {
                        return Err(config_error(
                            "sslrootcert=system (the operating system's trust store) is not supported: point sslrootcert at a PEM file with the CA certificate(s)",
                        ));
                    }
                    v => v.map(|p| PemSource::File(PathBuf::from(p))),
                }
            }
            "sslcert" => {
                tls.client_cert = non_empty("sslcert", value)?.map(|p| PemSource::File(p.into()))
            }
            "sslkey" => {
                tls.client_key = non_empty("sslkey", value)?.map(|p| PemSource::File(p.into()))
            }
            "channel_binding" => tls.channel_binding = value.parse()?,
            "application_name" => application_name = non_empty("application_name", value)?,
            "connect_timeout" => connect_timeout = parse_connect_timeout(&value)?,
            "options" => options = non_empty("options", value)?,
            other => return Err(unknown_parameter(other)),
        }
    }

    let user = user.ok_or_else(|| {
        config_error("the connection string names no user: add user=... (or user@ in a URI)")
    })?;
    let host = match (host, hostaddr) {
        (Some(h), _) if h.starts_with('/') => Host::Unix(PathBuf::from(h)),
        (Some(h), _) => Host::Tcp(h),
        // Only hostaddr: it is also the name TLS verifies against, as in libpq.
        (None, Some(addr)) => Host::Tcp(addr.to_string()),
        (None, None) => Host::Tcp(DEFAULT_HOST.to_owned()),
    };
    Ok(ConnectionConfig {
        host,
        hostaddr,
        port,
        dbname: dbname.unwrap_or_else(|| user.clone()),
        user,
        password,
        tls,
        application_name,
        connect_timeout,
        options,
    })
}

/// libpq's `connect_timeout`: whole seconds; zero or negative means no timeout; values
/// below 2 are raised to 2 seconds.
fn parse_connect_timeout(value: &str) -> Result<Option<Duration>> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    let seconds: i64 = trimmed.parse().map_err(|_| {
        config_error(format!(
            "invalid connect_timeout {value:?}: expected a whole number of seconds"
        ))
    })?;
    Ok(match seconds {
        s if s <= 0 => None,
        1 => Some(Duration::from_secs(2)),
        s => Some(Duration::from_secs(s.unsigned_abs())),
    })
}

impl ConnectionConfig {
    /// Parses a libpq connection string, in URI form
    /// (`postgres://user:p%40ss@host:5432/db?sslmode=verify-full`) or key=value form
    /// (`host=db user=alice password='it\'s'`), and checks it ([`ConnectionConfig::validate`]).
    ///
    /// Every error is [`cdc_core::ErrorKind::Config`] and names the offending parameter;
    /// unknown parameters are errors that list the supported ones.
    pub fn parse(conninfo: &str) -> Result<Self> {
        let config = parse(conninfo)?;
        config.validate()?;
        Ok(config)
    }
}

impl FromStr for ConnectionConfig {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ConnectionConfig::parse(s)
    }
}

impl SourceConfig {
    /// A configuration for `conninfo` (libpq URI or key=value form) and `publication`, with
    /// no table filter (every table of the publication), the derived slot name, an initial
    /// snapshot, checkpoint commit mode and default batch limits.
    pub fn new(conninfo: &str, publication: impl Into<String>) -> Result<Self> {
        let config = SourceConfig {
            connection: ConnectionConfig::parse(conninfo)?,
            publication: publication.into(),
            slot: None,
            tables: Vec::new(),
            snapshot: SnapshotMode::default(),
            commit_mode: CommitMode::default(),
            batch: BatchLimits::default(),
        };
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::config::SslMode;
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    use proptest::prelude::*;

    fn parse_ok(s: &str) -> ConnectionConfig {
        match parse(s) {
            Ok(c) => c,
            Err(e) => panic!("{s:?}: {e}"),
        }
    }

    #[test]
    fn uri_with_everything() {
        let c = parse_ok(
            "postgres://alice:p%40ss@db.example:6432/shop?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x&connect_timeout=10&options=-c%20a%3Db",
        );
        assert_eq!(c.user, "alice");
        assert_eq!(c.password.as_deref(), Some("p@ss"));
        assert_eq!(c.host, Host::Tcp("db.example".into()));
        assert_eq!(c.port, 6432);
        assert_eq!(c.dbname, "shop");
        assert_eq!(c.tls.mode, SslMode::VerifyFull);
        assert_eq!(c.tls.root_cert, Some(PemSource::File("/ca.pem".into())));
        assert_eq!(c.application_name.as_deref(), Some("x"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(10)));
        assert_eq!(c.options.as_deref(), Some("-c a=b"));
    }

    #[test]
    fn uri_defaults() {
        let c = parse_ok("postgresql://bob@/");
        assert_eq!(c.host, Host::Tcp(DEFAULT_HOST.into()));
        assert_eq!(c.port, DEFAULT_PORT);
        assert_eq!(c.dbname, "bob");
        assert_eq!(c.password, None);
        assert_eq!(c.tls.mode, SslMode::Prefer);
    }

    #[test]
    fn password_with_reserved_and_non_ascii_characters() {
        let c = parse_ok("postgres://u:%40%3A%2F%25%C3%A9%E2%82%AC@h/db");
        assert_eq!(c.password.as_deref(), Some("@:/%é€"));
        // Raw non-ASCII is accepted as is.
        assert_eq!(
            parse_ok("postgres://u:é€@h/db").password.as_deref(),
            Some("é€")
        );
        // An empty password is kept (the server decides), unlike an absent one.
        assert_eq!(parse_ok("postgres://u:@h/db").password.as_deref(), Some(""));
    }

    #[test]
    fn unix_socket_hosts() {
        for s in [
            "postgres://u@%2Ftmp%2Fpg dir/db",
            "postgres://u@/db?host=/tmp/pg%20dir",
            "host='/tmp/pg dir' user=u dbname=db",
        ] {
            let c = parse_ok(s);
            assert_eq!(c.host, Host::Unix("/tmp/pg dir".into()), "{s}");
            assert!(c.is_unix_socket());
        }
    }

    #[test]
    fn ipv6_and_hostaddr() {
        let c = parse_ok("postgres://u@[::1]:5433/db");
        assert_eq!(c.host, Host::Tcp("::1".into()));
        assert_eq!(c.port, 5433);
        let c = parse_ok("hostaddr=10.0.0.5 user=u");
        assert_eq!(c.hostaddr, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(c.host, Host::Tcp("10.0.0.5".into()));
        let c = parse_ok("host=db.example hostaddr=10.0.0.5 user=u");
        assert_eq!(c.host, Host::Tcp("db.example".into()));
        assert!(parse("hostaddr=db.example user=u").is_err());
    }

    #[test]
    fn key_value_quoting_and_escapes() {
        let c = parse_ok(
            r"host = db  user=alice password='it\'s a \\ secret' dbname=my\ db application_name=''",
        );
        assert_eq!(c.password.as_deref(), Some(r"it's a \ secret"));
        assert_eq!(c.dbname, "my db");
        assert_eq!(c.application_name, None);
        assert!(parse("host=db user=u password='open").is_err());
        let err = parse("host db user=u").unwrap_err();
        assert!(err.message().contains("missing \"=\""), "{err}");
    }

    #[test]
    fn channel_binding_in_both_forms() {
        use crate::conn::config::ChannelBinding;
        assert_eq!(
            parse_ok("postgres://u@h/db").tls.channel_binding,
            ChannelBinding::Prefer
        );
        assert_eq!(
            parse_ok("postgres://u@h/db?channel_binding=require")
                .tls
                .channel_binding,
            ChannelBinding::Require
        );
        assert_eq!(
            parse_ok("host=h user=u channel_binding=disable")
                .tls
                .channel_binding,
            ChannelBinding::Disable
        );
        let err = parse("host=h user=u channel_binding=on").unwrap_err();
        assert!(err.message().contains("channel_binding"), "{err}");
    }

    #[test]
    fn later_parameters_override_earlier_ones() {
        let c = parse_ok("postgres://u@h/db?sslmode=disable&sslmode=require");
        assert_eq!(c.tls.mode, SslMode::Require);
    }

    #[test]
    fn unknown_and_malformed_parameters_are_errors() {
        let err = parse("host=h user=u sslmod=require").unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::Config);
        assert!(
            err.message().contains("\"sslmod\"") && err.message().contains("sslrootcert"),
            "{err}"
        );
        let err = parse("postgres://u@h/db?target_session_attrs=any").unwrap_err();
        assert!(err.message().contains("target_session_attrs"), "{err}");
        for bad in [
            "postgres://u@h:99999/db",
            "postgres://u@h:0/db",
            "postgres://u@h:x/db",
            "postgres://u@h/db?sslmode=always",
            "postgres://u@h/db?connect_timeout=soon",
            "postgres://u@h/db?sslmode",
            "postgres://u:%zz@h/db",
            "postgres://u:%4@h/db",
            "postgres://u:%00@h/db",
            "postgres://u:%ff@h/db",
            "postgres://u@a,b/db",
            "host=a,b user=u",
            "postgres://u@[::1/db",
            "postgres://u@h/db?sslrootcert=system",
            "host=h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn connect_timeout_follows_libpq() {
        assert_eq!(parse_connect_timeout("0").unwrap(), None);
        assert_eq!(parse_connect_timeout("-3").unwrap(), None);
        assert_eq!(
            parse_connect_timeout("1").unwrap(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse_connect_timeout(" 7 ").unwrap(),
            Some(Duration::from_secs(7))
        );
        assert!(parse_connect_timeout("1.5").is_err());
    }

    #[test]
    fn dbname_defaults_to_user() {
        assert_eq!(parse_ok("user=carol").dbname, "carol");
    }

    proptest! {
        #[test]
        fn uri_percent_encoding_round_trips(
            user in "\\PC{1,12}",
            password in "\\PC{0,16}",
            db in "\\PC{1,12}",
            app in "\\PC{1,12}",
        ) {
            let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
            let uri = format!(
                "postgres://{}:{}@db.example:5433/{}?application_name={}",
                enc(&user), enc(&password), enc(&db), enc(&app)
            );
            let c = parse(&uri).unwrap();
            prop_assert_eq!(c.user, user);
            prop_assert_eq!(c.password, Some(password));
            prop_assert_eq!(c.dbname, db);
            prop_assert_eq!(c.application_name, Some(app));
            prop_assert_eq!(c.port, 5433);
        }

        #[test]
        fn key_value_quoting_round_trips(password in "\\PC{0,16}", db in "\\PC{1,12}") {
            let quote = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
            let kv = format!("host=h user=u password={} dbname={}", quote(&password), quote(&db));
            let c = parse(&kv).unwrap();
            prop_assert_eq!(c.password, Some(password));
            prop_assert_eq!(c.dbname, db);
        }

        #[test]
        fn arbitrary_strings_never_panic(s in "\\PC{0,64}") {
            let _ = parse(&s);
            let _ = parse(&format!("postgres://{s}"));
        }
    }
}
