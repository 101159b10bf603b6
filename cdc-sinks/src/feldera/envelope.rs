//! Change events → Feldera `insert_delete` envelopes (rules in the `feldera` module docs).

use std::collections::HashMap;

use cdc_core::row_block::block_row_position;
use cdc_core::{
    ChangeEvent, Error, EventKind, FieldLayout, OldRow, OldRowKind, Position, ReplicaIdentity, Row,
    RowBlock, SchemaRef, TableName, TableSchema, Value,
};

use super::format::{ColumnCtx, write_value};
use super::frame::{Frame, FrameSet};
use super::policy::{Policies, PolicyCase, PolicyLog, TruncatePolicy};
use crate::json::{write_int, write_str, write_utf8};

/// Options of the Feldera-style encoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct EncoderOptions {
    /// What to do with values and events Feldera cannot express.
    pub policies: Policies,
    /// Add `"table":"schema.name"` to every envelope (for one multiplexed stream; Feldera
    /// accepts and ignores the key).
    pub table_key: bool,
}

impl EncoderOptions {
    /// Options with these `policies`, and the `table` key when `table_key`.
    pub const fn new(policies: Policies, table_key: bool) -> Self {
        EncoderOptions {
            policies,
            table_key,
        }
    }
}

/// A table's schema prepared for encoding: column keys pre-escaped.
#[derive(Debug)]
struct Prepared {
    schema: SchemaRef,
    /// `"name":` per column, escaped.
    keys: Vec<Vec<u8>>,
    /// Key column indexes; empty for a keyless table.
    key: Vec<usize>,
    is_key: Vec<bool>,
    /// `"table":"schema.name",`
    table_member: Vec<u8>,
}

impl Prepared {
    fn new(schema: &SchemaRef) -> Self {
        let keys = schema
            .columns
            .iter()
            .map(|c| {
                let mut k = Vec::with_capacity(c.name.len() + 3);
                write_str(&mut k, &c.name);
                k.push(b':');
                k
            })
            .collect();
        let key = schema.key_indexes();
        let mut is_key = vec![false; schema.columns.len()];
        for &k in &key {
            if let Some(slot) = is_key.get_mut(k) {
                *slot = true;
            }
        }
        let mut table_member = b"\"table\":".to_vec();
        write_str(&mut table_member, &schema.name.to_string());
        table_member.push(b',');
        Prepared {
            schema: schema.clone(),
            keys,
            key,
            is_key,
            table_member,
        }
    }
}

/// Encodes change events as Feldera JSON envelopes into [`Frame`]s.
///
/// Reuses per-table state across events (column keys are escaped once per schema) and
/// writes directly into the frame's buffer: no intermediate JSON value per row. Counts
/// every application of a non-error policy (see [`EncoderStats`]).
#[derive(Debug)]
pub struct FelderaEncoder {
    options: EncoderOptions,
    prepared: Vec<Prepared>,
    by_name: HashMap<TableName, usize>,
    last: usize,
    log: PolicyLog,
    /// Truncates skipped by policy, per table.
    stats: EncoderStats,
}

/// Counters of an encoder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncoderStats {
    /// Envelopes written.
    pub envelopes: u64,
    /// TRUNCATE statements skipped by [`TruncatePolicy::Skip`].
    pub truncates_skipped: u64,
    /// TRUNCATE markers written by [`TruncatePolicy::Marker`].
    pub truncate_markers: u64,
}

/// Which envelope key.
#[derive(Clone, Copy)]
enum Op {
    Insert,
    Delete,
    Update,
}

impl Op {
    fn member(self) -> &'static [u8] {
        match self {
            Op::Insert => b"\"insert\":",
            Op::Delete => b"\"delete\":",
            Op::Update => b"\"update\":",
        }
    }
}

/// Which values an envelope's row object holds: column `i` is written from `values[i]`
/// when `include(i)`.
struct RowSource<'r> {
    values: &'r [Value],
    /// Fallback for `Value::Unchanged` in `values` (the old full row).
    fill: Option<&'r [Value]>,
}

impl FelderaEncoder {
    /// An encoder with `options`.
    pub fn new(options: EncoderOptions) -> Self {
        FelderaEncoder::with_policy_log(options, PolicyLog::default())
    }

