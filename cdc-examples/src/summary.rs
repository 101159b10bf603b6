//! The summary printed to stderr when a stream ends: changes per table and operation,
//! first and last LSN, duration — as text or one JSON object (`--summary json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use cdc_core::{Lsn, RunEnd, RunSummary, StatsSnapshot};
use serde::Serialize;

use crate::counting_sink::{Counts, OpCounts};

/// What a run did.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The command (`stream`, `demo`).
    pub command: &'static str,
    /// `end_reached` (end LSN or snapshot-only run), `stopped` (Ctrl-C/SIGTERM) or
    /// `failed`.
    pub outcome: &'static str,
    /// Wall-clock duration of the run.
    pub duration_secs: f64,
    /// Whether the run resumed from a saved position.
    pub resumed: bool,
    /// Changes per table (`schema.table`) and operation.
    pub tables: BTreeMap<String, OpCounts>,
    /// Changes over all tables.
    pub total: OpCounts,
    /// Transactions written.
    pub transactions: u64,
    /// Commit LSN of the first transaction written.
    pub first_lsn: Option<Lsn>,
    /// Commit LSN of the last transaction written.
    pub last_lsn: Option<Lsn>,
    /// The position acknowledged to the server (the slot's `confirmed_flush_lsn`).
    pub confirmed_lsn: Lsn,
    /// The initial snapshot, if one ran.
    pub snapshot: Option<SnapshotSummary>,
    /// Completed checkpoints.
    pub checkpoints: u64,
    /// The error that ended the run.
    pub error: Option<String>,
}

/// The initial snapshot of a run.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotSummary {
    /// Rows copied.
    pub rows: u64,
    /// Tables completed.
    pub tables: u64,
    /// Whether every table was copied.
    pub complete: bool,
    /// The slot's consistent point (streaming starts there).
    pub consistent_point: Option<Lsn>,
    /// How long the copy took, when complete.
    pub duration_secs: Option<f64>,
}

impl Summary {
    /// Assembles the summary of a run that took `elapsed`, from the counts, the final
    /// statistics and the run's result.
    pub fn new(
        command: &'static str,
        elapsed: Duration,
        counts: &Counts,
        stats: &StatsSnapshot,
        result: Result<&RunSummary, &cdc_core::Error>,
        resumed: bool,
    ) -> Self {
        let (outcome, confirmed, error) = match result {
            Ok(run) => (
                match run.end {
                    RunEnd::SourceEnded => "end_reached",
                    RunEnd::Shutdown => "stopped",
                    _ => "ended",
                },
                run.confirmed,
                None,
            ),
            Err(e) => ("failed", stats.confirmed_lsn, Some(e.to_string())),
        };
        let snapshot = counts
            .snapshot_started
            .is_some()
            .then_some(SnapshotSummary {
                rows: counts.snapshot_rows(),
                tables: counts.snapshot_tables_done(),
                complete: counts.snapshot_complete,
                consistent_point: counts.consistent_point,
                duration_secs: counts.snapshot_duration_secs,
            });
        Summary {
            command,
            outcome,
            duration_secs: elapsed.as_secs_f64(),
            resumed,
            tables: counts
                .tables
                .by_table()
                .iter()
                .map(|(name, ops)| (name.to_string(), *ops))
                .collect(),
            total: counts.totals(),
            transactions: counts.transactions,
            first_lsn: counts.first_lsn,
            last_lsn: counts.last_lsn,
            confirmed_lsn: confirmed,
            snapshot,
            checkpoints: stats.checkpoints,
            error,
        }
    }

    /// One JSON object on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A small table of counts and a line of positions.
    pub fn to_text(&self) -> String {
        let how = match self.outcome {
            "end_reached" => "reached the end",
            "stopped" => "stopped on request",
            _ => "failed",
        };
        let mut out = format!(
            "pgcdc: {} {how} after {:.1}s{}\n",
            self.command,
            self.duration_secs,
            if self.resumed {
                " (resumed from the saved position)"
            } else {
                ""
            }
        );
        let width = self
            .tables
            .keys()
            .map(|t| t.chars().count())
            .max()
            .unwrap_or(0)
            .max(5);
        let _ = writeln!(
            out,
            "  {:width$}  {:>9} {:>9} {:>9} {:>9} {:>9}",
            "table", "snapshot", "insert", "update", "delete", "truncate"
        );
        let row = |out: &mut String, name: &str, c: &OpCounts| {
            let _ = writeln!(
                out,
                "  {name:width$}  {:>9} {:>9} {:>9} {:>9} {:>9}",
                c.snapshot, c.insert, c.update, c.delete, c.truncate
            );
        };
        for (name, counts) in &self.tables {
            row(&mut out, name, counts);
        }
        row(&mut out, "total", &self.total);
        let lsn = |l: Option<Lsn>| l.map_or_else(|| "-".to_owned(), |l| l.to_string());
        let _ = write!(
            out,
            "  {} transactions, first LSN {}, last LSN {}, acknowledged {}, {} checkpoints",
            self.transactions,
            lsn(self.first_lsn),
            lsn(self.last_lsn),
            self.confirmed_lsn,
            self.checkpoints
        );
        if let Some(snapshot) = &self.snapshot {
            let _ = write!(
                out,
                "\n  snapshot: {} rows, {} tables, {}",
                snapshot.rows,
                snapshot.tables,
                if snapshot.complete {
                    "complete"
                } else {
                    "incomplete: a rerun takes the whole snapshot again on a new slot \
                     (an --out-dir first drops the partial copy)"
                }
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::TableName;

    use super::*;

    #[test]
    fn text_and_json_name_tables_and_positions() {
        let mut counts = Counts::default();
        let orders = std::sync::Arc::new(cdc_core::TableSchema {
            name: TableName::new("public", "orders"),
            relation_id: 1,
            columns: Vec::new(),
            replica_identity: cdc_core::ReplicaIdentity::Default,
            primary_key: Vec::new(),
        });
        let event = |kind| cdc_core::ChangeEvent {
            lsn: cdc_core::Lsn::ZERO,
            position: cdc_core::Position::new(Lsn(1), 0),
            kind,
        };
        let insert = || {
            event(cdc_core::EventKind::Insert {
                table: orders.clone(),
                new: Vec::new(),
            })
        };
        counts.tables.record_all(&[
            insert(),
            insert(),
            insert(),
            event(cdc_core::EventKind::Delete {
                table: orders.clone(),
                old: None,
            }),
        ]);
        counts.transactions = 4;
        counts.first_lsn = Some(Lsn(0x10));
        counts.last_lsn = Some(Lsn(0x1_0000_0020));
        let stats = cdc_core::PipelineStats::default().snapshot();
        let run = RunSummary {
            stats: stats.clone(),
            confirmed: Lsn(0x1_0000_0028),
            last_token: None,
            end: RunEnd::Shutdown,
        };
        let summary = Summary::new(
            "stream",
            Duration::from_secs(2),
            &counts,
            &stats,
            Ok(&run),
            false,
        );
        let text = summary.to_text();
        assert!(text.contains("public.orders"), "{text}");
        assert!(text.contains("last LSN 1/20"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&summary.to_json()).unwrap_or_default();
        assert_eq!(json["tables"]["public.orders"]["insert"], 3);
        assert_eq!(json["confirmed_lsn"], "1/28");
        assert_eq!(json["outcome"], "stopped");
    }
}
