//! TEMPORARY: the hand-written JSON renderer this split replaces, kept only to compare its
//! bytes with the serde renderer's; deleted once golden strings hold the expected output.

use cdc_core::value::TimestampTz;
use cdc_core::{
    ChangeEvent, Error, EventKind, OldRow, OldRowKind, Result, Row, SnapshotMarker, TableSchema,
    Value,
};

use crate::feldera::{ColumnCtx, Policies, PolicyLog, write_value};
use crate::json::{write_int, write_str};

#[derive(Debug)]
pub(super) struct Legacy {
    pub(super) policies: Policies,
    pub(super) log: PolicyLog,
}

impl Legacy {
    pub(super) fn new() -> Self {
        Legacy {
            policies: Policies::lossless(),
            log: PolicyLog::default(),
        }
    }

    pub(super) fn render_json(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        let result = self.render_json_inner(event, out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn render_json_inner(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<()> {
        let pos = event.position;
        let op = match &event.kind {
            EventKind::Begin(_) => "begin",
            EventKind::Commit(_) => "commit",
            EventKind::Insert { .. } => "insert",
            EventKind::Update { .. } => "update",
            EventKind::Delete { .. } => "delete",
            EventKind::Truncate { .. } => "truncate",
            EventKind::SchemaChange { .. } => "schema_change",
            EventKind::Message { .. } => "message",
            EventKind::Snapshot(_) => "snapshot",
        };
        out.extend_from_slice(b"{\"op\":\"");
        out.extend_from_slice(op.as_bytes());
        out.extend_from_slice(b"\",\"position\":");
        write_str(out, &pos.to_string());
        if let Some(table) = event.table() {
            out.extend_from_slice(b",\"table\":");
            write_str(out, &table.name.to_string());
        }
        match &event.kind {
            EventKind::Begin(b) => {
                out.extend_from_slice(b",\"xid\":");
                write_int(out, b.xid);
                out.extend_from_slice(b",\"final_lsn\":");
                write_str(out, &b.final_lsn.to_string());
                self.commit_time(out, b.commit_time_micros, event)?;
            }
            EventKind::Commit(c) => {
                out.extend_from_slice(b",\"commit_lsn\":");
                write_str(out, &c.commit_lsn.to_string());
                out.extend_from_slice(b",\"end_lsn\":");
                write_str(out, &c.end_lsn.to_string());
                self.commit_time(out, c.commit_time_micros, event)?;
            }
            EventKind::Insert { table, new } => {
                self.json_row(out, "new", table, new, |_| true, event)?;
            }
            EventKind::Update { table, old, new } => {
                self.json_old(out, table, old.as_ref(), event)?;
                self.json_row(out, "new", table, new, |v| !v.is_unchanged(), event)?;
                let unchanged: Vec<&str> = table
                    .columns
                    .iter()
                    .zip(new)
                    .filter(|(_, v)| v.is_unchanged())
                    .map(|(c, _)| c.name.as_str())
                    .collect();
                if !unchanged.is_empty() {
                    out.extend_from_slice(b",\"unchanged\":[");
                    for (i, name) in unchanged.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        write_str(out, name);
                    }
                    out.push(b']');
                }
            }
            EventKind::Delete { table, old } => self.json_old(out, table, old.as_ref(), event)?,
            EventKind::Truncate {
                tables,
                cascade,
                restart_identity,
            } => {
                out.extend_from_slice(b",\"tables\":[");
                for (i, t) in tables.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_str(out, &t.name.to_string());
                }
                out.extend_from_slice(b"],\"cascade\":");
                out.extend_from_slice(if *cascade { b"true" } else { b"false" });
                out.extend_from_slice(b",\"restart_identity\":");
                out.extend_from_slice(if *restart_identity { b"true" } else { b"false" });
            }
            EventKind::SchemaChange { new, .. } => {
                out.extend_from_slice(b",\"schema\":");
                serde_json::to_writer(&mut *out, &**new).map_err(|e| {
                    Error::sink("serializing a schema for the stdout sink failed").with_source(e)
                })?;
            }
            EventKind::Message {
                transactional,
                prefix,
                content,
            } => {
                out.extend_from_slice(b",\"transactional\":");
                out.extend_from_slice(if *transactional { b"true" } else { b"false" });
                out.extend_from_slice(b",\"prefix\":");
                write_str(out, prefix);
                out.extend_from_slice(b",\"content\":");
                match std::str::from_utf8(content) {
                    Ok(text) => write_str(out, text),
                    Err(_) => {
                        out.push(b'[');
                        for (i, b) in content.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            write_int(out, *b);
                        }
                        out.push(b']');
                    }
                }
            }
            EventKind::Snapshot(marker) => {
                let (name, table) = match marker {
                    SnapshotMarker::Started => ("started", None),
                    SnapshotMarker::Restarted => ("restarted", None),
                    SnapshotMarker::TableStarted(t) => ("table_started", Some(t)),
                    SnapshotMarker::TableCompleted { table, rows } => {
                        out.extend_from_slice(b",\"rows\":");
                        write_int(out, *rows);
                        ("table_completed", Some(table))
                    }
                    SnapshotMarker::Completed { consistent_point } => {
                        out.extend_from_slice(b",\"consistent_point\":");
                        write_str(out, &consistent_point.to_string());
                        ("completed", None)
                    }
                };
                out.extend_from_slice(b",\"marker\":");
                write_str(out, name);
                if let Some(t) = table {
                    out.extend_from_slice(b",\"table\":");
                    write_str(out, &t.to_string());
                }
            }
        }
        out.extend_from_slice(b"}\n");
        Ok(())
    }

