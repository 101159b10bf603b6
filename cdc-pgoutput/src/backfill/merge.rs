//! Merging online snapshot chunks into the change stream, so that a sink applying events
//! as a multiset ends with exactly the table's rows.
//!
//! A table is read in chunks, in primary-key order, each in its own short transaction
//! whose snapshot `S` (`pg_current_snapshot()`) is recorded together with `until`, the WAL
//! insert position read right after it. While the stream is paused between two
//! transactions (the anchor), the chunk's rows are put into the stream as inserts. Then,
//! for every streamed change of the table, with `k` the key it touches and `X` its
//! transaction:
//!
//! 1. `k` beyond the frontier (the last key any delivered chunk read): **dropped** — the
//!    sink has no row there, and a later chunk reads the row as it is then, `X` included.
//! 2. `k` inside the range of a chunk whose window is still open and `X` visible in that
//!    chunk's `S`: **dropped** — the chunk's row already shows `X`'s effect.
//! 3. Otherwise: **delivered** — the sink has the row as it was before `X`.
//!
//! An update whose key moved across the frontier is delivered as the half that applies (a
//! delete of the old row, or an insert of the new one). A TRUNCATE of a table being
//! backfilled is delivered and starts its backfill over, so no chunk read before it survives.
//!
//! Why no change is lost or applied twice (for one key `k` in a chunk's range `R`):
//! - Every change to `R` before the anchor was dropped by rule 1 (`R` was beyond the
//!   frontier until now), and every transaction that made one is visible in `S`
//!   ([`Backfill::invisible_before_anchor`] checks this for the transactions whose dropped
//!   changes reach into `R`; the caller retries the chunk if one is not, e.g. a commit
//!   still waiting for a synchronous standby). So `S` shows them all. A transaction whose
//!   dropped changes all lie beyond `R` does not concern this chunk: it stays recorded for
//!   the chunks that reach its keys. A TRUNCATE's transaction reaches every key.
//! - A transaction after the anchor is either visible in `S` (its effect is in the chunk:
//!   rule 2 drops it) or not (the chunk is older: rule 3 applies it after the chunk's row).
//! - Every transaction visible in `S` committed before `S` was taken, so its commit record
//!   is before `until`; once the stream has passed `until`, rule 2 can no longer apply and
//!   the window closes.
//!
//! Keys whose order only the server knows ([`KeyOrder::by_server`]: text under a
//! linguistic collation, enums, `inet`, …) are compared by the server: before passing an
//! event of such a table, the source asks [`Backfill::comparisons_needed`] — its keys
//! against the frontier and the open windows' bounds, the only comparisons the rules make
//! — has the server answer them, and tells the merge ([`Backfill::learn_comparison`]).
//! The rules and the proof are the same; the chunks are read in the server's order too.
//! Such a table's passed transactions reach every key (their keys are not compared with
//! each other).
//!
//! The state is plain data (no I/O): the source feeds it events, chunks and progress, and
//! asks it for the next chunk's start key and for the resume token's part.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use cdc_core::{ChangeEvent, Error, EventKind, Lsn, Row, SchemaRef, TableName, Value};

use super::key_order::KeyOrder;
use super::xid_snapshot::XidSnapshot;

/// A primary key's values, in key column order.
pub type Key = Vec<Value>;

/// How far a table's chunks were delivered.
#[derive(Clone, Debug, PartialEq)]
pub enum Frontier {
    /// No chunk yet: every key is beyond the frontier.
    NotStarted,
    /// Rows with keys up to and including this one were delivered.
    UpTo(Key),
    /// Every row was delivered: no key is beyond the frontier.
    Done,
}

/// Where a delivered chunk's key range ends.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkEnd {
    /// At this key (inclusive): later chunks continue after it.
    Key(Key),
    /// At the end of the table: its backfill is complete.
    TableEnd,
}

