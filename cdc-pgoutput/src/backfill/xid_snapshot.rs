//! `XidSnapshot`: the value of `pg_current_snapshot()`, and which transactions it saw as
//! committed.
//!
//! A `pg_snapshot` (Postgres 13+; `txid_snapshot` before) is printed as
//! `xmin:xmax:xip1,xip2,...` with 64-bit "full" transaction ids (the 32-bit xid plus the
//! wraparound epoch above it):
//!
//! - `xmin`: the oldest transaction still running when the snapshot was taken. Every
//!   transaction id below it had finished.
//! - `xmax`: one past the newest finished transaction id. Transactions with ids at or above
//!   it had not finished (most had not started).
//! - `xip`: the top-level transactions in `[xmin, xmax)` that were still running. A
//!   transaction in `[xmin, xmax)` that is not listed had finished. The list never holds
//!   subtransaction ids.
//!
//! pgoutput's Begin and Stream Start messages carry the 32-bit top-level xid;
//! [`XidSnapshot::widen`] turns it into the full id, relative to the snapshot.

use std::fmt;

/// Transaction ids below this are special (`InvalidTransactionId` 0, `BootstrapTransactionId`
/// 1, `FrozenTransactionId` 2); they belong to no epoch.
const FIRST_NORMAL_XID: u32 = 3;

/// The 32-bit xid space; a full id is `epoch * XID_SPACE + xid`.
const XID_SPACE: u64 = 1 << 32;

/// At most this many characters of a rejected input are quoted in an error.
const EXCERPT_CHARS: usize = 64;

/// A snapshot as `pg_current_snapshot()` returns it: which transactions had committed when it
/// was taken.
///
/// Build one with [`XidSnapshot::parse`] from `pg_current_snapshot()::text` (or
/// `txid_current_snapshot()::text`); persist it with [`XidSnapshot::to_text`] (the same
/// text form, which [`XidSnapshot::parse`] reads back).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct XidSnapshot {
    xmin: u64,
    xmax: u64,
    /// Strictly ascending, each in `[xmin, xmax)`.
    xip: Vec<u64>,
}

/// Why a text or a set of parts is not a valid snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum XidSnapshotError {
    /// The text does not have the form `xmin:xmax:xip1,xip2,...` with decimal 64-bit ids.
    #[error("invalid pg_snapshot text {input:?}: {problem}")]
    Syntax {
        /// The rejected input (its first 64 characters, then `…`).
        input: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// `xmin` or `xmax` is not a valid transaction id: its 32-bit part is 0
    /// (`InvalidTransactionId`), which Postgres never assigns and rejects in a snapshot.
    #[error(
        "invalid snapshot: {field} {value} is not a valid transaction id (its 32-bit part is 0)"
    )]
    InvalidXid {
        /// `"xmin"` or `"xmax"`.
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// `xmin` is after `xmax`.
    #[error("invalid snapshot: xmin {xmin} is after xmax {xmax}")]
    XminAfterXmax {
        /// The snapshot's xmin.
        xmin: u64,
        /// The snapshot's xmax.
        xmax: u64,
    },
    /// An in-progress transaction id is outside `[xmin, xmax)`.
    #[error(
        "invalid snapshot: in-progress transaction {xid} is outside [xmin {xmin}, xmax {xmax})"
    )]
    InProgressOutOfRange {
        /// The offending entry.
        xid: u64,
        /// The snapshot's xmin.
        xmin: u64,
        /// The snapshot's xmax.
        xmax: u64,
    },
    /// The in-progress list is not strictly ascending (Postgres prints it sorted, without
    /// duplicates).
    #[error(
        "invalid snapshot: in-progress transaction {xid} does not follow {previous} \
         (the list must be strictly ascending)"
    )]
    InProgressNotAscending {
        /// The entry before.
        previous: u64,
        /// The offending entry.
        xid: u64,
    },
}

impl XidSnapshot {
    /// A snapshot from its parts, checked as [`XidSnapshot::parse`] checks the text:
    /// `xmin` and `xmax` valid transaction ids (32-bit part not 0), `xmin <= xmax`, the
    /// in-progress ids strictly ascending and each in `[xmin, xmax)`.
    pub fn new(xmin: u64, xmax: u64, in_progress: Vec<u64>) -> Result<Self, XidSnapshotError> {
        check_bounds(xmin, xmax)?;
        let mut previous: Option<u64> = None;
        for &xid in &in_progress {
            check_in_progress(xmin, xmax, previous, xid)?;
            previous = Some(xid);
        }
        Ok(XidSnapshot {
            xmin,
            xmax,
            xip: in_progress,
        })
    }

