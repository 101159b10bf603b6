//! The stdout sink's JSON mode: one JSON object per event, for debugging.
//!
//! The object is a set of small views borrowing the event, serialized with serde. Column
//! values (and commit times) are first written by the Feldera encoder under
//! [`Policies::lossless`], then spliced in as raw JSON, so the stdout and Feldera outputs
//! cannot disagree on how a value looks, and the policy log sees every value once, in
//! column order, old row before new.

use std::fmt;

use cdc_core::value::TimestampTz;
use cdc_core::{
    ChangeEvent, ColumnSchema, Error, EventKind, Lsn, OldRow, OldRowKind, Position, Result, Row,
    SnapshotMarker, TableName, TableSchema, Value,
};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::feldera::{ColumnCtx, Policies, PolicyLog, write_value};

/// Renders events as JSON lines under the lossless policies, counting their applications.
#[derive(Debug)]
pub(super) struct JsonRenderer {
    policies: Policies,
    log: PolicyLog,
}

impl JsonRenderer {
    pub(super) fn new() -> Self {
        JsonRenderer {
            policies: Policies::lossless(),
            log: PolicyLog::default(),
        }
    }

    /// Appends the line (object and `\n`) for `event` to `out`. On error `out` is left as
    /// it was; values encoded before the failing one stay counted in the policy log.
    pub(super) fn render(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<()> {
        let line = self.line(event)?;
        let start = out.len();
        match serde_json::to_writer(&mut *out, &line) {
            Ok(()) => {
                out.push(b'\n');
                Ok(())
            }
            Err(e) => {
                out.truncate(start);
                Err(Error::sink("serializing an event for the stdout sink failed").with_source(e))
            }
        }
    }

    /// The view of `event`, with every value already encoded.
    fn line<'a>(&mut self, event: &'a ChangeEvent) -> Result<Line<'a>> {
        let position = event.position;
        let body = match &event.kind {
            EventKind::Begin(b) => Body::Begin {
                xid: b.xid,
                final_lsn: Shown(b.final_lsn),
                commit_time: self.commit_time(b.commit_time_micros, position)?,
            },
            EventKind::Commit(c) => Body::Commit {
                commit_lsn: Shown(c.commit_lsn),
                end_lsn: Shown(c.end_lsn),
                commit_time: self.commit_time(c.commit_time_micros, position)?,
            },
            EventKind::Insert { table, new } => Body::Insert {
                new: self.columns(table, new, position, |_, _| true)?,
            },
            EventKind::Update { table, old, new } => {
                // Old before new: the order the policy log and the first error follow.
                let old = self.old(table, old.as_ref(), position)?;
                let new_columns = self.columns(table, new, position, |_, v| !v.is_unchanged())?;
                Body::Update {
                    old,
                    new: new_columns,
                    unchanged: table
                        .columns
                        .iter()
                        .zip(new)
                        .filter(|(_, v)| v.is_unchanged())
                        .map(|(c, _)| c.name.as_str())
                        .collect(),
                }
            }
            EventKind::Delete { table, old } => Body::Delete {
                old: self.old(table, old.as_ref(), position)?,
            },
            EventKind::Truncate {
                tables,
                cascade,
                restart_identity,
            } => Body::Truncate {
                tables: tables.iter().map(|t| Shown(&t.name)).collect(),
                cascade: *cascade,
                restart_identity: *restart_identity,
            },
            EventKind::SchemaChange { new, .. } => Body::SchemaChange { schema: new },
            EventKind::Message {
                transactional,
                prefix,
                content,
            } => Body::Message {
                transactional: *transactional,
                prefix,
                content: match std::str::from_utf8(content) {
                    Ok(text) => Content::Text(text),
                    Err(_) => Content::Bytes(content),
                },
            },
            EventKind::Snapshot(marker) => snapshot(marker),
            _ => return Err(crate::unknown_event(event)),
        };
        Ok(Line {
            op: op_name(&event.kind),
            position: Shown(position),
            table: event.table().map(|t| Shown(&t.name)),
            body,
        })
    }

    /// A commit time in the form of a `timestamptz` column (out-of-range times as
    /// Postgres's text).
    fn commit_time(&mut self, micros: i64, position: Position) -> Result<Box<RawValue>> {
        let table = TableName::new("", "");
        let ctx = ColumnCtx {
            table: &table,
            relation_id: 0,
            column: "commit_time",
            index: 0,
            position,
        };
        self.encode(&Value::TimestampTz(TimestampTz::Micros(micros)), &ctx)
    }

    fn old<'a>(
        &mut self,
        table: &'a TableSchema,
        old: Option<&OldRow>,
        position: Position,
    ) -> Result<Old<'a>> {
        let Some(old) = old else {
            return Ok(Old::Missing { old: () });
        };
        // A key-only old row carries NULL placeholders in its other columns: not data.
        let key_only = old.kind == OldRowKind::Key;
        let columns = self.columns(table, &old.values, position, |c, v| {
            !v.is_unchanged() && (!key_only || c.part_of_key)
        })?;
        Ok(Old::Logged {
            old_kind: match old.kind {
                OldRowKind::Key => "key",
                OldRowKind::Full => "full",
            },
            old: columns,
        })
    }

    /// The columns of `row` that `include` keeps, with their encoded values.
    fn columns<'a>(
        &mut self,
        table: &'a TableSchema,
        row: &Row,
        position: Position,
        include: impl Fn(&ColumnSchema, &Value) -> bool,
    ) -> Result<Columns<'a>> {
        let mut columns = Vec::with_capacity(table.columns.len());
        for (index, (column, value)) in table.columns.iter().zip(row).enumerate() {
            if !include(column, value) {
                continue;
            }
            let ctx = ColumnCtx {
                table: &table.name,
                relation_id: table.relation_id,
                column: &column.name,
                index,
                position,
            };
            columns.push((column.name.as_str(), self.encode(value, &ctx)?));
        }
        Ok(Columns(columns))
    }

    /// `value` as the Feldera encoder writes it.
    ///
    /// A buffer per value and a second parse cost about 1.7 times the old hand-written
    /// renderer's time (some 1.4 µs against 0.8 µs an event in release): nothing next to
    /// the sink's blocking write, and it buys one encoder for both JSON outputs.
    fn encode(&mut self, value: &Value, ctx: &ColumnCtx<'_>) -> Result<Box<RawValue>> {
        let mut json = Vec::new();
        write_value(&mut json, value, &self.policies, &mut self.log, ctx)?;
        let json = String::from_utf8(json).map_err(|_| {
            ctx.reject(format!(
                "the {} value encoded to invalid UTF-8",
                value.kind_name()
            ))
        })?;
        // The encoder only checks a json/jsonb text for balanced brackets and quotes;
        // parsing it here keeps every line a JSON object even if a source sent broken
        // JSON (Postgres never does).
        RawValue::from_string(json).map_err(|e| {
            ctx.reject(format!(
                "{} value is not valid JSON ({e})",
                value.kind_name()
            ))
        })
    }
}