/// A delivered chunk whose snapshot may still be newer than the stream.
#[derive(Clone, Debug)]
pub struct Window {
    /// Exclusive lower bound (`None`: from the first key).
    pub after: Option<Key>,
    /// Inclusive upper bound (`None`: to the end of the table).
    pub upto: Option<Key>,
    /// The chunk's snapshot.
    pub snapshot: XidSnapshot,
    /// Every transaction visible in `snapshot` committed before this position.
    pub until: Lsn,
}

/// One table's backfill.
#[derive(Clone, Debug)]
pub struct TableState {
    /// The table.
    pub table: TableName,
    /// Positions of the primary key columns in the table's rows, in key order.
    pub key_columns: Vec<usize>,
    /// How keys compare (as Postgres's btree orders them).
    pub order: KeyOrder,
    /// How far chunks were delivered.
    pub frontier: Frontier,
    /// Open merge windows, in key order.
    pub windows: Vec<Window>,
    /// Chunks delivered (the next chunk's number).
    pub chunks: u64,
    /// Rows delivered by chunks.
    pub rows: u64,
}

/// How far into a table's key space a passed transaction's dropped changes reach: a chunk
/// whose range reaches that far must show the transaction.
#[derive(Clone, Debug, PartialEq)]
enum Reach {
    /// Every chunk must show it: a TRUNCATE, or a transaction an earlier session passed
    /// (its keys are not kept in a token).
    Everything,
    /// The smallest key among its dropped changes; chunks ending before it need not.
    From(Key),
}

/// A comparison the merge needs of a table whose key order only the server knows: a
/// streamed row's key against a boundary (the frontier, or an open window's bound).
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The table's index in the merge.
    pub table: usize,
    /// The streamed row's key.
    pub key: Key,
    /// The boundary.
    pub boundary: Key,
}

/// A deliberate mistake the simulation must catch (tests only): each breaks one rule of
/// the proof, and `merge_model_tests::every_deliberate_fault_is_caught` fails if the
/// simulation's seeds do not find it.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A chunk is placed without checking that its snapshot shows the passed transactions.
    NoVisibilityCheck,
    /// A change at exactly the frontier's key is taken as beyond it (and dropped).
    FrontierOffByOne,
    /// A restart forgets the transactions passed but not yet shown.
    ForgetOnRestart,
    /// Rule 2 never drops: a change a chunk's snapshot already shows is delivered again.
    NoWindowDrop,
}

/// A key's text form (Postgres's), to look comparisons up by.
type KeyText = Vec<String>;

/// The outcome of one row change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Deliver,
    Drop,
}

/// The online snapshot's merge state for every table being backfilled.
#[derive(Debug, Default)]
pub struct Backfill {
    tables: Vec<TableState>,
    /// The transaction whose events are being processed.
    current_xid: Option<u32>,
    /// Per table (by index): the transactions processed whose changes to it were dropped
    /// beyond its frontier (rule 1) or that truncated it, and that no snapshot observed
    /// since showed ([`Self::observe`]); each must be visible in the snapshot of a chunk
    /// reaching its [`Reach`]. A map, so a row change costs the same however many there
    /// are.
    touched: Vec<HashMap<u32, Reach>>,
    /// End of the last transaction processed (or progress position reported).
    processed: Lsn,
    /// Comparisons the server made for tables whose key order only it knows: (table, key,
    /// boundary) → how the key compares with the boundary.
    server_order: HashMap<(usize, KeyText, KeyText), Ordering>,
    /// A deliberate mistake, for the simulation's fault test.
    #[cfg(test)]
    pub(crate) fault: Option<Fault>,
}

impl Backfill {
    /// A merge state for `tables` (none is done yet, or as restored from a token).
    pub fn new(tables: Vec<TableState>, processed: Lsn) -> Self {
        Backfill {
            touched: vec![HashMap::new(); tables.len()],
            tables,
            current_xid: None,
            processed,
            server_order: HashMap::new(),
            #[cfg(test)]
            fault: None,
        }
    }

