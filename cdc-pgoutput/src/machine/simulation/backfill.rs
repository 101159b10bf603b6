//! The online snapshot in the source simulation: [`OnlineSnapshot`] driven as
//! `cdc-postgres`'s `backfill_phase` drives it, with chunk reads served by the simulated
//! database under snapshots taken when they run. A background round's chunks are read
//! one at a time, at steps the seed chooses, while the workload and the stream go on;
//! each read sees what was committed and visible at its moment (`Database::visible_rows`,
//! `snapshot_text`), in the key order the server's btree has (integers by value, text
//! under the `C` collation, bytewise). In some seeds the text-keyed table's order is one
//! only the server knows (`KeyOrder::by_server`): streamed events wait for comparisons the
//! simulated server answers (or fails to, now and then).

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use cdc_core::{Error, Lsn, Row, TableName, Text, Value};

use super::database::{Database, INT4, INT8, TABLES, TEXT, TableDef, Values};
use super::walsender::relation;
use crate::backfill::key_order::{KeyCollation, KeyColumnOrder, KeyOrder};
use crate::backfill::merge::Comparison;
use crate::backfill::online::{
    ChunkRead, OnlineSnapshot, OnlineTable, Request, TablePlan, range_cap,
};
use crate::backfill::token_progress::key_text as token_key_text;
use crate::changes::{RelationCache, SchemaChangePolicy, TableRouting};
use crate::machine::batches::EventQueue;
use crate::machine::schedule::BackfillFacts;
use crate::machine::source::{BackfillStep, StreamMerge};
use crate::protocol::pgoutput::PgOutputMessage;
use crate::types::TypeRegistry;

/// The simulated tables as the online snapshot sees them: their schemas as the stream's
/// Relation messages make them (with the primary key named), key positions and order
/// (`server_ordered`: the text-keyed table's keys compared only by the server).
pub(super) fn online_tables(server_ordered: bool) -> Arc<Vec<OnlineTable>> {
    let mut cache = RelationCache::new(
        TableRouting::tables(TABLES.iter().map(|t| TableName::new("public", t.name))),
        SchemaChangePolicy::default(),
    );
    let types = TypeRegistry::default();
    let tables = TABLES
        .iter()
        .filter_map(|def| {
            let PgOutputMessage::Relation(message) = relation(def, None) else {
                return None;
            };
            cache.register(&message).ok()?;
            let mut schema = (*cache.get(def.relation_id)?.schema.clone()?).clone();
            schema.primary_key = def
                .key
                .iter()
                .filter_map(|&k| def.columns.get(k).map(|(name, _)| (*name).to_owned()))
                .collect();
            let by_server = server_ordered
                && def.key.len() == 1
                && def
                    .key
                    .first()
                    .and_then(|&k| def.columns.get(k))
                    .map(|c| c.1)
                    == Some(TEXT);
            let order = if by_server {
                KeyOrder::by_server()
            } else {
                KeyOrder::new(
                    def.key
                        .iter()
                        .filter_map(|&k| {
                            let (_, oid) = def.columns.get(k)?;
                            let collation = if matches!(*oid, INT4 | INT8) {
                                KeyCollation::NotCollatable
                            } else {
                                KeyCollation::Libc { collate: "C" }
                            };
                            KeyColumnOrder::for_column(*oid, collation).ok()
                        })
                        .collect(),
                )
            };
            Some(OnlineTable {
                schema: Arc::new(schema),
                key_columns: def.key.to_vec(),
                order,
                column_types: def
                    .columns
                    .iter()
                    .map(|(_, oid)| types.resolve(*oid))
                    .collect(),
            })
        })
        .collect();
    Arc::new(tables)
}

/// A background round: the chunks still to read, and what was read.
#[derive(Debug, Default)]
struct Round {
    to_read: VecDeque<Request>,
    results: Vec<(Request, Result<ChunkRead, Error>)>,
}

/// The running online snapshot of the simulation.
#[derive(Debug)]
pub(super) struct SimBackfill {
    pub state: OnlineSnapshot,
    round: Option<Round>,
    /// The rest of a keyless table being copied whole (read under the copy's snapshot).
    whole_rows: VecDeque<Row>,
    chunk_rows: usize,
}

impl SimBackfill {
    pub(super) fn new(state: OnlineSnapshot, chunk_rows: usize) -> Self {
        SimBackfill {
            state,
            round: None,
            whole_rows: VecDeque::new(),
            chunk_rows: chunk_rows.max(1),
        }
    }

    /// Whether a background round has chunks left to read.
    pub(super) fn reading(&self) -> bool {
        self.round.as_ref().is_some_and(|r| !r.to_read.is_empty())
    }

