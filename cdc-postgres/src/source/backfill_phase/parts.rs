//! What the online snapshot's parts keep between calls, apart from the code that acts on
//! it: a read round's requests and results, chunk ends found ahead, a whole-table copy in
//! progress, and stream items held for the server's key comparisons. A leaf: the phase
//! and each part depend on it, it on neither.

use cdc_core::{ChangeEvent, Lsn, Result};

use crate::conn::sql_session::SqlSession;
use crate::snapshot::{ChunkRead, WholeTableRead};

/// One chunk request of a read round.
#[derive(Debug)]
pub(super) struct Request {
    /// The table's index in the merge.
    pub(super) index: usize,
    pub(super) catalog_index: usize,
    /// The key the chunk continues after (text form; `None`: the table's start).
    pub(super) after: Option<Vec<String>>,
    /// The key the chunk ends at (inclusive), when the round split the table among
    /// several readers; `None`: the next `chunk_rows` rows.
    pub(super) upto: Option<Vec<String>>,
}

/// One table's share of a read round: `chunks` consecutive chunks from `after`, split
/// at `ends` when they were found ahead or estimated. `estimable`: the table's key is a
/// single integer column, whose next ends are estimated rather than found ahead.
#[derive(Debug)]
pub(super) struct TablePlan {
    pub(super) index: usize,
    pub(super) catalog_index: usize,
    pub(super) after: Option<Vec<String>>,
    pub(super) chunks: usize,
    pub(super) ends: Option<Vec<Vec<String>>>,
    pub(super) estimable: bool,
}

/// Split keys found ahead for a table shared by several readers: the ends of its next
/// chunks after `after` (text form of each key). `exhausted`: fewer rows than another
/// chunk follow the last end (the table's end is near).
#[derive(Debug)]
pub(super) struct Splits {
    pub(super) index: usize,
    pub(super) after: Option<Vec<String>>,
    pub(super) ends: Vec<Vec<String>>,
    pub(super) exhausted: bool,
}

impl Splits {
    /// The ends for `chunks` chunks of a table now at `after`, if these splits were
    /// found from there and reach far enough (any key splits a range soundly, however
    /// the table changed since; a range that grew is cut at its cap).
    pub(super) fn ends_for(
        &self,
        after: &Option<Vec<String>>,
        chunks: usize,
    ) -> Option<Vec<Vec<String>>> {
        if &self.after != after || (self.ends.len() < chunks && !self.exhausted) {
            return None;
        }
        Some(self.ends.iter().take(chunks).cloned().collect())
    }
}

/// What a background read round hands back: its connections, each request's result (a
/// table's chunks together and in key order), and the splits found for the next round.
#[derive(Debug)]
pub(super) struct RoundResult {
    pub(super) readers: Vec<SqlSession>,
    pub(super) planner: Option<SqlSession>,
    pub(super) results: Vec<(Request, Result<ChunkRead>)>,
    pub(super) next_splits: Vec<Splits>,
}

/// A table without a primary key being read whole.
#[derive(Debug)]
pub(super) struct WholeCopy {
    /// The table's index in the merge.
    pub(super) index: usize,
    pub(super) catalog_index: usize,
    pub(super) read: WholeTableRead,
    /// The copy's snapshot (text form, for the token) and position.
    pub(super) snapshot: String,
    pub(super) until: Lsn,
    /// The next piece's chunk number, and rows placed so far.
    pub(super) next_chunk: u64,
    pub(super) rows: u64,
}

/// What waits for the server's comparisons, in stream order.
#[derive(Debug)]
pub(super) enum Held {
    /// A streamed event.
    Event(ChangeEvent),
    /// A transaction ended here.
    End(Lsn),
    /// The stream was idle up to here.
    Idle(Lsn),
}
