//! Whether a failover slot will survive a promotion, as far as one server can tell: the
//! settings PostgreSQL 17+ needs on the primary (`synchronized_standby_slots`, naming the
//! standbys' physical slots) and on each standby (`sync_replication_slots`,
//! `primary_slot_name`, a `dbname` in `primary_conninfo`, `hot_standby_feedback`), and on
//! a standby whether it already holds a persistent synced copy of the slot.
//!
//! Each gap is a [`FailoverGap`] with what it costs at failover and how to close it;
//! [`failover_gaps`] reads them over SQL, [`mod@super::preflight`] reports them as problems.

use tokio_postgres::Client;

use super::error::{Activity, from_tokio_postgres};
use super::slot::SlotInfo;
use cdc_core::Result;

/// One reason a failover slot may not survive a promotion, or may stall the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailoverGap {
    /// The server is older than PostgreSQL 17, which added failover slots.
    Unsupported {
        /// `server_version_num`.
        version: u32,
    },
    /// Primary: the slot exists but is not a failover slot (`--failover` applies when the
    /// slot is created).
    SlotNotFailover {
        /// The slot.
        slot: String,
    },
    /// Primary: `synchronized_standby_slots` is empty, so the stream may receive changes
    /// no standby has; after a promotion the saved position can lie beyond the new
    /// primary's history.
    PrimaryDoesNotWait,
    /// Primary: a slot named in `synchronized_standby_slots` does not exist, is not
    /// physical, or is invalidated: logical decoding waits for it, so the stream stalls.
    StandbySlotUnusable {
        /// The name in `synchronized_standby_slots`.
        slot: String,
        /// What is wrong with it.
        why: String,
    },
    /// Primary: a slot named in `synchronized_standby_slots` has no standby connected:
    /// logical decoding waits until it is back.
    StandbySlotInactive {
        /// The physical slot.
        slot: String,
    },
    /// Standby: `sync_replication_slots` is off.
    StandbyDoesNotSync,
    /// Standby: `primary_slot_name` is empty (slot synchronization needs a physical slot).
    StandbyWithoutSlot,
    /// Standby: `primary_conninfo` names no database (slot synchronization needs one).
    StandbyConninfoWithoutDbname,
    /// Standby: `hot_standby_feedback` is off (slot synchronization needs it).
    StandbyWithoutFeedback,
    /// Standby: the slot has no copy here yet, or only a temporary one (dropped at
    /// promotion); a promotion now would lose the slot.
    SlotNotSynced {
        /// The slot.
        slot: String,
        /// A copy exists but is still temporary.
        temporary: bool,
    },
}

