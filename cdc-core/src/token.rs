//! `ResumeToken`: where a restarted stream continues, stored by the sink.

use serde::{Deserialize, Serialize};

use crate::{Lsn, Position, TableName};

/// The token format version this build writes. It also reads every earlier version
/// (version 1 had no online snapshot progress).
pub const RESUME_TOKEN_VERSION: u32 = 2;

/// The oldest token format version this build still reads.
pub const OLDEST_READABLE_TOKEN_VERSION: u32 = 1;

/// Identity of the stream a token belongs to. A token is only valid for the same source
/// identity: resuming it against another server, timeline, database or slot is a
/// resync-required error, never a silent restart.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SourceIdentity {
    /// The cluster's system identifier (`IDENTIFY_SYSTEM`), as a decimal string because it
    /// exceeds JSON's exact integer range.
    pub system_identifier: String,
    /// The timeline the position was read on.
    pub timeline: u32,
    /// The database name.
    pub database: String,
    /// The replication slot name.
    pub slot: String,
}

/// Progress of an initial snapshot that had not completed when the token was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotProgress {
    /// The slot's consistent point: streaming starts here once the snapshot is complete.
    pub consistent_point: Lsn,
    /// Tables whose copy was complete and acknowledged.
    #[serde(default)]
    pub completed_tables: Vec<TableName>,
}

/// Progress of an online snapshot (backfill): per table, how far its chunks were
/// delivered, and the merge windows of recent chunks that still decide which streamed
/// changes the chunks already reflect.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillProgress {
    /// Every table of the stream's set — being copied, copied, or not to be copied —
    /// and every table that left the set in a later run (`removed`). Kept after the
    /// copy is over: a later run learns from it which tables the sink holds, so a
    /// completed table is never copied again, a table added since is copied alone, and a
    /// table that comes back is copied anew.
    pub tables: Vec<TableBackfill>,
    /// Transactions (32-bit ids) the stream passed that touched a table still being
    /// copied, which no snapshot read since has shown: each table's next chunk must show
    /// them. A restarted run's stream starts after them, so only this list says that a
    /// commit the earlier run passed may not be visible yet (its backend still waiting,
    /// e.g. for a synchronous standby). Usually empty or short: every chunk read prunes
    /// it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unshown_xids: Vec<u32>,
}

/// One table's online snapshot progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableBackfill {
    /// The table.
    pub table: TableName,
    /// Nothing is left to copy: every row is delivered, or the stream's snapshot mode
    /// chose not to copy the table (`never`), which then delivers its changes only.
    #[serde(default)]
    pub done: bool,
    /// The table left the stream's table set in a later run: the sink holds what was
    /// delivered of it until then, and its changes since were not delivered. Kept so that
    /// a run which adds the table back knows the sink's copy is stale: it is copied again,
    /// after a TRUNCATE of it (or, with snapshot mode `never`, streamed on as it is, with
    /// a warning).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// The key of the last row delivered (each key column in Postgres's text form), in
    /// key order: rows up to and including it are the sink's. `None`: nothing yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upto: Option<Vec<String>>,
    /// Chunks delivered so far (the next chunk's number).
    #[serde(default)]
    pub chunks: u64,
    /// Rows delivered so far.
    #[serde(default)]
    pub rows: u64,
    /// Merge windows of chunks whose snapshot may still be newer than the stream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<BackfillWindow>,
}

/// The part of one delivered chunk that still matters for merging: the key range it
/// covered and the snapshot it was read under, until the stream passes `until`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillWindow {
    /// Exclusive lower bound of the key range (`None`: from the first key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<String>>,
    /// Inclusive upper bound of the key range (`None`: to the end of the table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upto: Option<Vec<String>>,
    /// The chunk's transaction snapshot (`pg_current_snapshot()`, text form).
    pub snapshot: String,
    /// The WAL insert position read just after that snapshot: every transaction it sees
    /// committed before this position.
    pub until: Lsn,
}

