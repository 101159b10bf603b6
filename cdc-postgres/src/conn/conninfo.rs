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
//! Environment variables (`PGHOST`, ...) and the password file (`~/.pgpass`) are consulted
//! only through [`ConnectionConfig::parse_with_env`] (see [`super::env`]); `~/.postgresql/`
//! never is.
//!
//! Several servers are named as in libpq: `host=a,b port=5432,5433` (one port for all,
//! or one per host; `hostaddr` one per host), or `postgres://a:5432,b:5433/db`; with
//! `target_session_attrs` (`any`, `read-write`, `primary`, `standby`) saying which one a
//! connection takes. Not supported, with an error that says so: `sslrootcert=system` and
//! the other `target_session_attrs` values.
//!
//! Errors never show any part of a password, even of one written wrongly. In a URI, a raw
//! `/` or `?` in the password ends the host part early and moves the rest of the password
//! into what looks like the port, the path or the query; so no error quotes text that may
//! hold part of one: anything before the last `@` (credentials end there: a raw `@` or `:`
//! in a password works), everything when there is no `@` but the host part has a `:`
//! (`postgres://user:password` with the host forgotten), and every query parameter after
//! `password=` (a raw `&` in it starts what looks like the next parameter). Such errors
//! name the parameter only, if it is a known one, and say how to encode the password. In
//! key=value form a password value ends at white space, so the word after it must be
//! a parameter name followed by `=`; otherwise the password had a space and was not
//! quoted, and the error names the keyword only. Words that are not parameter names
//! (`postgress://user:password@host`) are never quoted either. What no parser can tell
//! apart: a raw `@` in the password of a URI whose `@host` is missing
//! (`postgres://user:p@ss` is user `user`, password `p`, host `ss`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use cdc_core::{Error, Result};
use percent_encoding::percent_decode_str;

use super::config::{
    ConnectionConfig, DEFAULT_HOST, DEFAULT_PORT, Endpoint, Host, PemSource, SourceConfig,
    TargetSessionAttrs, TlsConfig,
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
    "target_session_attrs",
];

/// Parses a connection string in either form without the cross-parameter checks of
/// [`ConnectionConfig::validate`] (callers that merge further settings validate after).
pub fn parse(conninfo: &str) -> Result<ConnectionConfig> {
    let params = parse_params(conninfo)?;
    check_guarded(&params)?;
    build(params.into_iter().map(Param::into_pair).collect())
}

/// Parses `conninfo` like [`parse`], with `defaults` (`(parameter, value, source)`) for the
/// parameters it does not set (even to an empty value), as libpq applies its environment
/// variables. A default is checked only when it applies; its error names its source (and
/// shows the value, unless it is the password).
pub(crate) fn parse_with_defaults(
    conninfo: &str,
    defaults: &[(&str, &str, &str)],
) -> Result<ConnectionConfig> {
    let params = parse_params(conninfo)?;
    check_guarded(&params)?;
    let mut pairs = Vec::new();
    for &(key, value, source) in defaults {
        if params.iter().any(|p| p.key == key) {
            continue;
        }
        let alone = vec![
            ("user".to_owned(), "-".to_owned()),
            (key.to_owned(), value.to_owned()),
        ];
        if let Err(e) = build(alone) {
            return Err(config_error(if key == "password" {
                format!("{source} is not a valid password (the value is not shown)")
            } else {
                format!("{source}: {}", e.message())
            }));
        }
        pairs.push((key.to_owned(), value.to_owned()));
    }
    // Earlier pairs are overridden by later ones: the connection string's come last.
    pairs.extend(params.into_iter().map(Param::into_pair));
    build(pairs)
}

/// Splits a connection string into decoded `(key, value)` pairs, in order, without
/// interpreting them.
pub fn parse_pairs(conninfo: &str) -> Result<Vec<(String, String)>> {
    Ok(parse_params(conninfo)?
        .into_iter()
        .map(Param::into_pair)
        .collect())
}

