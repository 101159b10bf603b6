//! Sans-IO: what the stream and the resume entry say at open — the token to resume from,
//! the events already in the stream, and where the sequence chain goes on.

use std::str::FromStr;

use cdc_core::{Error, Lsn, Position, ResumeToken};
use serde::{Deserialize, Serialize};

use super::headers as h;
use super::plan_debezium::DebeziumPlanState;

/// What recovery needs of one stored message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StoredMessage {
    pub(crate) sequence: u64,
    /// The last event it covers.
    pub(crate) last: Position,
    /// Which of the last event's records it ends with (`Pgcdc-Part`; 0 for a message of
    /// several events, whose last record is always its event's first).
    pub(crate) last_part: u32,
    /// The token it carries (the last message of a written batch).
    pub(crate) token: Option<ResumeToken>,
    /// With the token, the Debezium encoder's state there (`Pgcdc-Debezium-State`).
    pub(crate) debezium: Option<DebeziumPlanState>,
    /// Sequence of the latest earlier message with a token (0: none).
    pub(crate) token_sequence: u64,
}

impl StoredMessage {
    /// Reads a message's pgcdc headers; `header` looks one up by name. A message without
    /// them is not pgcdc's: an error, since the stream must be pgcdc's alone.
    pub(crate) fn parse<'a>(
        stream: &str,
        sequence: u64,
        header: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<StoredMessage, Error> {
        let foreign = |why: String| {
            Error::sink(format!(
                "message {sequence} of JetStream stream {stream:?} {why}: the stream must hold pgcdc's messages only (nothing else may publish to it); give pgcdc a stream of its own"
            ))
        };
        if header(h::SOURCE).is_none() {
            return Err(foreign("has no Pgcdc-Source header".into()));
        }
        let position = |name: &str| -> Result<Option<Position>, Error> {
            header(name)
                .map(|v| {
                    parse_position(v)
                        .ok_or_else(|| foreign(format!("has {name} {v:?}, not LSN#ordinal")))
                })
                .transpose()
        };
        let first =
            position(h::POSITION)?.ok_or_else(|| foreign("has no Pgcdc-Position header".into()))?;
        let last_position = position(h::LAST_POSITION)?;
        let last = last_position.unwrap_or(first);
        let last_part = match (last_position, header(h::PART)) {
            (Some(_), _) | (None, None) => 0,
            (None, Some(v)) => v
                .parse()
                .map_err(|_| foreign(format!("has Pgcdc-Part {v:?}, not a number")))?,
        };
        let debezium = header(h::DEBEZIUM_STATE)
            .map(|v| {
                serde_json::from_str(v).map_err(|e| {
                    foreign(format!(
                        "has a Pgcdc-Debezium-State that does not parse ({e})"
                    ))
                })
            })
            .transpose()?;
        let token = header(h::TOKEN)
            .map(|v| {
                ResumeToken::from_json(v)
                    .map_err(|e| foreign(format!("has a Pgcdc-Token that does not parse ({e})")))
            })
            .transpose()?;
        let token_sequence = match header(h::TOKEN_SEQ) {
            None => 0,
            Some(v) => v
                .parse()
                .map_err(|_| foreign(format!("has Pgcdc-Token-Seq {v:?}, not a number")))?,
        };
        Ok(StoredMessage {
            sequence,
            last,
            last_part,
            token,
            debezium,
            token_sequence,
        })
    }

    /// The sequence of the latest message with a token, up to and including this one.
    fn latest_token_sequence(&self) -> u64 {
        if self.token.is_some() {
            self.sequence
        } else {
            self.token_sequence
        }
    }
}

/// The resume entry: the token of the last checkpoint, and the stream's last sequence
/// when it was taken (every message up to it is covered by the token).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResumeEntry {
    pub(crate) stream_sequence: u64,
    pub(crate) token: ResumeToken,
    /// The Debezium encoder's state at the token (Debezium records only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) debezium: Option<DebeziumPlanState>,
}

/// Where the sink goes on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Recovered {
    /// The token the source resumes from.
    pub(crate) token: Option<ResumeToken>,
    /// Events at or before this are in the stream (skipped on replay).
    pub(crate) applied_through: Option<Position>,
    /// Of the event at `applied_through`, the records up to this one are in the stream
    /// (`None`: all of them). Debezium records only: an event may be several messages.
    pub(crate) applied_part: Option<u32>,
    /// The Debezium encoder's state at `token` (Debezium records only).
    pub(crate) debezium: Option<DebeziumPlanState>,
    /// Sequence of the latest message with a token (for `Pgcdc-Token-Seq`).
    pub(crate) token_sequence: u64,
}

