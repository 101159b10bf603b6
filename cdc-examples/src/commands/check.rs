//! `pgcdc check`: is the source ready to stream? Every problem found, each with its fix.
//!
//! The library's preflight covers `wal_level`, privileges, the publication and its tables,
//! replica identities and the slot's health; this command adds the server settings that
//! decide how a slot behaves over time (`max_slot_wal_keep_size`, `wal_sender_timeout`)
//! and whether a slot and a walsender are still available. With `--failover`, the
//! preflight also reports what keeps a failover slot through a promotion, as the server
//! checked (primary or standby) can tell.

use std::process::ExitCode;

use cdc_core::ErrorKind;
use cdc_postgres::conn::{PreflightOptions, Severity, connect_sql, preflight};
use tokio_postgres::Client;

use super::sql_error;
use crate::cli::{CheckArgs, CliError, exit_code};

/// A finding of this command's own checks.
#[derive(Debug)]
struct Finding {
    severity: Level,
    message: String,
    fix: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Error,
    Warning,
    Note,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Note => "note",
        }
    }
}

/// Runs `pgcdc check`.
pub async fn run(args: CheckArgs) -> Result<ExitCode, CliError> {
    let mut config = super::source_config(&args.source)?;
    config.failover = args.failover;
    let client = connect_sql(&config.connection).await?;
    let report = preflight(&client, &config, &PreflightOptions::default()).await?;
    let slot = config.slot_name();
    let mut extra = server_settings(&client, report.slot.is_none()).await?;
    if let Some(info) = &report.slot
        && info.wal_status.as_deref() == Some("unreserved")
    {
        extra.push(Finding {
            severity: Level::Warning,
            message: format!(
                "replication slot {slot:?} has wal_status = unreserved: it is about to lose WAL it still needs and be invalidated"
            ),
            fix: "let the consumer catch up now, or raise max_slot_wal_keep_size".to_owned(),
        });
    }

    println!(
        "PostgreSQL {}, role {:?}, wal_level = {}, publication {:?}",
        version_text(report.server_version_num),
        report.role,
        report.wal_level,
        config.publication
    );
    for table in &report.tables {
        println!(
            "table {}: replica identity {}, {}",
            table.name,
            table
                .replica_identity
                .map_or("unknown".to_owned(), |r| format!("{r:?}").to_lowercase()),
            if table.has_primary_key {
                "primary key"
            } else {
                "no primary key"
            }
        );
    }
    match &report.slot {
        Some(info) => println!(
            "slot {slot:?}: exists, confirmed_flush_lsn {}, wal_status {}, {}{}",
            info.confirmed_flush_lsn
                .map_or("-".to_owned(), |l| l.to_string()),
            info.wal_status.as_deref().unwrap_or("-"),
            info.active_pid.map_or("inactive".to_owned(), |pid| format!(
                "active (process {pid})"
            )),
            failover_state(info, report.in_recovery)
        ),
        None if report.in_recovery && config.failover => {
            println!("slot {slot:?}: this standby has no copy of it")
        }
        None => println!("slot {slot:?}: does not exist yet (stream --create-slot creates it)"),
    }

    let mut errors = 0;
    let mut warnings = 0;
    let mut first_error: Option<ErrorKind> = None;
    for problem in &report.problems {
        let level = match problem.severity {
            Severity::Error => {
                errors += 1;
                first_error.get_or_insert(problem.error_kind());
                Level::Error
            }
            Severity::Warning => {
                warnings += 1;
                Level::Warning
            }
        };
        print_finding(level, &problem.message(), &problem.fix());
    }
    for finding in &extra {
        match finding.severity {
            Level::Error => {
                errors += 1;
                first_error.get_or_insert(ErrorKind::Config);
            }
            Level::Warning => warnings += 1,
            Level::Note => {}
        }
        print_finding(finding.severity, &finding.message, &finding.fix);
    }
    match first_error {
        None => {
            println!("ok: ready to stream ({})", plural(warnings, "warning"));
            Ok(ExitCode::SUCCESS)
        }
        Some(kind) => {
            println!(
                "{}, {}: fix the errors before streaming",
                plural(errors, "error"),
                plural(warnings, "warning")
            );
            Ok(ExitCode::from(exit_code(kind)))
        }
    }
}

