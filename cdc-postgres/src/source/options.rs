//! Options of a [`super::PgSource`].

use std::time::Duration;

use cdc_core::{Error, Lsn};

use crate::conn::{SourceConfig, StreamOptions};
use cdc_pgoutput::changes::{MessageFilter, SchemaChangePolicy};
pub use cdc_pgoutput::machine::start::SlotPolicy;

/// How a [`super::PgSource`] reads: the source configuration plus decoding, snapshot and
/// reconnect settings, each with a default a serious deployment can keep.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PgSourceOptions {
    /// Server, publication, tables, slot, snapshot mode, batch limits, streaming of large
    /// transactions and two-phase decoding.
    pub config: SourceConfig,
    /// What a mid-stream schema change does (default: fail before any row under the new
    /// schema).
    pub schema_policy: SchemaChangePolicy,
    /// Logical decoding messages to deliver (default: none).
    pub messages: MessageFilter,
    /// Ask for binary tuple values (PostgreSQL 14+; default on). Used only when every
    /// configured column's type decodes from binary; otherwise the session uses text, so
    /// types without a dedicated `Value` variant keep their exact Postgres text.
    pub binary: bool,
    /// Memory for buffered in-progress streamed transactions (and, with two-phase
    /// decoding, prepared transactions awaiting COMMIT PREPARED) before they spill to disk
    /// (default 32 MiB). Counts the bytes held, to within one partly filled 64 KiB block
    /// per transaction and under 2% of the rest.
    /// A committed transaction that spilled is released entirely from its file, so the
    /// release holds no buffered messages next to the batches in flight to the sink.
    pub stream_memory_limit: usize,
    /// Connections copying the snapshot in parallel (online snapshot: chunks read at
    /// once — one table each, or several key ranges of one table when fewer tables are
    /// left than readers; then one more connection finds the next round's ranges while a
    /// round reads).
    pub snapshot_workers: usize,
    /// With several workers, the consistent snapshot reads a table larger than this many
    /// 8 kB pages (by its statistics) in parts: in ctid ranges of this size by several
    /// workers when the table is at most a quarter of the server's `shared_buffers` and
    /// the server is PostgreSQL 14 or later, otherwise in one COPY whose rows several
    /// tasks decode (`snapshot_workers` of them shared among such tables, at most one per
    /// core; a range scan of a larger table would cycle it through the server's buffer
    /// pool).
    pub snapshot_chunk_pages: i64,
    /// Online snapshot: rows per chunk (default 10,000). Each chunk is one short
    /// transaction; the stream waits while a chunk is read and placed, so this bounds
    /// that pause (and the memory a chunk holds).
    pub backfill_chunk_rows: usize,
    /// Online snapshot: tables to copy again on this run, while the stream runs (a
    /// resumed stream, in either snapshot mode). Each is delivered as a TRUNCATE of the
    /// table followed by its rows in chunks, so a sink ends with the table as it is — also
    /// a sink that applies events as a multiset. Each run given the list starts these
    /// tables' copies over; give it once.
    pub resnapshot: Vec<cdc_core::TableName>,
    /// Whether the sink applies a TRUNCATE (empties its copy of the table; default true).
    /// A table copied again while the stream runs — listed in `resnapshot`, back in the
    /// stream after a run without it, or read whole and cut short before — is preceded by
    /// a TRUNCATE of it. When false (an output that rejects or skips TRUNCATE), `start`
    /// refuses such a run with a Config error naming the tables, before anything is
    /// delivered, instead of leaving the old rows beside the new copy.
    pub sink_applies_truncate: bool,
    /// Stop cleanly once the stream reaches this LSN (like `pg_recvlogical -E`), and any
    /// online snapshot is complete.
    pub end_lsn: Option<Lsn>,
    /// Reconnection after transient failures.
    pub reconnect: ReconnectPolicy,
    /// Replication stream tuning (status update interval, read sizes).
    pub stream: StreamOptions,
    /// Send an empty progress batch (so an idle slot advances) at most this often.
    pub progress_interval: Duration,
    /// How often the slot's WAL retention is read from `pg_replication_slots` for
    /// [`super::SourceStats`] (on a SQL connection of its own; default 10 s; `None`: never).
    pub slot_poll_interval: Option<Duration>,
    /// Whether the source may create the slot, or drop an existing one to take a new
    /// snapshot, when the sink's token does not show the slot to be this stream's.
    /// Default: create, never replace (an engine whose state store lost its token keeps
    /// the slot, and learns why the run stopped).
    pub slot_policy: SlotPolicy,
}

impl PgSourceOptions {
    /// Defaults for `config`.
    pub fn new(config: SourceConfig) -> Self {
        PgSourceOptions {
            config,
            schema_policy: SchemaChangePolicy::Fail,
            messages: MessageFilter::Off,
            binary: true,
            stream_memory_limit: 32 << 20,
            snapshot_workers: 2,
            snapshot_chunk_pages: 16_384,
            backfill_chunk_rows: 10_000,
            resnapshot: Vec::new(),
            sink_applies_truncate: true,
            end_lsn: None,
            reconnect: ReconnectPolicy::default(),
            stream: StreamOptions::default(),
            progress_interval: Duration::from_secs(1),
            slot_poll_interval: Some(Duration::from_secs(10)),
            slot_policy: SlotPolicy::default(),
        }
    }
}

