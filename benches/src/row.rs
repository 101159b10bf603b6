//! The realistic mixed-type row of every benchmark: a bigint key, an int, a ~30 character
//! text, a numeric, a timestamptz, a small jsonb object, 16 bytes of bytea, a uuid and a
//! float8.
//!
//! The same row exists three ways: as SQL that fills a table on a real server
//! ([`create_table_sql`], [`insert_select_sql`]), as the text Postgres prints for each
//! column ([`text_values`], matching what the SQL produces for the same `g`), and as
//! pgoutput messages built with the crate's own encoders ([`relation`], [`insert`],
//! [`transaction`]), in text or binary tuple format.

use bytes::{Bytes, BytesMut};
use cdc_core::{Lsn, TypeOid};
use cdc_pgoutput::protocol::pgoutput::{
    Begin, ColumnValue, Commit, Insert, PgOutputMessage, Relation, RelationColumn, ReplicaIdentity,
    TupleData, encode,
};
use cdc_pgoutput::types::{TypeInfo, decode_text, encode_binary, oids};

/// Column name, type OID and SQL type of each column, in table order. The first column is
/// the primary key.
pub const COLUMNS: [(&str, TypeOid, &str); 9] = [
    ("id", oids::INT8, "bigint"),
    ("qty", oids::INT4, "integer"),
    ("name", oids::TEXT, "text"),
    ("amount", oids::NUMERIC, "numeric(12,2)"),
    ("at", oids::TIMESTAMPTZ, "timestamptz"),
    ("doc", oids::JSONB, "jsonb"),
    ("blob", oids::BYTEA, "bytea"),
    ("uid", oids::UUID, "uuid"),
    ("score", oids::FLOAT8, "double precision"),
];

/// How tuple values are sent: the type's text output (pgoutput's default) or its binary
/// send format (`binary 'true'`, PostgreSQL 14+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Column kind `t`.
    Text,
    /// Column kind `b`.
    Binary,
}

impl Format {
    /// `"text"` or `"binary"`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Binary => "binary",
        }
    }
}

/// `CREATE TABLE` for the row's table, with `id` as primary key.
pub fn create_table_sql(table: &str) -> String {
    let columns: Vec<String> = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (name, _, ty))| {
            if i == 0 {
                format!("{name} {ty} PRIMARY KEY")
            } else {
                format!("{name} {ty}")
            }
        })
        .collect();
    format!("CREATE TABLE {table} ({})", columns.join(", "))
}

/// The SQL expression of each column for row number `g` (a `generate_series` column);
/// [`text_values`] computes the same values client-side.
const SQL_EXPRESSIONS: [&str; 9] = [
    "g",
    "((g * 7) % 1000000)::int",
    "'customer name number ' || lpad(g::text, 8, '0') || ' x'",
    "((g % 100000) * 1.37)::numeric(12,2)",
    "timestamptz '2024-05-01 00:00:00+00' + g * interval '1 second'",
    "jsonb_build_object('k', g, 'tag', 'abc', 'ok', true)",
    "decode(md5(g::text), 'hex')",
    "md5(g::text)::uuid",
    "g / 7.0::float8",
];

/// `INSERT INTO table SELECT … FROM generate_series(from, to) g`: rows `from..=to`. The
/// bounds are SQL expressions (numbers, or e.g. PL/pgSQL variables).
pub fn insert_select_sql(
    table: &str,
    from: impl std::fmt::Display,
    to: impl std::fmt::Display,
) -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
    format!(
        "INSERT INTO {table} ({}) SELECT {} FROM generate_series(({from})::bigint, ({to})::bigint) g",
        names.join(", "),
        SQL_EXPRESSIONS.join(", ")
    )
}

/// The type of each column, resolved once (as the relation cache does).
pub fn type_infos() -> Vec<TypeInfo> {
    COLUMNS.iter().map(|c| TypeInfo::builtin(c.1)).collect()
}

/// A 64-bit mix of `x` (splitmix64), for bytes that look random but are reproducible.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The text Postgres prints for each column of row `g` (with `TimeZone = UTC`), the shape
/// of what [`insert_select_sql`] inserts (the 16 random-looking bytes differ: they are not
/// an MD5 here).
pub fn text_values(g: u64) -> [String; 9] {
    let a = mix(g);
    let b = mix(a);
    let bytes: Vec<u8> = a.to_be_bytes().into_iter().chain(b.to_be_bytes()).collect();
    let hex: String = bytes.iter().map(|x| format!("{x:02x}")).collect();
    let amount_cents = (g % 100_000) * 137;
    let secs = g % 86_400;
    let days = g / 86_400;
    [
        g.to_string(),
        ((g * 7) % 1_000_000).to_string(),
        format!("customer name number {g:08} x"),
        format!("{}.{:02}", amount_cents / 100, amount_cents % 100),
        format!(
            "2024-05-{:02} {:02}:{:02}:{:02}.{:06}+00",
            1 + days % 28,
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            a % 1_000_000
        ),
        format!("{{\"k\": {g}, \"ok\": true, \"tag\": \"abc\"}}"),
        format!("\\x{hex}"),
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        ),
        cdc_core::value::format_float8(g as f64 / 7.0),
    ]
}

