//! Policies for values and events Feldera cannot express, and the log that counts every
//! time a non-error policy was applied.
//!
//! Every default is `Error`: nothing is silently turned into something else. Every other
//! choice is explicit, counted per table and column, and logged with `tracing::warn!` the
//! first time it applies to a column.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use cdc_core::TableName;

/// What to do with a float or numeric NaN, `Infinity` or `-Infinity` (Feldera's REAL,
/// DOUBLE and DECIMAL have no such values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NonFinitePolicy {
    /// Default: a `Rejected` error naming table, column and position.
    #[default]
    Error,
    /// Emit JSON `null` (the column must be nullable in Feldera).
    Null,
    /// Emit Postgres's text as a JSON string: `"NaN"`, `"Infinity"`, `"-Infinity"` (for a
    /// VARCHAR column, or a consumer that reads them).
    String,
}

/// What to do with a date, time or timestamp outside Feldera's range: `infinity`,
/// `-infinity`, BC years, years after 9999, and the time `24:00:00`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OutOfRangePolicy {
    /// Default: a `Rejected` error naming table, column and position.
    #[default]
    Error,
    /// Emit JSON `null`.
    Null,
    /// Emit Postgres's text as a JSON string (`"infinity"`, `"0044-03-15 BC"`,
    /// `"12345-06-07 00:00:00"`).
    String,
}

/// What to do with an array whose lower bound is not 1 (Feldera arrays have no bounds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ArrayBoundsPolicy {
    /// Default: a `Rejected` error naming table, column and position.
    #[default]
    Error,
    /// Emit the elements as a JSON array anyway, dropping the bounds (`[0:1]={1,2}`
    /// becomes `[1,2]`).
    DropBounds,
    /// Emit the whole array as its Postgres text, e.g. `"[0:1]={1,2}"`.
    String,
}

/// What to do with a TRUNCATE (Feldera has no truncate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TruncatePolicy {
    /// Default: a `Rejected` error naming the tables and the position.
    #[default]
    Error,
    /// Write nothing: the consumer keeps the rows Postgres removed. Counted and logged
    /// per table.
    Skip,
    /// Write `{"table":"public.t","truncate":{"cascade":false,"restart_identity":false}}`
    /// per truncated table. Feldera's parser rejects this record, so it is only allowed
    /// for multiplexed outputs meant for other consumers.
    Marker,
}

/// All policies of the Feldera-style encoding. `Policies::default()` rejects everything
/// it cannot express exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Policies {
    /// Float and numeric NaN / ±Infinity.
    pub non_finite: NonFinitePolicy,
    /// Dates, times and timestamps outside 0001-01-01 ..= 9999-12-31 and ±infinity.
    pub out_of_range: OutOfRangePolicy,
    /// Arrays with a lower bound other than 1.
    pub array_bounds: ArrayBoundsPolicy,
    /// TRUNCATE.
    pub truncate: TruncatePolicy,
}

impl Policies {
    /// Every value kept as text where JSON has no exact form, truncates written as
    /// markers: nothing is lost, but the output is not what Feldera's typed columns
    /// accept. For debugging output (the stdout sink's JSON mode).
    pub fn lossless() -> Self {
        Policies {
            non_finite: NonFinitePolicy::String,
            out_of_range: OutOfRangePolicy::String,
            array_bounds: ArrayBoundsPolicy::String,
            truncate: TruncatePolicy::Marker,
        }
    }
}

/// Which situation a policy handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyCase {
    /// A NaN or ±Infinity float or numeric.
    NonFinite,
    /// A date, time or timestamp out of Feldera's range.
    OutOfRange,
    /// An array with a lower bound other than 1.
    ArrayBounds,
    /// A TRUNCATE.
    Truncate,
}

impl fmt::Display for PolicyCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyCase::NonFinite => "non-finite value",
            PolicyCase::OutOfRange => "out-of-range date/time",
            PolicyCase::ArrayBounds => "array lower bound other than 1",
            PolicyCase::Truncate => "TRUNCATE",
        })
    }
}

/// How often a non-error policy was applied to one column (or, for TRUNCATE, one table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyCount {
    /// The table.
    pub table: TableName,
    /// The column; empty for [`PolicyCase::Truncate`].
    pub column: String,
    /// The situation.
    pub case: PolicyCase,
    /// What was done (`"null"`, `"string"`, `"drop bounds"`, `"skip"`, `"marker"`).
    pub action: &'static str,
    /// Number of values (or truncates) handled so.
    pub count: u64,
}

/// Counts applications of non-error policies, warning once per column and case.
///
/// Clones share the counts: take one (e.g. [`crate::feldera::FelderaStreamSink::policy_log`])
/// before the sink moves into a pipeline, and read it while the pipeline runs (metrics).
/// Recording locks a mutex, which costs nothing measurable: policies apply to rare values.
#[derive(Debug, Default, Clone)]
pub struct PolicyLog {
    /// Keyed by (relation id, column index, case): no allocation after the first time.
    counts: Arc<Mutex<CountsByColumn>>,
}

/// Counts keyed by (relation id, column index, case).
type CountsByColumn = HashMap<(u32, usize, PolicyCase), PolicyCount>;

impl PolicyLog {
    /// Records one application; logs a warning the first time for this column and case.
    pub(crate) fn record(
        &mut self,
        relation_id: u32,
        table: &TableName,
        column_index: usize,
        column: &str,
        case: PolicyCase,
        action: &'static str,
    ) {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = counts
            .entry((relation_id, column_index, case))
            .or_insert_with(|| {
                tracing::warn!(
                    table = %table,
                    column = column,
                    "{case} handled by policy {action:?}; further occurrences in this column are counted, not logged"
                );
                PolicyCount {
                    table: table.clone(),
                    column: column.to_owned(),
                    case,
                    action,
                    count: 0,
                }
            });
        entry.count += 1;
    }

    /// Every column (and table) a policy was applied to, with counts, sorted by table,
    /// column and case.
    pub fn counts(&self) -> Vec<PolicyCount> {
        let mut out: Vec<PolicyCount> = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        out.sort_by(|a, b| (&a.table, &a.column, a.case).cmp(&(&b.table, &b.column, b.case)));
        out
    }

    /// Total number of applications of any policy.
    pub fn total(&self) -> u64 {
        self.counts().iter().map(|c| c.count).sum()
    }
}
