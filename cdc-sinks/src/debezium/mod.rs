//! Debezium's PostgreSQL change-event format: what Debezium's consumers read (Feldera's
//! `debezium_postgres` JSON flavor, Flink's `debezium-json`, Kafka Connect sinks).
//!
//! [`DebeziumEncoder`] turns change events into records, one JSON line each (on stdout,
//! or durably in the file sink, which saves the encoder's [`DebeziumState`] with each
//! checkpoint):
//! `{"key": <key document>, "value": <envelope>, "destination": "<name>.<schema>.<table>"}`
//! — the key, value and topic Debezium's embedded engine hands out, the key and value as
//! its JSON converter writes them: with `schemas.enable=false` the documents themselves,
//! with `schemas.enable=true` (Debezium's default, [`DebeziumOptions::schemas`]) each as
//! `{"schema": <Kafka Connect schema>, "payload": <document>}`. Feldera's Debezium input
//! reads the `payload` of such values.
//!
//! | event | records (`op`) |
//! |---|---|
//! | insert (streamed) / row of a snapshot copy | `c` / `r`, `before` null |
//! | update, key unchanged | `u`; `before` the full old row under `REPLICA IDENTITY FULL`, else null |
//! | update that changes the primary key | `d` (old key), a tombstone, `c` (new row) |
//! | delete | `d`, `before` the old row as the replica identity logged it (key columns, other columns null; or the full row), then a tombstone (`value` null) |
//! | TRUNCATE | one `t` per table, key null ([`DebeziumOptions::truncate`]) |
//! | transaction ([`DebeziumOptions::transaction_metadata`]) | a BEGIN record before its first change (`id` `<xid>:<its LSN>`), an END record after its last (`<xid>:<end LSN>`, event counts per table) on `<name>.transaction`; each change's `transaction` block gives its order |
//!
//! The key is the primary key's columns in key order (null for a table without one). The
//! `source` block has `connector: "postgresql"`, `name`, `db`, `schema`, `table`, `txId`,
//! `ts_ms` of the commit, `snapshot`, `lsn` and `sequence`. A snapshot row's `snapshot`
//! says where it stands as Debezium's do: `first` (the snapshot's first row),
//! `first_in_data_collection` (a later table's first), `last_in_data_collection` (a table's
//! last, also its only), `last` (the snapshot's last) or `true`; the encoder holds each
//! snapshot row until what follows it decides ([`DebeziumEncoder::end_of_batch`],
//! [`DebeziumEncoder::finish`]). Streamed changes say `false`.
//!
//! Values as Debezium writes them under its defaults:
//!
//! | PostgreSQL | JSON |
//! |---|---|
//! | boolean, smallint, integer, bigint, oid | JSON boolean / number |
//! | real, double precision | number; NaN and infinities as `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | numeric(p, s) | base64 of the unscaled value's two's-complement bytes |
//! | numeric | `{"scale": s, "value": <base64 of the unscaled value>}`; NaN and infinities null |
//! | money | as a `numeric(p, 2)` in the decimal mode (from its C-locale text; another `lc_monetary` is refused) |
//! | bit(1) | boolean |
//! | bit(n), bit varying | `io.debezium.data.Bits`: base64 of the bits, little-endian, without high zero bytes |
//! | point | `{"x", "y", "wkb", "srid"}` (`io.debezium.data.geometry.Point`; `wkb` little-endian, `srid` null) |
//! | text, varchar, char(n) (padded), name, enum, inet, cidr, macaddr, xml, tsvector, ranges | the text (an enum's schema lists its labels; a domain's schema is its base type's) |
//! | other types (box, circle, line, lseg, path, polygon, multiranges, composites) | the text as Postgres prints it (Debezium leaves such columns out) |
//! | bytea | base64 |
//! | date | days since 1970-01-01 |
//! | time(p) | milliseconds since midnight for p ≤ 3, microseconds otherwise |
//! | timetz | `"HH:MM:SS[.fraction]Z"`, in UTC |
//! | timestamp(p) | milliseconds since the epoch for p ≤ 3, microseconds otherwise |
//! | timestamptz | `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` |
//! | interval | microseconds, a month counted as 30.4375 days |
//! | hstore | a string holding the JSON object of its pairs |
//! | uuid | hyphenated string |
//! | json, jsonb | the document's text, as a string |
//! | arrays | JSON arrays of the elements, nested one level per dimension |
//! | unchanged TOASTed value | `"__debezium_unavailable_value"` |
//!
//! `source.lsn` is the change's own WAL position (the message that carried it) and
//! `source.sequence` `[<end LSN of the transaction before>, <lsn>]`, as Debezium gives them.
//!
//! Where pgcdc differs from Debezium today (the comparison tests name each case):
//! `source.version` is pgcdc's; snapshot rows carry no `txId` (Debezium: its snapshot
//! transaction's); Debezium's JSON converter writes a column's DEFAULT in place of a NULL
//! (`replace.null.with.default`), pgcdc writes the NULL; where Debezium cannot write a
//! value, pgcdc writes it: multi-dimensional arrays (Debezium: nulls), `numeric[]` and
//! `bit[]` (null), `interval[]`, `money[]`, `point[]` and types it does not know (the
//! column left out), `name` in streamed inserts (null); dates before 1582 and infinite
//! dates of a snapshot row as Debezium streams them (its snapshot reads them through
//! JDBC's Julian calendar).

