//! The replication slot's health, from `pg_replication_slots`: missing, invalidated
//! (`wal_status = lost`, PG17's `invalidation_reason`, a recovery conflict), held by another
//! process, of another plugin or type, or of another database — each a distinct
//! [`SlotProblem`] with its own error kind and fix.

use cdc_core::{Error, ErrorKind, Lsn, Result};
use tokio_postgres::Client;

use super::error::{Activity, from_tokio_postgres};
use super::replication::quote_literal;

/// The state of the replication slot, as `pg_replication_slots` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// The slot's name.
    pub slot_name: String,
    /// Output plugin (`pgoutput`); `None` for physical slots.
    pub plugin: Option<String>,
    /// `logical` or `physical`.
    pub slot_type: String,
    /// Database of a logical slot.
    pub database: Option<String>,
    /// Whether the slot disappears with its session.
    pub temporary: bool,
    /// The process streaming from the slot, if any.
    pub active_pid: Option<i32>,
    /// `reserved`, `extended`, `unreserved` or `lost` (PostgreSQL 13+).
    pub wal_status: Option<String>,
    /// Oldest WAL the slot retains (`None` once invalidated).
    pub restart_lsn: Option<Lsn>,
    /// Where streaming resumes: everything before it was confirmed.
    pub confirmed_flush_lsn: Option<Lsn>,
    /// Invalidated because of a conflict with recovery (PostgreSQL 16+).
    pub conflicting: Option<bool>,
    /// Why the slot was invalidated (PostgreSQL 17+).
    pub invalidation_reason: Option<String>,
    /// Whether prepared transactions are decoded at PREPARE (PostgreSQL 14+).
    pub two_phase: Option<bool>,
    /// Whether it is a failover slot, synced to standbys (PostgreSQL 17+).
    pub failover: Option<bool>,
    /// On a standby: whether it is a synced copy of the primary's failover slot
    /// (PostgreSQL 17+; stays true after a promotion).
    pub synced: Option<bool>,
}

/// What is wrong with the replication slot. Each variant is a distinct error with its own
/// kind ([`SlotProblem::kind`]) and fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotProblem {
    /// The slot does not exist, but the stream expects it (resuming from a token).
    Missing {
        /// The slot.
        slot: String,
    },
    /// The slot can no longer stream: its WAL was removed or it conflicts with recovery.
    Invalidated {
        /// The slot.
        slot: String,
        /// Why (`wal_status = lost`, the PG17 `invalidation_reason`, or a conflict).
        reason: String,
    },
    /// Another process is streaming from the slot.
    Active {
        /// The slot.
        slot: String,
        /// That process.
        pid: i32,
    },
    /// The slot is logical but uses another output plugin.
    WrongPlugin {
        /// The slot.
        slot: String,
        /// Its plugin.
        plugin: String,
    },
    /// The slot is a physical slot.
    NotLogical {
        /// The slot.
        slot: String,
    },
    /// The slot belongs to another database.
    WrongDatabase {
        /// The slot.
        slot: String,
        /// Its database.
        database: String,
        /// The configured database.
        expected: String,
    },
}