/// One decoded parameter of a connection string.
#[derive(Debug)]
struct Param {
    key: String,
    value: String,
    /// Its text may be part of a password written wrongly (see the module documentation):
    /// an error about it must show neither its value nor, unless it is a known parameter,
    /// its name.
    guarded: bool,
}

impl Param {
    fn new(key: &str, value: String, guarded: bool) -> Self {
        Param {
            key: key.to_owned(),
            value,
            guarded,
        }
    }

    fn into_pair(self) -> (String, String) {
        (self.key, self.value)
    }
}

fn parse_params(conninfo: &str) -> Result<Vec<Param>> {
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

/// What an error about a guarded parameter (only URIs have them) says instead of showing
/// it.
const GUARDED_HINT: &str = "not shown, as it may be part of the password: in a URI the credentials end at the '@' before the host, and a password's '/', '?', '%' and '&' are written %2F, %3F, %25 and %26";

/// `build` quotes the values it rejects and the names it does not know. A guarded
/// parameter is first checked on its own, so that its error can be replaced by one that
/// shows nothing of it. (Each of `build`'s checks of one parameter depends on that
/// parameter alone.)
fn check_guarded(params: &[Param]) -> Result<()> {
    for param in params.iter().filter(|p| p.guarded) {
        // Their errors never show the value (and both are known names).
        if param.key == "user" || param.key == "password" {
            continue;
        }
        // A host or port list is checked item by item: its length is checked against
        // the other lists later, which shows no value.
        let items: Vec<&str> = match param.key.as_str() {
            "host" | "port" => param.value.split(',').collect(),
            _ => vec![param.value.as_str()],
        };
        let invalid = items.into_iter().any(|item| {
            let alone = vec![
                ("user".to_owned(), "-".to_owned()),
                (param.key.clone(), item.to_owned()),
            ];
            build(alone).is_err()
        });
        if invalid {
            return Err(if SUPPORTED_PARAMETERS.contains(&param.key.as_str()) {
                config_error(format!(
                    "invalid {} in the connection URI (the value is {GUARDED_HINT})",
                    param.key
                ))
            } else {
                config_error(format!(
                    "unknown connection parameter (the name is {GUARDED_HINT}); supported parameters are: {}",
                    SUPPORTED_PARAMETERS.join(", ")
                ))
            });
        }
    }
    Ok(())
}

/// Whether `key` looks like a parameter name (letters, digits, underscores), so that an
/// error may show it: anything else may be a mangled URI with a password in it.
fn is_name(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `key` for an error message: quoted if it looks like a parameter name, else a
/// description that shows nothing of it.
fn shown_name(key: &str) -> String {
    if is_name(key) {
        format!("{key:?}")
    } else {
        "(not shown: it is no parameter name and may hold a secret)".to_owned()
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

/// Parses the part after `postgres://`, marking the parameters whose text may hold part
/// of a password as guarded (see the module documentation).
fn parse_uri(rest: &str) -> Result<Vec<Param>> {
    let mut params = Vec::new();
    // Credentials end at the last '@' before the first '/' or '?': a raw '/' or '?' inside
    // a password must be percent-encoded (a raw '@' happens to work, but encode it too).
    let netloc_end = rest.find(['/', '?']).unwrap_or(rest.len());
    // Text before this offset may be part of a password, wherever the parse puts it.
    let guard_end = match rest.rfind('@') {
        Some(at) => at,
        None if !rest.starts_with('[') && rest[..netloc_end].contains(':') => rest.len(),
        None => 0,
    };
    let mut pos = 0;
    let credentials = rest[..netloc_end].rfind('@');
    if let Some(at) = credentials {
        let userinfo = &rest[..at];
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (userinfo, None),
        };
        if !user.is_empty() {
            params.push(Param::new("user", decode(user, "user name")?, true));
        }
        if let Some(p) = password {
            params.push(Param::new("password", decode(p, "password")?, true));
        }
        pos = at + 1;
    }

    // Host and port.
    let remaining = &rest[pos..];
    let hostport_end = remaining.find(['/', '?']).unwrap_or(remaining.len());
    let hostport = &remaining[..hostport_end];
    let guarded = pos < guard_end;
    // Several servers: `host1:port1,host2:port2`, each port optional.
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    for element in hostport.split(',') {
        let (host, port) = uri_host(element)?;
        hosts.push(host);
        ports.push(port.map(|p| decode(p, "port")).transpose()?);
    }
    if hosts.iter().any(|h| !h.is_empty()) {
        params.push(Param::new("host", hosts.join(","), guarded));
    }
    if ports.iter().any(Option::is_some) {
        let ports: Vec<String> = ports.into_iter().map(Option::unwrap_or_default).collect();
        params.push(Param::new("port", ports.join(","), guarded));
    }
    pos += hostport_end;

    // Database.
    if let Some(path) = rest[pos..].strip_prefix('/') {
        let end = path.find('?').unwrap_or(path.len());
        let dbname = &path[..end];
        if credentials.is_none() && dbname.contains('@') {
            // `postgres://user:pass/word@host/db`: the '/' of the password ended the
            // host part. A database name with '@' must write it as %40.
            return Err(config_error(format!(
                "the connection URI has an '@' after the host part, in the database name (the text is {GUARDED_HINT}; an '@' in a database name is written %40)"
            )));
        }
        if !dbname.is_empty() {
            params.push(Param::new(
                "dbname",
                decode(dbname, "database name")?,
                pos < guard_end,
            ));
        }
        pos += 1 + end;
    }

    // Parameters.
    if let Some(query) = rest[pos..].strip_prefix('?') {
        let mut param_pos = pos + 1;
        // A raw '&' in a password parameter starts what looks like the next parameter.
        let mut after_password = false;
        for param in query.split('&') {
            let guarded = after_password || param_pos < guard_end;
            param_pos += param.len() + 1;
            if param.is_empty() {
                continue;
            }
            let Some((key, value)) = param.split_once('=') else {
                return Err(config_error(if guarded {
                    format!(
                        "a connection URI parameter has no value: expected name=value (the parameter is {GUARDED_HINT})"
                    )
                } else {
                    format!("connection URI parameter {param:?} has no value: expected name=value")
                }));
            };
            if value.contains('=') {
                return Err(config_error(
                    if guarded && !SUPPORTED_PARAMETERS.contains(&key) {
                        format!(
                            "a connection URI parameter contains a second '=': percent-encode it as %3D (the parameter is {GUARDED_HINT})"
                        )
                    } else {
                        format!(
                            "connection URI parameter {} contains a second '=': percent-encode it as %3D",
                            shown_name(key)
                        )
                    },
                ));
            }
            let key = decode(key, "parameter name")?;
            after_password |= key == "password";
            params.push(Param {
                value: decode(value, "parameter value")?,
                key,
                guarded,
            });
        }
    } else if !rest[pos..].is_empty() {
        // Not reached: the host part and the path end only at '/', '?' or the end.
        return Err(config_error("unexpected text in the connection URI"));
    }
    Ok(params)
}

/// Parses `key = value` pairs.
fn parse_key_value(conninfo: &str) -> Result<Vec<Param>> {
    let mut pairs: Vec<Param> = Vec::new();
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
        // A password value ends at white space, so what follows it must be a parameter;
        // anything else is most likely the rest of a password with a space, not quoted.
        let after_password = pairs.last().is_some_and(|p| p.key == "password");
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(if after_password {
                unquoted_password()
            } else {
                missing_equals(&key, pairs.last().map(|p| p.key.as_str()))
            });
        }
        if after_password && !SUPPORTED_PARAMETERS.contains(&key.as_str()) {
            return Err(unquoted_password());
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => {
                        return Err(config_error(format!(
                            "unterminated quoted value of parameter {} in the connection string",
                            shown_name(&key)
                        )));
                    }
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => {
                            return Err(config_error(format!(
                                "unterminated quoted value of parameter {} in the connection string",
                                shown_name(&key)
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
        pairs.push(Param {
            key,
            value,
            guarded: false,
        });
    }
}

/// The error for a word after a password value that is not a parameter: it shows nothing
/// of the word, which is most likely part of the password.
fn unquoted_password() -> Error {
    config_error(
        "the value of password is followed by a word that is not a parameter (not shown, as it may be part of the password): a password with spaces must be quoted, password='...', with ' and \\ inside written as \\' and \\\\",
    )
}

/// The error for a word without `=` (not after a password value; `previous` is the key of
/// the pair before it, if any).
fn missing_equals(key: &str, previous: Option<&str>) -> Error {
    // `postgress://user:password@host`: a URI with a scheme the parser does not know.
    if let Some((scheme, _)) = key.split_once("://") {
        let scheme = if is_name(scheme) {
            format!(" {scheme:?}")
        } else {
            String::new()
        };
        return config_error(format!(
            "unsupported connection URI scheme{scheme}: a connection URI starts with postgres:// or postgresql://"
        ));
    }
    if !is_name(key) {
        return config_error(
            "the connection string is neither key=value pairs nor a URI starting with postgres:// or postgresql:// (it is not shown, as it may hold a password)",
        );
    }
    let hint = match previous.filter(|p| is_name(p)) {
        Some(previous) => format!(
            "; if it belongs to the value of {previous}, quote that value: {previous}='...'"
        ),
        None => String::new(),
    };
    config_error(format!(
        "missing \"=\" after {key:?} in the connection string (expected key=value pairs or a postgres:// URI){hint}"
    ))
}

/// One `host[:port]` of a URI's host list (an IPv6 address in brackets), the host
/// percent-decoded, the port as written.
fn uri_host(hostport: &str) -> Result<(String, Option<&str>)> {
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
                config_error(
                    "unexpected text after the IPv6 address in the connection URI: expected ':' and the port",
                )
            })?),
        };
        (addr.to_owned(), port)
    } else {
        match hostport.rsplit_once(':') {
            // Two ':' outside brackets: not a host and a port, but most likely
            // `user:password` with the '@host' forgotten.
            Some((h, _)) if h.contains(':') => {
                return Err(config_error(format!(
                    "invalid host in the connection URI: it contains ':' (write an IPv6 address in brackets, [::1]; the text is {GUARDED_HINT})"
                )));
            }
            Some((h, p)) => (decode(h, "host")?, Some(p)),
            None => (decode(hostport, "host")?, None),
        }
    };
    if host.contains(',') {
        return Err(config_error(
            "a host in the connection URI contains a ',' (%2C): a comma separates hosts",
        ));
    }
    Ok((host, port))
}

/// A value with no NUL character, as written (empty means the default).
fn checked(key: &str, value: String) -> Result<String> {
    Ok(non_empty(key, value)?.unwrap_or_default())
}

/// The servers named by libpq's comma-separated `host`, `hostaddr` and `port` lists:
/// `hostaddr` has as many entries as `host` when both are given; `port` has one entry
/// (for every server) or one per server. An empty entry means the default.
fn servers(hosts: &str, hostaddrs: &str, ports: &str) -> Result<Vec<Endpoint>> {
    let split = |list: &str| -> Vec<String> {
        if list.is_empty() {
            Vec::new()
        } else {
            list.split(',').map(|item| item.trim().to_owned()).collect()
        }
    };
    let hosts = split(hosts);
    let hostaddrs = split(hostaddrs);
    let ports = split(ports);
    if !hosts.is_empty() && !hostaddrs.is_empty() && hosts.len() != hostaddrs.len() {
        return Err(config_error(format!(
            "the connection string names {} hosts but {} hostaddr values: give one hostaddr per host (or none)",
            hosts.len(),
            hostaddrs.len()
        )));
    }
    let count = hosts.len().max(hostaddrs.len()).max(1);
    if ports.len() > 1 && ports.len() != count {
        return Err(config_error(format!(
            "the connection string names {count} servers but {} ports: give one port for all, or one per host",
            ports.len()
        )));
    }
    (0..count)
        .map(|i| {
            let host = hosts.get(i).filter(|h| !h.is_empty()).cloned();
            let hostaddr = match hostaddrs.get(i).filter(|a| !a.is_empty()) {
                None => None,
                Some(v) => Some(v.parse::<IpAddr>().map_err(|_| {
                    config_error(format!(
                        "invalid hostaddr {v:?}: expected a numeric IPv4 or IPv6 address"
                    ))
                })?),
            };
            let port_text = ports.get(i).or(ports.first()).map_or("", |p| p.as_str());
            let port = match port_text {
                "" => DEFAULT_PORT,
                v => v.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                    config_error(format!(
                        "invalid port {v:?}: expected a number from 1 to 65535"
                    ))
                })?,
            };
            let host = match (host, hostaddr) {
                (Some(h), _) if h.starts_with('/') => Host::Unix(PathBuf::from(h)),
                (Some(h), _) => Host::Tcp(h),
                // Only hostaddr: it is also the name TLS verifies against, as in libpq.
                (None, Some(addr)) => Host::Tcp(addr.to_string()),
                (None, None) => Host::Tcp(DEFAULT_HOST.to_owned()),
            };
            Ok(Endpoint {
                host,
                hostaddr,
                port,
            })
        })
        .collect()
}