    /// Reads the background round's next chunk now; what it read, for the trace.
    pub(super) fn read_next(&mut self, db: &Database) -> String {
        let Some(round) = self.round.as_mut() else {
            return String::new();
        };
        let Some(request) = round.to_read.pop_front() else {
            return String::new();
        };
        let read = read_chunk(db, &request, self.chunk_rows);
        let line = describe_read(&request, &read);
        round.results.push((request, Ok(read)));
        line
    }

    /// Performs one backfill step the machine asked for, at `now` (`fail`: a comparison
    /// on the server fails, as on a lost connection).
    pub(super) fn step(
        &mut self,
        step: BackfillStep,
        db: &Database,
        now: Instant,
        fail: bool,
        out: &mut EventQueue<'_>,
    ) -> Result<(), Error> {
        match step {
            BackfillStep::StartRound => self.start_round(db),
            BackfillStep::FinishRound => {
                self.place_round(now, out)?;
                if self.state.optimistic() && self.state.wants_chunk(now) {
                    self.start_round(db)?;
                }
                Ok(())
            }
            BackfillStep::ReadRoundPaused => {
                self.start_round(db)?;
                while self.reading() {
                    self.read_next(db);
                }
                self.place_round(now, out)
            }
            BackfillStep::StartWhole => {
                let Some(catalog_index) = self.state.next_whole() else {
                    return Ok(());
                };
                if self
                    .state
                    .whole_begun(db.snapshot_text(), db.insert_position(), now, out)?
                {
                    let def = TABLES.get(catalog_index).copied();
                    self.whole_rows = db
                        .visible_rows(catalog_index)
                        .iter()
                        .filter_map(|v| def.map(|d| row_of(&d, v)))
                        .collect();
                    self.next_whole_piece(out)?;
                }
                Ok(())
            }
            BackfillStep::NextWholePiece => self.next_whole_piece(out),
            BackfillStep::ResolveHeld => {
                if fail {
                    self.state.comparisons_failed(now);
                    return Ok(());
                }
                let needed = self.state.comparisons_needed()?;
                let answers = needed
                    .iter()
                    .map(|c| self.server_compares(c))
                    .collect::<Result<Vec<_>, _>>()?;
                self.state.comparisons_answered(&needed, answers, out)
            }
        }
    }

    /// The server's answer to one comparison: the key against the boundary, in its order.
    fn server_compares(&self, comparison: &Comparison) -> Result<Ordering, Error> {
        let def = self
            .state
            .catalog_index(comparison.table)
            .and_then(|i| TABLES.get(i))
            .ok_or_else(|| Error::protocol("a comparison for an unknown table"))?;
        let text = |key: &Vec<Value>| -> Result<Values, Error> {
            Ok(token_key_text(key)?.into_iter().map(Some).collect())
        };
        Ok(key_cmp(
            def,
            &text(&comparison.key)?,
            &text(&comparison.boundary)?,
        ))
    }

    fn start_round(&mut self, db: &Database) -> Result<(), Error> {
        let plans = self.state.plan_round(Vec::new())?;
        if plans.is_empty() {
            return Ok(());
        }
        let mut round = Round::default();
        for plan in plans {
            let ends = ends_for(db, &plan, self.chunk_rows);
            round.to_read.extend(plan.requests(ends).0);
        }
        self.round = Some(round);
        Ok(())
    }

    fn place_round(&mut self, now: Instant, out: &mut EventQueue<'_>) -> Result<(), Error> {
        let Some(round) = self.round.take() else {
            return Ok(());
        };
        self.state.place_round(round.results, now, out)?;
        Ok(())
    }

    fn next_whole_piece(&mut self, out: &mut EventQueue<'_>) -> Result<(), Error> {
        let take = self.chunk_rows.min(self.whole_rows.len());
        let rows: Vec<Row> = self.whole_rows.drain(..take).collect();
        let done = self.whole_rows.is_empty();
        self.state.whole_piece(rows, done, out)
    }
}

impl StreamMerge for SimBackfill {
    fn on_event(
        &mut self,
        event: cdc_core::ChangeEvent,
    ) -> Result<Option<cdc_core::ChangeEvent>, Error> {
        self.state.on_event(event)
    }

    fn hold_end(&mut self, end: Lsn) -> bool {
        self.state.hold_end(end)
    }

    fn idle(&mut self, lsn: Lsn) {
        self.state.progress(lsn);
    }

    fn facts(&self, now: Instant) -> BackfillFacts {
        let ready = self.round.is_some() && !self.reading();
        self.state.facts(now, ready)
    }
}