    /// The comparisons [`Self::on_event`] will make for `event` that only the server can
    /// answer and that were not learned yet: its keys against the frontier and the open
    /// windows' bounds of a table whose key order is [`KeyOrder::by_server`]. Until each is
    /// learned ([`Self::learn_comparison`]), passing the event fails. Placing chunks adds
    /// boundaries; committing and a TRUNCATE only remove some, so what is needed for
    /// events queued behind each other is known before the first of them is passed.
    pub fn comparisons_needed(&self, event: &ChangeEvent) -> Result<Vec<Comparison>, Error> {
        let (table, rows): (&SchemaRef, [Option<&Row>; 2]) = match &event.kind {
            EventKind::Insert { table, new } => (table, [Some(new), None]),
            EventKind::Update { table, old, new } => {
                (table, [Some(new), old.as_ref().map(|o| &o.values)])
            }
            EventKind::Delete { table, old } => (table, [old.as_ref().map(|o| &o.values), None]),
            _ => return Ok(Vec::new()),
        };
        let Some(index) = self.merging_index(&table.name) else {
            return Ok(Vec::new());
        };
        let Some(state) = self.tables.get(index) else {
            return Ok(Vec::new());
        };
        if !state.order.is_by_server() {
            return Ok(Vec::new());
        }
        let mut boundaries: Vec<&Key> = Vec::new();
        if let Frontier::UpTo(key) = &state.frontier {
            boundaries.push(key);
        }
        for window in &state.windows {
            boundaries.extend(window.after.iter().chain(window.upto.iter()));
        }
        let mut needed = Vec::new();
        for row in rows.into_iter().flatten() {
            // A row without its key fails when it is passed, with the reason.
            let Ok(key) = key_of(&state.key_columns, row) else {
                continue;
            };
            let text = key_text(&key)?;
            for &boundary in &boundaries {
                let lookup = (index, text.clone(), key_text(boundary)?);
                if !self.server_order.contains_key(&lookup)
                    && !needed
                        .iter()
                        .any(|c: &Comparison| c.key == key && &c.boundary == boundary)
                {
                    needed.push(Comparison {
                        table: index,
                        key: key.clone(),
                        boundary: boundary.clone(),
                    });
                }
            }
        }
        Ok(needed)
    }

    /// The server's answer to `comparison`: how its key compares with its boundary.
    pub fn learn_comparison(
        &mut self,
        comparison: &Comparison,
        ordering: Ordering,
    ) -> Result<(), Error> {
        self.server_order.insert(
            (
                comparison.table,
                key_text(&comparison.key)?,
                key_text(&comparison.boundary)?,
            ),
            ordering,
        );
        Ok(())
    }

    /// Forgets the comparisons learned (once the events they were asked for are passed),
    /// so that they take no memory beyond a batch.
    pub fn forget_comparisons(&mut self) {
        self.server_order.clear();
    }

    /// How key `a` of table `index` compares with `b`: by the key order, or as the server
    /// said for an order only it knows.
    fn compare_keys(
        &self,
        index: usize,
        state: &TableState,
        a: &Key,
        b: &Key,
    ) -> Result<Ordering, Error> {
        if !state.order.is_by_server() {
            return state.order.compare(a, b).map_err(order_error);
        }
        self.server_order
            .get(&(index, key_text(a)?, key_text(b)?))
            .copied()
            .ok_or_else(|| {
                Error::protocol(format!(
                    "internal: a key of {} was not compared by the server before its change                      was passed to the online snapshot's merge",
                    state.table
                ))
            })
    }

    /// The merge continues an earlier session (a restart from a resume token, or a
    /// reconnect) whose stream passed `xids` without a snapshot showing them yet: every
    /// table's next chunk must show them, as if this session had passed them. The new
    /// session's stream starts after them, so without this a commit the earlier session
    /// saw but that is not yet visible (its backend still waiting, e.g. for a synchronous
    /// standby) would be missing from the next chunk for good. Which tables and keys each
    /// reached is not kept: every table's next chunk waits for all of them.
    pub fn with_unshown(mut self, xids: &[u32]) -> Self {
        #[cfg(test)]
        if self.fault == Some(Fault::ForgetOnRestart) {
            return self;
        }
        for touched in &mut self.touched {
            touched.extend(xids.iter().map(|&xid| (xid, Reach::Everything)));
        }
        self
    }

