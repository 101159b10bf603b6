//! What the online snapshot's decisions exchange with the driver that reads for them: the
//! tables, a read round's plans and requests, what a chunk read returned, and what waits
//! for the server's key comparisons. A leaf: the snapshot and each part depend on it, it
//! on neither.

use cdc_core::{ChangeEvent, Lsn, Row, SchemaRef};

use super::super::key_order::KeyOrder;
use crate::types::TypeInfo;

/// One of the stream's tables as the online snapshot needs it. The driver builds one per
/// table of its catalog; [`OnlineSnapshot`](super::OnlineSnapshot) refers to them by
/// their index in that list (a request's `catalog_index`).
#[derive(Clone, Debug)]
pub struct OnlineTable {
    /// The table's schema as the copy delivers it.
    pub schema: SchemaRef,
    /// Positions of its primary key columns in its rows (none: read whole).
    pub key_columns: Vec<usize>,
    /// How its keys compare (as the server's btree orders them, or by the server).
    pub order: KeyOrder,
    /// Each column's type, to read keys back from their text form in a token.
    pub column_types: Vec<TypeInfo>,
}

/// One chunk request of a read round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The table's index in the merge.
    pub index: usize,
    /// The table's index in the driver's list of [`OnlineTable`]s.
    pub catalog_index: usize,
    /// The key the chunk continues after (text form; `None`: the table's start).
    pub after: Option<Vec<String>>,
    /// The key the chunk ends at (inclusive), when the round split the table among
    /// several readers; `None`: the next `chunk_rows` rows.
    pub upto: Option<Vec<String>>,
}

/// One table's share of a read round: `chunks` consecutive chunks from `after`, split
/// at `ends` when they were found ahead or estimated. `estimable`: the table's key is a
/// single integer column, whose next ends are estimated rather than found ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablePlan {
    pub index: usize,
    pub catalog_index: usize,
    pub after: Option<Vec<String>>,
    pub chunks: usize,
    pub ends: Option<Vec<Vec<String>>>,
    pub estimable: bool,
}

/// Where the driver looks for split keys ahead, for the round after: `chunks` ends
/// after `after` of table `index` (`catalog_index` in the driver's list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ahead {
    pub index: usize,
    pub catalog_index: usize,
    pub after: Option<Vec<String>>,
    pub chunks: usize,
}

impl TablePlan {
    /// The chunk requests of this plan once the ends of its ranges are known (`ends`:
    /// found by a query, given by the plan, or none for a single chunk), and where to
    /// look for the next round's ends. A round whose ranges all end at a key (as many
    /// ends as chunks) leaves the next rows to the next round, which starts from the
    /// last end; otherwise its last chunk is the next rows after the last end, however
    /// far they reach (and the table's end when they are fewer than a chunk).
    pub fn requests(self, ends: Vec<Vec<String>>) -> (Vec<Request>, Option<Ahead>) {
        let bounded = self.chunks > 1 && ends.len() == self.chunks;
        let mut requests = Vec::with_capacity(ends.len() + 1);
        let mut after = self.after;
        for end in ends {
            requests.push(Request {
                index: self.index,
                catalog_index: self.catalog_index,
                after: after.clone(),
                upto: Some(end.clone()),
            });
            after = Some(end);
        }
        if bounded {
            let ahead = Ahead {
                index: self.index,
                catalog_index: self.catalog_index,
                after,
                chunks: self.chunks,
            };
            return (requests, Some(ahead));
        }
        requests.push(Request {
            index: self.index,
            catalog_index: self.catalog_index,
            after,
            upto: None,
        });
        (requests, None)
    }

    /// The one request that reports a failure to split this plan's table (the round
    /// places nothing of the table).
    pub fn failed_request(self) -> Request {
        Request {
            index: self.index,
            catalog_index: self.catalog_index,
            after: self.after,
            upto: None,
        }
    }
}

/// Split keys found ahead for a table shared by several readers: the ends of its next
/// chunks after `after` (text form of each key). `exhausted`: fewer rows than another
/// chunk follow the last end (the table's end is near).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Splits {
    pub index: usize,
    pub after: Option<Vec<String>>,
    pub ends: Vec<Vec<String>>,
    pub exhausted: bool,
}

impl Splits {
    /// The ends for `chunks` chunks of a table now at `after`, if these splits were
    /// found from there and reach far enough (any key splits a range soundly, however
    /// the table changed since; a range that grew is cut at its cap).
    pub fn ends_for(&self, after: &Option<Vec<String>>, chunks: usize) -> Option<Vec<Vec<String>>> {
        if &self.after != after || (self.ends.len() < chunks && !self.exhausted) {
            return None;
        }
        Some(self.ends.iter().take(chunks).cloned().collect())
    }
}

/// What one chunk read returned.
#[derive(Debug)]
pub struct ChunkRead {
    /// `pg_current_snapshot()` of the read's transaction, as text.
    pub snapshot: String,
    /// The WAL insert position read right after the snapshot was taken (on a standby: the
    /// replay position). Every transaction the snapshot sees committed before it.
    pub until: Lsn,
    /// The rows after the start key, in key order, at most `limit`.
    pub rows: Vec<Row>,
    /// The read reached the end of the table (fewer rows than the limit; never for a read
    /// up to a given key).
    pub complete: bool,
    /// A read up to a given key stopped at its cap ([`range_cap`] rows) before the key:
    /// rows went into the range after its end was found. The chunk then ends at its last
    /// row, and the rest of the range is left to the next chunk.
    pub cut_short: bool,
}

/// The most rows a read up to a given key returns: twice the chunk size, so that a
/// range that grew after its end was found (inserts, keys moved into it) still costs
/// bounded memory, while a range of its usual size is never cut.
pub fn range_cap(limit: usize) -> usize {
    limit.max(1).saturating_mul(2)
}

/// What placing a read round came to, for the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundOutcome {
    /// Chunks read again because their snapshot missed a transaction the stream passed.
    pub rereads: u64,
    /// A read failed on a lost connection: the readers are to be opened anew.
    pub failed_connection: bool,
}

/// A table without a primary key being read whole (the driver holds the read).
#[derive(Debug)]
pub(super) struct WholeCopy {
    /// The table's index in the merge.
    pub(super) index: usize,
    pub(super) catalog_index: usize,
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
