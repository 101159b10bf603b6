//! The stdout sink's text mode: one human-readable line per event, values in Postgres's
//! text form (`INSERT public.t @0/16B3748#1: id=1 name='x'`).

use cdc_core::{
    ChangeEvent, EventKind, OldRow, OldRowKind, Row, SnapshotMarker, TableSchema, Value,
    quote_identifier,
};

/// Appends the human-readable line for `event`.
pub(super) fn render(event: &ChangeEvent, out: &mut Vec<u8>) {
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