impl FailoverGap {
    /// Whether the stream cannot work at all with it (the rest are warnings: streaming
    /// works, but a failover would not be survived).
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            FailoverGap::Unsupported { .. } | FailoverGap::StandbySlotUnusable { .. }
        )
    }

    /// What is wrong, and what it costs.
    pub fn message(&self) -> String {
        match self {
            FailoverGap::Unsupported { version } => format!(
                "failover slots need PostgreSQL 17+, but the server is version {}.{}",
                version / 10000,
                version % 10000
            ),
            FailoverGap::SlotNotFailover { slot } => format!(
                "replication slot {slot:?} exists but is not a failover slot: standbys do not sync it, and it is lost when one is promoted"
            ),
            FailoverGap::PrimaryDoesNotWait => "synchronized_standby_slots is empty: the stream may receive changes before any standby has them, \
                 and after a promotion its saved position can be beyond the new primary's history (the stream then needs a new snapshot)"
                .to_owned(),
            FailoverGap::StandbySlotUnusable { slot, why } => format!(
                "slot {slot:?} named in synchronized_standby_slots {why}: logical decoding waits for it, so the stream stalls"
            ),
            FailoverGap::StandbySlotInactive { slot } => format!(
                "no standby is streaming from physical slot {slot:?} (named in synchronized_standby_slots): logical decoding waits until one is"
            ),
            FailoverGap::StandbyDoesNotSync => {
                "this standby does not sync failover slots (sync_replication_slots = off): the slot is lost if it is promoted".to_owned()
            }
            FailoverGap::StandbyWithoutSlot => {
                "this standby has no physical slot on the primary (primary_slot_name is empty): it cannot sync failover slots".to_owned()
            }
            FailoverGap::StandbyConninfoWithoutDbname => {
                "this standby's primary_conninfo names no database: it cannot sync failover slots".to_owned()
            }
            FailoverGap::StandbyWithoutFeedback => {
                "this standby has hot_standby_feedback = off: it cannot sync failover slots".to_owned()
            }
            FailoverGap::SlotNotSynced { slot, temporary: false } => format!(
                "this standby has no copy of replication slot {slot:?} yet: a promotion now would lose it"
            ),
            FailoverGap::SlotNotSynced { slot, temporary: true } => format!(
                "this standby's copy of replication slot {slot:?} is still temporary (dropped at promotion): it becomes persistent once the slot \
                 moves on the primary past where the standby's copy could start"
            ),
        }
    }

    /// How to close it.
    pub fn fix(&self) -> String {
        let on_standby = |setting: &str| {
            format!("on the standby: ALTER SYSTEM SET {setting}; SELECT pg_reload_conf();")
        };
        match self {
            FailoverGap::Unsupported { .. } => {
                "upgrade to PostgreSQL 17+, or stream without --failover (a promotion then needs a new snapshot)".to_owned()
            }
            FailoverGap::SlotNotFailover { slot } => format!(
                "on PostgreSQL 17+, while no one streams from it, run over a replication connection \
                 (psql \"dbname=... replication=database\"): ALTER_REPLICATION_SLOT {} (FAILOVER true); \
                 or drop it and start over with --failover",
                cdc_core::quote_identifier(slot)
            ),
            FailoverGap::PrimaryDoesNotWait => {
                "on the primary: ALTER SYSTEM SET synchronized_standby_slots = '<physical slot of each standby that may be promoted>'; SELECT pg_reload_conf();".to_owned()
            }
            FailoverGap::StandbySlotUnusable { .. } => {
                "create the standby's physical slot (and set primary_slot_name on the standby to it), or remove the name from synchronized_standby_slots".to_owned()
            }
            FailoverGap::StandbySlotInactive { .. } => {
                "start the standby, or remove its slot from synchronized_standby_slots while it is away".to_owned()
            }
            FailoverGap::StandbyDoesNotSync => on_standby("sync_replication_slots = on"),
            FailoverGap::StandbyWithoutSlot => format!(
                "create a physical slot on the primary (SELECT pg_create_physical_replication_slot('standby_1')), then {}",
                on_standby("primary_slot_name = 'standby_1'")
            ),
            FailoverGap::StandbyConninfoWithoutDbname => {
                "add dbname=<any database> to primary_conninfo on the standby and reload".to_owned()
            }
            FailoverGap::StandbyWithoutFeedback => on_standby("hot_standby_feedback = on"),
            FailoverGap::SlotNotSynced { .. } => {
                "wait until `pgcdc check --failover` against the standby reports the copy as synced (pg_replication_slots.synced, not temporary) before relying on a failover; \
                 the slot must be a failover slot (--failover) and the primary must be streaming to it".to_owned()
            }
        }
    }
}

fn sql_error(e: tokio_postgres::Error) -> cdc_core::Error {
    from_tokio_postgres(e, Activity::Command, "reading the failover settings failed")
}

