//! Schema-qualified table names with Postgres identifier rules.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A schema-qualified table name, `schema.name`, holding the identifiers as Postgres stores
/// them (after case folding).
///
/// Parsing follows Postgres's rules: an unquoted identifier folds to lower case; a
/// `"quoted"` one keeps its case and may contain dots, spaces and `""` (an escaped quote).
/// Display quotes an identifier only where Postgres would need it. Serde uses the display
/// form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableName {
    /// The schema (namespace), e.g. `public`.
    pub schema: String,
    /// The table's name within the schema.
    pub name: String,
}

/// Why a string is not a usable table name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableNameError {
    /// The name has no schema. Configuration must name tables unambiguously.
    #[error(
        "table name {input:?} is not schema-qualified: write it as schema.table, e.g. public.{input}"
    )]
    Unqualified {
        /// The rejected input.
        input: String,
    },
    /// The text is not a valid (possibly quoted) identifier sequence.
    #[error("invalid table name {input:?}: {reason}")]
    Invalid {
        /// The rejected input.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl TableName {
    /// A name from already-folded identifiers (as found in the catalog), without parsing.
    pub fn new(schema: impl Into<String>, name: impl Into<String>) -> Self {
        TableName {
            schema: schema.into(),
            name: name.into(),
        }
    }

    /// Parses `schema.table` following Postgres identifier rules. An unqualified name is a
    /// [`TableNameError::Unqualified`] error; so is a name with more than two parts.
    pub fn parse(input: &str) -> Result<Self, TableNameError> {
        let parts = split_identifiers(input)?;
        match <[String; 2]>::try_from(parts) {
            Ok([schema, name]) => Ok(TableName { schema, name }),
            Err(parts) if parts.len() == 1 => Err(TableNameError::Unqualified {
                input: input.to_owned(),
            }),
            Err(parts) => Err(TableNameError::Invalid {
                input: input.to_owned(),
                reason: format!(
                    "expected schema.table, found {} dot-separated parts (quote names that contain dots)",
                    parts.len()
                ),
            }),
        }
    }

    /// Parses a single identifier (no schema) following Postgres rules.
    pub fn parse_identifier(input: &str) -> Result<String, TableNameError> {
        let mut parts = split_identifiers(input)?;
        if parts.len() != 1 {
            return Err(TableNameError::Invalid {
                input: input.to_owned(),
                reason: "expected a single identifier".into(),
            });
        }
        Ok(parts.remove(0))
    }
}

fn split_identifiers(input: &str) -> Result<Vec<String>, TableNameError> {
    let invalid = |reason: &str| TableNameError::Invalid {
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    let mut parts = Vec::new();
    let mut chars = input.chars().peekable();
    loop {
        let mut ident = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(invalid("unterminated quoted identifier")),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        ident.push('"');
                    }
                    Some('"') => break,
                    Some(c) => ident.push(c),
                }
            }
            if ident.is_empty() {
                return Err(invalid("zero-length quoted identifier"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' || c == '"' {
                    break;
                }
                if !(c.is_alphanumeric() || c == '_' || c == '$') {
                    return Err(invalid(&format!(
                        "character {c:?} is not allowed in an unquoted identifier; quote the identifier"
                    )));
                }
                ident.push(c.to_ascii_lowercase());
                chars.next();
            }
            if ident.is_empty() {
                return Err(invalid("empty identifier"));
            }
            if ident.starts_with(|c: char| c.is_ascii_digit() || c == '$') {
                return Err(invalid(
                    "an unquoted identifier cannot start with a digit or '$'",
                ));
            }
        }
        parts.push(ident);
        match chars.next() {
            None => return Ok(parts),
            Some('.') => continue,
            Some(c) => return Err(invalid(&format!("unexpected {c:?} after identifier"))),
        }
    }
}

/// Writes `ident` as Postgres's `quote_ident` would: bare when it is lower-case
/// `[a-z_][a-z0-9_$]*` and not a reserved keyword, otherwise quoted with `""` escapes.
pub fn write_identifier(f: &mut impl fmt::Write, ident: &str) -> fmt::Result {
    let safe = ident
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && ident
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$')
        && !is_keyword_needing_quotes(ident);
    if safe {
        return f.write_str(ident);
    }
    f.write_char('"')?;
    for c in ident.chars() {
        if c == '"' {
            f.write_char('"')?;
        }
        f.write_char(c)?;
    }
    f.write_char('"')
}

