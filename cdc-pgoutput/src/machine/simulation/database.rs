//! The simulated database: tables, concurrent transactions with subtransactions, row and
//! table locks, and the WAL they write — as far as logical decoding can observe it.
//!
//! Transactions run concurrently and commit in any order; every change is a WAL record
//! written when it is made (tagged with the subtransaction that made it), a
//! `ROLLBACK TO SAVEPOINT` writes the subtransaction's abort record, and the end of a
//! transaction writes its commit or abort record. Locks keep the schedules ones
//! PostgreSQL could produce: a row (or a key being inserted) is changed by one open
//! transaction at a time, and `TRUNCATE` waits for every other transaction that touched
//! the table and blocks them after it.

use std::collections::{BTreeMap, HashMap, HashSet};

use cdc_core::Lsn;

use crate::seed_rng::SeedRng;

/// A row's column values in text form (`None`: NULL).
pub(super) type Values = Vec<Option<String>>;

/// A simulated table.
#[derive(Clone, Copy, Debug)]
pub(super) struct TableDef {
    pub name: &'static str,
    pub relation_id: u32,
    /// Column names and type OIDs.
    pub columns: &'static [(&'static str, u32)],
    /// The primary key's columns; empty: no key, `REPLICA IDENTITY FULL`.
    pub key: &'static [usize],
}

impl TableDef {
    /// The values that identify a row: the key, or (without one) the whole row.
    pub(super) fn identity(&self, row: &Values) -> Values {
        if self.key.is_empty() {
            return row.clone();
        }
        self.key
            .iter()
            .map(|&i| row.get(i).cloned().flatten())
            .collect()
    }
}

/// `int8`, `int4` and `text`.
pub(super) const INT8: u32 = 20;
pub(super) const INT4: u32 = 23;
pub(super) const TEXT: u32 = 25;

/// The tables: integer, composite and text primary keys, and one without a key.
pub(super) const TABLES: [TableDef; 4] = [
    TableDef {
        name: "t_int",
        relation_id: 16_384,
        columns: &[("id", INT8), ("v", TEXT)],
        key: &[0],
    },
    TableDef {
        name: "t_comp",
        relation_id: 16_390,
        columns: &[("a", INT4), ("b", TEXT), ("v", TEXT)],
        key: &[0, 1],
    },
    TableDef {
        name: "t_text",
        relation_id: 16_396,
        columns: &[("k", TEXT), ("v", TEXT)],
        key: &[0],
    },
    TableDef {
        name: "t_nokey",
        relation_id: 16_402,
        columns: &[("a", INT4), ("v", TEXT)],
        key: &[],
    },
];

/// One change as its WAL record has it.
#[derive(Clone, Debug)]
pub(super) enum Change {
    Insert {
        table: usize,
        new: Values,
    },
    /// `old`: the whole old row (the walsender sends what the replica identity needs).
    Update {
        table: usize,
        old: Values,
        new: Values,
    },
    Delete {
        table: usize,
        old: Values,
    },
    /// `new_files`: the tables given a new file (and so a relation cache invalidation);
    /// a table truncated again in the subtransaction that gave it its new file is
    /// truncated in place, without one.
    Truncate {
        tables: Vec<usize>,
        new_files: Vec<usize>,
    },
}

/// A WAL record the walsender decodes.
#[derive(Clone, Debug)]
pub(super) enum Record {
    /// A change made by subtransaction `sub` of top-level transaction `xid` (`sub == xid`
    /// outside a subtransaction).
    Change {
        xid: u32,
        sub: u32,
        change: Change,
    },
    /// `ROLLBACK TO SAVEPOINT`: subtransaction `sub` of `xid` aborted.
    SubAbort {
        xid: u32,
        sub: u32,
    },
    Commit {
        xid: u32,
    },
    Abort {
        xid: u32,
    },
    /// `PREPARE TRANSACTION`: `xid` is prepared; it ends with one of the two below,
    /// from any session.
    Prepare {
        xid: u32,
    },
    CommitPrepared {
        xid: u32,
    },
    RollbackPrepared {
        xid: u32,
    },
}