impl SlotProblem {
    /// Missing and invalidated slots need a resync; a slot in use by another process is
    /// transient (often our own previous connection, gone within `wal_sender_timeout`);
    /// wrong plugin, type or database are configuration errors.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SlotProblem::Missing { .. } | SlotProblem::Invalidated { .. } => {
                ErrorKind::ResyncRequired
            }
            SlotProblem::Active { .. } => ErrorKind::Transient,
            SlotProblem::WrongPlugin { .. }
            | SlotProblem::NotLogical { .. }
            | SlotProblem::WrongDatabase { .. } => ErrorKind::Config,
        }
    }

    /// What is wrong.
    pub fn message(&self) -> String {
        match self {
            SlotProblem::Missing { slot } => format!(
                "replication slot {slot:?} does not exist, but the saved position belongs to it: it was dropped, or this server was promoted from a standby and the slot was not a failover slot (an ordinary slot stays on the old primary; PostgreSQL 17+ syncs failover slots, --failover), so changes since may be gone"
            ),
            SlotProblem::Invalidated { slot, reason } => format!(
                "replication slot {slot:?} is invalidated ({reason}): {}; it can no longer stream",
                invalidation_cause(reason)
            ),
            SlotProblem::Active { slot, pid } => {
                format!("replication slot {slot:?} is in use by another connection (process {pid})")
            }
            SlotProblem::WrongPlugin { slot, plugin } => {
                format!("replication slot {slot:?} uses output plugin {plugin:?}, not pgoutput")
            }
            SlotProblem::NotLogical { slot } => {
                format!("replication slot {slot:?} is a physical slot, not a logical one")
            }
            SlotProblem::WrongDatabase {
                slot,
                database,
                expected,
            } => format!(
                "replication slot {slot:?} belongs to database {database:?}, not {expected:?}"
            ),
        }
    }

    /// How to fix it.
    pub fn fix(&self) -> String {
        let drop_and_resync = |slot: &str| {
            format!(
                "start over: drop the slot (SELECT pg_drop_replication_slot({})) and discard the saved position, so a new slot and snapshot are made",
                quote_literal(slot)
            )
        };
        match self {
            SlotProblem::Missing { .. } => {
                "start over with a new snapshot: discard the saved position (resume token) so a new slot is created".to_owned()
            }
            SlotProblem::Invalidated { slot, reason } => format!(
                "{}; to prevent it, {}",
                drop_and_resync(slot),
                invalidation_prevention(reason)
            ),
            SlotProblem::Active { pid, .. } => format!(
                "stop the other consumer (SELECT pg_terminate_backend({pid}) if it is a stale connection); a previous connection of ours goes away within wal_sender_timeout"
            ),
            SlotProblem::WrongPlugin { .. } | SlotProblem::NotLogical { .. } | SlotProblem::WrongDatabase { .. } => {
                "configure another slot name (or drop this slot if nothing else uses it)".to_owned()
            }
        }
    }

    /// The problem as an error of [`SlotProblem::kind`].
    pub fn to_error(&self) -> Error {
        Error::new(
            self.kind(),
            format!("{}; fix: {}", self.message(), self.fix()),
        )
    }
}

fn sql_error(e: tokio_postgres::Error) -> Error {
    from_tokio_postgres(e, Activity::Command, "reading pg_replication_slots failed")
}

/// Reads the slot's row from `pg_replication_slots` (columns that the server's version
/// lacks are `None`); `Ok(None)` if there is no such slot.
pub async fn inspect_slot(client: &Client, slot: &str) -> Result<Option<SlotInfo>> {
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int4", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(sql_error)?;
    let wal_status = if version >= 130000 {
        "wal_status"
    } else {
        "NULL::text"
    };
    let conflicting = if version >= 160000 {
        "conflicting"
    } else {
        "NULL::bool"
    };
    let reason = if version >= 170000 {
        "invalidation_reason"
    } else {
        "NULL::text"
    };
    let two_phase = if version >= 140000 {
        "two_phase"
    } else {
        "NULL::bool"
    };
    let (failover, synced) = if version >= 170000 {
        ("failover", "synced")
    } else {
        ("NULL::bool", "NULL::bool")
    };
    let sql = format!(
        "SELECT slot_name::text, plugin::text, slot_type, database::text, temporary, active_pid, \
         {wal_status}, restart_lsn::text, confirmed_flush_lsn::text, {conflicting}, {reason}, {two_phase}, \
         {failover}, {synced} \
         FROM pg_replication_slots WHERE slot_name::text = $1::text"
    );
    let Some(row) = client.query_opt(&sql, &[&slot]).await.map_err(sql_error)? else {
        return Ok(None);
    };
    let lsn = |text: Option<String>| -> Result<Option<Lsn>> {
        text.map(|t| {
            t.parse().map_err(|_| {
                Error::protocol(format!("malformed LSN {t:?} in pg_replication_slots"))
            })
        })
        .transpose()
    };
    Ok(Some(SlotInfo {
        slot_name: row.try_get(0).map_err(sql_error)?,
        plugin: row.try_get(1).map_err(sql_error)?,
        slot_type: row.try_get(2).map_err(sql_error)?,
        database: row.try_get(3).map_err(sql_error)?,
        temporary: row.try_get(4).map_err(sql_error)?,
        active_pid: row.try_get(5).map_err(sql_error)?,
        wal_status: row.try_get(6).map_err(sql_error)?,
        restart_lsn: lsn(row.try_get(7).map_err(sql_error)?)?,
        confirmed_flush_lsn: lsn(row.try_get(8).map_err(sql_error)?)?,
        conflicting: row.try_get(9).map_err(sql_error)?,
        invalidation_reason: row.try_get(10).map_err(sql_error)?,
        two_phase: row.try_get(11).map_err(sql_error)?,
        failover: row.try_get(12).map_err(sql_error)?,
        synced: row.try_get(13).map_err(sql_error)?,
    }))
}