/// Where to resume: a small, versioned JSON document that a sink stores atomically with
/// the data it covers (an engine stores it in its own checkpoint) and hands back at restart.
///
/// Deserialization checks `version` first and rejects versions this build does not know
/// with an error that says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResumeToken {
    /// Format version; [`RESUME_TOKEN_VERSION`] when written by this build.
    pub version: u32,
    /// The stream this token belongs to.
    pub source: SourceIdentity,
    /// The last event whose effect the token covers; events at or before it are skipped on
    /// replay. `None` before any event was acknowledged.
    pub position: Option<Position>,
    /// The end LSN of the last transaction the token fully covers (including transactions
    /// that carried nothing for the sink). The source may be confirmed up to here; a source
    /// whose confirmed position is beyond it has lost changes the sink does not have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_end: Option<Lsn>,
    /// The end LSN of the last transaction the token fully covers when that is beyond
    /// `commit_end` (which a prepared transaction still waiting holds back to its
    /// PREPARE): every transaction ending at or before it is in the sink. Tells a
    /// restarted source that a COMMIT PREPARED the server sends alone (its PREPARE lies
    /// before where the session starts) is one the sink has. `None`: `commit_end`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_end: Option<Lsn>,
    /// Present while the initial snapshot (consistent mode) is incomplete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotProgress>,
    /// Present while an online snapshot runs (since version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<BackfillProgress>,
}

/// Versions 1 and 2: version 1 is version 2 without `backfill`.
#[derive(Deserialize)]
struct ResumeTokenV2 {
    version: u32,
    source: SourceIdentity,
    position: Option<Position>,
    #[serde(default)]
    commit_end: Option<Lsn>,
    #[serde(default)]
    complete_end: Option<Lsn>,
    #[serde(default)]
    snapshot: Option<SnapshotProgress>,
    #[serde(default)]
    backfill: Option<BackfillProgress>,
}

#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

impl<'de> Deserialize<'de> for ResumeToken {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(deserializer)?;
        let VersionOnly { version } =
            serde_json::from_value(value.clone()).map_err(D::Error::custom)?;
        if !(OLDEST_READABLE_TOKEN_VERSION..=RESUME_TOKEN_VERSION).contains(&version) {
            return Err(D::Error::custom(format!(
                "resume token version {version} is not supported by this build (it reads versions {OLDEST_READABLE_TOKEN_VERSION} to {RESUME_TOKEN_VERSION}); upgrade pgcdc or start a new stream"
            )));
        }
        let v2: ResumeTokenV2 = serde_json::from_value(value).map_err(D::Error::custom)?;
        if v2.version < 2 && v2.backfill.is_some() {
            return Err(D::Error::custom(
                "resume token version 1 cannot carry online snapshot progress; the token is not one pgcdc wrote",
            ));
        }
        Ok(ResumeToken {
            // Read tokens are rewritten in the current format.
            version: RESUME_TOKEN_VERSION,
            source: v2.source,
            position: v2.position,
            commit_end: v2.commit_end,
            complete_end: v2.complete_end,
            snapshot: v2.snapshot,
            backfill: v2.backfill,
        })
    }
}

impl ResumeToken {
    /// A token for `source` at `position`, in the current format version.
    pub fn new(source: SourceIdentity, position: Option<Position>) -> Self {
        ResumeToken {
            version: RESUME_TOKEN_VERSION,
            source,
            position,
            commit_end: None,
            complete_end: None,
            snapshot: None,
            backfill: None,
        }
    }

