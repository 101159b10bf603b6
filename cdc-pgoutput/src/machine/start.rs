//! Where a run starts, decided from what the driver found: the sink's resume token, the
//! replication slot, and the configured snapshot. The driver (`cdc-postgres`'s
//! `source/start.rs`) gathers the facts, asks [`plan`], and performs the plan: it creates,
//! drops and reads slots and copies tables, and decides nothing about which.

use cdc_core::{Error, Lsn};

/// How the existing rows are copied, as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotChoice {
    /// Not at all: stream changes only.
    Never,
    /// Under one exported snapshot, before streaming (the consistent mode).
    Consistent,
    /// In chunks while the stream runs.
    Online,
}

/// What the sink's resume token says, as far as the start depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenFacts {
    /// The token was taken in the middle of a consistent snapshot.
    pub mid_snapshot: bool,
    /// The end of the last transaction the sink holds (`commit_end`, zero if none).
    pub covered: Lsn,
}

/// What the slot is, if it exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotFacts {
    /// Its `confirmed_flush_lsn` (zero if unset).
    pub confirmed: Lsn,
}

/// What the source may do to a replication slot that no resume token shows to be its own
/// (a token that streamed from the slot, or that an interrupted snapshot of this stream
/// left behind, needs no permission: the run that made the slot had it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotPolicy {
    /// Create the slot when it does not exist. Default: yes.
    pub may_create: bool,
    /// Drop an existing slot to take a new snapshot when the sink holds no token (its
    /// state store lost it, or another consumer made the slot). Default: no — the slot
    /// may be another consumer's, or hold the only way to the changes the sink lost.
    pub may_replace: bool,
}

impl SlotPolicy {
    /// A policy that may create a missing slot (`may_create`) and may replace one no
    /// token shows to be this stream's (`may_replace`).
    pub const fn new(may_create: bool, may_replace: bool) -> Self {
        SlotPolicy {
            may_create,
            may_replace,
        }
    }
}

impl Default for SlotPolicy {
    fn default() -> Self {
        SlotPolicy {
            may_create: true,
            may_replace: false,
        }
    }
}

/// Everything [`plan`] decides from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartFacts {
    pub snapshot: SnapshotChoice,
    /// A run that copies and stops (`--snapshot initial-only`).
    pub snapshot_only: bool,
    /// The sink's token; `None` for a sink that holds nothing.
    pub token: Option<TokenFacts>,
    /// The slot; `None` when it does not exist.
    pub slot: Option<SlotFacts>,
    /// What the source may do to a slot that is not known to be its own.
    pub policy: SlotPolicy,
}

/// What the run does first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartPlan {
    /// A snapshot-only run whose sink holds the complete copy of an earlier one: nothing
    /// to do (copying again would deliver every row a second time).
    AlreadyCopied,
    /// Resume streaming at `start`, the slot confirmed at `confirmed`; tables the token
    /// does not know are copied (`copy_added`) or only streamed.
    Resume {
        confirmed: Lsn,
        start: Lsn,
        copy_added: bool,
    },
    /// No token, no snapshot, a slot in place: stream from where it is confirmed.
    StreamFromSlot { confirmed: Lsn },
    /// Create the slot — dropping the existing one first when `drop_existing` (the sink
    /// holds nothing durable from it beyond an incomplete snapshot) — then `then`.
    NewSlot {
        drop_existing: bool,
        then: AfterNewSlot,
    },
}

/// What follows a new slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterNewSlot {
    /// Stream from its consistent point; nothing to copy.
    Stream,
    /// Stream from its consistent point and copy every table online. `drop_partial`: the
    /// sink holds part of an interrupted snapshot, which it drops first.
    Online { drop_partial: bool },
    /// Copy under the snapshot the slot exports, then stream. `restarted`: the sink holds
    /// part of an interrupted snapshot.
    Consistent { restarted: bool },
}

