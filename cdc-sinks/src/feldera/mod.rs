//! Feldera-style JSON: change events as `insert_delete` envelopes that Feldera ingests
//! with `format=json`, `update_format=insert_delete`.
//!
//! - value → JSON: see the table below;
//! - [`FelderaEncoder`] — events → envelopes into [`Frame`]s;
//! - [`Policies`] — what to do with what Feldera cannot express (default: error);
//! - [`FelderaStreamSink`] — one multiplexed stream to any `std::io::Write`;
//! - [`crate::file::FelderaFileSink`] — durable, exactly-once files.
//!
//! Values are written as Feldera's parser expects them for the matching column type:
//!
//! | Value | JSON |
//! |---|---|
//! | null / bool / int2, int4, int8, oid | `null` / `true`, `false` / integer |
//! | float4, float8 | shortest round-trip number; NaN/±Infinity per [`NonFinitePolicy`] |
//! | numeric | string with every digit (`"-12.3400"`); NaN/±Infinity per policy |
//! | text | string |
//! | bytea | array of byte numbers `[222,173]` |
//! | date | `"YYYY-MM-DD"` |
//! | time | `"HH:MM:SS.ffffff"` |
//! | timestamp | `"YYYY-MM-DD HH:MM:SS.ffffff"` |
//! | timestamptz | `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` (RFC 3339, UTC) |
//! | out-of-range dates and times | per [`OutOfRangePolicy`] |
//! | timetz, interval | Postgres text as a string |
//! | uuid | `"hyphenated-lower-case"` |
//! | json, jsonb | the document inline (white space outside strings removed) |
//! | array | nested JSON arrays; lower bounds ≠ 1 per [`ArrayBoundsPolicy`] |
//! | other types (text form) | Postgres text as a string |
//! | other types (binary form), unchanged TOAST | `Rejected` |
//!
//! Envelopes ([`FelderaEncoder`]):
//!
//! - insert → `{"insert": row}`
//! - delete → `{"delete": row}`: the key columns for a table with a key, the full old row
//!   for a table without one
//! - update, key unchanged, table with a key → `{"update": {key + every sent column}}`:
//!   unchanged TOAST columns are omitted and keep their value in Feldera
//! - update that changes the key → `{"delete": old key}` then `{"insert": new row}`
//! - update of a table without a key → `{"delete": full old row}` then `{"insert": new row}`
//!   (needs `REPLICA IDENTITY FULL`)
//!
//! A pair is written as two envelopes, in that order, in the same output (Feldera versions
//! differ in the order they apply the keys of one object, so each object holds one).
//! Whatever cannot be expressed exactly is a `Rejected` error naming table, column and
//! position. The "key" of a table is [`cdc_core::TableSchema::key_indexes`]: its primary key, or its
//! replica identity index; the Feldera table must declare those columns as its PRIMARY
//! KEY (and no primary key when there is none).

mod envelope;
mod format;
mod frame;
mod policy;
mod stream;

pub use envelope::{EncoderOptions, EncoderStats, FelderaEncoder};
pub use frame::{Frame, FrameSet, Framing};
pub use policy::{
    ArrayBoundsPolicy, NonFinitePolicy, OutOfRangePolicy, Policies, PolicyCase, PolicyCount,
    PolicyLog, TruncatePolicy,
};
pub use stream::FelderaStreamSink;

pub(crate) use format::{ColumnCtx, write_value};

#[cfg(test)]
mod block_tests;
#[cfg(test)]
mod round_trip;
#[cfg(test)]
mod tests;
