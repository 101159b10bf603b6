//! Timeline switches (a standby promoted, a server restored to a point in time): the
//! server's timeline history, from `TIMELINE_HISTORY`, and whether a resume token taken on
//! an earlier timeline lies entirely in the history the server shares with it.

use cdc_core::{Error, Lsn, Result, SourceIdentity};

/// One line of a timeline history file: timeline `parent` ended at `switchpoint`, where
/// its child began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineSwitch {
    /// The timeline that ended.
    pub parent: u32,
    /// The WAL position where it ended (and the next one began).
    pub switchpoint: Lsn,
}

/// Parses a timeline history file (`parentTLI<TAB>switchpoint<TAB>reason` per line;
/// `#` comments and blank lines ignored).
pub fn parse_history(content: &str) -> Result<Vec<TimelineSwitch>> {
    let mut out = Vec::new();
    for line in content.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let parent = fields.next().and_then(|f| f.parse::<u32>().ok());
        let switchpoint = fields.next().and_then(|f| f.parse::<Lsn>().ok());
        match (parent, switchpoint) {
            (Some(parent), Some(switchpoint)) => out.push(TimelineSwitch {
                parent,
                switchpoint,
            }),
            _ => {
                return Err(Error::protocol(format!(
                    "malformed timeline history line {line:?}"
                )));
            }
        }
    }
    Ok(out)
}

/// Whether a token taken on `token.timeline`, covering changes up to `covered` (its
/// `commit_end`, and the commit LSN of the last event it covers), may resume on a server
/// now on `server_timeline` with `history`: only if the token's timeline is an ancestor
/// and everything the token covers lies before the point where it ended — the WAL both
/// servers share. Otherwise a ResyncRequired error that says so.
pub fn judge_timeline_switch(
    token: &SourceIdentity,
    covered: Lsn,
    server_timeline: u32,
    history: &[TimelineSwitch],
) -> Result<()> {
    let Some(switch) = history.iter().find(|s| s.parent == token.timeline) else {
        return Err(Error::resync_required(format!(
            "the resume token was taken on timeline {}, which is not in the history of the server's timeline {server_timeline}: \
             the server descends from another branch; start over with a new snapshot",
            token.timeline
        )));
    };
    if covered > switch.switchpoint {
        return Err(Error::resync_required(format!(
            "the saved position {covered} is not part of this server's history: it is beyond the point where timeline {} ends ({}) in the history of the server's timeline {server_timeline}; \
             the old primary had changes the promoted server never received (the sink may hold some of them); \
             start over with a new snapshot (with --out-dir, into an empty directory). \
             To survive a failover without this, have the primary wait for the standby (synchronized_standby_slots, PostgreSQL 17+)",
            token.timeline, switch.switchpoint
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(timeline: u32) -> SourceIdentity {
        SourceIdentity {
            system_identifier: "7".into(),
            timeline,
            database: "db".into(),
            slot: "s".into(),
        }
    }

    #[test]
    fn history_files_parse_and_malformed_lines_are_errors() {
        let history =
            parse_history("1\t0/3000158\tno recovery target specified\n\n# c\n2\t0/5000000\tx\n")
                .unwrap();
        assert_eq!(
            history,
            [
                TimelineSwitch {
                    parent: 1,
                    switchpoint: Lsn(0x300_0158)
                },
                TimelineSwitch {
                    parent: 2,
                    switchpoint: Lsn(0x500_0000)
                }
            ]
        );
        assert!(parse_history("x\t0/1\n").is_err());
        assert!(parse_history("1\tnot-an-lsn\n").is_err());
        assert!(parse_history("1\n").is_err());
    }

    #[test]
    fn a_token_inside_the_shared_history_resumes_one_beyond_it_does_not() {
        let history = parse_history("1\t0/3000158\treason\n2\t0/5000000\treason\n").unwrap();
        judge_timeline_switch(&identity(1), Lsn(0x300_0158), 3, &history).unwrap();
        judge_timeline_switch(&identity(2), Lsn(0x400_0000), 3, &history).unwrap();
        let beyond = judge_timeline_switch(&identity(1), Lsn(0x300_0159), 3, &history).unwrap_err();
        assert_eq!(beyond.kind(), cdc_core::ErrorKind::ResyncRequired);
        assert!(
            beyond
                .to_string()
                .contains("beyond the point where timeline 1 ends")
        );
        let unknown = judge_timeline_switch(&identity(9), Lsn(1), 3, &history).unwrap_err();
        assert!(unknown.to_string().contains("not in the history"));
    }
}