/// Quotes `ident` like Postgres's `quote_ident`.
pub fn quote_identifier(ident: &str) -> String {
    let mut out = String::with_capacity(ident.len() + 2);
    let _ = write_identifier(&mut out, ident);
    out
}

/// Keywords that are reserved (or reserved as type/function names) in Postgres and so must
/// be quoted when used as a table or schema name.
fn is_keyword_needing_quotes(ident: &str) -> bool {
    KEYWORDS.binary_search(&ident).is_ok()
}

/// Sorted, for binary search.
const KEYWORDS: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "between",
    "bigint",
    "binary",
    "bit",
    "boolean",
    "both",
    "case",
    "cast",
    "char",
    "character",
    "check",
    "coalesce",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "dec",
    "decimal",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "exists",
    "extract",
    "false",
    "fetch",
    "float",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "greatest",
    "group",
    "grouping",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "inout",
    "int",
    "integer",
    "intersect",
    "interval",
    "into",
    "is",
    "isnull",
    "join",
    "json",
    "json_array",
    "json_arrayagg",
    "json_exists",
    "json_object",
    "json_objectagg",
    "json_query",
    "json_scalar",
    "json_serialize",
    "json_table",
    "json_value",
    "lateral",
    "leading",
    "least",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "merge_action",
    "national",
    "natural",
    "nchar",
    "none",
    "normalize",
    "not",
    "notnull",
    "null",
    "nullif",
    "numeric",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "out",
    "outer",
    "overlaps",
    "overlay",
    "placing",
    "position",
    "precision",
    "primary",
    "real",
    "references",
    "returning",
    "right",
    "row",
    "select",
    "session_user",
    "setof",
    "similar",
    "smallint",
    "some",
    "substring",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "to",
    "trailing",
    "treat",
    "trim",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "values",
    "varchar",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
    "xmlattributes",
    "xmlconcat",
    "xmlelement",
    "xmlexists",
    "xmlforest",
    "xmlnamespaces",
    "xmlparse",
    "xmlpi",
    "xmlroot",
    "xmlserialize",
    "xmltable",
];

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_identifier(f, &self.schema)?;
        f.write_str(".")?;
        write_identifier(f, &self.name)
    }
}

impl FromStr for TableName {
    type Err = TableNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TableName::parse(s)
    }
}

impl Serialize for TableName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TableName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        TableName::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keyword_list_is_sorted_for_binary_search() {
        assert!(KEYWORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(is_keyword_needing_quotes("select"));
        assert!(is_keyword_needing_quotes("xmltable"));
        assert!(is_keyword_needing_quotes("all"));
        assert!(!is_keyword_needing_quotes("orders"));
    }

    #[test]
    fn folds_unquoted_and_keeps_quoted() {
        assert_eq!(
            TableName::parse("Public.Orders").unwrap(),
            TableName::new("public", "orders")
        );
        assert_eq!(
            TableName::parse(r#""My Schema"."Or.ders""x""#).unwrap(),
            TableName::new("My Schema", "Or.ders\"x")
        );
    }

    #[test]
    fn unqualified_is_an_error_that_says_to_qualify() {
        let err = TableName::parse("orders").unwrap_err();
        assert!(matches!(err, TableNameError::Unqualified { .. }));
        assert!(err.to_string().contains("public.orders"), "{err}");
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "", ".", "a.", ".b", "a.b.c", "\"a", "a.\"\"", "a b.c", "1a.b", "a.b\"c\"",
        ] {
            assert!(TableName::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn displays_with_quotes_only_where_needed() {
        assert_eq!(
            TableName::new("public", "orders").to_string(),
            "public.orders"
        );
        assert_eq!(
            TableName::new("public", "Orders").to_string(),
            "public.\"Orders\""
        );
        assert_eq!(
            TableName::new("a.b", "select").to_string(),
            "\"a.b\".\"select\""
        );
        assert_eq!(TableName::new("s", "x\"y").to_string(), "s.\"x\"\"y\"");
    }

    fn identifier() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z_][a-z0-9_$]{0,10}",
            "[A-Za-z0-9 ._\"$é-]{1,12}",
            Just("select".to_string()),
            Just("Mixed.Case\"Quote".to_string()),
        ]
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(schema in identifier(), name in identifier()) {
            let table = TableName::new(schema, name);
            let shown = table.to_string();
            prop_assert_eq!(TableName::parse(&shown), Ok(table.clone()), "{}", shown);
            let json = serde_json::to_string(&table).unwrap();
            prop_assert_eq!(serde_json::from_str::<TableName>(&json).unwrap(), table);
        }
    }
}