/// The problems of `slot` given its state `info` (from [`inspect_slot`]), for a stream of
/// `database`. With `must_exist` (resuming from a token) a missing slot is a problem;
/// `own_pid` is our own walsender when checking again after `START_REPLICATION` (the slot
/// being active for it is fine).
pub fn slot_problems(
    slot: &str,
    info: Option<&SlotInfo>,
    database: &str,
    must_exist: bool,
    own_pid: Option<i32>,
) -> Vec<SlotProblem> {
    let Some(info) = info else {
        return if must_exist {
            vec![SlotProblem::Missing {
                slot: slot.to_owned(),
            }]
        } else {
            Vec::new()
        };
    };
    let slot = slot.to_owned();
    let mut problems = Vec::new();
    if info.slot_type != "logical" {
        problems.push(SlotProblem::NotLogical { slot: slot.clone() });
        return problems;
    }
    let invalidation = info
        .invalidation_reason
        .clone()
        .or_else(|| {
            (info.wal_status.as_deref() == Some("lost")).then(|| "wal_status = lost".to_owned())
        })
        .or_else(|| (info.conflicting == Some(true)).then(|| "conflicts with recovery".to_owned()));
    if let Some(reason) = invalidation {
        problems.push(SlotProblem::Invalidated {
            slot: slot.clone(),
            reason,
        });
    }
    match info.plugin.as_deref() {
        Some("pgoutput") => {}
        other => problems.push(SlotProblem::WrongPlugin {
            slot: slot.clone(),
            plugin: other.unwrap_or("").to_owned(),
        }),
    }
    if let Some(db) = info.database.as_ref().filter(|db| *db != database) {
        problems.push(SlotProblem::WrongDatabase {
            slot: slot.clone(),
            database: db.clone(),
            expected: database.to_owned(),
        });
    }
    if let Some(pid) = info.active_pid.filter(|pid| Some(*pid) != own_pid) {
        problems.push(SlotProblem::Active { slot, pid });
    }
    problems
}

/// What an invalidation reason (`pg_replication_slots.invalidation_reason`, PostgreSQL
/// 17+, or what older columns imply) means.
fn invalidation_cause(reason: &str) -> &'static str {
    match reason {
        "idle_timeout" => {
            "it was inactive longer than the server's idle_replication_slot_timeout (PostgreSQL 18+), so the server gave up the WAL it held"
        }
        "rows_removed" | "conflicts with recovery" => {
            "the catalog rows it needed were removed (a recovery conflict on a standby, or hot_standby_feedback off)"
        }
        "wal_level_insufficient" => "the primary's wal_level is no longer logical",
        _ => "the WAL it needed was removed (max_slot_wal_keep_size exceeded)",
    }
}

