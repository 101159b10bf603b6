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
    }
}

fn snapshot(marker: &SnapshotMarker) -> Body<'_> {
    let (marker, table, rows, consistent_point) = match marker {
        SnapshotMarker::Started => ("started", None, None, None),
        SnapshotMarker::Restarted => ("restarted", None, None, None),
        SnapshotMarker::TableStarted(t) => ("table_started", Some(t), None, None),
        SnapshotMarker::TableCompleted { table, rows } => {
            ("table_completed", Some(table), Some(*rows), None)
        }
        SnapshotMarker::Completed { consistent_point } => {
            ("completed", None, None, Some(Shown(*consistent_point)))
        }
    };
    Body::Snapshot {
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
    use super::super::fixtures;
    use super::super::legacy_json::Legacy;
    use super::*;
    use crate::testing::{self, arb_value, insert, old_full, pos, update};
    use cdc_core::{ReplicaIdentity, Text};
    use proptest::prelude::*;

    fn both(
        old: &mut Legacy,
        new: &mut JsonRenderer,
        event: &ChangeEvent,
    ) -> (Result<String>, Result<String>) {
        let (mut a, mut b) = (b"kept".to_vec(), b"kept".to_vec());
        let ra = old
            .render_json(event, &mut a)
            .map(|()| String::from_utf8(a).unwrap());
        let rb = new
            .render(event, &mut b)
            .map(|()| String::from_utf8(b).unwrap());
        (ra, rb)
    }

    /// The serde renderer writes exactly the bytes of the hand-written one it replaced,
    /// for every event of the fixtures, fails where it failed, and counts the same policy
    /// applications.
    #[test]
    fn same_bytes_as_the_hand_written_renderer() {
        let mut new = JsonRenderer::new();
        let mut old = Legacy::new();
        for event in fixtures::events() {
            let (a, b) = both(&mut old, &mut new, &event);
            assert_eq!(b.unwrap(), a.unwrap(), "{event:?}");
        }
        for event in fixtures::rejected_events() {
            let (a, b) = both(&mut old, &mut new, &event);
            assert_eq!(format!("{b:?}"), format!("{a:?}"));
            println!("{a:?}");
        }
        assert_eq!(new.log.counts(), old.log.counts());
        assert!(new.log.total() > 10);
    }

    #[test]
    fn json_edge_cases_compared() {
        let t = testing::table(
            "j",
            &[("id", 23), ("j", 114)],
            &["id"],
            ReplicaIdentity::Default,
        );
        let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
        for doc in [
            "{abc}",
            "[1,]",
            "{\"a\" 1}",
            "[\"\\ud800\"]",
            "-0",
            "1E+2",
            deep.as_str(),
        ] {
            let event = insert(
                pos(1, 1),
                &t,
                vec![
                    cdc_core::Value::Int4(1),
                    cdc_core::Value::Json(Text::from(doc)),
                ],
            );
            let (a, b) = both(&mut Legacy::new(), &mut JsonRenderer::new(), &event);
            let short = |r: &Result<String>| format!("{r:?}").chars().take(300).collect::<String>();
            println!(
                "DOC {:.40}\n  old: {}\n  new: {}",
                doc,
                short(&a),
                short(&b)
            );
        }
    }

    #[test]
    #[ignore]
    fn timing() {
        let events = fixtures::events();
        let n = 20_000;
        for round in 0..2 {
            let mut out = Vec::with_capacity(1 << 20);
            let mut old = Legacy::new();
            let t = std::time::Instant::now();
            for _ in 0..n {
                out.clear();
                for e in &events {
                    old.render_json(e, &mut out).unwrap();
                }
            }
            let old_t = t.elapsed();
            let bytes = out.len();
            let mut new = JsonRenderer::new();
            let t = std::time::Instant::now();
            for _ in 0..n {
                out.clear();
                for e in &events {
                    new.render(e, &mut out).unwrap();
                }
            }
            let new_t = t.elapsed();
            let per = (n * events.len()) as f64;
            println!(
                "round {round}: {} events/pass, {bytes} bytes/pass; old {:?} ({:.0} ns/event), new {:?} ({:.0} ns/event), ratio {:.2}",
                events.len(),
                old_t,
                old_t.as_nanos() as f64 / per,
                new_t,
                new_t.as_nanos() as f64 / per,
                new_t.as_secs_f64() / old_t.as_secs_f64()
            );
        }
    }

    proptest! {
        #[test]
        fn same_bytes_for_arbitrary_rows(
            values in proptest::collection::vec(arb_value(false), 4),
            old_values in proptest::collection::vec(prop_oneof![3 => arb_value(false), 1 => Just(cdc_core::Value::Unchanged)], 4),
            unchanged in proptest::collection::vec(any::<bool>(), 4),
        ) {
            let t = testing::table("p", &[("a", 0), ("b\"", 0), ("c\n", 0), ("ü", 0)], &["a"], ReplicaIdentity::Full);
            let new_row: Vec<cdc_core::Value> = values.iter().zip(&unchanged).map(|(v, u)| if *u { cdc_core::Value::Unchanged } else { v.clone() }).collect();
            let events = [
                insert(pos(7, 1), &t, values.clone()),
                update(pos(7, 2), &t, old_full(old_values.clone()), new_row.clone()),
                update(pos(7, 3), &t, crate::testing::old_key(old_values.clone()), new_row),
                testing::delete(pos(7, 4), &t, old_full(old_values)),
            ];
            let mut new = JsonRenderer::new();
            let mut old = Legacy::new();
            for event in &events {
                let (a, b) = both(&mut old, &mut new, event);
                prop_assert_eq!(format!("{b:?}"), format!("{a:?}"));
            }
            prop_assert_eq!(new.log.counts(), old.log.counts());
        }
    }
}
