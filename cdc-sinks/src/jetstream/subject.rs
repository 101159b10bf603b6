//! Subjects: the per-table subject template, the escaping that makes any table name a
//! valid subject token, and whether a stream's subject filters cover a subject.

use cdc_core::{Error, TableName};

/// A subject template such as `pgcdc.{database}.{schema}.{table}`.
///
/// Placeholders: `{database}`, `{schema}`, `{table}`. Each is replaced by one subject
/// token: the name with every byte outside `A-Z a-z 0-9 _ -` written as `%XX` (upper-case
/// hex), so names holding `.`, `*`, `>`, spaces or non-ASCII characters map to distinct,
/// valid tokens (`public.My Table` → `public.My%20Table`). Literal parts must be valid
/// subject tokens without wildcards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubjectTemplate {
    tokens: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Database,
    Schema,
    Table,
}

/// The default template.
pub const DEFAULT_SUBJECT_TEMPLATE: &str = "pgcdc.{database}.{schema}.{table}";

impl Default for SubjectTemplate {
    /// [`DEFAULT_SUBJECT_TEMPLATE`].
    fn default() -> Self {
        SubjectTemplate {
            tokens: vec![
                Part::Literal("pgcdc".to_owned()),
                Part::Database,
                Part::Schema,
                Part::Table,
            ],
        }
    }
}

impl SubjectTemplate {
    /// Parses and checks a template.
    pub fn parse(template: &str) -> Result<SubjectTemplate, Error> {
        let bad = |why: &str| {
            Error::config(format!(
                "subject template {template:?}: {why} (example: {DEFAULT_SUBJECT_TEMPLATE})"
            ))
        };
        if template.is_empty() {
            return Err(bad("it is empty"));
        }
        let mut tokens = Vec::new();
        for token in template.split('.') {
            let part = match token {
                "{database}" => Part::Database,
                "{schema}" => Part::Schema,
                "{table}" => Part::Table,
                "" => return Err(bad("it has an empty token (two dots, or a dot at an end)")),
                t if t.contains('{') || t.contains('}') => {
                    return Err(bad(
                        "a placeholder must be a whole token: {database}, {schema} or {table}",
                    ));
                }
                t if t.contains('*') || t.contains('>') => {
                    return Err(bad("wildcards (* and >) cannot be published to"));
                }
                t if t.bytes().any(|b| b <= b' ' || b == 0x7f) => {
                    return Err(bad("subjects cannot hold spaces or control characters"));
                }
                t => Part::Literal(t.to_owned()),
            };
            tokens.push(part);
        }
        if !tokens.contains(&Part::Table) {
            return Err(bad(
                "it has no {table}: every table needs a subject of its own (Feldera reads one table per connector)",
            ));
        }
        Ok(SubjectTemplate { tokens })
    }

    /// The subject of `table` in `database`.
    pub fn render(&self, database: &str, table: &TableName) -> String {
        self.build(database, Some(table))
    }

    /// The subjects of every table of `database` as one filter (`*` for schema and table),
    /// which the stream's subjects must cover.
    pub fn filter(&self, database: &str) -> String {
        self.build(database, None)
    }

    /// The subject of `table`, or with `*` for schema and table when there is none.
    fn build(&self, database: &str, table: Option<&TableName>) -> String {
        let mut out = String::with_capacity(64);
        for (i, part) in self.tokens.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            match (part, table) {
                (Part::Literal(s), _) => out.push_str(s),
                (Part::Database, _) => escape_token(database, &mut out),
                (Part::Schema, Some(t)) => escape_token(&t.schema, &mut out),
                (Part::Table, Some(t)) => escape_token(&t.name, &mut out),
                (Part::Schema | Part::Table, None) => out.push('*'),
            }
        }
        out
    }
}

/// Appends `name` as one subject token (see [`SubjectTemplate`]).
pub(crate) fn escape_token(name: &str, out: &mut String) {
    if name.is_empty() {
        out.push_str("%00");
        return;
    }
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Whether every subject matching `subject` (which may hold `*` tokens, or be literal)
/// also matches the stream filter `filter` (NATS wildcards `*` and a final `>`).
pub fn filter_covers(filter: &str, subject: &str) -> bool {
    let mut f = filter.split('.');
    let mut s = subject.split('.');
    loop {
        match (f.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b && b != "*" && b != ">" => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_escapes_names_into_single_tokens() {
        let t = SubjectTemplate::parse(DEFAULT_SUBJECT_TEMPLATE).unwrap();
        assert_eq!(
            t.render("shop", &TableName::new("public", "orders")),
            "pgcdc.shop.public.orders"
        );
        assert_eq!(
            t.render("my.db", &TableName::new("sales", "Order Items*>é")),
            "pgcdc.my%2Edb.sales.Order%20Items%2A%3E%C3%A9"
        );
        assert_eq!(t.filter("shop"), "pgcdc.shop.*.*");
        assert_eq!(t, SubjectTemplate::default());
    }

    #[test]
    fn escaping_is_injective_on_names_that_differ_only_in_escaped_bytes() {
        let mut a = String::new();
        let mut b = String::new();
        escape_token("a.b", &mut a);
        escape_token("a%2Eb", &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn refuses_templates_that_cannot_name_one_table() {
        for bad in [
            "",
            "pgcdc",
            "pgcdc..{table}",
            "pgcdc.*.{table}",
            "pgcdc.x{table}",
            "pg cdc.{table}",
            "pgcdc.{table}.>",
        ] {
            assert!(SubjectTemplate::parse(bad).is_err(), "{bad:?}");
        }
        assert!(SubjectTemplate::parse("cdc.{table}").is_ok());
    }

    #[test]
    fn filters_cover_subjects_like_nats_does() {
        assert!(filter_covers("pgcdc.>", "pgcdc.shop.*.*"));
        assert!(filter_covers("pgcdc.*.*.*", "pgcdc.shop.*.*"));
        assert!(filter_covers(
            "pgcdc.shop.public.orders",
            "pgcdc.shop.public.orders"
        ));
        assert!(!filter_covers("pgcdc.shop.public.*", "pgcdc.shop.*.*"));
        assert!(!filter_covers("pgcdc.shop", "pgcdc.shop.*.*"));
        assert!(!filter_covers("pgcdc.shop.*.*.*", "pgcdc.shop.*.*"));
        assert!(filter_covers(">", "a"));
    }
}