fn op_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::Begin(_) => "begin",
        EventKind::Commit(_) => "commit",
        EventKind::Insert { .. } => "insert",
        EventKind::Update { .. } => "update",
        EventKind::Delete { .. } => "delete",
        EventKind::Truncate { .. } => "truncate",
        EventKind::SchemaChange { .. } => "schema_change",
        EventKind::Message { .. } => "message",
        EventKind::Snapshot(_) => "snapshot",
        _ => "unknown",
    }
}

fn snapshot(marker: &SnapshotMarker) -> Body<'_> {
    let (marker, table, chunk, rows, consistent_point) = match marker {
        SnapshotMarker::Started => ("started", None, None, None, None),
        SnapshotMarker::Restarted => ("restarted", None, None, None, None),
        SnapshotMarker::TableStarted(t) => ("table_started", Some(t), None, None, None),
        SnapshotMarker::TableCompleted { table, rows } => {
            ("table_completed", Some(table), None, Some(*rows), None)
        }
        SnapshotMarker::Completed { consistent_point } => (
            "completed",
            None,
            None,
            None,
            Some(Shown(*consistent_point)),
        ),
        SnapshotMarker::ChunkStarted { table, chunk } => {
            ("chunk_started", Some(table), Some(*chunk), None, None)
        }
        SnapshotMarker::ChunkCompleted { table, chunk, rows } => (
            "chunk_completed",
            Some(table),
            Some(*chunk),
            Some(*rows),
            None,
        ),
        _ => ("unknown", None, None, None, None),
    };
    Body::Snapshot {
        chunk,
        rows,
        consistent_point,
        marker,
        table: table.map(Shown),
    }
}

/// One output line. Key order is part of the format: consumers may read it with tools that
/// keep it (`jq`), and tests compare bytes.
#[derive(Serialize)]
struct Line<'a> {
    op: &'static str,
    position: Shown<Position>,
    /// For events about one table (rows and schema changes).
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<Shown<&'a TableName>>,
    #[serde(flatten)]
    body: Body<'a>,
}