/// Whether the preflight must find the slot: a token that streamed from it needs it,
/// unless the run has nothing left to do.
pub fn slot_must_exist(facts: &StartFacts) -> bool {
    facts.token.is_some_and(|t| !t.mid_snapshot) && !already_copied(facts)
}

/// The combinations no start can serve, whatever the token and the slot (a `Config`
/// error): checked by [`plan`], and by a driver before it opens anything.
pub fn refuse_configuration(facts: &StartFacts) -> Result<(), Error> {
    if facts.snapshot == SnapshotChoice::Online && facts.snapshot_only {
        return Err(Error::config(
            "a snapshot-only run copies under one exported snapshot: use the consistent (initial) snapshot mode with it",
        ));
    }
    Ok(())
}

fn already_copied(facts: &StartFacts) -> bool {
    facts.snapshot_only && facts.token.is_some_and(|t| !t.mid_snapshot)
}

/// The start for `facts`, or the reason there is none that keeps the sink exact: a
/// `Config` error for an impossible combination, `ResyncRequired` when the slot cannot
/// give the sink what follows its token. `slot_name` names the slot in the messages.
pub fn plan(facts: &StartFacts, slot_name: &str) -> Result<StartPlan, Error> {
    refuse_configuration(facts)?;
    if already_copied(facts) {
        return Ok(StartPlan::AlreadyCopied);
    }
    let copies_first = facts.snapshot_only || facts.snapshot == SnapshotChoice::Consistent;
    match (facts.token, facts.slot) {
        (Some(token), Some(slot)) if !token.mid_snapshot => {
            // A slot confirmed beyond what the token covers has moved past changes the
            // sink does not have (completion mode's window, or another consumer).
            if slot.confirmed > token.covered {
                return Err(Error::resync_required(format!(
                    "replication slot {slot_name:?} is confirmed up to {}, but the sink's resume token only covers changes up to {}: \
                     the changes in between were acknowledged without reaching the sink's durable state (commit mode `completion` after a crash, \
                     or another consumer of the slot). Start over with a new snapshot",
                    slot.confirmed, token.covered
                )));
            }
            Ok(StartPlan::Resume {
                confirmed: slot.confirmed,
                start: slot.confirmed.max(token.covered),
                copy_added: facts.snapshot != SnapshotChoice::Never,
            })
        }
        (Some(_), None) => Err(Error::resync_required(format!(
            "replication slot {slot_name:?} does not exist, but the sink's resume token expects it: \
             the changes since the token cannot be recovered; start over with a new snapshot"
        ))),
        (token, slot) => {
            let copies = copies_first || facts.snapshot == SnapshotChoice::Online;
            let drop_existing = slot.is_some() && (copies || token.is_some());
            // Without a token the slot is not known to be this stream's.
            if token.is_none() {
                refuse_without_permission(facts, slot.is_some(), drop_existing, slot_name)?;
            }
            if let (Some(slot), false) = (slot, drop_existing) {
                return Ok(StartPlan::StreamFromSlot {
                    confirmed: slot.confirmed,
                });
            }
            let then = match facts.snapshot {
                SnapshotChoice::Online => AfterNewSlot::Online {
                    drop_partial: token.is_some(),
                },
                _ if copies_first => AfterNewSlot::Consistent {
                    restarted: token.is_some(),
                },
                _ => AfterNewSlot::Stream,
            };
            Ok(StartPlan::NewSlot {
                drop_existing,
                then,
            })
        }
    }
}