/// What a client did, in order: the workload as statements (see `against_postgres`).
#[derive(Clone, Debug)]
pub(super) enum Statement {
    Begin { xid: u32 },
    Savepoint { xid: u32 },
    Release { xid: u32 },
    RollbackToSavepoint { xid: u32 },
    Change { xid: u32, change: Change },
    Commit { xid: u32 },
    Abort { xid: u32 },
    Prepare { xid: u32 },
    CommitPrepared { xid: u32 },
    RollbackPrepared { xid: u32 },
}

/// Where record `index` starts in the WAL.
pub(super) fn record_lsn(index: usize) -> Lsn {
    Lsn(0x0100_0000 + index as u64 * 0x40)
}

/// Where record `index` ends (a commit's end LSN).
pub(super) fn record_end(index: usize) -> Lsn {
    Lsn(record_lsn(index).0 + 0x28)
}

#[derive(Clone, Debug)]
struct Row {
    id: u64,
    values: Values,
}

/// How to undo one change.
#[derive(Debug)]
enum Undo {
    Remove { table: usize, id: u64 },
    Restore { table: usize, row: Row },
    Replace { table: usize, id: u64, old: Values },
    RestoreAll { table: usize, rows: Vec<Row> },
}

impl Undo {
    fn table(&self) -> usize {
        match self {
            Undo::Remove { table, .. }
            | Undo::Restore { table, .. }
            | Undo::Replace { table, .. }
            | Undo::RestoreAll { table, .. } => *table,
        }
    }
}

/// Undoes `undo` on `rows`, the rows of `table` (nothing for another table's undo).
fn undo_on(rows: &mut Vec<Row>, table: usize, undo: &Undo) {
    if undo.table() != table {
        return;
    }
    match undo {
        Undo::Remove { id, .. } => rows.retain(|r| r.id != *id),
        Undo::Restore { row, .. } => rows.push(row.clone()),
        Undo::Replace { id, old, .. } => {
            if let Some(row) = rows.iter_mut().find(|r| r.id == *id) {
                row.values.clone_from(old);
            }
        }
        Undo::RestoreAll { rows: taken, .. } => rows.extend(taken.iter().cloned()),
    }
}

#[derive(Debug)]
struct OpenTx {
    xid: u32,
    /// The subtransaction changes go to now (`xid`: none open).
    sub: u32,
    undo: Vec<(u32, Undo)>,
    touched: HashSet<usize>,
    /// Tables truncated in this transaction, with the subtransaction that gave them
    /// their new file (`rd_newRelfilelocatorSubid`).
    new_files: HashMap<usize, u32>,
}

/// What a lock protects: a key of a keyed table, or one row of a keyless one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum LockKey {
    Key(usize, Values),
    Row(usize, u64),
}

/// The database and its WAL.
#[derive(Debug)]
pub(super) struct Database {
    pub wal: Vec<Record>,
    /// Every statement that took effect, in order.
    pub statements: Vec<Statement>,
    tables: Vec<Vec<Row>>,
    open: Vec<OpenTx>,
    /// Prepared transactions: ended by no session, holding their locks.
    prepared: Vec<OpenTx>,
    /// Committed transactions not yet visible to new snapshots (their backend still
    /// waits, e.g. for a synchronous standby): the commit record is in the WAL, the
    /// locks are held, snapshots see them in progress.
    invisible: Vec<OpenTx>,
    /// Percent chance that a transaction ending prepares first.
    prepare_percent: u64,
    /// Percent chance that a commit stays invisible for a while.
    lag_percent: u64,
    locks: HashMap<LockKey, u32>,
    /// Tables a TRUNCATE holds exclusively, until its transaction ends.
    exclusive: HashMap<usize, u32>,
    next_xid: u32,
    next_row: u64,
    /// Transactions still to begin.
    budget: u32,
    max_open: usize,
}

impl Database {
    /// An empty database whose workload begins `transactions` transactions, at most
    /// `max_open` at a time; `prepare_percent` of those that end are prepared first
    /// (`PREPARE TRANSACTION`) and committed or rolled back later.
    pub(super) fn new(transactions: u32, max_open: usize, prepare_percent: u64) -> Self {
        Database {
            wal: Vec::new(),
            statements: Vec::new(),
            tables: vec![Vec::new(); TABLES.len()],
            open: Vec::new(),
            prepared: Vec::new(),
            invisible: Vec::new(),
            prepare_percent,
            lag_percent: 0,
            locks: HashMap::new(),
            exclusive: HashMap::new(),
            next_xid: 700,
            next_row: 1,
            budget: transactions,
            max_open: max_open.max(1),
        }
    }