/// The fields particular to each kind of event.
#[derive(Serialize)]
#[serde(untagged)]
enum Body<'a> {
    Begin {
        xid: u32,
        final_lsn: Shown<Lsn>,
        commit_time: Box<RawValue>,
    },
    Commit {
        commit_lsn: Shown<Lsn>,
        end_lsn: Shown<Lsn>,
        commit_time: Box<RawValue>,
    },
    Insert {
        new: Columns<'a>,
    },
    Update {
        #[serde(flatten)]
        old: Old<'a>,
        /// Without the unchanged TOAST columns, which are named in `unchanged` instead.
        new: Columns<'a>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        unchanged: Vec<&'a str>,
    },
    Delete {
        #[serde(flatten)]
        old: Old<'a>,
    },
    Truncate {
        tables: Vec<Shown<&'a TableName>>,
        cascade: bool,
        restart_identity: bool,
    },
    SchemaChange {
        schema: &'a TableSchema,
    },
    Message {
        transactional: bool,
        prefix: &'a str,
        content: Content<'a>,
    },
    /// The counts and LSN come before the marker's name, as they always have.
    Snapshot {
        #[serde(skip_serializing_if = "Option::is_none")]
        chunk: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        rows: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        consistent_point: Option<Shown<Lsn>>,
        marker: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        table: Option<Shown<&'a TableName>>,
    },
}

/// The old row of an update or delete.
#[derive(Serialize)]
#[serde(untagged)]
enum Old<'a> {
    /// Postgres logged none: `"old":null`, and no `old_kind`.
    Missing { old: () },
    /// Key or full row, without unchanged TOAST columns (and, for a key, without the
    /// placeholder columns).
    Logged {
        old_kind: &'static str,
        old: Columns<'a>,
    },
}

/// Column name → encoded value, in column order.
struct Columns<'a>(Vec<(&'a str, Box<RawValue>)>);

impl Serialize for Columns<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, value)| (name, value)))
    }
}

/// A logical message's content: a string when it is UTF-8, else its bytes as numbers.
#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
}

/// A JSON string of `T`'s `Display` form (positions, LSNs, table names as Postgres would
/// quote them).
struct Shown<T>(T);