mod envelope;
mod hstore;
mod schema;
mod value;

pub use envelope::{DebeziumEncoder, DebeziumOptions, DebeziumState, RecordSpan};
pub use value::UNAVAILABLE_VALUE;

/// How times and timestamps are written: Debezium's `time.precision.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TimePrecision {
    /// `time(p)` and `timestamp(p)` in milliseconds for p ≤ 3, else microseconds.
    /// Debezium's default.
    #[default]
    Adaptive,
    /// As `Adaptive`, but every `time` in microseconds.
    AdaptiveTimeMicroseconds,
    /// Kafka Connect's own types: `time` and `timestamp` in milliseconds.
    Connect,
}

/// How `bytea` is written: Debezium's `binary.handling.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BinaryMode {
    /// Connect `bytes` (base64 in JSON). Debezium's default.
    #[default]
    Bytes,
    /// A base64 string.
    Base64,
    /// A URL-safe base64 string.
    Base64UrlSafe,
    /// A lower-case hex string.
    Hex,
}

/// How `interval` is written: Debezium's `interval.handling.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IntervalMode {
    /// Microseconds, a month counted as 30.4375 days (`io.debezium.time.MicroDuration`).
    /// Debezium's default.
    #[default]
    Numeric,
    /// ISO 8601, `P<y>Y<m>M<d>DT<h>H<m>M<s>S` (`io.debezium.time.Interval`): exact.
    String,
}

/// How `hstore` is written: Debezium's `hstore.handling.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HstoreMode {
    /// A string holding a JSON object (`io.debezium.data.Json`). Debezium's default.
    #[default]
    Json,
    /// A JSON object, a Kafka Connect `map` of strings.
    Map,
}

/// The value modes one encoder writes with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Modes {
    pub decimals: DecimalMode,
    pub time: TimePrecision,
    pub binary: BinaryMode,
    pub interval: IntervalMode,
    pub hstore: HstoreMode,
}

/// How numerics are written: Debezium's `decimal.handling.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DecimalMode {
    /// Exact: `numeric(p, s)` as the unscaled value's bytes, `numeric` as
    /// `{"scale", "value"}`; NaN and infinities null. Debezium's default.
    #[default]
    Precise,
    /// The number's text (`"1234.567"`); NaN and infinities as `"NAN"`,
    /// `"POSITIVE_INFINITY"`, `"NEGATIVE_INFINITY"`. The decimals Feldera's
    /// `debezium_postgres` JSON flavor reads (docs/formats.md: "Feldera's Debezium input").
    String,
    /// A JSON number (rounded to a double); NaN and infinities as strings.
    Double,
}

#[cfg(test)]
mod tests;