    /// The transactions the stream passed that a table's next chunk must still show (no
    /// snapshot observed since has), sorted: what [`Self::with_unshown`] takes after a
    /// restart.
    pub fn unshown(&self) -> Vec<u32> {
        let mut xids: Vec<u32> = self
            .touched
            .iter()
            .flat_map(|touched| touched.keys().copied())
            .collect();
        xids.sort_unstable();
        xids.dedup();
        xids
    }

    /// A snapshot the server gave since the last checks (a chunk read's, whether its
    /// chunk was placed or not): transactions it shows are visible to every snapshot taken
    /// after it, so no later chunk needs checking for them. Keeps the record of passed
    /// transactions to those committed since the last read, however long a table waits
    /// for its turn.
    ///
    /// Only for snapshots taken before every snapshot checked from now on: a snapshot
    /// observed too early would excuse a read whose own, older snapshot misses a
    /// transaction. The source observes a round's snapshots once all of them were checked.
    pub fn observe(&mut self, snapshot: &XidSnapshot) {
        for touched in &mut self.touched {
            touched.retain(|&xid, _| !snapshot.is_visible_xid32(xid));
        }
    }

    /// The tables and their state.
    pub fn tables(&self) -> &[TableState] {
        &self.tables
    }

    /// Whether every table is done and every window closed: the merge has nothing left
    /// to decide.
    pub fn is_finished(&self) -> bool {
        self.tables
            .iter()
            .all(|t| t.frontier == Frontier::Done && t.windows.is_empty())
    }

    /// Tables that still need chunks (index, table).
    pub fn pending_tables(&self) -> impl Iterator<Item = (usize, &TableState)> {
        self.tables
            .iter()
            .enumerate()
            .filter(|(_, t)| t.frontier != Frontier::Done)
    }

    /// Where the stream stands: the end of the last transaction processed.
    pub fn processed(&self) -> Lsn {
        self.processed
    }

    /// The stream has nothing in flight up to `lsn` (an idle keepalive's WAL end): windows
    /// that end there close.
    pub fn progress(&mut self, lsn: Lsn) {
        if self.current_xid.is_none() && lsn > self.processed {
            self.processed = lsn;
            self.close_windows();
        }
    }

    fn close_windows(&mut self) {
        let processed = self.processed;
        for table in &mut self.tables {
            table.windows.retain(|w| w.until > processed);
        }
    }

    /// Transactions processed before the anchor that are not visible in `snapshot` and
    /// whose dropped changes to `table` reach into a chunk from the table's frontier up to
    /// `end`: a chunk read under `snapshot` would miss their changes, which the stream
    /// already dropped. Empty means the chunk may be delivered now.
    ///
    /// Only the reach matters, not when the transaction committed: a commit anywhere else
    /// in the table while the chunk was read leaves the chunk sound.
    pub fn invisible_before_anchor(
        &self,
        table: usize,
        snapshot: &XidSnapshot,
        end: &ChunkEnd,
    ) -> Result<Vec<u32>, Error> {
        let (Some(touched), Some(state)) = (self.touched.get(table), self.tables.get(table)) else {
            return Ok(Vec::new());
        };
        #[cfg(test)]
        if self.fault == Some(Fault::NoVisibilityCheck) {
            return Ok(Vec::new());
        }
        let mut invisible = Vec::new();
        for (&xid, reach) in touched {
            if snapshot.is_visible_xid32(xid) {
                continue;
            }
            let reaches = match (reach, end) {
                (Reach::Everything, _) | (_, ChunkEnd::TableEnd) => true,
                // Not recorded for such a table; were it, it would reach.
                _ if state.order.is_by_server() => true,
                (Reach::From(first), ChunkEnd::Key(end)) => {
                    state.order.compare(first, end).map_err(order_error)? != Ordering::Greater
                }
            };
            if reaches {
                invisible.push(xid);
            }
        }
        invisible.sort_unstable();
        Ok(invisible)
    }