impl<T: fmt::Display> Serialize for Shown<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::{ErrorKind, ReplicaIdentity, Text};
    use proptest::prelude::*;

    use super::super::fixtures;
    use super::*;
    use crate::testing::{self, arb_value, insert, pos};

    /// The lines for [`fixtures::events`], without their `\n`. Written byte for byte by the
    /// hand-written renderer this one replaced (checked against it before it was deleted).
    const EXPECTED: [&str; 34] = [
        r#"{"op":"begin","position":"0/16B3748#0","xid":4294967295,"final_lsn":"0/16B3748","commit_time":"2000-01-01T00:00:00.000000Z"}"#,
        r#"{"op":"begin","position":"0/16B3748#0","xid":0,"final_lsn":"FFFFFFFF/FFFFFFFF","commit_time":"294277-01-09 04:00:54.775807+00"}"#,
        "{\"op\":\"insert\",\"position\":\"0/16B3748#1\",\"table\":\"public.scalars\",\"new\":{\"id\":9223372036854775807,\"b\":true,\"i2\":-32768,\"i4\":-1,\"o\":4294967295,\"f4\":1.5,\"f8\":0.1,\"n\":\"-12.3400\",\"t\":\"it's \\\"q\\\" \\\\ /\\n\\t\\r\\b\\f\\u0000\\u0001\\u001f\u{7f} é ☃ 😀 \u{2028}\u{2029}\",\"by\":[0,1,9,10,99,100,127,128,255],\"d\":\"2000-01-01\",\"tm\":\"12:34:56.789012\",\"ttz\":\"01:00:00+05:30\",\"ts\":\"1999-12-31 23:59:59.999999\",\"tstz\":\"2039-02-13T23:31:30.123456Z\",\"iv\":\"1 year 2 mons -3 days +01:02:03.000004\",\"u\":\"01234567-89ab-cdef-fedc-ba9876543210\",\"inet\":\"10.0.0.1/8\"}}",
        r#"{"op":"insert","position":"0/16B3748#2","table":"public.scalars","new":{"id":-9223372036854775808,"b":false,"i2":32767,"i4":-2147483648,"o":0,"f4":"NaN","f8":"NaN","n":"NaN","t":"","by":[],"d":"infinity","tm":"24:00:00","ttz":"00:00:00-09:30","ts":"-infinity","tstz":"infinity","iv":"00:00:00","u":"00000000-0000-0000-0000-000000000000","inet":"'quoted' \"text\""}}"#,
        r#"{"op":"insert","position":"0/16B3748#3","table":"public.scalars","new":{"id":0,"b":null,"i2":0,"i4":2147483647,"o":1,"f4":"Infinity","f8":"-Infinity","n":"Infinity","t":"ascii only","by":null,"d":"0739-02-03 BC","tm":"00:00:00.000000","ttz":null,"ts":"294277-01-09 04:00:54.775807","tstz":"-infinity","iv":"-1 mons -00:00:00.000001","u":null,"inet":null}}"#,
        r#"{"op":"insert","position":"0/16B3748#4","table":"public.scalars","new":{"id":-1,"b":null,"i2":null,"i4":null,"o":null,"f4":"-Infinity","f8":"Infinity","n":"-Infinity","t":null,"by":null,"d":"-infinity","tm":null,"ttz":null,"ts":"infinity","tstz":"290279-12-22 19:59:05.224192+00 BC","iv":null,"u":null,"inet":null}}"#,
        r#"{"op":"insert","position":"0/16B3748#5","table":"public.scalars","new":{"id":1,"b":null,"i2":null,"i4":null,"o":null,"f4":-0.0,"f8":-0.0,"n":"0","t":null,"by":null,"d":"9999-12-31","tm":null,"ttz":null,"ts":"9999-12-31 23:59:59.999999","tstz":"0001-01-01T00:00:00.000000Z","iv":null,"u":null,"inet":null}}"#,
        r#"{"op":"insert","position":"0/16B3748#6","table":"public.scalars","new":{"id":2,"b":null,"i2":null,"i4":null,"o":null,"f4":1.1754944e-38,"f8":5e-324,"n":"123456789012345678901234567890.000000000000000000001","t":null,"by":null,"d":null,"tm":null,"ttz":null,"ts":null,"tstz":null,"iv":null,"u":null,"inet":null}}"#,
        r#"{"op":"insert","position":"0/16B3748#7","table":"public.scalars","new":{"id":3,"b":null,"i2":null,"i4":null,"o":null,"f4":3.4028235e38,"f8":1e300,"n":"-0.5","t":null,"by":null,"d":null,"tm":null,"ttz":null,"ts":null,"tstz":null,"iv":null,"u":null,"inet":null}}"#,
        r#"{"op":"insert","position":"0/16B3748#8","table":"public.composites","new":{"id":1,"ints":[1,null,-3],"grid":[["a","b,c"],["\"q\"\n",null]],"empty":[],"bounded":"[0:1]={1,2}","floats":["NaN","Infinity",-0.0,2.5],"j":{"b":1,"a":[1,2.50,1e400,"x y\n\u00e9"],"b":null},"jb":{"a":{"b":[true,false,null,"\""]}}}}"#,
        r#"{"op":"insert","position":"0/16B3748#9","table":"public.composites","new":{"id":2,"ints":[0],"grid":"[-2:-2][1:2]={{7,NULL}}","empty":null,"bounded":null,"floats":[null],"j":"just a string","jb":12.50e3}}"#,
        "{\"op\":\"insert\",\"position\":\"0/16B3748#10\",\"table\":\"\\\"My Schema\\\".\\\"t\\\"\\\"x\\\\y\\\"\",\"new\":{\"Key \\\"1\\\"\":1,\"col\\nwith\\tcontrols\\u0001\":\"it's \\\"q\\\" \\\\ /\\n\\t\\r\\b\\f\\u0000\\u0001\\u001f\u{7f} é ☃ 😀 \u{2028}\u{2029}\",\"ünï☃\":\"ü\"}}",
        r#"{"op":"update","position":"0/16B3748#11","table":"\"My Schema\".\"t\"\"x\\y\"","old":null,"new":{"Key \"1\"":1,"ünï☃":null},"unchanged":["col\nwith\tcontrols\u0001"]}"#,
        r#"{"op":"update","position":"0/16B3748#12","table":"\"My Schema\".\"t\"\"x\\y\"","old_kind":"key","old":{"Key \"1\"":1},"new":{"Key \"1\"":2,"col\nwith\tcontrols\u0001":"x"},"unchanged":["ünï☃"]}"#,
        r#"{"op":"update","position":"0/16B3748#13","table":"public.\"full\"","old_kind":"full","old":{"id":1,"x":0.5},"new":{"id":1,"x":"NaN"},"unchanged":["big"]}"#,
        r#"{"op":"update","position":"0/16B3748#14","table":"public.\"full\"","old_kind":"full","old":{"id":1,"big":"big","x":null},"new":{},"unchanged":["id","big","x"]}"#,
        r#"{"op":"delete","position":"0/16B3748#15","table":"\"My Schema\".\"t\"\"x\\y\"","old":null}"#,
        r#"{"op":"delete","position":"0/16B3748#16","table":"\"My Schema\".\"t\"\"x\\y\"","old_kind":"key","old":{"Key \"1\"":2}}"#,
        r#"{"op":"delete","position":"0/16B3748#17","table":"public.\"full\"","old_kind":"full","old":{"id":1,"x":-0.0}}"#,
        r#"{"op":"truncate","position":"0/16B3748#18","tables":["public.scalars"],"cascade":false,"restart_identity":false}"#,
        r#"{"op":"truncate","position":"0/16B3748#19","tables":["public.scalars","\"My Schema\".\"t\"\"x\\y\""],"cascade":true,"restart_identity":true}"#,
        r#"{"op":"truncate","position":"0/16B3748#20","tables":[],"cascade":false,"restart_identity":true}"#,
        r#"{"op":"schema_change","position":"0/16B3748#21","table":"\"My Schema\".\"t\"\"x\\y\"","schema":{"name":"\"My Schema\".\"t\"\"x\\y\"","relation_id":16400,"columns":[{"name":"Key \"1\"","column_type":{"oid":23,"modifier":-1,"name":null},"nullable":false,"part_of_key":true},{"name":"col\nwith\tcontrols\u0001","column_type":{"oid":25,"modifier":-1,"name":"pg_catalog.text"},"nullable":true,"part_of_key":false},{"name":"ünï☃","column_type":{"oid":25,"modifier":-1,"name":null},"nullable":true,"part_of_key":false}],"replica_identity":"default","primary_key":["Key \"1\""]}}"#,
        r#"{"op":"schema_change","position":"0/16B3748#22","table":"\"My Schema\".renamed","schema":{"name":"\"My Schema\".renamed","relation_id":16400,"columns":[{"name":"Key \"1\"","column_type":{"oid":23,"modifier":-1,"name":null},"nullable":false,"part_of_key":true},{"name":"col\nwith\tcontrols\u0001","column_type":{"oid":25,"modifier":-1,"name":"pg_catalog.varchar"},"nullable":true,"part_of_key":false}],"replica_identity":"default","primary_key":["Key \"1\""]}}"#,
        "{\"op\":\"message\",\"position\":\"0/16B3748#23\",\"transactional\":true,\"prefix\":\"it's \\\"q\\\" \\\\ /\\n\\t\\r\\b\\f\\u0000\\u0001\\u001f\u{7f} é ☃ 😀 \u{2028}\u{2029}\",\"content\":\"it's \\\"q\\\" \\\\ /\\n\\t\\r\\b\\f\\u0000\\u0001\\u001f\u{7f} é ☃ 😀 \u{2028}\u{2029}\"}",
        r#"{"op":"message","position":"0/16B3748#24","transactional":false,"prefix":"","content":[0,65,255,195]}"#,
        r#"{"op":"message","position":"0/16B3748#25","transactional":false,"prefix":"p","content":""}"#,
        r#"{"op":"commit","position":"0/16B3748#26","commit_lsn":"0/16B3748","end_lsn":"0/16B3780","commit_time":"1999-12-30T23:59:59.999999Z"}"#,
        r#"{"op":"commit","position":"0/16B3748#27","commit_lsn":"0/0","end_lsn":"0/1","commit_time":"290279-12-22 19:59:05.224192+00 BC"}"#,
        r#"{"op":"snapshot","position":"1/0#0","marker":"started"}"#,
        r#"{"op":"snapshot","position":"1/0#1","marker":"restarted"}"#,
        r#"{"op":"snapshot","position":"1/0#2","marker":"table_started","table":"\"My Schema\".\"t\"\"x\\y\""}"#,
        r#"{"op":"snapshot","position":"1/0#3","rows":18446744073709551615,"marker":"table_completed","table":"public.scalars"}"#,
        r#"{"op":"snapshot","position":"1/0#4","consistent_point":"1/28","marker":"completed"}"#,
    ];

    fn render(renderer: &mut JsonRenderer, event: &ChangeEvent) -> Result<String> {
        let mut out = Vec::new();
        renderer.render(event, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn every_event_and_value_kind_renders_to_the_golden_bytes() {
        let mut renderer = JsonRenderer::new();
        let events = fixtures::events();
        assert_eq!(events.len(), EXPECTED.len());
        for (event, expected) in events.iter().zip(EXPECTED) {
            let line = render(&mut renderer, event).unwrap();
            assert_eq!(line, format!("{expected}\n"), "{event:?}");
            // IgnoredAny: a `serde_json::Value` would refuse `1e400`, which is valid JSON.
            serde_json::from_str::<serde::de::IgnoredAny>(&line).unwrap();
        }
    }

    #[test]
    fn every_policy_application_is_counted() {
        let mut renderer = JsonRenderer::new();
        for event in fixtures::events() {
            render(&mut renderer, &event).unwrap();
        }
        // 7 + 6 + 6 in the scalar rows, 3 + 1 in the array rows, 1 in an update, 2 commit
        // times.
        assert_eq!(renderer.log.total(), 26);
    }

    #[test]
    fn a_value_without_json_form_fails_the_event_and_leaves_the_buffer_alone() {
        let mut renderer = JsonRenderer::new();
        let expected = [
            "arrived in binary form",
            "an unchanged TOAST value",
            "not a single JSON document",
        ];
        let events = fixtures::rejected_events();
        assert_eq!(events.len(), expected.len());
        for (event, expected) in events.iter().zip(expected) {
            let mut out = b"kept".to_vec();
            let err = renderer.render(event, &mut out).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Rejected);
            assert!(err.to_string().contains(expected), "{err}");
            assert_eq!(out, b"kept");
        }
    }

    fn json_column(doc: &str) -> Result<String> {
        let t = testing::table(
            "j",
            &[("id", 23), ("j", 114)],
            &["id"],
            ReplicaIdentity::Default,
        );
        let event = insert(
            pos(1, 1),
            &t,
            vec![Value::Int4(1), Value::Json(Text::from(doc))],
        );
        render(&mut JsonRenderer::new(), &event)
    }

    /// The Feldera encoder checks json text only for balance, and used to be spliced in
    /// as is; now every line must parse, so balanced but invalid text (which Postgres
    /// never sends) is rejected rather than printed.
    #[test]
    fn balanced_but_invalid_json_text_is_rejected() {
        for doc in ["{abc}", "[1,]", "{\"a\" 1}"] {
            let err = json_column(doc).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Rejected);
            assert!(err.to_string().contains("not valid JSON"), "{err}");
        }
    }

    /// What Postgres's json accepts and a strict parser might not: deep nesting (no
    /// recursion limit when splicing), lone surrogate escapes, huge exponents.
    #[test]
    fn valid_json_text_is_spliced_verbatim() {
        let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
        for doc in [deep.as_str(), "[\"\\ud800\"]", "1e400", "-0", "1E+2"] {
            assert_eq!(
                json_column(doc).unwrap(),
                format!(
                    r#"{{"op":"insert","position":"0/1#1","table":"public.j","new":{{"id":1,"j":{doc}}}}}"#
                ) + "\n"
            );
        }
    }

    proptest! {
        /// Every line parses, and each column holds what the Feldera encoder writes for
        /// the value.
        #[test]
        fn values_are_the_feldera_encoders(values in proptest::collection::vec(arb_value(false), 4)) {
            let t = testing::table("p", &[("a", 0), ("b\"", 0), ("c\n", 0), ("ü", 0)], &["a"], ReplicaIdentity::Default);
            let event = insert(pos(7, 1), &t, values.clone());
            let line: serde_json::Value = serde_json::from_str(&render(&mut JsonRenderer::new(), &event).unwrap()).unwrap();
            let new = line["new"].as_object().unwrap();
            prop_assert_eq!(new.len(), t.columns.len());
            for (i, (column, value)) in t.columns.iter().zip(&values).enumerate() {
                let mut encoded = Vec::new();
                let ctx = ColumnCtx { table: &t.name, relation_id: t.relation_id, column: &column.name, index: i, position: event.position };
                write_value(&mut encoded, value, &Policies::lossless(), &mut PolicyLog::default(), &ctx).unwrap();
                let expected: serde_json::Value = serde_json::from_slice(&encoded).unwrap();
                prop_assert_eq!(&new[&column.name], &expected);
            }
        }
    }
}
