//! Unit and property tests of the connection-string parser (`conninfo.rs`): URI and
//! key=value forms, quoting, percent-decoding, guarded parameters, libpq's errors.

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
    let err = parse("postgres://u@h/db?load_balance_hosts=random").unwrap_err();
    assert!(err.message().contains("\"load_balance_hosts\""), "{err}");
    let err = parse("host=a,b user=u target_session_attrs=prefer-standby").unwrap_err();
    assert!(
        err.message()
            .contains("any, read-write, primary or standby"),
        "{err}"
    );
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
        "postgres://u@a:1,b:x/db",
        "postgres://u@a,[::1/db",
        "host=a,b port=1,2,3 user=u",
        "host=a,b hostaddr=10.0.0.1 user=u",
        "host=a,b hostaddr=10.0.0.1,x user=u",
        "host=a user=u target_session_attrs=read-only",
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

#[test]
fn several_servers_in_both_forms() {
    let endpoint = |host: &str, port: u16| Endpoint {
        host: Host::Tcp(host.into()),
        hostaddr: None,
        port,
    };
    let uri = parse_ok("postgres://u@db1:5433,[::1],db3:6000/shop?target_session_attrs=read-write");
    assert_eq!(
        (uri.host.clone(), uri.port),
        (Host::Tcp("db1".into()), 5433)
    );
    assert_eq!(
        uri.fallback_hosts,
        [endpoint("::1", DEFAULT_PORT), endpoint("db3", 6000)]
    );
    assert_eq!(uri.target_session_attrs, TargetSessionAttrs::ReadWrite);
    assert_eq!(uri.dbname, "shop");

    // One port for every host; hostaddr one per host; a socket directory among them.
    let kv =
        parse_ok("host=a,/run/pg hostaddr=10.0.0.1, port=6432 user=u target_session_attrs=primary");
    assert_eq!((kv.hostaddr, kv.port), ("10.0.0.1".parse().ok(), 6432));
    assert_eq!(
        kv.fallback_hosts,
        [Endpoint {
            host: Host::Unix("/run/pg".into()),
            hostaddr: None,
            port: 6432
        }]
    );
    assert_eq!(kv.target_session_attrs, TargetSessionAttrs::Primary);
    let servers = kv.per_server();
    assert_eq!(servers.len(), 2);
    assert!(
        servers
            .iter()
            .all(|s| s.fallback_hosts.is_empty() && s.user == "u")
    );
    assert_eq!(servers[1].host, Host::Unix("/run/pg".into()));

    // One server: no fallbacks, and the default attributes.
    let one = parse_ok("host=a user=u");
    assert!(one.fallback_hosts.is_empty());
    assert_eq!(one.target_session_attrs, TargetSessionAttrs::Any);
    assert_eq!(one.per_server().len(), 1);
}