    /// Makes `percent` of commits stay invisible for a while after their commit record.
    pub(super) fn with_visibility_lag(mut self, percent: u64) -> Self {
        self.lag_percent = percent;
        self
    }

    /// Whether the workload is over: every transaction begun and ended.
    pub(super) fn done(&self) -> bool {
        self.quiet() && self.budget == 0
    }

    /// Whether no transaction is open, prepared or invisible (a replication slot created
    /// now is consistent at once).
    pub(super) fn quiet(&self) -> bool {
        self.open.is_empty() && self.prepared.is_empty() && self.invisible.is_empty()
    }

    /// The WAL insert position (`pg_current_wal_insert_lsn()`): where the last record
    /// ends, as the walsender reports it once it decoded that record.
    pub(super) fn insert_position(&self) -> Lsn {
        match self.wal.len().checked_sub(1) {
            Some(last) => record_end(last),
            None => record_lsn(0),
        }
    }

    /// `pg_current_snapshot()` now, in its text form: every transaction open, prepared or
    /// committed but not yet visible is in progress.
    pub(super) fn snapshot_text(&self) -> String {
        let mut running: Vec<u32> = self
            .open
            .iter()
            .chain(&self.prepared)
            .chain(&self.invisible)
            .map(|t| t.xid)
            .collect();
        running.sort_unstable();
        let xmax = self.next_xid + 1;
        let xmin = running.first().copied().unwrap_or(xmax);
        let xip: Vec<String> = running.iter().map(u32::to_string).collect();
        format!("{xmin}:{xmax}:{}", xip.join(","))
    }

    /// The rows of `table` a snapshot taken now sees (the changes of every transaction
    /// in progress for it undone), in no particular order.
    pub(super) fn visible_rows(&self, table: usize) -> Vec<Values> {
        let mut rows = self.tables.get(table).cloned().unwrap_or_default();
        // Locks keep transactions in progress off each other's rows (and a TRUNCATE
        // waits for every other), so each one's changes are undone on their own.
        for tx in self
            .open
            .iter()
            .chain(&self.prepared)
            .chain(&self.invisible)
        {
            for (_, undo) in tx.undo.iter().rev() {
                undo_on(&mut rows, table, undo);
            }
        }
        rows.into_iter().map(|r| r.values).collect()
    }

    /// The committed contents (with every transaction ended): per table, each row's
    /// identity and values, with how many rows share them.
    pub(super) fn contents(&self) -> Vec<BTreeMap<Values, (Values, usize)>> {
        self.tables
            .iter()
            .zip(TABLES)
            .map(|(rows, def)| {
                let mut out: BTreeMap<Values, (Values, usize)> = BTreeMap::new();
                for row in rows {
                    out.entry(def.identity(&row.values))
                        .or_insert_with(|| (row.values.clone(), 0))
                        .1 += 1;
                }
                out
            })
            .collect()
    }

    /// One step of the workload: a transaction begins, changes something, opens, releases
    /// or rolls back a savepoint, commits or aborts.
    pub(super) fn step(&mut self, rng: &mut SeedRng) {
        let nothing_else = self.budget == 0 && self.open.is_empty();
        if !self.invisible.is_empty() && (nothing_else || rng.chance(15)) {
            // The oldest waiting backend goes on: its commit becomes visible, its locks
            // are released.
            let tx = self.invisible.remove(0);
            self.release(tx.xid);
            return;
        }
        if !self.prepared.is_empty() && (nothing_else || rng.chance(8)) {
            let at = rng.below(self.prepared.len() as u64) as usize;
            self.finish_prepared(at, !rng.chance(25));
            return;
        }
        if self.budget > 0
            && (self.open.is_empty() || self.open.len() < self.max_open && rng.chance(25))
        {
            self.budget -= 1;
            let xid = self.allocate_xid();
            self.statements.push(Statement::Begin { xid });
            self.open.push(OpenTx {
                xid,
                sub: xid,
                undo: Vec::new(),
                touched: HashSet::new(),
                new_files: HashMap::new(),
            });
            return;
        }
        if self.open.is_empty() {
            return;
        }
        let at = rng.below(self.open.len() as u64) as usize;
        let in_sub = self.open.get(at).is_some_and(|t| t.sub != t.xid);
        match rng.pick(&[14, 2, 2, 2, 4, 1]) {
            0 => self.change(at, rng),
            1 if !in_sub => {
                let sub = self.allocate_xid();
                if let Some(tx) = self.open.get_mut(at) {
                    tx.sub = sub;
                    self.statements.push(Statement::Savepoint { xid: tx.xid });
                }
            }
            // RELEASE SAVEPOINT: the subtransaction's changes stay (under its xid).
            2 if in_sub => {
                if let Some(tx) = self.open.get_mut(at) {
                    let (xid, sub) = (tx.xid, tx.sub);
                    for owner in tx.new_files.values_mut() {
                        if *owner == sub {
                            *owner = xid;
                        }
                    }
                    tx.sub = xid;
                    self.statements.push(Statement::Release { xid });
                }
            }
            3 if in_sub => self.rollback_to_savepoint(at),
            // (No draw without prepares, so such seeds replay as before they existed.)
            4 if self.prepare_percent > 0 && rng.chance(self.prepare_percent) => self.prepare(at),
            4 => self.end(at, true),
            5 => self.end(at, false),
            _ => self.change(at, rng),
        }
    }

