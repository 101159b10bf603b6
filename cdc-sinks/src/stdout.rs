//! Human-readable or JSON lines, one per event, for demos and debugging.

use std::io::Write;

use async_trait::async_trait;
use cdc_core::value::TimestampTz;
use cdc_core::{
    Ack, Acknowledger, ChangeEvent, Error, EventKind, OldRow, OldRowKind, Result, ResumeToken, Row,
    Sink, SinkBatch, SnapshotMarker, TableSchema, Value, quote_identifier,
};

use crate::feldera::{ColumnCtx, Policies, PolicyLog, write_value};
use crate::json::{write_int, write_str};

/// How the stdout sink prints events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StdoutFormat {
    /// `INSERT public.t @0/16B3748#1: id=1 name='x'`. Default.
    #[default]
    Text,
    /// One JSON object per event: `{"op":"insert","table":"public.t","position":"0/16B3748#1","new":{…}}`.
    /// Values as in the Feldera encoding with [`Policies::lossless`] (NaN, infinities and
    /// out-of-range dates as strings); unchanged TOAST columns are left out of `new` and
    /// listed in `"unchanged"`.
    Json,
}

/// Prints every event to a writer (stdout by default).
///
/// Keeps no state: `open` returns `None`, a checkpoint is a flush. Writes are blocking
/// (fine for a terminal or a pipe; use it for demos and debugging, not throughput).
#[derive(Debug)]
pub struct StdoutSink<W> {
    writer: W,
    format: StdoutFormat,
    buf: Vec<u8>,
    policies: Policies,
    log: PolicyLog,
}

impl StdoutSink<std::io::Stdout> {
    /// A sink printing to the process's standard output.
    pub fn stdout(format: StdoutFormat) -> Self {
        StdoutSink::new(std::io::stdout(), format)
    }
}

impl<W: Write + Send> StdoutSink<W> {
    /// A sink printing to `writer` (tests pass a `Vec<u8>`).
    pub fn new(writer: W, format: StdoutFormat) -> Self {
        StdoutSink {
            writer,
            format,
            buf: Vec::with_capacity(16 * 1024),
            policies: Policies::lossless(),
            log: PolicyLog::default(),
        }
    }

    /// The writer.
    pub fn writer(&self) -> &W {
        &self.writer
    }

    /// Consumes the sink, returning the writer.
    pub fn into_writer(self) -> W {
        self.writer
    }

