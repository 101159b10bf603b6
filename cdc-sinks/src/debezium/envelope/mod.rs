//! Change events → Debezium records: `{"key":…,"value":…,"destination":…}` lines, the
//! value being the PostgreSQL connector's change-event envelope (`before`, `after`,
//! `source`, `transaction`, `op`, `ts_ms`, `ts_us`, `ts_ns`).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use cdc_core::{
    ChangeEvent, Error, EventKind, Lsn, OldRow, OldRowKind, Position, Row, SchemaRef,
    SnapshotMarker, TableName, Value,
};

use super::schema::{key_schema, value_schema};
use super::value::write_value;
use super::{BinaryMode, DecimalMode, HstoreMode, IntervalMode, Modes, TimePrecision};
use crate::json::{write_int, write_str};

mod durable;
mod spans;
pub use durable::DebeziumState;
pub use spans::RecordSpan;

/// Microseconds from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_MICROS: i64 = 946_684_800_000_000;

/// What the records say about their source, and which records are written.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DebeziumOptions {
    /// Debezium's `topic.prefix`: `source.name`, and the first part of every record's
    /// destination (`<name>.<schema>.<table>`).
    pub name: String,
    /// The database's name (`source.db`).
    pub database: String,
    /// A tombstone (the key with a null value) after every delete, as Debezium's
    /// `tombstones.on.delete` (default true).
    pub tombstones: bool,
    /// TRUNCATE as `op: "t"` records. Debezium skips them by default
    /// (`skipped.operations=t`); pgcdc writes them by default, since a consumer that
    /// misses a TRUNCATE holds rows the table no longer has.
    pub truncate: bool,
    /// Each key and value as `{"schema": …, "payload": …}` with its Kafka Connect schema,
    /// as Debezium's JSON converter writes them with `schemas.enable=true` (its default).
    pub schemas: bool,
    /// How numerics are written (`decimal.handling.mode`).
    pub decimals: DecimalMode,
    /// How times and timestamps are written (`time.precision.mode`).
    pub time: TimePrecision,
    /// How `bytea` is written (`binary.handling.mode`).
    pub binary: BinaryMode,
    /// How `interval` is written (`interval.handling.mode`).
    pub interval: IntervalMode,
    /// How `hstore` is written (`hstore.handling.mode`).
    pub hstore: HstoreMode,
    /// Transaction metadata, as Debezium's `provide.transaction.metadata`: a BEGIN and an
    /// END record (with its event counts) on `<name>.transaction` around each
    /// transaction, and each change's place in it (`transaction`).
    pub transaction_metadata: bool,
}

impl DebeziumOptions {
    fn modes(&self) -> Modes {
        Modes {
            decimals: self.decimals,
            time: self.time,
            binary: self.binary,
            interval: self.interval,
            hstore: self.hstore,
        }
    }
}

impl DebeziumOptions {
    /// Records named `name`, from database `database`, with tombstones and TRUNCATEs.
    pub fn new(name: impl Into<String>, database: impl Into<String>) -> Self {
        DebeziumOptions {
            name: name.into(),
            database: database.into(),
            tombstones: true,
            truncate: true,
            schemas: false,
            decimals: DecimalMode::Precise,
            time: TimePrecision::Adaptive,
            binary: BinaryMode::Bytes,
            interval: IntervalMode::Numeric,
            hstore: HstoreMode::Json,
            transaction_metadata: false,
        }
    }
}

/// The transaction being written.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Transaction {
    xid: u32,
    /// Commit time, microseconds since the Unix epoch.
    commit_micros: i64,
    /// Records written for it, and per table in order of first appearance.
    total: u64,
    per_table: Vec<(String, u64)>,
    /// Its BEGIN record is written with its first change (whose LSN it names).
    begun: bool,
}