/// A slot created or replaced without the policy allowing it: a `Config` error naming
/// the switch (and the CLI's flag).
fn refuse_without_permission(
    facts: &StartFacts,
    exists: bool,
    replace: bool,
    slot_name: &str,
) -> Result<(), Error> {
    if replace && !facts.policy.may_replace {
        return Err(Error::config(format!(
            "replication slot {slot_name:?} exists, but the sink holds no resume token: a new snapshot needs a new slot, and              dropping this one would lose what it retains for whoever created it (another consumer, or this stream's lost              state). Allow it (SlotPolicy::may_replace; pgcdc: --create-slot), or stream from the slot's position without a              snapshot (snapshot mode never)"
        )));
    }
    // A snapshot-only run's slot is temporary: it goes with the session.
    if !exists && !facts.snapshot_only && !facts.policy.may_create {
        return Err(Error::config(format!(
            "replication slot {slot_name:?} does not exist: allow creating it (SlotPolicy::may_create; pgcdc: --create-slot)              — a slot keeps WAL on the server until it is dropped"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_core::ErrorKind;

    const CHOICES: [SnapshotChoice; 3] = [
        SnapshotChoice::Never,
        SnapshotChoice::Consistent,
        SnapshotChoice::Online,
    ];

    fn facts(
        snapshot: SnapshotChoice,
        snapshot_only: bool,
        token: Option<(bool, u64)>,
        slot: Option<u64>,
    ) -> StartFacts {
        StartFacts {
            snapshot,
            snapshot_only,
            token: token.map(|(mid_snapshot, covered)| TokenFacts {
                mid_snapshot,
                covered: Lsn(covered),
            }),
            slot: slot.map(|c| SlotFacts { confirmed: Lsn(c) }),
            policy: SlotPolicy {
                may_create: true,
                may_replace: true,
            },
        }
    }

    #[test]
    fn a_fresh_sink_creates_the_slot_and_copies_as_configured() {
        for snapshot in CHOICES {
            let plan = plan(&facts(snapshot, false, None, None), "s").unwrap();
            let then = match snapshot {
                SnapshotChoice::Never => AfterNewSlot::Stream,
                SnapshotChoice::Consistent => AfterNewSlot::Consistent { restarted: false },
                SnapshotChoice::Online => AfterNewSlot::Online {
                    drop_partial: false,
                },
            };
            assert_eq!(
                plan,
                StartPlan::NewSlot {
                    drop_existing: false,
                    then
                }
            );
        }
        // A slot in place is replaced by one whose snapshot the copy reads; without a
        // copy, streaming starts where it is.
        assert_eq!(
            plan(&facts(SnapshotChoice::Never, false, None, Some(70)), "s").unwrap(),
            StartPlan::StreamFromSlot { confirmed: Lsn(70) }
        );
        for snapshot in [SnapshotChoice::Consistent, SnapshotChoice::Online] {
            assert!(matches!(
                plan(&facts(snapshot, false, None, Some(70)), "s").unwrap(),
                StartPlan::NewSlot {
                    drop_existing: true,
                    ..
                }
            ));
        }
    }

    #[test]
    fn a_token_resumes_where_both_it_and_the_slot_have_come() {
        for snapshot in CHOICES {
            let plan = plan(&facts(snapshot, false, Some((false, 90)), Some(80)), "s").unwrap();
            assert_eq!(
                plan,
                StartPlan::Resume {
                    confirmed: Lsn(80),
                    start: Lsn(90),
                    copy_added: snapshot != SnapshotChoice::Never,
                }
            );
        }
    }

    #[test]
    fn a_slot_ahead_of_the_token_or_gone_needs_a_new_snapshot() {
        for snapshot in CHOICES {
            let ahead = plan(&facts(snapshot, false, Some((false, 80)), Some(81)), "s");
            assert_eq!(ahead.unwrap_err().kind(), ErrorKind::ResyncRequired);
            for mid_snapshot in [false, true] {
                let gone = plan(&facts(snapshot, false, Some((mid_snapshot, 80)), None), "s");
                assert_eq!(gone.unwrap_err().kind(), ErrorKind::ResyncRequired);
            }
        }
    }

    #[test]
    fn an_interrupted_snapshot_is_taken_again_on_a_new_slot() {
        for snapshot in CHOICES {
            let plan = plan(&facts(snapshot, false, Some((true, 0)), Some(50)), "s").unwrap();
            let then = match snapshot {
                SnapshotChoice::Never => AfterNewSlot::Stream,
                SnapshotChoice::Consistent => AfterNewSlot::Consistent { restarted: true },
                SnapshotChoice::Online => AfterNewSlot::Online { drop_partial: true },
            };
            assert_eq!(
                plan,
                StartPlan::NewSlot {
                    drop_existing: true,
                    then
                }
            );
        }
    }

    #[test]
    fn a_slot_not_known_to_be_ours_is_created_or_replaced_only_when_allowed() {
        let strict = |mut f: StartFacts, may_create, may_replace| {
            f.policy = SlotPolicy {
                may_create,
                may_replace,
            };
            f
        };
        // No token, a slot, a snapshot wanted: replacing it needs permission.
        for snapshot in [SnapshotChoice::Consistent, SnapshotChoice::Online] {
            let f = strict(facts(snapshot, false, None, Some(100)), true, false);
            let err = plan(&f, "s").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{err}");
            assert!(err.to_string().contains("may_replace"), "{err}");
            let f = strict(facts(snapshot, false, None, Some(100)), false, true);
            assert!(matches!(
                plan(&f, "s"),
                Ok(StartPlan::NewSlot {
                    drop_existing: true,
                    ..
                })
            ));
        }
        // Streaming from an existing slot replaces nothing.
        let f = strict(
            facts(SnapshotChoice::Never, false, None, Some(100)),
            false,
            false,
        );
        assert!(matches!(
            plan(&f, "s"),
            Ok(StartPlan::StreamFromSlot { .. })
        ));
        // No slot: creating one needs permission, except a snapshot-only run's temporary one.
        let f = strict(
            facts(SnapshotChoice::Online, false, None, None),
            false,
            false,
        );
        assert!(
            plan(&f, "s")
                .unwrap_err()
                .to_string()
                .contains("may_create")
        );
        let f = strict(
            facts(SnapshotChoice::Consistent, true, None, None),
            false,
            false,
        );
        assert!(plan(&f, "s").is_ok());
        // A token shows the slot is this stream's: its own interrupted snapshot is taken
        // again on a new slot whatever the policy.
        let f = strict(
            facts(
                SnapshotChoice::Consistent,
                false,
                Some((true, 0)),
                Some(100),
            ),
            false,
            false,
        );
        assert!(matches!(
            plan(&f, "s"),
            Ok(StartPlan::NewSlot {
                drop_existing: true,
                ..
            })
        ));
    }

    #[test]
    fn a_snapshot_only_run_copies_once() {
        let done = facts(SnapshotChoice::Consistent, true, Some((false, 40)), None);
        assert_eq!(plan(&done, "s").unwrap(), StartPlan::AlreadyCopied);
        assert!(!slot_must_exist(&done));
        // Its snapshot is consistent whatever the stream's mode would be.
        assert_eq!(
            plan(&facts(SnapshotChoice::Never, true, None, None), "s").unwrap(),
            StartPlan::NewSlot {
                drop_existing: false,
                then: AfterNewSlot::Consistent { restarted: false }
            }
        );
        let online = plan(&facts(SnapshotChoice::Online, true, None, None), "s");
        assert_eq!(online.unwrap_err().kind(), ErrorKind::Config);
    }

    #[test]
    fn the_preflight_needs_the_slot_exactly_when_a_token_streamed_from_it() {
        assert!(!slot_must_exist(&facts(
            SnapshotChoice::Online,
            false,
            None,
            None
        )));
        assert!(!slot_must_exist(&facts(
            SnapshotChoice::Online,
            false,
            Some((true, 0)),
            None
        )));
        assert!(slot_must_exist(&facts(
            SnapshotChoice::Online,
            false,
            Some((false, 10)),
            None
        )));
    }
}