/// What the stream says.
#[derive(Clone, Debug)]
pub(crate) struct StreamState {
    /// The stream's last sequence (0: nothing was ever stored).
    pub(crate) last_sequence: u64,
    /// Its last message, `None` when it is gone (expired or deleted).
    pub(crate) last: Option<StoredMessage>,
    /// The message at the last one's `Pgcdc-Token-Seq`, when the last has no token itself
    /// (`None` when there is none, or it is gone).
    pub(crate) token_message: Option<StoredMessage>,
}

/// Decides the resume point from the stream and the resume entry.
pub(crate) fn recover(
    stream: &str,
    state: &StreamState,
    entry: Option<ResumeEntry>,
) -> Result<Recovered, Error> {
    let entry_sequence = entry.as_ref().map(|e| e.stream_sequence);
    if let Some(seq) = entry_sequence
        && seq > state.last_sequence
    {
        return Err(Error::sink(format!(
            "pgcdc's resume entry for JetStream stream {stream:?} covers messages up to sequence {seq}, but the stream's last sequence is {}: the stream was purged or recreated after pgcdc published to it. To start over from a new snapshot, delete the resume entry (nats kv del <resume bucket> {stream}) and the replication slot",
            state.last_sequence
        )));
    }
    let Some(last) = &state.last else {
        if state.last_sequence == 0 || entry_sequence == Some(state.last_sequence) {
            // Nothing stored yet, or everything stored is covered by the entry.
            return Ok(Recovered {
                applied_through: entry.as_ref().and_then(|e| e.token.position),
                applied_part: None,
                debezium: entry.as_ref().and_then(|e| e.debezium.clone()),
                token: entry.map(|e| e.token),
                token_sequence: 0,
            });
        }
        return Err(Error::sink(format!(
            "the last message ({}) of JetStream stream {stream:?} is gone (expired by max_age or deleted) and pgcdc's resume entry does not cover it, so pgcdc cannot tell which changes the stream holds; keep messages longer than pgcdc may be stopped (max_age), or start over (delete the stream, the resume entry and the replication slot)",
            state.last_sequence
        )));
    };
    let token_sequence = last.latest_token_sequence();
    let stream_token = match (&last.token, &state.token_message) {
        (Some(token), _) => Some((token.clone(), last.debezium.clone())),
        (None, Some(m)) if m.sequence == token_sequence => {
            m.token.clone().map(|t| (t, m.debezium.clone()))
        }
        _ => None,
    };
    if token_sequence > 0 && stream_token.is_none() && entry_sequence < Some(token_sequence) {
        return Err(Error::sink(format!(
            "message {token_sequence} of JetStream stream {stream:?}, which holds pgcdc's resume token, is gone (expired or deleted) and the resume entry is older; keep messages longer (max_age), or start over (delete the stream, the resume entry and the replication slot)"
        )));
    }
    // The entry is written after every message up to its sequence was acknowledged, with
    // the token of the checkpoint: when it is at least as recent as the stream's latest
    // token, it is the newer of the two (it also holds progress without messages).
    let (token, debezium) = match entry {
        Some(e) if Some(e.stream_sequence) >= Some(token_sequence) => (Some(e.token), e.debezium),
        _ => match stream_token {
            Some((token, debezium)) => (Some(token), debezium),
            None => (None, None),
        },
    };
    let (applied_through, applied_part) = match token.as_ref().and_then(|t| t.position) {
        Some(p) if p > last.last => (Some(p), None),
        _ => (Some(last.last), Some(last.last_part)),
    };
    Ok(Recovered {
        token,
        applied_through,
        applied_part,
        debezium,
        token_sequence,
    })
}