    /// Appends the line(s) for `event` to `out`.
    pub fn render(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<()> {
        match self.format {
            StdoutFormat::Text => {
                render_text(event, out);
                Ok(())
            }
            StdoutFormat::Json => self.render_json(event, out),
        }
    }

    fn render_json(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<()> {
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

/// Appends the human-readable line for `event`.
fn render_text(event: &ChangeEvent, out: &mut Vec<u8>) {
    use std::fmt::Write as _;
    let mut line = String::new();
    let pos = event.position;
    let _ = match &event.kind {
        EventKind::Begin(b) => write!(line, "BEGIN xid={} final_lsn={} @{pos}", b.xid, b.final_lsn),
        EventKind::Commit(c) => write!(
            line,
            "COMMIT lsn={} end_lsn={} @{pos}",
            c.commit_lsn, c.end_lsn
        ),
        EventKind::Insert { table, new } => {
            let _ = write!(line, "INSERT {} @{pos}:", table.name);
            text_row(&mut line, table, new, false);
            Ok(())
        }
        EventKind::Update { table, old, new } => {
            let _ = write!(line, "UPDATE {} @{pos}:", table.name);
            text_row(&mut line, table, new, false);
            text_old(&mut line, table, old.as_ref());
            Ok(())
        }
        EventKind::Delete { table, old } => {
            let _ = write!(line, "DELETE {} @{pos}:", table.name);
            text_old(&mut line, table, old.as_ref());
            Ok(())
        }
        EventKind::Truncate {
            tables,
            cascade,
            restart_identity,
        } => {
            let names: Vec<String> = tables.iter().map(|t| t.name.to_string()).collect();
            write!(
                line,
                "TRUNCATE {}{}{} @{pos}",
                names.join(", "),
                if *cascade { " CASCADE" } else { "" },
                if *restart_identity {
                    " RESTART IDENTITY"
                } else {
                    ""
                }
            )
        }
        EventKind::SchemaChange { old, new } => {
            let _ = write!(line, "SCHEMA {} @{pos}:", new.name);
            match old {
                Some(old) => {
                    let diffs = old.differences(new);
                    let _ = write!(line, " {}", diffs.join("; "));
                }
                None => {
                    for c in &new.columns {
                        let _ = write!(
                            line,
                            " {} {}",
                            quote_identifier(&c.name),
                            c.column_type
                                .name
                                .clone()
                                .unwrap_or_else(|| format!("oid {}", c.column_type.oid))
                        );
                    }
                }
            }
            Ok(())
        }
        EventKind::Message {
            transactional,
            prefix,
            content,
        } => write!(
            line,
            "MESSAGE prefix={prefix:?}{} @{pos}: {:?}",
            if *transactional { " transactional" } else { "" },
            String::from_utf8_lossy(content)
        ),
        EventKind::Snapshot(marker) => match marker {
            SnapshotMarker::Started => write!(line, "SNAPSHOT started @{pos}"),
            SnapshotMarker::Restarted => write!(line, "SNAPSHOT restarted @{pos}"),
            SnapshotMarker::TableStarted(t) => write!(line, "SNAPSHOT table {t} started @{pos}"),
            SnapshotMarker::TableCompleted { table, rows } => {
                write!(line, "SNAPSHOT table {table} completed, {rows} rows @{pos}")
            }
            SnapshotMarker::Completed { consistent_point } => write!(
                line,
                "SNAPSHOT completed, consistent point {consistent_point} @{pos}"
            ),
        },
    };
    line.push('\n');
    out.extend_from_slice(line.as_bytes());
}

fn text_old(line: &mut String, table: &TableSchema, old: Option<&OldRow>) {
    match old {
        None => line.push_str(" (no old row)"),
        Some(old) => {
            line.push_str(match old.kind {
                OldRowKind::Key => " (old key:",
                OldRowKind::Full => " (old:",
            });
            text_row(line, table, &old.values, old.kind == OldRowKind::Key);
            line.push(')');
        }
    }
}

fn text_row(line: &mut String, table: &TableSchema, row: &Row, key_only: bool) {
    for (column, value) in table.columns.iter().zip(row) {
        if key_only && !column.part_of_key {
            continue;
        }
        line.push(' ');
        line.push_str(&quote_identifier(&column.name));
        line.push('=');
        text_value(line, value);
    }
}

fn text_value(line: &mut String, value: &Value) {
    match value {
        Value::Null => line.push_str("NULL"),
        Value::Unchanged => line.push_str("<unchanged>"),
        Value::Bool(_)
        | Value::Int2(_)
        | Value::Int4(_)
        | Value::Int8(_)
        | Value::Oid(_)
        | Value::Float4(_)
        | Value::Float8(_)
        | Value::Numeric(_) => line.push_str(&value.to_pg_text().unwrap_or_default()),
        _ => match value.to_pg_text() {
            Some(text) => {
                line.push('\'');
                line.push_str(&text.replace('\'', "''"));
                line.push('\'');
            }
            None => line.push_str("<binary>"),
        },
    }
}

#[async_trait]
impl<W: Write + Send> Sink for StdoutSink<W> {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        Ok(None)
    }

    /// Renders every event of the batch and writes them; `Done` once written.
    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut result = Ok(());
        for event in &batch.batch.events {
            result = self.render(event, &mut buf);
            if result.is_err() {
                break;
            }
        }
        let result = result.and_then(|()| {
            self.writer
                .write_all(&buf)
                .map_err(|e| Error::sink("writing to the stdout sink failed").with_source(e))
        });
        self.buf = buf;
        result.map(|()| Ack::Done)
    }

    /// Flushes the writer; nothing is stored with the token.
    async fn checkpoint(&mut self, _token: &ResumeToken) -> Result<Ack> {
        self.writer
            .flush()
            .map_err(|e| Error::sink("flushing the stdout sink failed").with_source(e))?;
        Ok(Ack::Done)
    }

    async fn close(&mut self) -> Result<()> {
        self.writer
            .flush()
            .map_err(|e| Error::sink("flushing the stdout sink failed").with_source(e))
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::{ReplicaIdentity, Value};

    use super::*;
    use crate::testing::{self, batch, delete, insert, old_key, pos, text, update};

    fn output(format: StdoutFormat) -> String {
        let k = testing::table(
            "k",
            &[("id", 23), ("body", 25), ("x", 701)],
            &["id"],
            ReplicaIdentity::Default,
        );
        let events = vec![
            testing::begin(16),
            insert(
                pos(16, 1),
                &k,
                vec![Value::Int4(1), text("it's"), Value::Float8(f64::NAN)],
            ),
            update(
                pos(16, 2),
                &k,
                None,
                vec![Value::Int4(1), Value::Unchanged, Value::Null],
            ),
            update(
                pos(16, 3),
                &k,
                old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
                vec![Value::Int4(2), text("b"), Value::Float8(0.5)],
            ),
            delete(
                pos(16, 4),
                &k,
                old_key(vec![Value::Int4(2), Value::Null, Value::Null]),
            ),
            testing::commit(16, 5),
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut sink = StdoutSink::new(Vec::new(), format);
        rt.block_on(async {
            assert_eq!(sink.open(Acknowledger::channel().0).await.unwrap(), None);
            assert_eq!(sink.write(batch(0, events)).await.unwrap(), Ack::Done);
            assert_eq!(
                sink.checkpoint(&testing::token(None)).await.unwrap(),
                Ack::Done
            );
        });
        String::from_utf8(sink.into_writer()).unwrap()
    }

    #[test]
    fn text_lines_show_op_table_position_and_values() {
        assert_eq!(
            output(StdoutFormat::Text),
            "BEGIN xid=1 final_lsn=0/10 @0/10#0\n\
             INSERT public.k @0/10#1: id=1 body='it''s' x=NaN\n\
             UPDATE public.k @0/10#2: id=1 body=<unchanged> x=NULL (no old row)\n\
             UPDATE public.k @0/10#3: id=2 body='b' x=0.5 (old key: id=1)\n\
             DELETE public.k @0/10#4: (old key: id=2)\n\
             COMMIT lsn=0/10 end_lsn=0/18 @0/10#5\n"
        );
    }

    #[test]
    fn json_lines_are_valid_json_with_unchanged_columns_listed() {
        let out = output(StdoutFormat::Json);
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[0]["op"], "begin");
        assert_eq!(lines[0]["commit_time"], "2000-01-01T00:00:00.000000Z");
        assert_eq!(
            lines[1]["new"],
            serde_json::json!({"id": 1, "body": "it's", "x": "NaN"})
        );
        assert_eq!(lines[2]["new"], serde_json::json!({"id": 1, "x": null}));
        assert_eq!(lines[2]["unchanged"], serde_json::json!(["body"]));
        assert_eq!(lines[2]["old"], serde_json::Value::Null);
        assert_eq!(lines[3]["old"], serde_json::json!({"id": 1}));
        assert_eq!(lines[3]["old_kind"], "key");
        assert_eq!(lines[4]["op"], "delete");
        assert_eq!(lines[4]["table"], "public.k");
        assert_eq!(lines[4]["position"], "0/10#4");
        assert_eq!(lines[5]["end_lsn"], "0/18");
    }
}