    /// Delivers a chunk of `table` read under `snapshot`: `rows` are the table's rows
    /// after the frontier in key order (at most the chunk size); `complete` says the read
    /// reached the end of the table.
    ///
    /// Must be called at an anchor (between transactions), after
    /// [`Self::invisible_before_anchor`] came back empty.
    pub fn deliver_chunk(
        &mut self,
        table: usize,
        snapshot: XidSnapshot,
        until: Lsn,
        rows: &[Row],
        complete: bool,
    ) -> Result<(), Error> {
        let upto = match rows.last() {
            Some(last) if !complete => {
                let Some(state) = self.tables.get(table) else {
                    return Err(Error::protocol("internal: chunk for an unknown table"));
                };
                ChunkEnd::Key(key_of(&state.key_columns, last)?)
            }
            // An empty read reached the table's end (fewer rows than asked for).
            _ => ChunkEnd::TableEnd,
        };
        self.deliver_range(table, snapshot, until, rows.len(), upto)
    }

    /// Delivers a chunk of `table` read under `snapshot` that holds every row of the
    /// table's key range from the frontier (exclusive) up to `end` (inclusive): `rows`
    /// rows. Several chunks of one table can be placed at one anchor this way, each
    /// continuing where the previous one ended — but only after every one of them passed
    /// [`Self::invisible_before_anchor`] (this forgets the transactions `snapshot` shows,
    /// which a chunk read under an older snapshot may still need).
    pub fn deliver_range(
        &mut self,
        table: usize,
        snapshot: XidSnapshot,
        until: Lsn,
        rows: usize,
        end: ChunkEnd,
    ) -> Result<(), Error> {
        let Some(state) = self.tables.get_mut(table) else {
            return Err(Error::protocol("internal: chunk for an unknown table"));
        };
        let after = match &state.frontier {
            Frontier::NotStarted => None,
            Frontier::UpTo(key) => Some(key.clone()),
            Frontier::Done => {
                return Err(Error::protocol("internal: chunk for a table already done"));
            }
        };
        let upto = match end {
            ChunkEnd::Key(key) => {
                // The server ordered the chunk itself when only it can compare the keys.
                if let Some(after) = &after
                    && !state.order.is_by_server()
                    && state.order.compare(&key, after).map_err(order_error)? != Ordering::Greater
                {
                    return Err(Error::protocol(
                        "internal: a chunk's end is not after the table's frontier",
                    ));
                }
                Some(key)
            }
            ChunkEnd::TableEnd => None,
        };
        state.frontier = match &upto {
            Some(key) => Frontier::UpTo(key.clone()),
            None => Frontier::Done,
        };
        state.chunks += 1;
        state.rows += rows as u64;
        // Transactions visible in `snapshot` are visible in every later chunk's: they need no
        // further check. The others reach only beyond this chunk, and stay.
        if let Some(touched) = self.touched.get_mut(table) {
            touched.retain(|&xid, _| !snapshot.is_visible_xid32(xid));
        }
        if until > self.processed {
            state.windows.push(Window {
                after,
                upto,
                snapshot,
                until,
            });
        }
        Ok(())
    }