    /// The token as compact JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain strings, integers and options cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a token from JSON, rejecting unknown versions.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// Whether an event at `position` is already covered by this token and must be skipped
    /// on replay.
    pub fn covers(&self, position: Position) -> bool {
        self.position.is_some_and(|p| position <= p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn identity() -> SourceIdentity {
        SourceIdentity {
            system_identifier: "7291234567890123456".into(),
            timeline: 1,
            database: "shop".into(),
            slot: "pgcdc_abc".into(),
        }
    }

    #[test]
    fn json_is_small_and_readable() {
        let token = ResumeToken::new(identity(), Some(Position::new(Lsn(0x1_0000_0010), 3)));
        let json = token.to_json();
        assert!(json.contains("\"commit_lsn\":\"1/10\""), "{json}");
        assert!(json.len() < 200, "{json}");
    }

    #[test]
    fn rejects_unknown_version() {
        let mut value = serde_json::to_value(ResumeToken::new(identity(), None)).unwrap();
        value["version"] = 3.into();
        let err = ResumeToken::from_json(&value.to_string()).unwrap_err();
        assert!(
            err.to_string().contains("version 3 is not supported"),
            "{err}"
        );
        value["version"] = 0.into();
        assert!(ResumeToken::from_json(&value.to_string()).is_err());
        assert!(ResumeToken::from_json("{}").is_err());
    }

    #[test]
    fn reads_a_version_1_token_as_written_by_the_previous_release() {
        // Verbatim from a version-1 build (mid consistent snapshot).
        let v1 = r#"{"version":1,"source":{"system_identifier":"7291234567890123456","timeline":1,"database":"shop","slot":"pgcdc_abc"},"position":{"commit_lsn":"0/16B3748","ordinal":12},"commit_end":"0/16B3800","snapshot":{"consistent_point":"0/16B3749","completed_tables":["public.orders"]}}"#;
        let token = ResumeToken::from_json(v1).unwrap();
        assert_eq!(token.version, RESUME_TOKEN_VERSION);
        assert_eq!(token.position, Some(Position::new(Lsn(0x16B_3748), 12)));
        assert_eq!(token.commit_end, Some(Lsn(0x16B_3800)));
        let snapshot = token.snapshot.clone().unwrap();
        assert_eq!(
            snapshot.completed_tables,
            vec![TableName::new("public", "orders")]
        );
        assert_eq!(token.backfill, None);
        // A version-1 token with version-2 content was not written by pgcdc.
        let forged = v1.replace(r#""snapshot":"#, r#""backfill":{"tables":[]},"snapshot":"#);
        assert!(ResumeToken::from_json(&forged).is_err());
    }

    #[test]
    fn backfill_progress_round_trips() {
        let mut token = ResumeToken::new(identity(), Some(Position::new(Lsn(10), 2)));
        token.backfill = Some(BackfillProgress {
            tables: vec![TableBackfill {
                table: TableName::new("public", "orders"),
                done: false,
                removed: false,
                upto: Some(vec!["42".into(), "it's".into()]),
                chunks: 3,
                rows: 3000,
                windows: vec![BackfillWindow {
                    after: Some(vec!["7".into(), "a".into()]),
                    upto: Some(vec!["42".into(), "it's".into()]),
                    snapshot: "100:105:101,103".into(),
                    until: Lsn(0x1_0000_0000),
                }],
            }],
            unshown_xids: vec![4_294_967_000, 7],
        });
        let json = token.to_json();
        assert!(json.contains("\"version\":2"), "{json}");
        assert_eq!(ResumeToken::from_json(&json).unwrap(), token);
    }

    #[test]
    fn covers_positions_up_to_its_own() {
        let token = ResumeToken::new(identity(), Some(Position::new(Lsn(10), 2)));
        assert!(token.covers(Position::new(Lsn(10), 2)));
        assert!(token.covers(Position::new(Lsn(9), 99)));
        assert!(!token.covers(Position::new(Lsn(10), 3)));
        assert!(!ResumeToken::new(identity(), None).covers(Position::new(Lsn(0), 0)));
    }

    proptest! {
        #[test]
        fn serde_round_trip(
            sysid in any::<u64>(), timeline in any::<u32>(), db in "\\PC{0,12}", slot in "[a-z_0-9]{1,20}",
            pos in proptest::option::of(any::<(u64, u64)>()),
            end in proptest::option::of(any::<u64>()),
            snap in proptest::option::of((any::<u64>(), proptest::collection::vec(("[a-z]{1,5}", "[A-Za-z.\"]{1,6}"), 0..3))),
        ) {
            let mut token = ResumeToken::new(
                SourceIdentity { system_identifier: sysid.to_string(), timeline, database: db, slot },
                pos.map(|(l, o)| Position::new(Lsn(l), o)),
            );
            token.commit_end = end.map(Lsn);
            token.snapshot = snap.map(|(cp, tables)| SnapshotProgress {
                consistent_point: Lsn(cp),
                completed_tables: tables.into_iter().map(|(s, n)| TableName::new(s, n)).collect(),
            });
            let json = token.to_json();
            prop_assert_eq!(ResumeToken::from_json(&json).unwrap(), token);
        }
    }
}
