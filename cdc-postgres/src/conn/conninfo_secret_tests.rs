//! No connection-string error shows any part of the password: known cases, and a property
//! over passwords made of every special character, written in every form (URI
//! percent-encoded and raw, key=value quoted and unquoted) inside valid and malformed
//! strings, also when completed from the environment.
//!
//! The property needs care to be able to fail and to mean something:
//! - Error messages contain fixed text (`"connection URI"`, `"'%25'"`) that a random
//!   password may share, so a plain "no substring of the password" check would report
//!   false leaks. Every password is therefore built so that each run of 3 characters holds
//!   a *marker*: a character that appears in no message template and nowhere else in the
//!   tested string. A 3-character fragment of the password in a message then always
//!   carries a marker, and a false positive is impossible.
//! - A message may show a fragment escaped (`{:?}` turns `"` into `\"`) or percent-encoded
//!   (`%D0%B6`), which a substring search misses. So besides the literal property the
//!   message is compared with the one for the same password with every marker swapped for
//!   another (same parse, different secret): a message that differs depends on the
//!   secret.

use proptest::prelude::*;

use super::*;
use crate::conn::config::SourceConfig;
use crate::conn::env::PgEnv;

/// Characters that appear in no error message template and in none of the fixed text of
/// the tested strings.
const MARKERS: [char; 3] = ['ж', '密', 'Ω'];

/// The other characters of passwords: every character with a meaning in a URI or a
/// key=value string, white space, and ordinary letters.
const SPECIALS: [char; 20] = [
    '/', '?', '#', '@', ':', '=', '\'', ' ', '"', '\\', '%', '&', ',', '[', ']', '\t', 'a', 'Z',
    '0', 'é',
];

/// Each marker replaced by the next one: parses the same, is a different secret.
fn swap_markers(text: &str) -> String {
    text.chars()
        .map(|c| match MARKERS.iter().position(|m| *m == c) {
            Some(i) => MARKERS[(i + 1) % MARKERS.len()],
            None => c,
        })
        .collect()
}

/// Passwords in which every 3 consecutive characters include a marker.
fn password() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(
            (
                prop::collection::vec(prop::sample::select(&SPECIALS[..]), 0..=2),
                prop::sample::select(&MARKERS[..]),
            ),
            1..6,
        ),
        prop::collection::vec(prop::sample::select(&SPECIALS[..]), 0..=2),
    )
        .prop_map(|(chunks, tail)| {
            let mut password = String::new();
            for (specials, marker) in chunks {
                password.extend(specials);
                password.push(marker);
            }
            password.extend(tail);
            password
        })
}

/// How the password is written into the string.
#[derive(Clone, Copy, Debug)]
enum Form {
    UriEncoded,
    UriRaw,
    KvQuoted,
    KvUnquoted,
}

impl Form {
    fn write(self, password: &str) -> String {
        use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
        match self {
            Form::UriEncoded => utf8_percent_encode(password, NON_ALPHANUMERIC).to_string(),
            Form::UriRaw | Form::KvUnquoted => password.to_owned(),
            Form::KvQuoted => format!("'{}'", password.replace('\\', "\\\\").replace('\'', "\\'")),
        }
    }

    fn templates(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Form::UriEncoded | Form::UriRaw => URI_TEMPLATES,
            Form::KvQuoted | Form::KvUnquoted => KV_TEMPLATES,
        }
    }
}

/// `(before, after)` the written password; the first one is valid.
const URI_TEMPLATES: &[(&str, &str)] = &[
    ("postgres://cdc:", "@db.example:5432/shop?sslmode=require"),
    ("postgres://cdc:", "@db.example:99999/shop"),
    ("postgres://cdc:", "@db.example:54x2/shop"),
    ("postgres://cdc:", "@db.example/shop?sslmode=sometimes"),
    ("postgres://cdc:", "@db.example/shop?bogus_param=1"),
    ("postgres://cdc:", "@db.example/shop?sslmode"),
    ("postgres://cdc:", "@db.example/shop?application_name=a=b"),
    ("postgres://cdc:", "@db.example/sh%zzop"),
    ("postgres://cdc:", "@[::1/shop"),
    ("postgres://cdc:", "@[::1]x/shop"),
    ("postgres://cdc:", "@a:1,b:2,c:x/shop"),
    ("postgres://cdc:", "@a:1,b:2/shop?port=1,2,3"),
    ("postgres://cdc:", "@db.example/shop?connect_timeout=soon"),
    ("postgres://cdc:", "@db.example/shop?hostaddr=db.example"),
    (
        "postgresql://cdc:",
        "@db.example/shop?application_name=x@y&sslmode=bad",
    ),
    // The host forgotten.
    ("postgres://cdc:", ""),
    ("postgres://cdc:", "/shop"),
    ("postgres://cdc:", "/shop?sslmode=bad"),
    // No user.
    ("postgres://:", "@db.example/shop"),
    // The password as a query parameter.
    ("postgres://cdc@db.example/shop?password=", "&sslmode=bogus"),
    ("postgres://cdc@db.example/shop?password=", "&bogus_param=1"),
    ("postgres://db.example:5432/shop?password=", ""),
    ("postgres://db.example/shop?user=cdc&password=", "&port=x"),
    // Misspelt schemes.
    ("postgress://cdc:", "@db.example/shop"),
    ("postgres:/cdc:", "@db.example/shop"),
    ("POSTGRES://cdc:", "@db.example/shop"),
    ("postgres//cdc:", "@db.example/shop"),
];