    fn commit_time(&mut self, out: &mut Vec<u8>, micros: i64, event: &ChangeEvent) -> Result<()> {
        out.extend_from_slice(b",\"commit_time\":");
        let table = cdc_core::TableName::new("", "");
        let ctx = ColumnCtx {
            table: &table,
            relation_id: 0,
            column: "commit_time",
            index: 0,
            position: event.position,
        };
        write_value(
            out,
            &Value::TimestampTz(TimestampTz::Micros(micros)),
            &self.policies,
            &mut self.log,
            &ctx,
        )
    }

    fn json_old(
        &mut self,
        out: &mut Vec<u8>,
        table: &TableSchema,
        old: Option<&OldRow>,
        event: &ChangeEvent,
    ) -> Result<()> {
        match old {
            None => out.extend_from_slice(b",\"old\":null"),
            Some(old) => {
                out.extend_from_slice(b",\"old_kind\":");
                out.extend_from_slice(match old.kind {
                    OldRowKind::Key => b"\"key\"",
                    OldRowKind::Full => b"\"full\"",
                });
                let key_only = old.kind == OldRowKind::Key;
                let keys: Vec<bool> = table.columns.iter().map(|c| c.part_of_key).collect();
                let mut idx = 0usize;
                self.json_row(
                    out,
                    "old",
                    table,
                    &old.values,
                    |v| {
                        let i = idx;
                        idx += 1;
                        !v.is_unchanged() && (!key_only || keys.get(i).copied().unwrap_or(true))
                    },
                    event,
                )?;
            }
        }
        Ok(())
    }

    fn json_row(
        &mut self,
        out: &mut Vec<u8>,
        name: &str,
        table: &TableSchema,
        row: &Row,
        mut include: impl FnMut(&Value) -> bool,
        event: &ChangeEvent,
    ) -> Result<()> {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":{");
        let mut first = true;
        for (i, (column, value)) in table.columns.iter().zip(row).enumerate() {
            if !include(value) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_str(out, &column.name);
            out.push(b':');
            let ctx = ColumnCtx {
                table: &table.name,
                relation_id: table.relation_id,
                column: &column.name,
                index: i,
                position: event.position,
            };
            write_value(out, value, &self.policies, &mut self.log, &ctx)?;
        }
        out.push(b'}');
        Ok(())
    }
}