/// Row `g` as tuple data in `format`. Binary values come from decoding the text and
/// encoding the value with the crate's binary encoder.
pub fn tuple(g: u64, format: Format, types: &[TypeInfo]) -> TupleData {
    let columns = text_values(g)
        .into_iter()
        .zip(types)
        .map(|(text, ty)| {
            let text = Bytes::from(text);
            match format {
                Format::Text => ColumnValue::Text(text),
                Format::Binary => {
                    let value = decode_text(ty, &text)
                        .unwrap_or_else(|e| panic!("fixture value {text:?} does not decode: {e}"));
                    let mut out = BytesMut::new();
                    encode_binary(ty, &value, &mut out)
                        .unwrap_or_else(|e| panic!("fixture value {value:?} does not encode: {e}"));
                    ColumnValue::Binary(out.freeze())
                }
            }
        })
        .collect();
    TupleData::new(columns)
}

/// The Relation message of the row's table `public.bench` (replica identity default: the
/// key column is flagged).
pub fn relation(relation_id: u32) -> Relation {
    Relation {
        xid: None,
        relation_id,
        namespace: "public".into(),
        name: "bench".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: COLUMNS
            .iter()
            .enumerate()
            .map(|(i, (name, oid, _))| RelationColumn {
                flags: u8::from(i == 0),
                name: (*name).into(),
                type_oid: *oid,
                type_modifier: -1,
            })
            .collect(),
    }
}

/// The Insert message of row `g`.
pub fn insert(relation_id: u32, g: u64, format: Format, types: &[TypeInfo]) -> PgOutputMessage {
    PgOutputMessage::Insert(Insert {
        xid: None,
        relation_id,
        new: tuple(g, format, types),
    })
}

/// Encodes `messages` into one buffer and returns each message's payload as a slice of it
/// (as the replication stream hands them out: zero-copy slices of what was read).
pub fn payloads(messages: &[PgOutputMessage]) -> Vec<Bytes> {
    let mut buf = BytesMut::new();
    let mut ends = Vec::with_capacity(messages.len());
    for message in messages {
        encode(message, &mut buf).unwrap_or_else(|e| panic!("fixture does not encode: {e}"));
        ends.push(buf.len());
    }
    let buf = buf.freeze();
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let slice = buf.slice(start..end);
            start = end;
            slice
        })
        .collect()
}

/// Payloads of `rows` Insert messages (rows `first..first + rows`).
pub fn insert_payloads(relation_id: u32, first: u64, rows: u64, format: Format) -> Vec<Bytes> {
    let types = type_infos();
    let messages: Vec<PgOutputMessage> = (first..first + rows)
        .map(|g| insert(relation_id, g, format, &types))
        .collect();
    payloads(&messages)
}

/// Payloads of one transaction: Begin, `rows` Inserts, Commit. Commit LSNs are fixed, so
/// the same transaction can be fed to an assembler again and again.
pub fn transaction(relation_id: u32, first: u64, rows: u64, format: Format) -> Vec<Bytes> {
    let types = type_infos();
    let lsn = Lsn(0x1_0000_0000);
    let mut messages = Vec::with_capacity(rows as usize + 2);
    messages.push(PgOutputMessage::Begin(Begin {
        final_lsn: lsn,
        commit_timestamp: 768_000_000_000_000,
        xid: 1000,
    }));
    messages.extend((first..first + rows).map(|g| insert(relation_id, g, format, &types)));
    messages.push(PgOutputMessage::Commit(Commit {
        flags: 0,
        commit_lsn: lsn,
        end_lsn: Lsn(lsn.0 + 64),
        commit_timestamp: 768_000_000_000_000,
    }));
    payloads(&messages)
}

/// Payload of the Relation message alone.
pub fn relation_payload(relation_id: u32) -> Bytes {
    payloads(&[PgOutputMessage::Relation(relation(relation_id))])
        .pop()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn text_values_decode_as_their_types() {
        let types = type_infos();
        for g in [0, 1, 12_345, 999_999] {
            for (text, ty) in text_values(g).iter().zip(&types) {
                decode_text(ty, &Bytes::from(text.clone())).unwrap();
            }
        }
    }
}