    fn allocate_xid(&mut self) -> u32 {
        self.next_xid += 1;
        self.next_xid
    }

    /// Whether transaction `xid` may change `key` (no other open transaction holds it)
    /// and the table (no other TRUNCATE holds it).
    fn free_for(&self, xid: u32, key: &LockKey) -> bool {
        let table = match key {
            LockKey::Key(t, _) | LockKey::Row(t, _) => *t,
        };
        self.locks.get(key).is_none_or(|&holder| holder == xid)
            && self
                .exclusive
                .get(&table)
                .is_none_or(|&holder| holder == xid)
    }

    fn lock_key(&self, table: usize, row: &Row) -> LockKey {
        match TABLES.get(table) {
            Some(def) if !def.key.is_empty() => LockKey::Key(table, def.identity(&row.values)),
            _ => LockKey::Row(table, row.id),
        }
    }

    fn change(&mut self, at: usize, rng: &mut SeedRng) {
        let Some(tx) = self.open.get(at) else {
            return;
        };
        let (xid, sub) = (tx.xid, tx.sub);
        let table = rng.below(TABLES.len() as u64) as usize;
        if self.exclusive.get(&table).is_some_and(|&h| h != xid) {
            return;
        }
        let change = match rng.pick(&[6, 5, 3, 1]) {
            0 => self.insert(xid, table, rng),
            1 => self.update(xid, table, rng),
            2 => self.delete(xid, table, rng),
            _ => self.truncate(at, table, rng),
        };
        let Some((change, undo)) = change else {
            return;
        };
        let Some(tx) = self.open.get_mut(at) else {
            return;
        };
        tx.touched.insert(table);
        if let Change::Truncate { tables, .. } = &change {
            tx.touched.extend(tables.iter().copied());
        }
        tx.undo.extend(undo.into_iter().map(|u| (sub, u)));
        self.statements.push(Statement::Change {
            xid,
            change: change.clone(),
        });
        self.wal.push(Record::Change { xid, sub, change });
    }

    fn new_values(&mut self, table: usize, rng: &mut SeedRng) -> Values {
        let v = (!rng.chance(15)).then(|| format!("v{}", rng.below(1000)));
        match table {
            0 => vec![Some(rng.below(24).to_string()), v],
            1 => vec![
                Some(rng.below(5).to_string()),
                Some(["a", "B", "c d", ""][rng.below(4) as usize].to_owned()),
                v,
            ],
            2 => vec![
                Some(["", "a", "b", "é", "x y", "Z", "10", "9"][rng.below(8) as usize].to_owned()),
                v,
            ],
            _ => vec![Some(rng.below(3).to_string()), v],
        }
    }

    /// Whether transaction `xid` may give a row of `table` the values `values` (no other
    /// live row has its key, and no other transaction holds that key).
    fn key_available(&self, xid: u32, table: usize, values: &Values, except: Option<u64>) -> bool {
        let Some(def) = TABLES.get(table) else {
            return false;
        };
        if def.key.is_empty() {
            return true;
        }
        let key = def.identity(values);
        let taken = self.tables.get(table).is_some_and(|rows| {
            rows.iter()
                .any(|r| Some(r.id) != except && def.identity(&r.values) == key)
        });
        !taken && self.free_for(xid, &LockKey::Key(table, key))
    }

