//! Which tables a resumed stream copies: the table set the token records (what the sink
//! holds of each table) against the tables configured for this run.
//!
//! Pure: the start hands it the token's record and the configured tables, and logs what
//! it says. The rules (docs/snapshots-and-guarantees.md: "Changing the table set"):
//! - a table the token records and this run streams goes on where it was;
//! - a table new to the stream is copied online, or — with snapshot mode `never` — only
//!   streamed from here on;
//! - a table the token records but this run does not stream is kept in the record as
//!   `removed`: the sink holds a copy that stops here;
//! - a `removed` table that comes back has a stale copy in the sink (its changes while it
//!   was out are missing): it is copied again after a TRUNCATE of it (the backfill does
//!   this for an entry still marked `removed`), or, with `never`, streamed on as it is.

use cdc_core::{BackfillProgress, TableBackfill, TableName};

/// What happens to a table new to the stream (or back in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddedTables {
    /// Copied online, while the stream runs.
    Copy,
    /// Not copied: its changes are streamed from here on (snapshot mode `never`).
    StreamOnly,
}

/// The table set a resumed run starts from.
#[derive(Debug, PartialEq)]
pub struct TableSet {
    /// The progress to start the backfill from (every configured table, plus the
    /// removed ones).
    pub progress: BackfillProgress,
    /// The token recorded no table set (written before pgcdc kept one): the configured
    /// tables were taken as the ones the sink holds.
    pub adopted: bool,
    /// Tables new to the stream.
    pub added: Vec<TableName>,
    /// Tables back in the stream after a run without them.
    pub returned: Vec<TableName>,
    /// Tables that left the stream in this run.
    pub left: Vec<TableName>,
}

/// The progress a run streaming `configured` starts from, given the token's `recorded`
/// progress (`None`: a token that records no table set).
pub fn resume(
    recorded: Option<BackfillProgress>,
    configured: &[TableName],
    added_tables: AddedTables,
) -> TableSet {
    let adopted = recorded.is_none();
    let recorded = recorded.unwrap_or_else(|| BackfillProgress {
        tables: configured.iter().map(|t| new_entry(t, true)).collect(),
        unshown_xids: Vec::new(),
    });
    let mut set = TableSet {
        progress: BackfillProgress {
            tables: Vec::new(),
            unshown_xids: recorded.unshown_xids,
        },
        adopted,
        added: Vec::new(),
        returned: Vec::new(),
        left: Vec::new(),
    };
    for mut entry in recorded.tables {
        if configured.contains(&entry.table) {
            if entry.removed {
                set.returned.push(entry.table.clone());
                if added_tables == AddedTables::StreamOnly {
                    // Streamed on as it is: nothing to copy, and no copy to continue.
                    entry = new_entry(&entry.table, true);
                }
                // Otherwise the entry stays `removed` until the TRUNCATE that starts its
                // new copy is covered by a token: a restart before that truncates again.
            }
        } else if !entry.removed {
            set.left.push(entry.table.clone());
            entry.removed = true;
            // Its windows described chunks merged with a stream that no longer carries it.
            entry.windows.clear();
        }
        set.progress.tables.push(entry);
    }
    for table in configured {
        if !set.progress.tables.iter().any(|t| &t.table == table) {
            set.added.push(table.clone());
            set.progress
                .tables
                .push(new_entry(table, added_tables == AddedTables::StreamOnly));
        }
    }
    set
}

/// A table's entry before anything of it was copied (`done`: nothing is to be).
pub fn new_entry(table: &TableName, done: bool) -> TableBackfill {
    TableBackfill {
        table: table.clone(),
        done,
        removed: false,
        upto: None,
        chunks: 0,
        rows: 0,
        windows: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::{BackfillWindow, Lsn};

    use super::*;

    fn name(n: &str) -> TableName {
        TableName::new("public", n)
    }

    fn copied(n: &str) -> TableBackfill {
        TableBackfill {
            rows: 10,
            chunks: 2,
            ..new_entry(&name(n), true)
        }
    }

    fn halfway(n: &str) -> TableBackfill {
        TableBackfill {
            done: false,
            upto: Some(vec!["5".into()]),
            rows: 5,
            chunks: 1,
            windows: vec![BackfillWindow {
                after: None,
                upto: Some(vec!["5".into()]),
                snapshot: "10:12:11".into(),
                until: Lsn(100),
            }],
            ..new_entry(&name(n), false)
        }
    }

    fn recorded(tables: Vec<TableBackfill>) -> Option<BackfillProgress> {
        Some(BackfillProgress {
            tables,
            unshown_xids: Vec::new(),
        })
    }

    #[test]
    fn the_same_tables_go_on_where_they_were() {
        let set = resume(
            recorded(vec![copied("a"), halfway("b")]),
            &[name("a"), name("b")],
            AddedTables::Copy,
        );
        assert_eq!(set.progress.tables, vec![copied("a"), halfway("b")]);
        assert!(set.added.is_empty() && set.returned.is_empty() && set.left.is_empty());
        assert!(!set.adopted);
    }

    #[test]
    fn a_table_left_out_is_kept_as_removed_without_its_windows() {
        let set = resume(
            recorded(vec![copied("a"), halfway("b")]),
            &[name("a")],
            AddedTables::Copy,
        );
        let b = &set.progress.tables[1];
        assert!(b.removed);
        assert!(b.windows.is_empty());
        assert_eq!((b.rows, b.upto.clone()), (5, Some(vec!["5".into()])));
        assert_eq!(set.left, vec![name("b")]);
        // A second run without it: still removed, not reported again.
        let again = resume(Some(set.progress.clone()), &[name("a")], AddedTables::Copy);
        assert_eq!(again.progress, set.progress);
        assert!(again.left.is_empty());
    }

    #[test]
    fn a_table_back_in_the_stream_stays_removed_until_its_copy_starts_over() {
        let gone = resume(
            recorded(vec![copied("a"), copied("b")]),
            &[name("a")],
            AddedTables::Copy,
        );
        let back = resume(
            Some(gone.progress.clone()),
            &[name("a"), name("b")],
            AddedTables::Copy,
        );
        assert_eq!(back.returned, vec![name("b")]);
        assert!(
            back.progress.tables[1].removed,
            "the backfill copies it anew"
        );
        // With `never`: streamed on as it is, nothing to copy.
        let never = resume(
            Some(gone.progress),
            &[name("a"), name("b")],
            AddedTables::StreamOnly,
        );
        assert_eq!(never.returned, vec![name("b")]);
        assert_eq!(never.progress.tables[1], new_entry(&name("b"), true));
    }

    #[test]
    fn a_new_table_is_copied_unless_the_mode_is_never() {
        let copy = resume(
            recorded(vec![copied("a")]),
            &[name("a"), name("c")],
            AddedTables::Copy,
        );
        assert_eq!(copy.added, vec![name("c")]);
        assert_eq!(copy.progress.tables[1], new_entry(&name("c"), false));
        let never = resume(
            recorded(vec![copied("a")]),
            &[name("a"), name("c")],
            AddedTables::StreamOnly,
        );
        assert_eq!(never.progress.tables[1], new_entry(&name("c"), true));
    }

    #[test]
    fn a_token_without_a_table_set_adopts_the_configured_tables() {
        let set = resume(None, &[name("a"), name("b")], AddedTables::Copy);
        assert!(set.adopted);
        assert!(set.added.is_empty());
        assert!(set.progress.tables.iter().all(|t| t.done && !t.removed));
        assert_eq!(set.progress.tables.len(), 2);
    }
}