/// `(before, after)` the written password; the first one is valid.
const KV_TEMPLATES: &[(&str, &str)] = &[
    ("host=db.example user=cdc password=", " dbname=shop"),
    ("host=db.example user=cdc password=", ""),
    ("password=", " host=db.example user=cdc port=99999"),
    ("host=db.example user=cdc password=", " sslmode=sometimes"),
    ("host=db.example user=cdc password=", " bogus_param=1"),
    ("host=db.example user=cdc password=", " dbname='shop"),
    ("host=db.example user=cdc password =", " port=x"),
    ("host=db.example user=cdc password= ", " dbname=shop"),
    ("user=cdc password=", " host=a,b port=1,2,3"),
    (
        "user=cdc password=",
        " host=a,b target_session_attrs=read-only",
    ),
    ("host=db.example password=", ""),
    (
        "host=db.example user=cdc password=",
        " connect_timeout=soon hostaddr=x",
    ),
    ("host=db.example user=cdc password=", "\\"),
];

/// What leaked of `password` into `message`, if anything; `rest` is the tested string
/// without the password.
///
/// The written form of the password (percent-encoded, quoted) is not searched for
/// fragments: it shares text with the templates (`%25`, `\'`). An encoded marker is
/// searched for whole; a part of one changes the message, which the comparison with the
/// swapped password catches.
fn leak(message: &str, password: &str, rest: &str) -> Option<String> {
    if !password.is_empty() && message.contains(password) {
        return Some(format!("the password {password:?}"));
    }
    let chars: Vec<char> = password.chars().collect();
    for start in 0..chars.len() {
        for end in start + 3..=chars.len() {
            let fragment: String = chars[start..end].iter().collect();
            if message.contains(&fragment) && !rest.contains(&fragment) {
                return Some(format!("the fragment {fragment:?}"));
            }
        }
    }
    for marker in MARKERS {
        let encoded = percent_encoding::utf8_percent_encode(
            marker.encode_utf8(&mut [0; 4]),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        if message.contains(marker) {
            return Some(format!("the character {marker:?}"));
        }
        if message.contains(&encoded) || message.contains(&encoded.to_lowercase()) {
            return Some(format!("the encoded character {encoded}"));
        }
    }
    None
}

/// The error messages `text` gives, through every API that parses a connection string.
fn errors(text: &str) -> Vec<String> {
    let mut messages = Vec::new();
    let env = PgEnv::new()
        .with_var("PGUSER", "cdc")
        .and_then(|env| env.with_var("PGSSLMODE", "prefer"))
        .unwrap_or_default()
        .with_pass_file("*:*:*:*:from-file\n");
    for result in [
        parse(text).map(drop),
        ConnectionConfig::parse(text).map(drop),
        parse_pairs(text).map(drop),
        SourceConfig::new(text, "pub").map(drop),
        SourceConfig::from_json(&serde_json::json!({"uri": text, "publication": "p"}).to_string())
            .map(drop),
        ConnectionConfig::parse_with_env(text, &env).map(drop),
    ] {
        if let Err(e) = result {
            messages.push(e.to_string());
            messages.push(format!("{e:?}"));
        }
    }
    messages
}

fn check(form: Form, template: usize, password: &str) -> Result<(), TestCaseError> {
    let (before, after) = form.templates()[template];
    // The credentials end at the last '@' before the host part. With the host forgotten
    // (`postgres://cdc:p@ss?word`), a raw '@' in the password is that last '@', and what
    // follows it is read as host, port, path and query: nothing can tell it from
    // `postgres://cdc:p@db?sslmode`. (The module documentation says so.)
    let host_forgotten = !after.contains('@') && !before.contains("password=");
    prop_assume!(!(matches!(form, Form::UriRaw) && host_forgotten && password.contains('@')));
    let written = form.write(password);
    let text = format!("{before}{written}{after}");
    let rest = format!("{before}{after}");
    let messages = errors(&text);
    let swapped = errors(&format!(
        "{before}{}{after}",
        form.write(&swap_markers(password))
    ));
    for message in &messages {
        if let Some(what) = leak(message, password, &rest) {
            return Err(TestCaseError::fail(format!(
                "{form:?} in {text:?}: the error shows {what}: {message}"
            )));
        }
    }
    prop_assert_eq!(
        &messages,
        &swapped,
        "{:?} in {:?}: the error depends on the password",
        form,
        text
    );
    if template == 0 && matches!(form, Form::UriEncoded | Form::KvQuoted) {
        let config = parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(config.password.as_deref(), Some(password));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn errors_never_show_a_uri_password(
        password in password(),
        encoded in any::<bool>(),
        template in 0..URI_TEMPLATES.len(),
    ) {
        check(if encoded { Form::UriEncoded } else { Form::UriRaw }, template, &password)?;
    }

    #[test]
    fn errors_never_show_a_key_value_password(
        password in password(),
        quoted in any::<bool>(),
        template in 0..KV_TEMPLATES.len(),
    ) {
        check(if quoted { Form::KvQuoted } else { Form::KvUnquoted }, template, &password)?;
    }
}

/// The property's checker catches what it must: a fragment, an escaped fragment (by the
/// marker), an encoded one; and a message that depends on the password differs from the
/// one for the swapped password.
#[test]
fn the_leak_checker_can_fail() {
    let rest = "postgres://cdc:@h/db";
    assert!(leak("invalid port \"aж/\"", "aж/b", rest).is_some());
    assert!(leak("invalid port \"\\\"ж\"", "\"ж", rest).is_some());
    assert!(leak("unexpected \"%D0%B6%2F\"", "ж/", rest).is_some());
    assert!(leak("invalid port in the connection URI", "aж/b", rest).is_none());
    // Text the rest of the string also holds is no leak.
    assert!(leak("host \"cdc\"", "cdcж", rest).is_none());
    // Escaped beyond recognition: only the comparison sees it.
    let show = |password: &str| format!("unexpected {}", password.escape_unicode());
    assert!(leak(&show("ж/ab"), "ж/ab", rest).is_none());
    assert_ne!(show("ж/ab"), show(&swap_markers("ж/ab")));
}

/// The cases that used to show the password.
#[test]
fn known_leaks_are_closed() {
    for (text, secret) in [
        ("postgres://cdc:Zq1/Zq2-word@db/shop", "Zq1"),
        ("postgres://cdc:Zq1?Zq2-word@db/shop", "Zq2"),
        ("postgres://cdc:Zq1-secret", "Zq1"),
        ("postgres://cdc:Zq1-secret/shop?sslmode=bad", "Zq1"),
        ("postgres://cdc:Zq1?sslmode=Zq2", "Zq"),
        ("postgres://cdc:Zq1:5432/shop", "Zq1"),
        ("postgres://cdc@db/shop?password=Zq1&Zq2-word", "Zq2"),
        ("postgres://cdc@db/shop?password=Zq1&sslmode=Zq2", "Zq2"),
        ("host=db user=cdc password=Zq1 Zq2-word", "Zq2"),
        ("host=db user=cdc password=Zq1 Zq2=x", "Zq2"),
        ("host=db user=cdc password='Zq1' Zq2", "Zq2"),
        ("postgress://cdc:Zq1-secret@db/shop", "Zq1"),
        ("postgres:/cdc:Zq1-secret@db/shop?sslmode=x", "Zq1"),
    ] {
        let messages = errors(text);
        assert!(!messages.is_empty(), "{text:?} parsed");
        for message in messages {
            assert!(!message.contains(secret), "{text:?}: {message}");
        }
    }
}

/// Errors about text that cannot be part of a password still show it.
#[test]
fn errors_still_quote_what_is_not_secret() {
    for (text, shown) in [
        ("postgres://cdc:pw@db:99999/shop", "99999"),
        ("postgres://cdc:pw@db/shop?sslmod=require", "sslmod"),
        ("postgres://cdc:pw@db/shop?sslmode=sometimes", "sometimes"),
        ("postgres://db/shop?sslmode=sometimes", "sometimes"),
        ("host=db user=cdc password=pw port=54x2", "54x2"),
        ("host=db user=cdc sslmod=require password=pw", "sslmod"),
        ("host db user=cdc", "host"),
        ("host=db dbname=my shop user=cdc", "shop"),
    ] {
        let message = parse(text).map(drop).unwrap_err().to_string();
        assert!(message.contains(shown), "{text:?}: {message}");
    }
}

/// A raw `/`, `?`, `@` or `:` in a URI password: the error says what to do.
#[test]
fn a_raw_reserved_character_in_a_uri_password_says_to_encode_it() {
    for text in [
        "postgres://cdc:pa/ss@db/shop",
        "postgres://cdc:pa?ss@db/shop",
    ] {
        let message = parse(text).map(drop).unwrap_err().to_string();
        assert!(message.contains("%2F"), "{text:?}: {message}");
    }
    // '@' and ':' work raw (credentials end at the last '@' of the host part).
    let config = parse("postgres://cdc:p@ss:w@db/shop").unwrap();
    assert_eq!(config.password.as_deref(), Some("p@ss:w"));
    assert_eq!(config.host, Host::Tcp("db".into()));
}

/// In key=value form a value with a space must be quoted; for the password the error
/// names the keyword only.
#[test]
fn an_unquoted_password_with_a_space_names_the_keyword_only() {
    let message = parse("host=db user=cdc password=two words")
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("password") && message.contains("quote"),
        "{message}"
    );
    assert!(!message.contains("words"), "{message}");
}