/// Turns change events into Debezium records, one line each. Keeps what a record needs
/// from earlier events: the transaction in progress (its xid and commit time, from its
/// Begin), the end LSN of the transaction before it (the first number of
/// `source.sequence`), and which tables' snapshot copies are being written.
#[derive(Debug)]
pub struct DebeziumEncoder {
    options: DebeziumOptions,
    transaction: Option<Transaction>,
    last_commit: Option<Lsn>,
    /// Tables whose copy is being written (their inserts are snapshot reads, `op: "r"`).
    copying: Vec<TableName>,
    /// The first snapshot row is still to come (`source.snapshot: "first"`).
    first_snapshot_row: bool,
    /// Tables whose snapshot rows began (for `first_in_data_collection`).
    started_tables: Vec<TableName>,
    /// The last snapshot row written, held back until what follows it says its
    /// `source.snapshot` (a table's last row, the snapshot's last, or neither).
    held: Option<HeldRow>,
    /// When the snapshot began, microseconds since the Unix epoch (`source.ts_ms` of its
    /// rows).
    snapshot_micros: i64,
    now: fn() -> i64,
    /// The key and value schemas of each table's current schema (`schemas`).
    schemas: HashMap<TableName, TableSchemas>,
    /// Where each record written lies, for outputs that send records apart
    /// ([`DebeziumEncoder::track_records`]).
    spans: Option<Vec<RecordSpan>>,
}

/// A snapshot row's record, written but for its `source.snapshot` label.
#[derive(Debug)]
struct HeldRow {
    table: TableName,
    /// The record; the label goes in at `label_at`.
    record: Vec<u8>,
    label_at: usize,
    /// Its value document in `record` (before the label goes in).
    value: Range<usize>,
    /// The event it comes from.
    position: Position,
    /// The snapshot's first row, or its table's.
    first: bool,
    first_in_table: bool,
    /// Its table's copy completed after it: it is the table's last row.
    table_done: bool,
}