/// The ends of `plan`'s ranges: given by the plan, else found now (as the first reader's
/// split query finds them) — none for a single chunk.
fn ends_for(db: &Database, plan: &TablePlan, limit: usize) -> Vec<Vec<String>> {
    if plan.chunks <= 1 {
        return Vec::new();
    }
    if let Some(ends) = &plan.ends {
        return ends.clone();
    }
    let count = plan.chunks - usize::from(plan.estimable);
    let Some(def) = TABLES.get(plan.catalog_index) else {
        return Vec::new();
    };
    let rows = sorted_after(db, def, plan.catalog_index, plan.after.as_deref());
    rows.iter()
        .skip(limit.max(1) - 1)
        .step_by(limit.max(1))
        .take(count)
        .map(|row| key_text(def, row))
        .collect()
}

/// One chunk read now: the rows after the request's start, up to its end (at most the
/// range cap) or the next `limit` rows.
fn read_chunk(db: &Database, request: &Request, limit: usize) -> ChunkRead {
    let snapshot = db.snapshot_text();
    let until = db.insert_position();
    let Some(def) = TABLES.get(request.catalog_index) else {
        return ChunkRead {
            snapshot,
            until,
            rows: Vec::new(),
            complete: true,
            cut_short: false,
        };
    };
    let mut rows = sorted_after(db, def, request.catalog_index, request.after.as_deref());
    let (complete, cut_short) = match &request.upto {
        Some(upto) => {
            let upto: Values = upto.iter().cloned().map(Some).collect();
            rows.retain(|row| key_cmp(def, &def.identity(row), &upto) != Ordering::Greater);
            rows.truncate(range_cap(limit));
            (false, rows.len() >= range_cap(limit))
        }
        None => {
            rows.truncate(limit);
            (rows.len() < limit, false)
        }
    };
    ChunkRead {
        snapshot,
        until,
        rows: rows.iter().map(|v| row_of(def, v)).collect(),
        complete,
        cut_short,
    }
}

/// The rows of `table` visible now whose key is after `after`, in key order.
fn sorted_after(
    db: &Database,
    def: &TableDef,
    table: usize,
    after: Option<&[String]>,
) -> Vec<Values> {
    let after: Option<Values> = after.map(|a| a.iter().cloned().map(Some).collect());
    let mut rows: Vec<Values> = db
        .visible_rows(table)
        .into_iter()
        .filter(|row| {
            after
                .as_ref()
                .is_none_or(|a| key_cmp(def, &def.identity(row), a) == Ordering::Greater)
        })
        .collect();
    rows.sort_by(|a, b| key_cmp(def, &def.identity(a), &def.identity(b)));
    rows
}

/// Two keys of `def` (key columns only) compared as the server's btree orders them.
fn key_cmp(def: &TableDef, a: &Values, b: &Values) -> Ordering {
    for ((x, y), &column) in a.iter().zip(b).zip(def.key) {
        let oid = def.columns.get(column).map_or(0, |c| c.1);
        let order = match (x, y) {
            (Some(x), Some(y)) if matches!(oid, INT4 | INT8) => {
                let (x, y) = (x.parse::<i64>().unwrap_or(0), y.parse::<i64>().unwrap_or(0));
                x.cmp(&y)
            }
            (Some(x), Some(y)) => x.as_bytes().cmp(y.as_bytes()),
            (x, y) => x.is_some().cmp(&y.is_some()),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    Ordering::Equal
}

/// The key of `row` in the text form a token and a query use.
fn key_text(def: &TableDef, row: &Values) -> Vec<String> {
    def.identity(row)
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect()
}

/// A row as the copy decodes it.
fn row_of(def: &TableDef, values: &Values) -> Row {
    values
        .iter()
        .zip(def.columns)
        .map(|(value, (_, oid))| match value {
            None => Value::Null,
            Some(text) if *oid == INT8 => Value::Int8(text.parse().unwrap_or(0)),
            Some(text) if *oid == INT4 => Value::Int4(text.parse().unwrap_or(0)),
            Some(text) => Value::Text(Text::from(text.as_str())),
        })
        .collect()
}

/// A chunk read as the trace shows it.
fn describe_read(request: &Request, read: &ChunkRead) -> String {
    let keys: Vec<String> = read
        .rows
        .iter()
        .map(|row| format!("{:?}", row.first()))
        .collect();
    format!(
        "read table {} after {:?} up to {:?} under {} until {}: {} rows {keys:?}{}{}",
        request.catalog_index,
        request.after,
        request.upto,
        read.snapshot,
        read.until,
        read.rows.len(),
        if read.complete { ", complete" } else { "" },
        if read.cut_short { ", cut short" } else { "" },
    )
}
