//! Polls the slot's WAL retention (`pg_replication_slots`) on a SQL connection of its own,
//! for the source's statistics. A failed poll clears the figure and is retried at the next
//! interval; it never affects the stream.

use std::time::{Duration, Instant};

use super::stats::{SlotRetention, SourceStats};
use crate::conn::{ConnectionConfig, connect_sql};

/// The polling task; stops when dropped.
#[derive(Debug)]
pub(super) struct SlotPoller {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlotPoller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SlotPoller {
    /// Starts polling `slot` every `interval`.
    pub(super) fn spawn(
        connection: ConnectionConfig,
        slot: String,
        interval: Duration,
        stats: SourceStats,
    ) -> SlotPoller {
        let task = tokio::spawn(async move {
            let mut client = None;
            loop {
                if client.is_none() {
                    client = connect_sql(&connection).await.ok();
                }
                let polled = match &client {
                    Some(sql) => match poll(sql, &slot).await {
                        Ok(retention) => retention,
                        Err(e) => {
                            tracing::debug!(error = %e, "polling the slot's WAL retention failed");
                            client = None;
                            None
                        }
                    },
                    None => None,
                };
                stats.slot_polled(polled);
                tokio::time::sleep(interval).await;
            }
        });
        SlotPoller { task }
    }
}

async fn poll(
    sql: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<SlotRetention>, tokio_postgres::Error> {
    // On a standby the server's position is what it replayed.
    let row = sql
        .query_opt(
            "SELECT COALESCE(pg_wal_lsn_diff( \
                 CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, \
                 restart_lsn), 0)::int8, \
                 COALESCE(to_jsonb(s) ->> 'wal_status', '') \
             FROM pg_replication_slots s WHERE slot_name::text = $1::text",
            &[&slot],
        )
        .await?;
    row.map(|r| {
        Ok(SlotRetention {
            retained_bytes: u64::try_from(r.try_get::<_, i64>(0)?).unwrap_or(0),
            wal_status: r.try_get(1)?,
            polled_at: Instant::now(),
        })
    })
    .transpose()
}