/// How to keep an invalidation of this kind from happening again.
fn invalidation_prevention(reason: &str) -> &'static str {
    match reason {
        "idle_timeout" => {
            "keep the consumer running, or raise (or set to 0) idle_replication_slot_timeout"
        }
        "rows_removed" | "conflicts with recovery" => {
            "on a standby, use a physical slot between the servers with hot_standby_feedback = on"
        }
        "wal_level_insufficient" => "keep wal_level = logical on the primary",
        _ => "raise max_slot_wal_keep_size (or set it to -1) or keep the consumer running",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> SlotInfo {
        SlotInfo {
            slot_name: "s".into(),
            plugin: Some("pgoutput".into()),
            slot_type: "logical".into(),
            database: Some("shop".into()),
            temporary: false,
            active_pid: None,
            wal_status: Some("reserved".into()),
            restart_lsn: Some(Lsn(1)),
            confirmed_flush_lsn: Some(Lsn(2)),
            conflicting: None,
            invalidation_reason: None,
            two_phase: Some(false),
            failover: None,
            synced: None,
        }
    }

    fn problems(info: Option<&SlotInfo>, must_exist: bool) -> Vec<SlotProblem> {
        slot_problems("s", info, "shop", must_exist, Some(7))
    }

    #[test]
    fn healthy_and_missing_slots() {
        assert!(problems(Some(&info()), true).is_empty());
        assert!(problems(None, false).is_empty());
        let missing = problems(None, true);
        assert_eq!(missing, vec![SlotProblem::Missing { slot: "s".into() }]);
        assert_eq!(missing[0].kind(), ErrorKind::ResyncRequired);
    }

    #[test]
    fn each_slot_problem_is_distinct() {
        let mut lost = info();
        lost.wal_status = Some("lost".into());
        lost.restart_lsn = None;
        let p = problems(Some(&lost), true);
        assert!(
            matches!(&p[..], [SlotProblem::Invalidated { reason, .. }] if reason.contains("lost"))
        );
        assert_eq!(p[0].kind(), ErrorKind::ResyncRequired);

        let mut active = info();
        active.active_pid = Some(4242);
        let p = problems(Some(&active), true);
        assert_eq!(
            p,
            vec![SlotProblem::Active {
                slot: "s".into(),
                pid: 4242
            }]
        );
        assert_eq!(p[0].kind(), ErrorKind::Transient);
        assert!(p[0].to_error().message().contains("4242"));
        active.active_pid = Some(7);
        assert!(
            problems(Some(&active), true).is_empty(),
            "our own pid is fine"
        );

        let mut plugin = info();
        plugin.plugin = Some("wal2json".into());
        assert!(matches!(
            &problems(Some(&plugin), true)[..],
            [SlotProblem::WrongPlugin { .. }]
        ));

        let mut db = info();
        db.database = Some("other".into());
        let p = problems(Some(&db), true);
        assert!(matches!(&p[..], [SlotProblem::WrongDatabase { .. }]));
        assert_eq!(p[0].kind(), ErrorKind::Config);

        let mut physical = info();
        physical.slot_type = "physical".into();
        physical.plugin = None;
        assert!(matches!(
            &problems(Some(&physical), true)[..],
            [SlotProblem::NotLogical { .. }]
        ));

        let mut pg17 = info();
        pg17.invalidation_reason = Some("wal_removed".into());
        assert!(
            matches!(&problems(Some(&pg17), true)[..], [SlotProblem::Invalidated { reason, .. }] if reason == "wal_removed")
        );
    }

    #[test]
    fn each_invalidation_reason_has_its_own_cause_and_fix() {
        let text = |reason: &str| {
            SlotProblem::Invalidated {
                slot: "s".into(),
                reason: reason.into(),
            }
            .to_error()
            .to_string()
        };
        let idle = text("idle_timeout");
        assert!(
            idle.contains("idle_replication_slot_timeout") && idle.contains("inactive"),
            "{idle}"
        );
        assert!(!idle.contains("max_slot_wal_keep_size"), "{idle}");
        let wal = text("wal_removed");
        assert!(wal.contains("max_slot_wal_keep_size"), "{wal}");
        assert!(text("rows_removed").contains("hot_standby_feedback"));
        assert!(text("wal_level_insufficient").contains("wal_level"));
        for reason in [
            "idle_timeout",
            "wal_removed",
            "rows_removed",
            "wal_level_insufficient",
        ] {
            assert!(
                text(reason).contains("pg_drop_replication_slot"),
                "{reason}"
            );
        }
    }
}