    /// Parses the text form of a `pg_snapshot` (`pg_current_snapshot()::text`), e.g.
    /// `10:20:10,14,15` or `748:748:`.
    ///
    /// Strict: exactly `xmin:xmax:` followed by a comma-separated list of decimal ids (empty
    /// when nothing was running), each a plain run of ASCII digits that fits in 64 bits;
    /// `xmin` and `xmax` valid ids (32-bit part not 0) with `xmin <= xmax`; the list strictly
    /// ascending and within `[xmin, xmax)`. That is what Postgres prints. Postgres's own
    /// input function is laxer (it also takes signs, leading white space, a trailing comma
    /// and duplicates, and saturates ids beyond 64 bits); nothing it prints is rejected here.
    ///
    /// Allocates nothing beyond the list of in-progress ids, whose length is bounded by the
    /// input's.
    pub fn parse(text: &str) -> Result<Self, XidSnapshotError> {
        let syntax = |problem: &'static str| XidSnapshotError::Syntax {
            input: excerpt(text),
            problem,
        };
        let mut fields = text.split(':');
        let (Some(xmin), Some(xmax), Some(xip_list), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(syntax(
                "expected exactly three ':'-separated fields xmin:xmax:xip_list",
            ));
        };
        let xmin = parse_xid(xmin).map_err(|e| syntax(e.describe("xmin")))?;
        let xmax = parse_xid(xmax).map_err(|e| syntax(e.describe("xmax")))?;
        check_bounds(xmin, xmax)?;
        let mut xip = Vec::new();
        if !xip_list.is_empty() {
            for entry in xip_list.split(',') {
                let xid = parse_xid(entry).map_err(|e| syntax(e.describe("in-progress id")))?;
                check_in_progress(xmin, xmax, xip.last().copied(), xid)?;
                xip.push(xid);
            }
        }
        Ok(XidSnapshot { xmin, xmax, xip })
    }

    /// The text form, as Postgres prints it and [`XidSnapshot::parse`] reads it back; use it
    /// to persist a snapshot.
    pub fn to_text(&self) -> String {
        self.to_string()
    }

    /// The oldest transaction id still running when the snapshot was taken (`xmax` when
    /// none was); every id below it had finished.
    pub fn xmin(&self) -> u64 {
        self.xmin
    }

    /// One past the newest finished transaction id; no id at or above it had finished.
    pub fn xmax(&self) -> u64 {
        self.xmax
    }

    /// The top-level transactions in `[xmin, xmax)` that were still running, ascending.
    pub fn in_progress(&self) -> &[u64] {
        &self.xip
    }

    /// Whether a top-level transaction with this full id, if it committed, is visible to
    /// the snapshot: that is, whether it had committed when the snapshot was taken.
    ///
    /// Exactly Postgres's `pg_visible_in_snapshot`: true iff `full_xid < xmin`, or
    /// `full_xid < xmax` and `full_xid` is not in the in-progress list. It says nothing
    /// about whether the transaction committed at all (an aborted transaction below `xmin`
    /// is "visible" and had no effect), and it is only meaningful for top-level transaction
    /// ids: a subtransaction id is never in the in-progress list, so a running
    /// subtransaction would look finished. pgoutput's Begin and Stream Start messages carry
    /// top-level ids.
    pub fn is_visible(&self, full_xid: u64) -> bool {
        if full_xid < self.xmin {
            true
        } else if full_xid >= self.xmax {
            false
        } else {
            self.xip.binary_search(&full_xid).is_err()
        }
    }

    /// The full (64-bit) id of a 32-bit transaction id such as pgoutput's Begin and Stream
    /// Start messages carry, taking the epoch from this snapshot's `xmax`.
    ///
    /// Returns the unique full id `f` with `f mod 2^32 == xid` and
    /// `xmax - 2^31 <= f < xmax + 2^31`: Postgres's own arithmetic for widening an xid
    /// relative to a known full id (`FullXidRelativeTo`). That is right when the transaction
    /// is recent relative to the snapshot: it started less than 2^31 transactions before or
    /// after `xmax`. This holds for a streamed transaction compared with a snapshot taken
    /// while it was running or shortly before or after it, because Postgres itself refuses
    /// to hand out new ids before 2^31 of them separate the oldest unfrozen one from the
    /// newest (wraparound protection).
    ///
    /// The special ids 0, 1 and 2 (invalid, bootstrap, frozen) belong to no epoch and are
    /// returned unchanged, as Postgres widens them. Near the ends of the 64-bit range, where
    /// the window leaves it (epoch 0 or the last epoch, which a real server never gets
    /// near), the id is put in `xmax`'s epoch.
    pub fn widen(&self, xid: u32) -> u64 {
        if xid < FIRST_NORMAL_XID {
            return u64::from(xid);
        }
        // Truncation intended: the 32-bit part of xmax.
        let xmax32 = self.xmax as u32;
        // Signed distance from xmax's 32-bit part, in [-2^31, 2^31): modular arithmetic,
        // exactly as Postgres compares xids.
        let delta = xid.wrapping_sub(xmax32) as i32;
        self.xmax
            .checked_add_signed(i64::from(delta))
            .unwrap_or((self.xmax & !(XID_SPACE - 1)) | u64::from(xid))
    }

    /// [`XidSnapshot::is_visible`] of [`XidSnapshot::widen`]`(xid)`: whether the transaction
    /// pgoutput announced with this 32-bit id, if it committed, is visible to the snapshot.
    /// The assumption of [`XidSnapshot::widen`] applies.
    pub fn is_visible_xid32(&self, xid: u32) -> bool {
        self.is_visible(self.widen(xid))
    }
}