/// Exponential backoff with jitter for transient failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconnectPolicy {
    /// Attempts after a failure before giving up (`None`: forever).
    pub max_attempts: Option<u32>,
    /// First delay.
    pub initial_backoff: Duration,
    /// Longest delay.
    pub max_backoff: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            max_attempts: Some(10),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

impl ReconnectPolicy {
    /// The delay before attempt `attempt` (0-based): exponential, capped, with ±25% jitter.
    /// Never panics, whatever the durations.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .initial_backoff
            .saturating_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
            .min(self.max_backoff);
        let jitter = rand::random_range(0.75..1.25);
        // Not `mul_f64`, which panics when the product does not fit a `Duration` (a huge
        // `max_backoff`): such a delay stays at its base.
        Duration::try_from_secs_f64(base.as_secs_f64() * jitter).unwrap_or(base)
    }
}

/// The retry decisions for one operation that fails transiently (a reconnect, a start, a
/// snapshot taken again), by a [`ReconnectPolicy`]: how long to wait before the next
/// attempt, or that it is time to give up. No clock and no sleeping here: the caller waits
/// and tries, and reports each transient failure.
#[derive(Debug)]
pub(crate) struct Retries {
    policy: ReconnectPolicy,
    /// What is retried, for the error when giving up (`reconnect attempts`, …).
    what: &'static str,
    /// What is logged at each retry (`replication connection lost; reconnecting`, …).
    doing: &'static str,
    attempt: u32,
}

impl Retries {
    pub(crate) fn new(policy: ReconnectPolicy, what: &'static str, doing: &'static str) -> Self {
        Retries {
            policy,
            what,
            doing,
            attempt: 0,
        }
    }

    /// After the transient failure `error`: the delay before the next attempt, or — after
    /// the policy's last attempt — the error to stop with (of `error`'s kind, naming how
    /// many attempts were made, with `error` as its source).
    pub(crate) fn after_failure(&mut self, error: Error) -> Result<Duration, Error> {
        let attempt = self.attempt;
        if self.policy.max_attempts.is_some_and(|max| attempt >= max) {
            return Err(Error::new(
                error.kind(),
                format!("giving up after {attempt} {}", self.what),
            )
            .with_source(error));
        }
        tracing::warn!(attempt, error = %error, "{}", self.doing);
        self.attempt = attempt.saturating_add(1);
        Ok(self.policy.delay(attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_longer_then_give_up_with_the_last_error() {
        let policy = ReconnectPolicy {
            max_attempts: Some(3),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        let mut retries = Retries::new(policy, "reconnect attempts", "reconnecting");
        let mut delays = Vec::new();
        for n in 0..3 {
            let delay = retries
                .after_failure(Error::transient(format!("lost {n}")))
                .expect("within the attempts");
            delays.push(delay);
        }
        // Exponential within the jitter: 100, 200, 400 ms ± 25%.
        assert!(delays[0] < delays[2], "{delays:?}");
        assert!(delays[2] >= Duration::from_millis(300), "{delays:?}");
        let gave_up = retries
            .after_failure(Error::transient("lost 3"))
            .expect_err("the fourth failure ends it");
        assert_eq!(gave_up.kind(), cdc_core::ErrorKind::Transient);
        let text = format!("{gave_up:#}");
        assert!(
            text.contains("giving up after 3 reconnect attempts"),
            "{text}"
        );
        // Forever: never gives up.
        let mut forever = Retries::new(
            ReconnectPolicy {
                max_attempts: None,
                ..policy
            },
            "starts",
            "retrying",
        );
        for _ in 0..1000 {
            assert!(forever.after_failure(Error::transient("x")).is_ok());
        }
    }

    #[test]
    fn delays_are_capped_jittered_and_never_overflow() {
        let policy = ReconnectPolicy::default();
        for attempt in [0, 1, 5, 20, 21, u32::MAX] {
            let delay = policy.delay(attempt);
            assert!(
                delay >= policy.initial_backoff.mul_f64(0.75),
                "{attempt}: {delay:?}"
            );
            assert!(
                delay <= policy.max_backoff.mul_f64(1.25),
                "{attempt}: {delay:?}"
            );
        }
        // A huge backoff (a configuration's "wait forever") is a long wait, not a panic.
        let huge = ReconnectPolicy {
            max_attempts: None,
            initial_backoff: Duration::MAX,
            max_backoff: Duration::MAX,
        };
        for attempt in [0, 1, u32::MAX] {
            assert!(huge.delay(attempt) >= Duration::from_secs(u64::MAX / 2));
        }
    }
}