    /// An encoder with `options` that counts policy applications into `log` (shared with
    /// the caller's clones).
    pub fn with_policy_log(options: EncoderOptions, log: PolicyLog) -> Self {
        FelderaEncoder {
            options,
            prepared: Vec::new(),
            by_name: HashMap::new(),
            last: 0,
            log,
            stats: EncoderStats::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &EncoderOptions {
        &self.options
    }

    /// Every application of a non-error policy so far, per column.
    pub fn policy_log(&self) -> &PolicyLog {
        &self.log
    }

    /// Counters.
    pub fn stats(&self) -> &EncoderStats {
        &self.stats
    }

    /// Encodes one event into the frame(s) `frames` gives for its table.
    ///
    /// Row events produce one or two envelopes; `Commit` ends the transaction in every
    /// frame; `Truncate` follows [`TruncatePolicy`]; `SchemaChange` refreshes the table's
    /// prepared state; other events produce nothing. On error the frame is rolled back
    /// to where it was before the event: an event is written whole or not at all.
    pub fn encode_event(
        &mut self,
        event: &ChangeEvent,
        frames: &mut impl FrameSet,
    ) -> Result<(), Error> {
        let position = event.position;
        match &event.kind {
            EventKind::Insert { table, new } => {
                let idx = self.prepare(table);
                let frame = frames.frame(&table.name)?;
                self.with_rollback(frame, |enc, frame| {
                    enc.encode_insert(idx, frame, new, None, position)
                })
            }
            EventKind::InsertBlock { table, rows } => {
                let idx = self.prepare(table);
                let frame = frames.frame(&table.name)?;
                self.with_rollback(frame, |enc, frame| {
                    enc.encode_block(idx, frame, rows, position)
                })
            }
            EventKind::Update { table, old, new } => {
                let idx = self.prepare(table);
                let frame = frames.frame(&table.name)?;
                self.with_rollback(frame, |enc, frame| {
                    enc.encode_update(idx, frame, old.as_ref(), new, position)
                })
            }
            EventKind::Delete { table, old } => {
                let idx = self.prepare(table);
                let frame = frames.frame(&table.name)?;
                self.with_rollback(frame, |enc, frame| {
                    enc.encode_delete(idx, frame, old.as_ref(), position)
                })
            }
            EventKind::Commit(_) => {
                frames.end_transaction();
                Ok(())
            }
            EventKind::Truncate {
                tables,
                cascade,
                restart_identity,
            } => self.encode_truncate(tables, *cascade, *restart_identity, position, frames),
            EventKind::SchemaChange { new, .. } => {
                tracing::info!(table = %new.name, position = %position, "schema changed; rows after this point use the new columns");
                self.prepare(new);
                Ok(())
            }
            EventKind::Begin(_) | EventKind::Message { .. } | EventKind::Snapshot(_) => Ok(()),
            _ => Err(crate::unknown_event(event)),
        }
    }

    fn with_rollback(
        &mut self,
        frame: &mut Frame,
        f: impl FnOnce(&mut Self, &mut Frame) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mark = frame.mark();
        let before = self.stats.envelopes;
        let result = f(self, frame);
        if result.is_err() {
            frame.rollback(mark);
            self.stats.envelopes = before;
        }
        result
    }

    /// Index of the prepared state for `schema`, creating or refreshing it.
    fn prepare(&mut self, schema: &SchemaRef) -> usize {
        if let Some(p) = self.prepared.get(self.last)
            && std::sync::Arc::ptr_eq(&p.schema, schema)
        {
            return self.last;
        }
        let idx = match self.by_name.get(&schema.name) {
            Some(&idx) => {
                if let Some(p) = self.prepared.get_mut(idx)
                    && !std::sync::Arc::ptr_eq(&p.schema, schema)
                {
                    if *p.schema == **schema {
                        p.schema = schema.clone();
                    } else {
                        *p = Prepared::new(schema);
                    }
                }
                idx
            }
            None => {
                self.prepared.push(Prepared::new(schema));
                let idx = self.prepared.len() - 1;
                self.by_name.insert(schema.name.clone(), idx);
                idx
            }
        };
        self.last = idx;
        idx
    }

    fn encode_insert(
        &mut self,
        idx: usize,
        frame: &mut Frame,
        new: &Row,
        fill: Option<&[Value]>,
        position: Position,
    ) -> Result<(), Error> {
        let row = RowSource { values: new, fill };
        self.envelope(idx, frame, Op::Insert, position, &row, |_| true)
    }

    /// One `insert` envelope per row of `rows`, exactly as [`Self::encode_insert`] writes
    /// each row decoded: integers and text straight from their bytes, every other field
    /// through the block's decoder and [`write_value`]. A field whose bytes do not fit its
    /// layout is decoded too, so it fails as it would have in the source.
    fn encode_block(
        &mut self,
        idx: usize,
        frame: &mut Frame,
        rows: &RowBlock,
        position: Position,
    ) -> Result<(), Error> {
        let Some(p) = self.prepared.get(idx) else {
            return Err(Error::sink("internal: prepared table state missing"));
        };
        let n = rows.len();
        if rows.width() != p.schema.columns.len() {
            let at = block_row_position(position, n, 0).unwrap_or(position);
            return Err(Error::protocol(format!(
                "a row of {} has {} values but the table has {} columns (at {at})",
                p.schema.name,
                rows.width(),
                p.schema.columns.len()
            )));
        }
        // Per block, not per row: the envelope's start with the first column's key, and
        // `,"key":` for each other column, so a row takes one copy per column.
        let mut start = vec![b'{'];
        if self.options.table_key {
            start.extend_from_slice(&p.table_member);
        }
        start.extend_from_slice(Op::Insert.member());
        start.push(b'{');
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(p.keys.len());
        for (i, key) in p.keys.iter().enumerate() {
            let mut joined = Vec::with_capacity(key.len() + 1);
            if i > 0 {
                joined.push(b',');
            }
            joined.extend_from_slice(key);
            keys.push(joined);
        }
        if let Some(first) = keys.first() {
            start.extend_from_slice(first);
        }
        let fixed = start.len() + keys.iter().skip(1).map(Vec::len).sum::<usize>() + 2;
        let columns: Vec<(FieldLayout, &[u8])> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| (rows.layout(i), key.as_slice()))
            .collect();
        let policies = &self.options.policies;
        let log = &mut self.log;
        for row in 0..n {
            let Some(fields) = rows.row(row) else {
                break;
            };
            let out = frame.begin_value();
            // Integers take at most 20 bytes; text reserves its own escapes.
            out.reserve(fixed + 20 * columns.len());
            out.extend_from_slice(&start);
            for (i, (field, &(layout, key))) in fields.zip(&columns).enumerate() {
                // The first key is part of the envelope's start.
                if i > 0 {
                    out.extend_from_slice(key);
                }
                let Some(bytes) = field else {
                    out.extend_from_slice(b"null");
                    continue;
                };
                let direct = match layout {
                    FieldLayout::Int2 => <[u8; 2]>::try_from(bytes)
                        .map(|b| write_int(out, i16::from_be_bytes(b)))
                        .is_ok(),
                    FieldLayout::Int4 => <[u8; 4]>::try_from(bytes)
                        .map(|b| write_int(out, i32::from_be_bytes(b)))
                        .is_ok(),
                    FieldLayout::Int8 => <[u8; 8]>::try_from(bytes)
                        .map(|b| write_int(out, i64::from_be_bytes(b)))
                        .is_ok(),
                    FieldLayout::Text => write_utf8(out, bytes),
                    _ => false,
                };
                if direct {
                    continue;
                }
                let at = block_row_position(position, n, row).unwrap_or(position);
                let value = rows.decode(row, i).map_err(|e| {
                    Error::protocol(format!("{e} (a row of {} at {at})", p.schema.name))
                })?;
                let ctx = ColumnCtx {
                    table: &p.schema.name,
                    relation_id: p.schema.relation_id,
                    column: p.schema.columns.get(i).map_or("", |c| c.name.as_str()),
                    index: i,
                    position: at,
                };
                if value.is_unchanged() {
                    return Err(unchanged_error(Op::Insert, &ctx));
                }
                write_value(out, &value, policies, log, &ctx)?;
            }
            out.extend_from_slice(b"}}");
            frame.end_value();
            self.stats.envelopes += 1;
        }
        Ok(())
    }

    fn encode_delete(
        &mut self,
        idx: usize,
        frame: &mut Frame,
        old: Option<&OldRow>,
        position: Position,
    ) -> Result<(), Error> {
        let p = self.prepared_ref(idx)?;
        let Some(old) = old else {
            return Err(no_old_row(&p.schema, "delete", position));
        };
        self.write_old(idx, frame, old, position)
    }

    /// Writes `{"delete": …}` for `old`: its key columns, or the whole row of a keyless
    /// table.
    fn write_old(
        &mut self,
        idx: usize,
        frame: &mut Frame,
        old: &OldRow,
        position: Position,
    ) -> Result<(), Error> {
        let p = self.prepared_ref(idx)?;
        check_width(&p.schema, &old.values, position)?;
        let row = RowSource {
            values: &old.values,
            fill: None,
        };
        if p.key.is_empty() {
            if old.kind != OldRowKind::Full {
                return Err(Error::rejected(format!(
                    "table {}, position {position}: the old row holds only key columns, but the table has no key to delete by; set REPLICA IDENTITY FULL",
                    p.schema.name
                )));
            }
            self.envelope(idx, frame, Op::Delete, position, &row, |_| true)
        } else {
            // A key column is never NULL: an old row without its value (a replica identity
            // index that lacks the key) cannot name the row, and a delete by NULL would
            // leave it downstream.
            if let Some(&column) = p
                .key
                .iter()
                .find(|&&k| matches!(old.values.get(k), Some(Value::Null) | None))
            {
                return Err(null_key(&p.schema, column, position));
            }
            let is_key = p.is_key.clone();
            self.envelope(idx, frame, Op::Delete, position, &row, |i| {
                is_key.get(i).copied().unwrap_or(false)
            })
        }
    }

    fn encode_update(
        &mut self,
        idx: usize,
        frame: &mut Frame,
        old: Option<&OldRow>,
        new: &Row,
        position: Position,
    ) -> Result<(), Error> {
        let p = self.prepared_ref(idx)?;
        check_width(&p.schema, new, position)?;
        if let Some(old) = old {
            check_width(&p.schema, &old.values, position)?;
        }
        let full_old = old
            .filter(|o| o.kind == OldRowKind::Full)
            .map(|o| o.values.as_slice());
        if p.key.is_empty() {
            // Keyless: only a full old row identifies the row to delete.
            let Some(old) = old else {
                return Err(no_old_row(&p.schema, "update", position));
            };
            self.write_old(idx, frame, old, position)?;
            return self.encode_insert(idx, frame, new, full_old, position);
        }
        let key_changed = old.is_some_and(|o| {
            p.key.iter().any(|&k| match (o.values.get(k), new.get(k)) {
                (_, Some(Value::Unchanged)) | (Some(Value::Unchanged), _) => false,
                (a, b) => a != b,
            })
        });
        if key_changed {
            if let Some(old) = old {
                self.write_old(idx, frame, old, position)?;
            }
            return self.encode_insert(idx, frame, new, full_old, position);
        }
        // Same key: a partial update. Key columns the new row does not carry come from
        // the old row (key or full).
        let key_fill = old.map(|o| o.values.as_slice());
        let is_key = p.is_key.clone();
        let row = RowSource {
            values: new,
            fill: key_fill,
        };
        self.envelope(idx, frame, Op::Update, position, &row, |i| {
            is_key.get(i).copied().unwrap_or(false) || !matches!(new.get(i), Some(Value::Unchanged))
        })
    }

    fn encode_truncate(
        &mut self,
        tables: &[SchemaRef],
        cascade: bool,
        restart_identity: bool,
        position: Position,
        frames: &mut impl FrameSet,
    ) -> Result<(), Error> {
        match self.options.policies.truncate {
            TruncatePolicy::Error => Err(Error::rejected(format!(
                "TRUNCATE of {} at position {position} cannot be expressed in Feldera's insert/delete format; choose a truncate policy (skip or marker) or resnapshot the tables",
                tables
                    .iter()
                    .map(|t| t.name.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            TruncatePolicy::Skip => {
                for t in tables {
                    self.log.record(
                        t.relation_id,
                        &t.name,
                        usize::MAX,
                        "",
                        PolicyCase::Truncate,
                        "skip",
                    );
                }
                self.stats.truncates_skipped += 1;
                Ok(())
            }
            TruncatePolicy::Marker => {
                for t in tables {
                    self.log.record(
                        t.relation_id,
                        &t.name,
                        usize::MAX,
                        "",
                        PolicyCase::Truncate,
                        "marker",
                    );
                    let frame = frames.frame(&t.name)?;
                    let out = frame.begin_value();
                    out.extend_from_slice(b"{\"table\":");
                    write_str(out, &t.name.to_string());
                    out.extend_from_slice(b",\"truncate\":{\"cascade\":");
                    out.extend_from_slice(if cascade { b"true" } else { b"false" });
                    out.extend_from_slice(b",\"restart_identity\":");
                    out.extend_from_slice(if restart_identity {
                        b"true}}"
                    } else {
                        b"false}}"
                    });
                    frame.end_value();
                    self.stats.truncate_markers += 1;
                }
                Ok(())
            }
        }
    }

    fn prepared_ref(&self, idx: usize) -> Result<&Prepared, Error> {
        self.prepared
            .get(idx)
            .ok_or_else(|| Error::sink("internal: prepared table state missing"))
    }

    /// Writes one envelope `{["table":…,]"op":{columns where include(i)}}`.
    fn envelope(
        &mut self,
        idx: usize,
        frame: &mut Frame,
        op: Op,
        position: Position,
        row: &RowSource<'_>,
        include: impl Fn(usize) -> bool,
    ) -> Result<(), Error> {
        let Some(p) = self.prepared.get(idx) else {
            return Err(Error::sink("internal: prepared table state missing"));
        };
        check_width(&p.schema, row.values, position)?;
        let policies = &self.options.policies;
        let log = &mut self.log;
        let out = frame.begin_value();
        out.push(b'{');
        if self.options.table_key {
            out.extend_from_slice(&p.table_member);
        }
        out.extend_from_slice(op.member());
        out.push(b'{');
        let mut first = true;
        for (i, value) in row.values.iter().enumerate() {
            if !include(i) {
                continue;
            }
            let value = match (value, row.fill.and_then(|f| f.get(i))) {
                (Value::Unchanged, Some(filled)) if !filled.is_unchanged() => filled,
                _ => value,
            };
            if !first {
                out.push(b',');
            }
            first = false;
            if let Some(key) = p.keys.get(i) {
                out.extend_from_slice(key);
            }
            let column = p.schema.columns.get(i).map_or("", |c| c.name.as_str());
            let ctx = ColumnCtx {
                table: &p.schema.name,
                relation_id: p.schema.relation_id,
                column,
                index: i,
                position,
            };
            if value.is_unchanged() {
                return Err(unchanged_error(op, &ctx));
            }
            write_value(out, value, policies, log, &ctx)?;
        }
        out.extend_from_slice(b"}}");
        frame.end_value();
        self.stats.envelopes += 1;
        Ok(())
    }
}

#[cold]
fn unchanged_error(op: Op, ctx: &ColumnCtx<'_>) -> Error {
    let why = match op {
        Op::Insert => {
            "the update needs the full new row (the key changed, or the table has no key), but Postgres did not send this unchanged TOAST value; set REPLICA IDENTITY FULL on the table"
        }
        Op::Delete => {
            "the old row lacks this unchanged TOAST value, so the row to delete cannot be identified; give the table a primary key"
        }
        Op::Update => "the key value is missing (unchanged TOAST value and no old key)",
    };
    ctx.reject(why)
}

#[cold]
fn null_key(schema: &TableSchema, column: usize, position: Position) -> Error {
    let name = schema.columns.get(column).map_or("?", |c| c.name.as_str());
    Error::rejected(format!(
        "table {table}, position {position}: the old row carries no value for key column {name:?} \
         (the table's replica identity does not include its primary key), so the row to delete or \
         update cannot be named; ALTER TABLE {table} REPLICA IDENTITY DEFAULT (or FULL)",
        table = schema.name
    ))
}

#[cold]
fn no_old_row(schema: &TableSchema, what: &str, position: Position) -> Error {
    let hint = match schema.replica_identity {
        ReplicaIdentity::Nothing => "the table has REPLICA IDENTITY NOTHING",
        _ => "the table has no primary key or replica identity index",
    };
    Error::rejected(format!(
        "table {}, position {position}: {what} without an old row cannot be expressed ({hint}); add a primary key or set REPLICA IDENTITY FULL",
        schema.name
    ))
}

fn check_width(schema: &TableSchema, values: &[Value], position: Position) -> Result<(), Error> {
    if values.len() == schema.columns.len() {
        Ok(())
    } else {
        Err(Error::protocol(format!(
            "table {}, position {position}: row has {} values but the table has {} columns",
            schema.name,
            values.len(),
            schema.columns.len()
        )))
    }
}