/// The slot's failover state (PostgreSQL 17+), as a suffix of its line.
fn failover_state(info: &cdc_postgres::conn::SlotInfo, in_recovery: bool) -> &'static str {
    match (info.failover, info.synced, info.temporary) {
        (_, Some(true), true) if in_recovery => {
            ", synced copy of the primary's failover slot (still temporary)"
        }
        (_, Some(true), false) if in_recovery => {
            ", synced copy of the primary's failover slot (survives a promotion)"
        }
        (Some(true), _, _) => ", failover slot",
        (Some(false), _, _) => ", not a failover slot",
        _ => "",
    }
}

fn print_finding(level: Level, message: &str, fix: &str) {
    println!("{:<9}{message}", format!("{}:", level.label()));
    println!("         fix: {fix}");
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn version_text(num: u32) -> String {
    format!("{}.{}", num / 10000, num % 10000)
}

/// Settings that decide how a slot behaves over time, and free capacity.
async fn server_settings(client: &Client, slot_missing: bool) -> Result<Vec<Finding>, CliError> {
    let row = client
        .query_one(
            "SELECT current_setting('max_slot_wal_keep_size'), \
                    current_setting('wal_sender_timeout'), \
                    (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_sender_timeout'), \
                    current_setting('max_replication_slots')::int8, \
                    (SELECT count(*) FROM pg_replication_slots), \
                    current_setting('max_wal_senders')::int8, \
                    (SELECT count(*) FROM pg_stat_replication)",
            &[],
        )
        .await
        .map_err(|e| sql_error("reading server settings failed", e))?;
    let get_text = |i| row.try_get::<_, String>(i).unwrap_or_default();
    let get_int = |i| row.try_get::<_, i64>(i).unwrap_or_default();
    let keep_size = get_text(0);
    let sender_timeout = get_text(1);
    let sender_timeout_ms = get_int(2);
    let (max_slots, slots) = (get_int(3), get_int(4));
    let (max_senders, senders) = (get_int(5), get_int(6));

    let mut findings = Vec::new();
    if keep_size == "-1" {
        findings.push(Finding {
            severity: Level::Note,
            message: "max_slot_wal_keep_size is -1 (unlimited): a stopped or abandoned slot keeps WAL until the disk is full".to_owned(),
            fix: "set a bound (ALTER SYSTEM SET max_slot_wal_keep_size = '50GB'; SELECT pg_reload_conf();) sized to the longest outage to ride out, and watch `pgcdc slots`; past it the slot is invalidated and needs a new snapshot".to_owned(),
        });
    } else {
        findings.push(Finding {
            severity: Level::Note,
            message: format!(
                "max_slot_wal_keep_size is {keep_size}: a slot that falls further behind is invalidated and the stream needs a new snapshot"
            ),
            fix: "keep the consumer running; watch the lag with `pgcdc slots`".to_owned(),
        });
    }
    if sender_timeout_ms == 0 {
        findings.push(Finding {
            severity: Level::Warning,
            message: "wal_sender_timeout is 0 (disabled): a dead consumer keeps its slot active until TCP notices, and a restart cannot take it over".to_owned(),
            fix: "ALTER SYSTEM SET wal_sender_timeout = '60s'; SELECT pg_reload_conf();".to_owned(),
        });
    } else if sender_timeout_ms < 5000 {
        findings.push(Finding {
            severity: Level::Warning,
            message: format!(
                "wal_sender_timeout is {sender_timeout}: short enough that a busy or paused consumer can be disconnected"
            ),
            fix: "ALTER SYSTEM SET wal_sender_timeout = '60s'; SELECT pg_reload_conf();".to_owned(),
        });
    }
    if slot_missing && slots >= max_slots {
        findings.push(Finding {
            severity: Level::Error,
            message: format!(
                "all {max_slots} replication slots are in use (max_replication_slots): no slot can be created"
            ),
            fix: "drop an unused slot (`pgcdc slots`, `pgcdc drop-slot NAME`) or raise max_replication_slots (restart needed)".to_owned(),
        });
    }
    if senders >= max_senders {
        findings.push(Finding {
            severity: Level::Error,
            message: format!(
                "all {max_senders} WAL senders are in use (max_wal_senders): a replication connection will be refused"
            ),
            fix: "stop an unused replication client or raise max_wal_senders (restart needed)"
                .to_owned(),
        });
    }
    Ok(findings)
}