impl fmt::Display for XidSnapshot {
    /// The text form, `xmin:xmax:xip1,xip2,...`, as Postgres prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:", self.xmin, self.xmax)?;
        for (i, xid) in self.xip.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{xid}")?;
        }
        Ok(())
    }
}

fn check_bounds(xmin: u64, xmax: u64) -> Result<(), XidSnapshotError> {
    // Postgres's `FullTransactionIdIsValid` looks at the 32-bit part only.
    for (field, value) in [("xmin", xmin), ("xmax", xmax)] {
        if value % XID_SPACE == 0 {
            return Err(XidSnapshotError::InvalidXid { field, value });
        }
    }
    if xmin > xmax {
        return Err(XidSnapshotError::XminAfterXmax { xmin, xmax });
    }
    Ok(())
}

fn check_in_progress(
    xmin: u64,
    xmax: u64,
    previous: Option<u64>,
    xid: u64,
) -> Result<(), XidSnapshotError> {
    if xid < xmin || xid >= xmax {
        return Err(XidSnapshotError::InProgressOutOfRange { xid, xmin, xmax });
    }
    match previous {
        Some(previous) if xid <= previous => {
            Err(XidSnapshotError::InProgressNotAscending { previous, xid })
        }
        _ => Ok(()),
    }
}

/// Why one field is not a decimal id.
enum NumberError {
    Empty,
    NotDigits,
    Overflow,
}

impl NumberError {
    fn describe(self, field: &'static str) -> &'static str {
        match (self, field) {
            (NumberError::Empty, "xmin") => "xmin is empty",
            (NumberError::Empty, "xmax") => "xmax is empty",
            (NumberError::Empty, _) => "empty entry in the in-progress list",
            (NumberError::NotDigits, "xmin") => "xmin is not a decimal number",
            (NumberError::NotDigits, "xmax") => "xmax is not a decimal number",
            (NumberError::NotDigits, _) => "an in-progress id is not a decimal number",
            (NumberError::Overflow, "xmin") => "xmin does not fit in 64 bits",
            (NumberError::Overflow, "xmax") => "xmax does not fit in 64 bits",
            (NumberError::Overflow, _) => "an in-progress id does not fit in 64 bits",
        }
    }
}

/// A plain run of ASCII digits as a u64.
fn parse_xid(s: &str) -> Result<u64, NumberError> {
    if s.is_empty() {
        return Err(NumberError::Empty);
    }
    s.bytes().try_fold(0u64, |acc, b| {
        if !b.is_ascii_digit() {
            return Err(NumberError::NotDigits);
        }
        acc.checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(NumberError::Overflow)
    })
}

/// The first characters of a rejected input, so an error never carries a huge string.
fn excerpt(input: &str) -> String {
    match input.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", input.get(..cut).unwrap_or_default()),
        None => input.to_owned(),
    }
}

#[cfg(test)]
#[path = "xid_snapshot_tests.rs"]
mod tests;