/// The gaps for failover slot `slot` (its state on this server: `info`) on the server
/// behind `client`: a primary (`in_recovery` false) or a standby, PostgreSQL
/// `version` (`server_version_num`).
pub async fn failover_gaps(
    client: &Client,
    version: u32,
    in_recovery: bool,
    slot: &str,
    info: Option<&SlotInfo>,
) -> Result<Vec<FailoverGap>> {
    if version < 170000 {
        return Ok(vec![FailoverGap::Unsupported { version }]);
    }
    let mut gaps = Vec::new();
    if in_recovery {
        let row = client
            .query_one(
                "SELECT current_setting('sync_replication_slots') = 'on', \
                        current_setting('primary_slot_name'), \
                        current_setting('hot_standby_feedback') = 'on', \
                        (SELECT setting FROM pg_settings WHERE name = 'primary_conninfo')",
                &[],
            )
            .await
            .map_err(sql_error)?;
        let syncs: bool = row.try_get(0).map_err(sql_error)?;
        let primary_slot: String = row.try_get(1).map_err(sql_error)?;
        let feedback: bool = row.try_get(2).map_err(sql_error)?;
        let conninfo: Option<String> = row.try_get(3).map_err(sql_error)?;
        if !syncs {
            gaps.push(FailoverGap::StandbyDoesNotSync);
        }
        if primary_slot.is_empty() {
            gaps.push(FailoverGap::StandbyWithoutSlot);
        }
        if !feedback {
            gaps.push(FailoverGap::StandbyWithoutFeedback);
        }
        if conninfo.as_deref().and_then(conninfo_names_database) == Some(false) {
            gaps.push(FailoverGap::StandbyConninfoWithoutDbname);
        }
        match info {
            None => gaps.push(FailoverGap::SlotNotSynced {
                slot: slot.to_owned(),
                temporary: false,
            }),
            Some(info) if info.temporary || info.synced != Some(true) => {
                gaps.push(FailoverGap::SlotNotSynced {
                    slot: slot.to_owned(),
                    temporary: info.temporary,
                })
            }
            Some(_) => {}
        }
        return Ok(gaps);
    }

    if let Some(info) = info
        && info.failover == Some(false)
    {
        gaps.push(FailoverGap::SlotNotFailover {
            slot: slot.to_owned(),
        });
    }
    let listed: String = client
        .query_one("SELECT current_setting('synchronized_standby_slots')", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(sql_error)?;
    let names = parse_slot_list(&listed);
    if names.is_empty() {
        gaps.push(FailoverGap::PrimaryDoesNotWait);
    }
    for name in names {
        let row = client
            .query_opt(
                "SELECT slot_type, active, wal_status = 'lost' OR invalidation_reason IS NOT NULL \
                 FROM pg_replication_slots WHERE slot_name::text = $1::text",
                &[&name],
            )
            .await
            .map_err(sql_error)?;
        let Some(row) = row else {
            gaps.push(FailoverGap::StandbySlotUnusable {
                slot: name,
                why: "does not exist".to_owned(),
            });
            continue;
        };
        let slot_type: String = row.try_get(0).map_err(sql_error)?;
        let active: bool = row.try_get(1).map_err(sql_error)?;
        let lost: Option<bool> = row.try_get(2).map_err(sql_error)?;
        if slot_type != "physical" {
            gaps.push(FailoverGap::StandbySlotUnusable {
                slot: name,
                why: format!("is a {slot_type} slot, not a physical one"),
            });
        } else if lost == Some(true) {
            gaps.push(FailoverGap::StandbySlotUnusable {
                slot: name,
                why: "is invalidated".to_owned(),
            });
        } else if !active {
            gaps.push(FailoverGap::StandbySlotInactive { slot: name });
        }
    }
    Ok(gaps)
}

/// The slot names of a `synchronized_standby_slots` value: a comma-separated list of
/// names, each possibly double-quoted (`""` inside quotes is one quote). `*` is not
/// accepted by the server for this setting, so it is not special here.
fn parse_slot_list(value: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut name = String::new();
        if chars.next_if_eq(&'"').is_some() {
            while let Some(c) = chars.next() {
                if c == '"' {
                    if chars.next_if_eq(&'"').is_some() {
                        name.push('"');
                    } else {
                        break;
                    }
                } else {
                    name.push(c);
                }
            }
            while chars.next_if(|c| *c != ',').is_some() {}
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                name.push(c);
            }
            name = name.trim().to_owned();
        }
        if !name.is_empty() {
            names.push(name);
        }
        if chars.next().is_none() {
            return names;
        }
    }
}

/// Whether a `primary_conninfo` value names a database: `Some(true/false)` for a
/// key=value string, `None` when it cannot tell (a URI, or a value hidden from this role).
fn conninfo_names_database(conninfo: &str) -> Option<bool> {
    let trimmed = conninfo.trim();
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        return None;
    }
    if trimmed.starts_with('<') || trimmed.starts_with('*') {
        return None;
    }
    // `key = value` is as valid as `key=value`.
    let normalized = trimmed
        .split('=')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("=");
    Some(normalized.split_whitespace().any(|word| {
        word.split_once('=')
            .is_some_and(|(key, value)| key == "dbname" && !value.is_empty())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_lists_split_on_commas_and_unquote() {
        assert_eq!(parse_slot_list(""), Vec::<String>::new());
        assert_eq!(parse_slot_list("  "), Vec::<String>::new());
        assert_eq!(parse_slot_list("a"), vec!["a"]);
        assert_eq!(parse_slot_list(" a , b,c "), vec!["a", "b", "c"]);
        assert_eq!(
            parse_slot_list("\"My Slot\", \"x\"\"y\",z"),
            vec!["My Slot", "x\"y", "z"]
        );
    }

    #[test]
    fn conninfo_dbname_is_found_in_key_value_strings_only() {
        assert_eq!(
            conninfo_names_database("host=/tmp port=5432 user=postgres"),
            Some(false)
        );
        assert_eq!(
            conninfo_names_database("host=/tmp dbname=postgres user=postgres"),
            Some(true)
        );
        assert_eq!(
            conninfo_names_database("host=/tmp dbname = 'db' user=x"),
            Some(true)
        );
        assert_eq!(conninfo_names_database("postgres://h/db"), None);
        assert_eq!(conninfo_names_database("<insufficient privilege>"), None);
    }

    #[test]
    fn only_unsupported_versions_and_unusable_standby_slots_are_errors() {
        assert!(FailoverGap::Unsupported { version: 160000 }.is_error());
        assert!(
            FailoverGap::StandbySlotUnusable {
                slot: "s".into(),
                why: "does not exist".into()
            }
            .is_error()
        );
        assert!(!FailoverGap::PrimaryDoesNotWait.is_error());
        assert!(
            FailoverGap::Unsupported { version: 160004 }
                .message()
                .contains("16.4")
        );
    }
}