    fn insert(&mut self, xid: u32, table: usize, rng: &mut SeedRng) -> Option<(Change, Vec<Undo>)> {
        let values = self.new_values(table, rng);
        if !self.key_available(xid, table, &values, None) {
            return None;
        }
        let row = Row {
            id: self.next_row,
            values: values.clone(),
        };
        self.next_row += 1;
        let lock = self.lock_key(table, &row);
        self.locks.insert(lock, xid);
        self.tables.get_mut(table)?.push(row.clone());
        Some((
            Change::Insert { table, new: values },
            vec![Undo::Remove { table, id: row.id }],
        ))
    }

    /// A live row of `table` that `xid` may change.
    fn pick_row(&self, xid: u32, table: usize, rng: &mut SeedRng) -> Option<Row> {
        let rows = self.tables.get(table)?;
        let keyless = TABLES.get(table).is_some_and(|d| d.key.is_empty());
        // A keyless row is changed only while no other row has its values: PostgreSQL
        // picks one of equal rows by its own order (`LIMIT 1 ... SKIP LOCKED`), so the
        // row the model locks would not be the one the server locks.
        let free: Vec<&Row> = rows
            .iter()
            .filter(|r| self.free_for(xid, &self.lock_key(table, r)))
            .filter(|r| !keyless || rows.iter().filter(|o| o.values == r.values).count() == 1)
            .collect();
        let pick = free.get(rng.below(free.len() as u64) as usize)?;
        Some((*pick).clone())
    }

    fn update(&mut self, xid: u32, table: usize, rng: &mut SeedRng) -> Option<(Change, Vec<Undo>)> {
        let row = self.pick_row(xid, table, rng)?;
        let mut new = self.new_values(table, rng);
        let def = TABLES.get(table)?;
        if !def.key.is_empty() && rng.chance(60) {
            // Most updates keep the key.
            for &k in def.key {
                if let (Some(slot), Some(old)) = (new.get_mut(k), row.values.get(k)) {
                    slot.clone_from(old);
                }
            }
        }
        if !self.key_available(xid, table, &new, Some(row.id)) {
            return None;
        }
        let old_lock = self.lock_key(table, &row);
        self.locks.insert(old_lock, xid);
        let moved = Row {
            id: row.id,
            values: new.clone(),
        };
        let new_lock = self.lock_key(table, &moved);
        self.locks.insert(new_lock, xid);
        let live = self
            .tables
            .get_mut(table)?
            .iter_mut()
            .find(|r| r.id == row.id)?;
        live.values.clone_from(&new);
        Some((
            Change::Update {
                table,
                old: row.values.clone(),
                new,
            },
            vec![Undo::Replace {
                table,
                id: row.id,
                old: row.values,
            }],
        ))
    }

    fn delete(&mut self, xid: u32, table: usize, rng: &mut SeedRng) -> Option<(Change, Vec<Undo>)> {
        let row = self.pick_row(xid, table, rng)?;
        let lock = self.lock_key(table, &row);
        self.locks.insert(lock, xid);
        self.tables.get_mut(table)?.retain(|r| r.id != row.id);
        Some((
            Change::Delete {
                table,
                old: row.values.clone(),
            },
            vec![Undo::Restore { table, row }],
        ))
    }

    /// `TRUNCATE` of `table` (and sometimes a second table), when no other open
    /// transaction touched them.
    fn truncate(
        &mut self,
        at: usize,
        table: usize,
        rng: &mut SeedRng,
    ) -> Option<(Change, Vec<Undo>)> {
        let (xid, sub) = self.open.get(at).map(|t| (t.xid, t.sub))?;
        let mut tables = vec![table];
        let other = rng.below(TABLES.len() as u64) as usize;
        if other != table && rng.chance(30) {
            tables.push(other);
        }
        // Prepared transactions hold their locks too, and so do invisible ones.
        let blocked = tables.iter().any(|t| {
            self.open
                .iter()
                .chain(&self.prepared)
                .chain(&self.invisible)
                .any(|o| o.xid != xid && o.touched.contains(t))
                || self.exclusive.get(t).is_some_and(|&h| h != xid)
        });
        if blocked {
            return None;
        }
        let mut undo = Vec::new();
        for &t in &tables {
            self.exclusive.insert(t, xid);
            let rows = std::mem::take(self.tables.get_mut(t)?);
            undo.push(Undo::RestoreAll { table: t, rows });
        }
        let tx = self.open.get_mut(at)?;
        let mut new_files = Vec::new();
        for &t in &tables {
            if tx.new_files.get(&t) != Some(&sub) {
                tx.new_files.insert(t, sub);
                new_files.push(t);
            }
        }
        Some((Change::Truncate { tables, new_files }, undo))
    }