/// The Connect schemas written for one table schema.
#[derive(Debug)]
struct TableSchemas {
    table: SchemaRef,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn wall_clock_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl DebeziumEncoder {
    /// An encoder for `options`.
    pub fn new(options: DebeziumOptions) -> Self {
        DebeziumEncoder {
            options,
            transaction: None,
            last_commit: None,
            copying: Vec::new(),
            first_snapshot_row: true,
            held: None,
            started_tables: Vec::new(),
            snapshot_micros: 0,
            now: wall_clock_micros,
            schemas: HashMap::new(),
            spans: None,
        }
    }

    /// The same encoder with a fixed clock for the envelope's processing time (tests).
    pub fn with_clock(mut self, now: fn() -> i64) -> Self {
        self.now = now;
        self
    }

    /// Appends the records of `event` (none, one, or — a delete's tombstone, a key
    /// change's delete and insert, a TRUNCATE of several tables — more), one line each.
    /// On error `out` is left as it was.
    pub fn encode(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<(), Error> {
        self.before_event(event, out);
        let start = out.len();
        let noted = self.records_noted();
        let result = self.encode_inner(event, out);
        if result.is_err() {
            out.truncate(start);
            self.forget_records_from(noted);
        }
        result
    }

    /// Writes the held snapshot row, if any, now that what follows it is known:
    /// `last_table` — no other table's copy follows.
    fn release(&mut self, out: &mut Vec<u8>, last_table: bool) {
        let Some(held) = self.held.take() else {
            return;
        };
        let label = match (held.table_done, last_table, held.first, held.first_in_table) {
            (true, true, _, _) => "last",
            (true, false, _, _) => "last_in_data_collection",
            (false, _, true, _) => "first",
            (false, _, false, true) => "first_in_data_collection",
            (false, _, false, false) => "true",
        };
        let (before, after) = held.record.split_at(held.label_at.min(held.record.len()));
        let start = out.len();
        out.extend_from_slice(before);
        write_str(out, label);
        let label_len = out.len() - start - before.len();
        out.extend_from_slice(after);
        let value = start + held.value.start..start + held.value.end + label_len;
        self.record_written(
            start..out.len(),
            value,
            Some(&held.table),
            held.position,
            true,
        );
    }

    /// The end of a batch of events: a held snapshot row whose table's copy goes on in a
    /// later chunk is written now (an online snapshot's chunk ends its batch); one that may
    /// be its table's last stays held until a later batch says.
    pub fn end_of_batch(&mut self, out: &mut Vec<u8>) {
        if self
            .held
            .as_ref()
            .is_some_and(|h| !h.table_done && !self.copying.contains(&h.table))
        {
            self.release(out, false);
        }
    }

    /// The end of the stream: writes a held snapshot row.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let last = self.copying.is_empty();
        self.release(out, last);
    }

    /// What `event` says of the held snapshot row: written before it (a table's last row
    /// when its copy completed), or held on.
    fn before_event(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) {
        if self.held.is_some() {
            match &event.kind {
                EventKind::Insert { table, .. } if self.copying.contains(&table.name) => {
                    self.release(out, false);
                }
                EventKind::Snapshot(SnapshotMarker::TableCompleted { table, .. }) => {
                    if let Some(held) = self.held.as_mut().filter(|h| &h.table == table) {
                        held.table_done = true;
                    }
                }
                EventKind::Snapshot(SnapshotMarker::Completed { .. }) => self.release(out, true),
                EventKind::Snapshot(_) => {}
                // Anything else written now goes after the row.
                _ => self.release(out, false),
            }
        }
    }

    fn encode_inner(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<(), Error> {
        match &event.kind {
            EventKind::Begin(begin) => {
                let transaction = Transaction {
                    xid: begin.xid,
                    commit_micros: begin.commit_time_micros.saturating_add(UNIX_TO_PG_MICROS),
                    total: 0,
                    per_table: Vec::new(),
                    begun: false,
                };
                self.transaction = Some(transaction);
            }
            EventKind::Commit(commit) => {
                // Debezium records the Commit message's position: the transaction's end.
                self.last_commit = Some(commit.end_lsn);
                if let Some(transaction) = self.transaction.take()
                    && self.options.transaction_metadata
                {
                    if !transaction.begun {
                        let id = format!("{}:{}", transaction.xid, event.lsn.0);
                        self.transaction_record(out, &id, &transaction, false, event.position);
                    }
                    let id = format!("{}:{}", transaction.xid, commit.end_lsn.0);
                    self.transaction_record(out, &id, &transaction, true, event.position);
                }
            }
            EventKind::Insert { table, new } => {
                let op = if self.copying.contains(&table.name) {
                    "r"
                } else {
                    "c"
                };
                self.record(out, table, event, op, None, Some(new))?;
            }
            EventKind::Update { table, old, new } => {
                let key = table.key_indexes();
                let full_old = old.as_ref().filter(|o| o.kind == OldRowKind::Full);
                let key_changed = !table.primary_key.is_empty()
                    && match old {
                        Some(OldRow {
                            kind: OldRowKind::Key,
                            ..
                        }) => true,
                        Some(old) => key.iter().any(|&i| old.values.get(i) != new.get(i)),
                        None => false,
                    };
                if key_changed && let Some(old) = old {
                    // Debezium writes a key change as a delete of the old key, its
                    // tombstone, and a create of the new row.
                    self.record(out, table, event, "d", Some(&old.values), None)?;
                    self.tombstone(out, table, &old.values, event.position);
                    self.record(out, table, event, "c", None, Some(new))?;
                } else {
                    let before = full_old.map(|o| &o.values);
                    self.record(out, table, event, "u", before, Some(new))?;
                }
            }
            EventKind::Delete { table, old } => {
                let Some(old) = old else {
                    return Err(Error::rejected(format!(
                        "a delete from {} without its old row (REPLICA IDENTITY NOTHING) has no Debezium record",
                        table.name
                    )));
                };
                self.record(out, table, event, "d", Some(&old.values), None)?;
                self.tombstone(out, table, &old.values, event.position);
            }
            EventKind::Truncate { tables, .. } if self.options.truncate => {
                for table in tables {
                    self.record(out, table, event, "t", None, None)?;
                }
            }
            EventKind::Snapshot(marker) => self.snapshot_marker(marker),
            EventKind::Truncate { .. }
            | EventKind::SchemaChange { .. }
            | EventKind::Message { .. } => {}
            _ => return Err(crate::unknown_event(event)),
        }
        Ok(())
    }

    fn snapshot_marker(&mut self, marker: &SnapshotMarker) {
        match marker {
            SnapshotMarker::Started if self.copying.is_empty() => {
                self.snapshot_micros = (self.now)();
            }
            SnapshotMarker::TableStarted(table) | SnapshotMarker::ChunkStarted { table, .. }
                if !self.copying.contains(table) =>
            {
                self.copying.push(table.clone());
            }
            SnapshotMarker::TableCompleted { table, .. }
            | SnapshotMarker::ChunkCompleted { table, .. } => {
                self.copying.retain(|t| t != table);
            }
            // The snapshot is taken again from its start (an output that can withdraw
            // its rows did so): its rows are labelled anew.
            SnapshotMarker::Restarted => {
                self.held = None;
                self.copying.clear();
                self.started_tables.clear();
                self.first_snapshot_row = true;
            }
            _ => {}
        }
    }

    /// A BEGIN or END record on `<name>.transaction`, for the event at `position`.
    fn transaction_record(
        &mut self,
        out: &mut Vec<u8>,
        id: &str,
        transaction: &Transaction,
        end: bool,
        position: Position,
    ) {
        let start = out.len();
        out.extend_from_slice(b"{\"key\":{\"id\":");
        write_str(out, id);
        out.extend_from_slice(b"},\"value\":");
        let value_start = out.len();
        out.extend_from_slice(b"{\"status\":");
        write_str(out, if end { "END" } else { "BEGIN" });
        out.extend_from_slice(b",\"id\":");
        write_str(out, id);
        if end {
            out.extend_from_slice(b",\"event_count\":");
            write_int(out, transaction.total);
            out.extend_from_slice(b",\"data_collections\":[");
            for (i, (table, count)) in transaction.per_table.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"data_collection\":");
                write_str(out, table);
                out.extend_from_slice(b",\"event_count\":");
                write_int(out, *count);
                out.push(b'}');
            }
            out.push(b']');
        } else {
            out.extend_from_slice(b",\"event_count\":null,\"data_collections\":null");
        }
        out.extend_from_slice(b",\"ts_ms\":");
        write_int(out, transaction.commit_micros.div_euclid(1000));
        out.push(b'}');
        let value = value_start..out.len();
        out.extend_from_slice(b",\"destination\":");
        write_str(out, &format!("{}.transaction", self.options.name));
        out.extend_from_slice(b"}\n");
        self.record_written(start..out.len(), value, None, position, false);
    }