fn unknown_parameter(key: &str) -> Error {
    config_error(format!(
        "unknown connection parameter {}; supported parameters are: {}",
        shown_name(key),
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
    // Comma-separated lists, as in libpq; resolved into servers after the loop.
    let mut hosts = String::new();
    let mut hostaddrs = String::new();
    let mut ports = String::new();
    let mut target_session_attrs = TargetSessionAttrs::Any;
    let mut dbname = None;
    let mut user = None;
    let mut password = None;
    let mut tls = TlsConfig::default();
    let mut application_name = None;
    let mut connect_timeout = None;
    let mut options = None;

    for (key, value) in pairs {
        match key.as_str() {
            "host" => hosts = checked("host", value)?,
            "hostaddr" => hostaddrs = checked("hostaddr", value)?,
            "port" => ports = checked("port", value)?,
            "target_session_attrs" => target_session_attrs = value.trim().parse()?,
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
    let mut servers = servers(&hosts, &hostaddrs, &ports)?.into_iter();
    let Some(first) = servers.next() else {
        return Err(config_error(
            "internal: no server resolved from the connection string",
        ));
    };
    Ok(ConnectionConfig {
        host: first.host,
        hostaddr: first.hostaddr,
        port: first.port,
        fallback_hosts: servers.collect(),
        target_session_attrs,
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
    /// unknown parameters are errors that list the supported ones. No error shows any part
    /// of the password.
    ///
    /// Never consults the environment: for libpq's `PG*` variables and password file, use
    /// [`ConnectionConfig::parse_with_env`].
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
    ///
    /// Never consults the environment (see [`super::env`]): to complete the connection
    /// string from libpq's `PG*` variables and password file, use
    /// `SourceConfig::from_connection(ConnectionConfig::parse_with_env(..)?, ..)`.
    pub fn new(conninfo: &str, publication: impl Into<String>) -> Result<Self> {
        SourceConfig::from_connection(ConnectionConfig::parse(conninfo)?, publication)
    }
}

#[cfg(test)]
#[path = "conninfo_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "conninfo_secret_tests.rs"]
mod secret_tests;