/// Parses `LSN#ordinal` (as [`Position`] displays).
pub(crate) fn parse_position(text: &str) -> Option<Position> {
    let (lsn, ordinal) = text.split_once('#')?;
    Some(Position::new(
        Lsn::from_str(lsn).ok()?,
        ordinal.parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_core::SourceIdentity;
    use std::collections::HashMap;

    fn token(lsn: u64) -> ResumeToken {
        ResumeToken::new(
            SourceIdentity {
                system_identifier: "1".into(),
                timeline: 1,
                database: "db".into(),
                slot: "s".into(),
            },
            Some(Position::new(Lsn(lsn), 1)),
        )
    }

    fn stored(
        sequence: u64,
        lsn: u64,
        token_lsn: Option<u64>,
        token_sequence: u64,
    ) -> StoredMessage {
        StoredMessage {
            sequence,
            last: Position::new(Lsn(lsn), 1),
            last_part: 0,
            token: token_lsn.map(token),
            debezium: None,
            token_sequence,
        }
    }

    #[test]
    fn parses_the_headers_the_planner_writes() {
        let t = token(0x500);
        let headers: HashMap<&str, String> = [
            (h::SOURCE, "1/db/s".to_owned()),
            (h::POSITION, "0/400#2".to_owned()),
            (h::LAST_POSITION, "0/500#1".to_owned()),
            (h::TOKEN, t.to_json()),
            (h::TOKEN_SEQ, "7".to_owned()),
        ]
        .into_iter()
        .collect();
        let m = StoredMessage::parse("S", 9, |k| headers.get(k).map(String::as_str)).unwrap();
        assert_eq!(
            m,
            StoredMessage {
                sequence: 9,
                last: Position::new(Lsn(0x500), 1),
                last_part: 0,
                token: Some(t),
                debezium: None,
                token_sequence: 7,
            }
        );
        let foreign = StoredMessage::parse("S", 3, |_| None).unwrap_err();
        assert!(
            foreign.to_string().contains("pgcdc's messages only"),
            "{foreign}"
        );
        let bad = StoredMessage::parse("S", 3, |k| match k {
            h::SOURCE => Some("x"),
            h::POSITION => Some("0/1"),
            _ => None,
        })
        .unwrap_err();
        assert!(bad.to_string().contains("LSN#ordinal"), "{bad}");
    }

    #[test]
    fn an_empty_stream_resumes_from_the_entry_or_the_start() {
        let empty = StreamState {
            last_sequence: 0,
            last: None,
            token_message: None,
        };
        assert_eq!(recover("S", &empty, None).unwrap().token, None);
        let purged = recover(
            "S",
            &empty,
            Some(ResumeEntry {
                stream_sequence: 4,
                token: token(9),
                debezium: None,
            }),
        )
        .unwrap_err();
        assert!(
            purged.to_string().contains("purged or recreated"),
            "{purged}"
        );
    }

    #[test]
    fn the_newer_of_stream_token_and_entry_wins_and_replay_skips_to_the_last_message() {
        // Messages 1..=5; 3 carries a token; 4 and 5 were published after it (their batch
        // never got its token message in: a crash).
        let state = StreamState {
            last_sequence: 5,
            last: Some(stored(5, 0x90, None, 3)),
            token_message: Some(stored(3, 0x50, Some(0x50), 1)),
        };
        let r = recover(
            "S",
            &state,
            Some(ResumeEntry {
                stream_sequence: 2,
                token: token(0x20),
                debezium: None,
            }),
        )
        .unwrap();
        assert_eq!(r.token, Some(token(0x50)));
        assert_eq!(r.applied_through, Some(Position::new(Lsn(0x90), 1)));
        assert_eq!(r.token_sequence, 3);
        // An idle checkpoint after all five: the entry is newer.
        let r = recover(
            "S",
            &state,
            Some(ResumeEntry {
                stream_sequence: 5,
                token: token(0x200),
                debezium: None,
            }),
        )
        .unwrap();
        assert_eq!(r.token, Some(token(0x200)));
        assert_eq!(r.applied_through, Some(Position::new(Lsn(0x200), 1)));
    }

    #[test]
    fn lost_messages_are_errors_not_guesses() {
        let gone_last = StreamState {
            last_sequence: 5,
            last: None,
            token_message: None,
        };
        let e = recover(
            "S",
            &gone_last,
            Some(ResumeEntry {
                stream_sequence: 3,
                token: token(1),
                debezium: None,
            }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("is gone"), "{e}");
        // Covered by the entry: fine.
        let r = recover(
            "S",
            &gone_last,
            Some(ResumeEntry {
                stream_sequence: 5,
                token: token(7),
                debezium: None,
            }),
        )
        .unwrap();
        assert_eq!(r.token, Some(token(7)));
        let gone_token = StreamState {
            last_sequence: 5,
            last: Some(stored(5, 0x90, None, 3)),
            token_message: None,
        };
        assert!(recover("S", &gone_token, None).is_err());
    }

    #[test]
    fn positions_parse_as_they_display() {
        let p = Position::new(Lsn(0x16_B374_D848), 42);
        assert_eq!(parse_position(&p.to_string()), Some(p));
        for bad in ["", "0/1", "#1", "0/1#", "0/1#x", "x#1"] {
            assert_eq!(parse_position(bad), None, "{bad:?}");
        }
    }
}