    fn destination(&self, out: &mut Vec<u8>, table: &TableName) {
        write_str(
            out,
            &format!("{}.{}.{}", self.options.name, table.schema, table.name),
        );
    }

    /// The schemas of `table`, made once per table schema.
    fn schemas_of(&mut self, table: &SchemaRef) -> &TableSchemas {
        let stale = self
            .schemas
            .get(&table.name)
            .is_none_or(|s| !Arc::ptr_eq(&s.table, table));
        if stale {
            let made = TableSchemas {
                table: table.clone(),
                key: key_schema(&self.options.name, table, self.options.modes()),
                value: value_schema(&self.options.name, table, self.options.modes()),
            };
            self.schemas.insert(table.name.clone(), made);
        }
        &self.schemas[&table.name]
    }

    /// The key: the primary key's columns in key order (with its schema when `schemas`),
    /// or null for a table without one.
    fn write_key(
        &mut self,
        out: &mut Vec<u8>,
        table: &SchemaRef,
        row: &[Value],
    ) -> Result<(), Error> {
        if table.primary_key.is_empty() {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        if self.options.schemas {
            out.extend_from_slice(b"{\"schema\":");
            let schema = &self.schemas_of(table).key;
            out.extend_from_slice(schema);
            out.extend_from_slice(b",\"payload\":");
        }
        self.write_key_payload(out, table, row)?;
        if self.options.schemas {
            out.push(b'}');
        }
        Ok(())
    }

    fn write_key_payload(
        &self,
        out: &mut Vec<u8>,
        table: &SchemaRef,
        row: &[Value],
    ) -> Result<(), Error> {
        out.push(b'{');
        for (n, name) in table.primary_key.iter().enumerate() {
            let Some(index) = table.column_index(name) else {
                return Err(Error::rejected(format!(
                    "{}: primary key column {name:?} is not among the published columns",
                    table.name
                )));
            };
            if n > 0 {
                out.push(b',');
            }
            write_str(out, name);
            out.push(b':');
            let value = row.get(index).unwrap_or(&Value::Null);
            if let Some(column) = table.columns.get(index) {
                write_value(out, value, column, self.options.modes())?;
            }
        }
        out.push(b'}');
        Ok(())
    }

    fn write_row(&self, out: &mut Vec<u8>, table: &SchemaRef, row: &Row) -> Result<(), Error> {
        out.push(b'{');
        for (i, column) in table.columns.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(out, &column.name);
            out.push(b':');
            write_value(
                out,
                row.get(i).unwrap_or(&Value::Null),
                column,
                self.options.modes(),
            )?;
        }
        out.push(b'}');
        Ok(())
    }