    fn undo(&mut self, undo: Undo) {
        if let Some(rows) = self.tables.get_mut(undo.table()) {
            undo_on(rows, undo.table(), &undo);
        }
    }

    /// `ROLLBACK TO SAVEPOINT`: the open subtransaction's changes are undone (its locks
    /// are kept to the end of the transaction: a stricter schedule, still a possible one).
    fn rollback_to_savepoint(&mut self, at: usize) {
        let Some(tx) = self.open.get_mut(at) else {
            return;
        };
        let (xid, sub) = (tx.xid, tx.sub);
        let mut undone = Vec::new();
        while tx.undo.last().is_some_and(|(s, _)| *s == sub) {
            if let Some((_, u)) = tx.undo.pop() {
                undone.push(u);
            }
        }
        tx.sub = xid;
        tx.new_files.retain(|_, owner| *owner != sub);
        for u in undone {
            self.undo(u);
        }
        self.statements.push(Statement::RollbackToSavepoint { xid });
        self.wal.push(Record::SubAbort { xid, sub });
    }

    /// `PREPARE TRANSACTION` (with a savepoint open or not): the transaction leaves its
    /// session, keeping its changes undoable and its locks.
    fn prepare(&mut self, at: usize) {
        if at >= self.open.len() {
            return;
        }
        let tx = self.open.remove(at);
        self.statements.push(Statement::Prepare { xid: tx.xid });
        self.wal.push(Record::Prepare { xid: tx.xid });
        self.prepared.push(tx);
    }

    /// `COMMIT PREPARED` or `ROLLBACK PREPARED` of the prepared transaction `at`.
    fn finish_prepared(&mut self, at: usize, commit: bool) {
        if at >= self.prepared.len() {
            return;
        }
        let tx = self.prepared.remove(at);
        let xid = tx.xid;
        let (statement, record) = if commit {
            (
                Statement::CommitPrepared { xid },
                Record::CommitPrepared { xid },
            )
        } else {
            (
                Statement::RollbackPrepared { xid },
                Record::RollbackPrepared { xid },
            )
        };
        self.finish(tx, commit, statement, record);
    }

    fn end(&mut self, at: usize, commit: bool) {
        if at >= self.open.len() {
            return;
        }
        let tx = self.open.remove(at);
        let xid = tx.xid;
        let (statement, record) = if commit {
            (Statement::Commit { xid }, Record::Commit { xid })
        } else {
            (Statement::Abort { xid }, Record::Abort { xid })
        };
        self.finish(tx, commit, statement, record);
    }

    /// Ends `tx` (its changes kept or undone, its locks released), as `statement` and
    /// `record` say.
    fn finish(&mut self, tx: OpenTx, commit: bool, statement: Statement, record: Record) {
        self.statements.push(statement);
        self.wal.push(record);
        if !commit {
            for (_, u) in tx.undo.into_iter().rev() {
                self.undo(u);
            }
        } else if self.lag_percent > 0 && self.rng_lag() {
            // Visible (and its locks released) at a later step.
            self.invisible.push(tx);
            return;
        }
        self.release(tx.xid);
    }

    /// Whether the next commit lags: every `lag_percent`-th in a fixed pattern drawn
    /// from the commit count, so the workload's own draws stay as they were.
    fn rng_lag(&self) -> bool {
        let commits = self.wal.len() as u64;
        SeedRng(commits.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(self.next_xid))
            .chance(self.lag_percent)
    }

    /// Releases the locks `xid` holds.
    fn release(&mut self, xid: u32) {
        self.locks.retain(|_, holder| *holder != xid);
        self.exclusive.retain(|_, holder| *holder != xid);
    }
}