    /// Decides one streamed event: `Ok(Some(event))` to deliver (possibly reduced to the
    /// half of an update that applies), `Ok(None)` to drop it.
    pub fn on_event(&mut self, event: ChangeEvent) -> Result<Option<ChangeEvent>, Error> {
        let position = event.position;
        let kind = match event.kind {
            EventKind::Begin(begin) => {
                self.current_xid = Some(begin.xid);
                EventKind::Begin(begin)
            }
            EventKind::Commit(commit) => {
                self.current_xid = None;
                self.processed = self.processed.max(commit.end_lsn);
                self.close_windows();
                EventKind::Commit(commit)
            }
            EventKind::Insert { table, new } => match self.decide_row(&table, &new)? {
                Some(Side::Drop) => return Ok(None),
                _ => EventKind::Insert { table, new },
            },
            EventKind::Delete { table, old } => {
                let Some(index) = self.merging_index(&table.name) else {
                    return Ok(Some(ChangeEvent {
                        lsn: cdc_core::Lsn::ZERO,
                        position,
                        kind: EventKind::Delete { table, old },
                    }));
                };
                let Some(old_row) = &old else {
                    return Err(no_old_key(&table.name));
                };
                match self.decide(index, &old_row.values)? {
                    Side::Drop => return Ok(None),
                    Side::Deliver => EventKind::Delete { table, old },
                }
            }
            EventKind::Update { table, old, new } => {
                let Some(index) = self.merging_index(&table.name) else {
                    return Ok(Some(ChangeEvent {
                        lsn: cdc_core::Lsn::ZERO,
                        position,
                        kind: EventKind::Update { table, old, new },
                    }));
                };
                let new_side = self.decide(index, &new)?;
                // Without an old row the key did not change: both halves decide alike.
                let old_side = match &old {
                    Some(old_row) => self.decide(index, &old_row.values)?,
                    None => new_side,
                };
                match (old_side, new_side) {
                    (Side::Deliver, Side::Deliver) => EventKind::Update { table, old, new },
                    (Side::Drop, Side::Drop) => return Ok(None),
                    (Side::Deliver, Side::Drop) => EventKind::Delete { table, old },
                    (Side::Drop, Side::Deliver) => insert_from_update(&table, new)
                        .map(|new| EventKind::Insert { table, new })?,
                }
            }
            EventKind::Truncate {
                tables,
                cascade,
                restart_identity,
            } => {
                // A TRUNCATE empties the sink's copy of a table being backfilled: its
                // chunks start over (windows of chunks read before it no longer describe
                // what the sink holds), and each must show the TRUNCATE, or it would put
                // back rows the sink just dropped. A done table's is an ordinary change.
                for table in &tables {
                    if let Some(index) = self.merging_index(&table.name) {
                        self.restart_table_at_anchor(index);
                        if let (Some(xid), Some(touched)) =
                            (self.current_xid, self.touched.get_mut(index))
                        {
                            touched.insert(xid, Reach::Everything);
                        }
                    }
                }
                EventKind::Truncate {
                    tables,
                    cascade,
                    restart_identity,
                }
            }
            other => other,
        };
        Ok(Some(ChangeEvent {
            lsn: cdc_core::Lsn::ZERO,
            position,
            kind,
        }))
    }

    /// Starts table `index`'s backfill over from its first row, whatever its state (the
    /// source puts a TRUNCATE of the table at the next anchor, before the first chunk,
    /// so the sink holds nothing of it when the chunks come). Its chunk and row counts
    /// start over too: the copy that follows is a new one.
    pub fn restart_table_at_anchor(&mut self, index: usize) {
        if let Some(state) = self.tables.get_mut(index) {
            state.frontier = Frontier::NotStarted;
            state.windows.clear();
            state.chunks = 0;
            state.rows = 0;
        }
    }

    /// The index of `table` while the merge still decides its changes (not done, or a
    /// window still open; a TRUNCATE of it then starts its copy over); `None` for a
    /// table the merge passes through untouched.
    pub fn merging_index(&self, table: &TableName) -> Option<usize> {
        self.tables.iter().position(|t| {
            t.table == *table && (t.frontier != Frontier::Done || !t.windows.is_empty())
        })
    }

    fn decide_row(&mut self, table: &SchemaRef, row: &Row) -> Result<Option<Side>, Error> {
        match self.merging_index(&table.name) {
            Some(index) => self.decide(index, row).map(Some),
            None => Ok(None),
        }
    }