    fn tombstone(&mut self, out: &mut Vec<u8>, table: &SchemaRef, old: &Row, position: Position) {
        if !self.options.tombstones {
            return;
        }
        let start = out.len();
        out.extend_from_slice(b"{\"key\":");
        if self.write_key(out, table, old).is_err() {
            out.truncate(start);
            return;
        }
        out.extend_from_slice(b",\"value\":");
        let value = out.len()..out.len() + 4;
        out.extend_from_slice(b"null,\"destination\":");
        self.destination(out, &table.name);
        out.extend_from_slice(b"}\n");
        self.record_written(start..out.len(), value, Some(&table.name), position, false);
    }

    /// One change record.
    fn record(
        &mut self,
        out: &mut Vec<u8>,
        table: &SchemaRef,
        event: &ChangeEvent,
        op: &str,
        before: Option<&Row>,
        after: Option<&Row>,
    ) -> Result<(), Error> {
        let snapshot_read = op == "r";
        if snapshot_read {
            let mut record = Vec::new();
            let (label_at, value) =
                self.write_record(&mut record, table, event, op, before, after)?;
            let first = std::mem::take(&mut self.first_snapshot_row);
            let first_in_table = !self.started_tables.contains(&table.name);
            if first_in_table {
                self.started_tables.push(table.name.clone());
            }
            self.held = Some(HeldRow {
                table: table.name.clone(),
                record,
                label_at,
                value,
                position: event.position,
                first,
                first_in_table,
                table_done: false,
            });
            return Ok(());
        }
        self.write_record(out, table, event, op, before, after)?;
        Ok(())
    }

