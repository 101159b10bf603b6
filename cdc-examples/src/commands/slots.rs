//! `pgcdc slots` (the database's replication slots with their lag) and `pgcdc drop-slot`.

use std::process::ExitCode;

use cdc_core::Error;
use cdc_postgres::conn::{ReplicationConnection, connect_sql};
use serde::Serialize;

use super::sql_error;
use crate::cli::{CliError, DropSlotArgs, SlotsArgs};
use crate::progress::human_bytes;

/// One row of `pgcdc slots`.
#[derive(Debug, Serialize)]
struct SlotRow {
    slot_name: String,
    plugin: Option<String>,
    slot_type: String,
    database: Option<String>,
    active_pid: Option<i32>,
    wal_status: Option<String>,
    confirmed_flush_lsn: Option<String>,
    /// `pg_current_wal_lsn() - confirmed_flush_lsn`: WAL not yet acknowledged.
    lag_bytes: Option<i64>,
    /// `pg_current_wal_lsn() - restart_lsn`: WAL the slot keeps on disk.
    retained_bytes: Option<i64>,
    /// WAL the slot may still fall behind before it is invalidated (bounded
    /// `max_slot_wal_keep_size` only).
    safe_wal_size: Option<i64>,
}

/// Runs `pgcdc slots`.
pub async fn run(args: SlotsArgs) -> Result<ExitCode, CliError> {
    let connection = super::connection(&args.conn)?;
    let client = connect_sql(&connection).await?;
    let rows = client
        .query(
            "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                                       ELSE pg_current_wal_lsn() END AS lsn) \
             SELECT slot_name::text, plugin::text, slot_type, database::text, active_pid, \
                    wal_status, confirmed_flush_lsn::text, \
                    pg_wal_lsn_diff(here.lsn, confirmed_flush_lsn)::int8, \
                    pg_wal_lsn_diff(here.lsn, restart_lsn)::int8, safe_wal_size \
             FROM pg_replication_slots, here ORDER BY slot_name",
            &[],
        )
        .await
        .map_err(|e| sql_error("listing replication slots failed", e))?;
    let slots = rows
        .iter()
        .map(|r| {
            Ok(SlotRow {
                slot_name: r.try_get(0)?,
                plugin: r.try_get(1)?,
                slot_type: r.try_get(2)?,
                database: r.try_get(3)?,
                active_pid: r.try_get(4)?,
                wal_status: r.try_get(5)?,
                confirmed_flush_lsn: r.try_get(6)?,
                lag_bytes: r.try_get(7)?,
                retained_bytes: r.try_get(8)?,
                safe_wal_size: r.try_get(9)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        .map_err(|e| sql_error("reading pg_replication_slots failed", e))?;
    if args.json {
        for slot in &slots {
            println!("{}", serde_json::to_string(slot).unwrap_or_default());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if slots.is_empty() {
        println!("no replication slots");
        return Ok(ExitCode::SUCCESS);
    }
    let width = slots
        .iter()
        .map(|s| s.slot_name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    println!(
        "{:width$}  {:9} {:12} {:10} {:>10} {:>10} {:>10}  {:18} active",
        "slot", "type", "database", "wal_status", "lag", "retained", "safe", "confirmed"
    );
    let bytes = |b: Option<i64>| {
        b.and_then(|b| u64::try_from(b).ok())
            .map_or("-".to_owned(), human_bytes)
    };
    for s in &slots {
        let kind = match (&s.slot_type[..], &s.plugin) {
            ("logical", Some(plugin)) => plugin.clone(),
            (kind, _) => kind.to_owned(),
        };
        println!(
            "{:width$}  {:9} {:12} {:10} {:>10} {:>10} {:>10}  {:18} {}",
            s.slot_name,
            kind,
            s.database.as_deref().unwrap_or("-"),
            s.wal_status.as_deref().unwrap_or("-"),
            bytes(s.lag_bytes),
            bytes(s.retained_bytes),
            bytes(s.safe_wal_size),
            s.confirmed_flush_lsn.as_deref().unwrap_or("-"),
            s.active_pid
                .map_or("no".to_owned(), |pid| format!("pid {pid}")),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `pgcdc drop-slot`.
pub async fn drop_slot(args: DropSlotArgs) -> Result<ExitCode, CliError> {
    let connection = super::connection(&args.conn)?;
    let mut replication = ReplicationConnection::connect(&connection).await?;
    let result = replication.drop_slot(&args.name, args.wait).await;
    replication.close().await;
    match result {
        Ok(()) => {
            println!("dropped replication slot {:?}", args.name);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if e.server_error().is_some_and(|s| s.code == "42704") => {
            if args.if_exists {
                println!("replication slot {:?} does not exist", args.name);
                Ok(ExitCode::SUCCESS)
            } else {
                Err(Error::config(format!(
                    "replication slot {:?} does not exist (list them with `pgcdc slots`; --if-exists accepts a missing slot)",
                    args.name
                ))
                .into())
            }
        }
        Err(e) => Err(e.into()),
    }
}