    /// Rules 1–3 of the module documentation for the row `row` of table `index`.
    fn decide(&mut self, index: usize, row: &Row) -> Result<Side, Error> {
        // Only tables the merge still decides come here (`merging_index`).
        let Some(state) = self.tables.get(index) else {
            return Ok(Side::Deliver);
        };
        let xid = self.current_xid.ok_or_else(|| {
            Error::protocol("internal: a row change outside a transaction during a backfill")
        })?;
        let key = key_of(&state.key_columns, row)?;
        let covered = match &state.frontier {
            Frontier::NotStarted => false,
            Frontier::Done => true,
            Frontier::UpTo(frontier) => {
                let ordering = self.compare_keys(index, state, &key, frontier)?;
                #[cfg(test)]
                if self.fault == Some(Fault::FrontierOffByOne) && ordering == Ordering::Equal {
                    return Ok(Side::Drop);
                }
                ordering != Ordering::Greater
            }
        };
        if !covered {
            // The chunk that reads this key must show the transaction. Keys only the
            // server can compare are not compared with each other: such a transaction
            // reaches every key.
            let reach = if state.order.is_by_server() {
                Reach::Everything
            } else {
                Reach::From(key)
            };
            if let Some(touched) = self.touched.get_mut(index) {
                match touched.entry(xid) {
                    Entry::Vacant(entry) => {
                        entry.insert(reach);
                    }
                    Entry::Occupied(mut entry) => {
                        let lower = match (entry.get(), &reach) {
                            (Reach::From(first), Reach::From(key)) => {
                                state.order.compare(key, first).map_err(order_error)?
                                    == Ordering::Less
                            }
                            (Reach::From(_), Reach::Everything) => true,
                            (Reach::Everything, _) => false,
                        };
                        if lower {
                            entry.insert(reach);
                        }
                    }
                }
            }
            return Ok(Side::Drop);
        }
        for window in &state.windows {
            let above = match &window.after {
                None => true,
                Some(after) => self.compare_keys(index, state, &key, after)? == Ordering::Greater,
            };
            let below = match &window.upto {
                None => true,
                Some(upto) => self.compare_keys(index, state, &key, upto)? != Ordering::Greater,
            };
            if above && below {
                #[cfg(test)]
                if self.fault == Some(Fault::NoWindowDrop) {
                    return Ok(Side::Deliver);
                }
                return Ok(if window.snapshot.is_visible_xid32(xid) {
                    Side::Drop
                } else {
                    Side::Deliver
                });
            }
        }
        Ok(Side::Deliver)
    }
}

fn order_error(e: super::key_order::KeyOrderError) -> Error {
    Error::protocol(format!(
        "comparing primary keys during an online snapshot: {e}"
    ))
}

/// `key` in Postgres's text form.
fn key_text(key: &Key) -> Result<KeyText, Error> {
    key.iter()
        .map(|value| {
            value.to_pg_text().ok_or_else(|| {
                Error::protocol(format!(
                    "a primary key value ({}) has no text form",
                    value.kind_name()
                ))
            })
        })
        .collect()
}

/// The key of `row`: its values at `key_columns`.
pub fn key_of(key_columns: &[usize], row: &Row) -> Result<Key, Error> {
    key_columns
        .iter()
        .map(|&i| match row.get(i) {
            Some(Value::Null) | Some(Value::Unchanged) | None => Err(Error::protocol(format!(
                "a row change without its primary key value (column {i}) during an online snapshot"
            ))),
            Some(value) => Ok(value.clone()),
        })
        .collect()
}

fn no_old_key(table: &TableName) -> Error {
    Error::config(format!(
        "a DELETE on {table} carried no old key: an online snapshot needs the table's replica \
         identity to include its primary key (REPLICA IDENTITY DEFAULT or FULL)"
    ))
}

/// An update whose old row the sink does not hold becomes an insert of the new row, which
/// must then be complete.
fn insert_from_update(table: &SchemaRef, new: Row) -> Result<Row, Error> {
    if new.iter().any(|v| matches!(v, Value::Unchanged)) {
        return Err(Error::config(format!(
            "an UPDATE moved a row of {} into the backfilled key range without sending its \
             unchanged TOASTed columns, so the row cannot be delivered whole; set REPLICA \
             IDENTITY FULL on the table, or use the consistent snapshot mode",
            table.name
        )));
    }
    Ok(new)
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "merge_model_tests.rs"]
mod model_tests;