    /// Writes one record; returns where its `source.snapshot` label goes for a snapshot
    /// row (written without one), and where its value lies.
    fn write_record(
        &mut self,
        out: &mut Vec<u8>,
        table: &SchemaRef,
        event: &ChangeEvent,
        op: &str,
        before: Option<&Row>,
        after: Option<&Row>,
    ) -> Result<(usize, Range<usize>), Error> {
        let snapshot_read = op == "r";
        let mut label_at = 0;
        // A transaction's BEGIN record goes before its first change, named by its LSN.
        if self.options.transaction_metadata
            && !snapshot_read
            && let Some(transaction) = self.transaction.as_mut().filter(|t| !t.begun)
        {
            transaction.begun = true;
            let first = if event.lsn == Lsn::ZERO {
                event.position.commit_lsn
            } else {
                event.lsn
            };
            let id = format!("{}:{}", transaction.xid, first.0);
            let transaction = transaction.clone();
            self.transaction_record(out, &id, &transaction, false, event.position);
        }
        let start = out.len();
        out.extend_from_slice(b"{\"key\":");
        match (op, before, after) {
            ("t", _, _) => out.extend_from_slice(b"null"),
            (_, _, Some(row)) | (_, Some(row), None) => self.write_key(out, table, row)?,
            _ => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"value\":");
        let value_start = out.len();
        if self.options.schemas {
            out.extend_from_slice(b"{\"schema\":");
            let schema = &self.schemas_of(table).value;
            out.extend_from_slice(schema);
            out.extend_from_slice(b",\"payload\":");
        }
        out.extend_from_slice(b"{\"before\":");
        match before {
            Some(row) => self.write_row(out, table, row)?,
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"after\":");
        match after {
            Some(row) => self.write_row(out, table, row)?,
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"source\":{\"version\":");
        write_str(out, concat!("pgcdc-", env!("CARGO_PKG_VERSION")));
        out.extend_from_slice(b",\"connector\":\"postgresql\",\"name\":");
        write_str(out, &self.options.name);
        let micros = if snapshot_read {
            self.snapshot_micros
        } else {
            self.transaction.as_ref().map_or(0, |t| t.commit_micros)
        };
        out.extend_from_slice(b",\"ts_ms\":");
        write_int(out, micros.div_euclid(1000));
        out.extend_from_slice(b",\"snapshot\":");
        if snapshot_read {
            label_at = out.len();
        } else {
            write_str(out, "false");
        }
        out.extend_from_slice(b",\"db\":");
        write_str(out, &self.options.database);
        // The change's own LSN where the source knows it, else the commit's.
        let lsn = if event.lsn == Lsn::ZERO {
            event.position.commit_lsn.0
        } else {
            event.lsn.0
        };
        out.extend_from_slice(b",\"sequence\":");
        let sequence = match (snapshot_read, self.last_commit) {
            (false, Some(last)) => format!("[\"{}\",\"{lsn}\"]", last.0),
            _ => format!("[null,\"{lsn}\"]"),
        };
        write_str(out, &sequence);
        out.extend_from_slice(b",\"ts_us\":");
        write_int(out, micros);
        out.extend_from_slice(b",\"ts_ns\":");
        write_int(out, micros.saturating_mul(1000));
        out.extend_from_slice(b",\"schema\":");
        write_str(out, &table.name.schema);
        out.extend_from_slice(b",\"table\":");
        write_str(out, &table.name.name);
        out.extend_from_slice(b",\"txId\":");
        match self.transaction.as_ref().filter(|_| !snapshot_read) {
            Some(t) => write_int(out, t.xid),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"lsn\":");
        write_int(out, lsn);
        out.extend_from_slice(b",\"xmin\":null,\"origin\":null,\"origin_lsn\":null}");
        out.extend_from_slice(b",\"transaction\":");
        match self
            .transaction
            .as_mut()
            .filter(|_| self.options.transaction_metadata && !snapshot_read)
        {
            Some(transaction) => {
                let data_collection = format!("{}.{}", table.name.schema, table.name.name);
                transaction.total += 1;
                let in_table = match transaction
                    .per_table
                    .iter_mut()
                    .find(|(t, _)| *t == data_collection)
                {
                    Some((_, count)) => {
                        *count += 1;
                        *count
                    }
                    None => {
                        transaction.per_table.push((data_collection, 1));
                        1
                    }
                };
                let total = transaction.total;
                let xid = transaction.xid;
                out.extend_from_slice(b"{\"id\":");
                write_str(out, &format!("{xid}:{lsn}"));
                out.extend_from_slice(b",\"total_order\":");
                write_int(out, total);
                out.extend_from_slice(b",\"data_collection_order\":");
                write_int(out, in_table);
                out.push(b'}');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"op\":");
        write_str(out, op);
        let now = (self.now)();
        out.extend_from_slice(b",\"ts_ms\":");
        write_int(out, now.div_euclid(1000));
        out.extend_from_slice(b",\"ts_us\":");
        write_int(out, now);
        out.extend_from_slice(b",\"ts_ns\":");
        write_int(out, now.saturating_mul(1000));
        out.push(b'}');
        if self.options.schemas {
            out.push(b'}');
        }
        let value = value_start..out.len();
        out.extend_from_slice(b",\"destination\":");
        self.destination(out, &table.name);
        out.extend_from_slice(b"}\n");
        if !snapshot_read {
            self.record_written(
                start..out.len(),
                value.clone(),
                Some(&table.name),
                event.position,
                false,
            );
        }
        Ok((label_at, value))
    }
}
