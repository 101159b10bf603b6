//! The Debezium planner: a record's value per message on its table's subject, records of
//! one event numbered, tombstones left out, a chunk one message, and — the point — after
//! a crash after any message, what is published is what an uninterrupted run publishes.

use cdc_core::{
    ChangeEvent, ErrorKind, EventKind, Lsn, ReplicaIdentity, SchemaRef, SinkBatch, SnapshotMarker,
    TableName, Value,
};

use super::headers as h;
use super::plan::OutMessage;
use super::plan_debezium::DebeziumPlanner;
use super::planners::Planners;
use super::recovery::{ResumeEntry, StoredMessage, StreamState, recover};
use super::subject::{DEFAULT_SUBJECT_TEMPLATE, SubjectTemplate};
use crate::debezium::DebeziumOptions;
use crate::testing::{
    batch, begin, commit, delete, insert, old_key, pos, table, text, token, update,
};

fn fixed_clock() -> i64 {
    1_700_000_000_000_000
}

fn planner(transactions: bool) -> DebeziumPlanner {
    let mut options = DebeziumOptions::new("srv", "test");
    options.transaction_metadata = transactions;
    DebeziumPlanner::new(
        SubjectTemplate::parse(DEFAULT_SUBJECT_TEMPLATE).unwrap(),
        options,
        1 << 20,
    )
    .with_clock(fixed_clock)
}

fn header<'m>(m: &'m OutMessage, name: &str) -> Option<&'m str> {
    m.headers
        .iter()
        .rev()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

fn orders() -> SchemaRef {
    table(
        "orders",
        &[("id", 20), ("note", 25)],
        &["id"],
        ReplicaIdentity::Default,
    )
}

fn items() -> SchemaRef {
    table(
        "items",
        &[("id", 20), ("note", 25)],
        &["id"],
        ReplicaIdentity::Default,
    )
}

fn row(id: i64) -> Vec<Value> {
    vec![Value::Int8(id), text("x")]
}

fn marker(lsn: u64, ordinal: u64, m: SnapshotMarker) -> ChangeEvent {
    ChangeEvent {
        lsn: Lsn::ZERO,
        position: pos(lsn, ordinal),
        kind: EventKind::Snapshot(m),
    }
}

fn truncate(lsn: u64, ordinal: u64, tables: Vec<SchemaRef>) -> ChangeEvent {
    ChangeEvent {
        lsn: Lsn(lsn - 4),
        position: pos(lsn, ordinal),
        kind: EventKind::Truncate {
            tables,
            cascade: false,
            restart_identity: false,
        },
    }
}

fn values(m: &OutMessage) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_slice(&m.payload)
        .into_iter::<serde_json::Value>()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_record_value_per_message_numbered_within_its_event_without_tombstones() {
    let (o, i) = (orders(), items());
    let mut p = planner(false);
    let events = vec![
        begin(100),
        insert(pos(100, 1), &o, row(1)),
        // A key change: a delete, its tombstone (not published) and a create.
        update(
            pos(100, 2),
            &o,
            old_key(vec![Value::Int8(1), Value::Null]),
            row(2),
        ),
        delete(pos(100, 3), &o, old_key(vec![Value::Int8(2), Value::Null])),
        truncate(100, 4, vec![o.clone(), i.clone()]),
        commit(100, 5),
    ];
    let tok = token(Some(pos(100, 5)));
    let out = p.plan(&events, &tok).unwrap();
    let ops: Vec<(String, String, Option<&str>)> = out
        .iter()
        .map(|m| {
            let v = &values(m)[0];
            (
                m.subject.clone(),
                v["op"].as_str().unwrap().to_owned(),
                header(m, h::PART),
            )
        })
        .collect();
    let o_subject = "pgcdc.test.public.orders".to_owned();
    let i_subject = "pgcdc.test.public.items".to_owned();
    assert_eq!(
        ops,
        [
            (o_subject.clone(), "c".into(), None),
            (o_subject.clone(), "d".into(), None),
            (o_subject.clone(), "c".into(), Some("2")),
            (o_subject.clone(), "d".into(), None),
            (o_subject, "t".into(), None),
            (i_subject, "t".into(), Some("1")),
        ]
    );
    // The payload is the value alone: the envelope, as Debezium Server publishes it.
    let first = &values(&out[0])[0];
    assert_eq!(first["after"]["id"], 1);
    assert_eq!(first["source"]["table"], "orders");
    assert!(first.get("key").is_none() && first.get("destination").is_none());
    assert_eq!(header(&out[0], h::ORIGIN), Some("stream"));
    assert_eq!(header(&out[0], h::XID), Some("1"));
    assert_eq!(header(&out[5], h::TX_LAST), Some("true"));
    assert_eq!(header(&out[5], h::TOKEN), Some(tok.to_json().as_str()));
    assert!(header(&out[5], h::DEBEZIUM_STATE).is_some());
    assert_eq!(header(&out[4], h::TOKEN), None);
    let ids: std::collections::HashSet<_> = out.iter().map(|m| header(m, h::NATS_MSG_ID)).collect();
    assert_eq!(ids.len(), out.len(), "every message has an id of its own");
}

#[test]
fn transaction_metadata_goes_to_the_subject_of_name_dot_transaction() {
    let o = orders();
    let mut p = planner(true);
    let events = vec![begin(100), insert(pos(100, 1), &o, row(1)), commit(100, 2)];
    let out = p.plan(&events, &token(Some(pos(100, 2)))).unwrap();
    let statuses: Vec<_> = out
        .iter()
        .map(|m| (m.subject.as_str(), values(m)[0]["status"].clone()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("pgcdc.test.srv.transaction", "BEGIN".into()),
            ("pgcdc.test.public.orders", serde_json::Value::Null),
            ("pgcdc.test.srv.transaction", "END".into()),
        ]
    );
    assert_eq!(header(&out[2], h::TX_LAST), Some("true"));
    // A table that would share that subject is refused.
    let clash = table(
        "transaction",
        &[("id", 20)],
        &["id"],
        ReplicaIdentity::Default,
    );
    let clash = std::sync::Arc::new(cdc_core::TableSchema {
        name: TableName::new("srv", "transaction"),
        ..(*clash).clone()
    });
    let mut p = planner(true);
    let events = vec![
        begin(200),
        insert(pos(200, 1), &clash, vec![Value::Int8(1)]),
        commit(200, 2),
    ];
    let err = p.plan(&events, &token(Some(pos(200, 2)))).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
}

/// A consistent snapshot of three rows, then an online-style backfill of `items` in two
/// chunks, then transactions (a key change, a delete, a TRUNCATE of two tables) in
/// batches of two events: batches end inside transactions; each chunk ends its batch,
/// the table's and the snapshot's completion going with the last.
fn history() -> Vec<SinkBatch> {
    let (o, i) = (orders(), items());
    let orders_name = o.name.clone();
    let items_name = i.name.clone();
    let mut batches: Vec<Vec<ChangeEvent>> = vec![
        vec![
            marker(50, 0, SnapshotMarker::Started),
            marker(50, 1, SnapshotMarker::TableStarted(orders_name.clone())),
            insert(pos(50, 2), &o, row(10)),
        ],
        vec![
            insert(pos(50, 3), &o, row(11)),
            insert(pos(50, 4), &o, row(12)),
            marker(
                50,
                5,
                SnapshotMarker::TableCompleted {
                    table: orders_name,
                    rows: 3,
                },
            ),
        ],
    ];
    let mut lsn = 100;
    let mut stream = Vec::new();
    for n in 0..6u64 {
        stream.push(begin(lsn));
        stream.push(insert(pos(lsn, 1), &o, row(20 + n as i64)));
        stream.push(update(
            pos(lsn, 2),
            &o,
            old_key(vec![Value::Int8(20 + n as i64), Value::Null]),
            row(40 + n as i64),
        ));
        stream.push(delete(
            pos(lsn, 3),
            &o,
            old_key(vec![Value::Int8(40 + n as i64), Value::Null]),
        ));
        if n == 3 {
            stream.push(truncate(lsn, 4, vec![o.clone(), i.clone()]));
        }
        stream.push(commit(lsn, 5));
        lsn += 100;
        if n == 1 || n == 4 {
            // A chunk of `items`, merged between transactions.
            let chunk = if n == 1 { 0 } else { 1 };
            let mut c = vec![marker(
                lsn,
                0,
                SnapshotMarker::ChunkStarted {
                    table: items_name.clone(),
                    chunk,
                },
            )];
            for r in 0..3u64 {
                c.push(insert(pos(lsn, 1 + r), &i, row((chunk * 10 + r) as i64)));
            }
            c.push(marker(
                lsn,
                4,
                SnapshotMarker::ChunkCompleted {
                    table: items_name.clone(),
                    chunk,
                    rows: 3,
                },
            ));
            if chunk == 1 {
                c.push(marker(
                    lsn,
                    5,
                    SnapshotMarker::TableCompleted {
                        table: items_name.clone(),
                        rows: 6,
                    },
                ));
                c.push(marker(
                    lsn,
                    6,
                    SnapshotMarker::Completed {
                        consistent_point: Lsn(lsn),
                    },
                ));
            }
            for pair in stream.chunks(2) {
                batches.push(pair.to_vec());
            }
            stream.clear();
            batches.push(c);
            lsn += 100;
        }
    }
    for pair in stream.chunks(2) {
        batches.push(pair.to_vec());
    }
    batches
        .into_iter()
        .enumerate()
        .map(|(n, events)| batch(n as u64, events))
        .collect()
}

fn run(
    p: &mut Planners,
    batches: &[SinkBatch],
    from: Option<&cdc_core::ResumeToken>,
) -> Vec<OutMessage> {
    let mut out = Vec::new();
    for b in batches {
        if from.is_some_and(|t| b.batch.last_position().is_some_and(|p| t.covers(p))) {
            continue;
        }
        out.extend(p.plan(&b.batch.events, &b.resume_token).unwrap());
    }
    out
}

/// What the stream says after `published` (sequence = index + 1), as the sink reads it.
fn stream_state(published: &[OutMessage]) -> StreamState {
    let stored = |n: usize| {
        let m = &published[n];
        let token_seq = published[..n]
            .iter()
            .rposition(|m| header(m, h::TOKEN).is_some())
            .map_or(0, |i| i as u64 + 1)
            .to_string();
        StoredMessage::parse("S", n as u64 + 1, |k| {
            if k == h::TOKEN_SEQ {
                Some(token_seq.as_str())
            } else {
                header(m, k)
            }
        })
        .unwrap()
    };
    let last = published.len().checked_sub(1).map(stored);
    let token_message = published
        .iter()
        .rposition(|m| header(m, h::TOKEN).is_some())
        .map(stored);
    StreamState {
        last_sequence: published.len() as u64,
        last,
        token_message,
    }
}

#[test]
fn after_a_crash_after_any_message_the_stream_holds_what_an_uninterrupted_run_publishes() {
    for transactions in [false, true] {
        let batches = history();
        let reference = run(
            &mut Planners::Debezium(Box::new(planner(transactions))),
            &batches,
            None,
        );
        let chunks: Vec<&OutMessage> = reference
            .iter()
            .filter(|m| header(m, h::ORIGIN) == Some("backfill"))
            .collect();
        assert_eq!(chunks.len(), 2);
        for chunk in &chunks {
            let rows = values(chunk);
            assert_eq!(rows.len(), 3, "a chunk's rows are one message");
            assert!(rows.iter().all(|r| r["op"] == "r"));
        }
        let labels: Vec<_> = reference
            .iter()
            .flat_map(values)
            .filter(|v| v["op"] == "r")
            .map(|v| v["source"]["snapshot"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            labels,
            [
                "first",
                "true",
                "last_in_data_collection",
                "first_in_data_collection",
                "true",
                "true",
                "true",
                "true",
                "last"
            ]
        );
        assert!(reference.iter().all(|m| !m.payload.is_empty()));
        for cut in 0..=reference.len() {
            let published = &reference[..cut];
            let recovered = recover("S", &stream_state(published), None).unwrap();
            let mut p = Planners::Debezium(Box::new(planner(transactions)));
            p.resume("S", &recovered).unwrap();
            let rest = run(&mut p, &batches, recovered.token.as_ref());
            let again: Vec<_> = published.iter().chain(&rest).collect();
            assert_eq!(again.len(), reference.len(), "crash after message {cut}");
            for (n, (a, b)) in again.iter().zip(&reference).enumerate() {
                assert_eq!(
                    (&a.subject, &a.payload, &a.headers),
                    (&b.subject, &b.payload, &b.headers),
                    "crash after message {cut}, message {n}"
                );
            }
        }
    }
}

#[test]
fn the_resume_entry_carries_the_state_of_a_checkpoint_without_messages() {
    let batches = history();
    let mut p = Planners::Debezium(Box::new(planner(true)));
    let reference = run(&mut p, &batches, None);
    // Stop after the batch ending inside the first transaction; a checkpoint of it
    // publishes nothing more, the entry keeps the token and the state.
    let mut p = Planners::Debezium(Box::new(planner(true)));
    let cut = 3;
    let published = run(&mut p, &batches[..cut], None);
    let entry = ResumeEntry {
        stream_sequence: published.len() as u64,
        token: batches[cut - 1].resume_token.clone(),
        debezium: p.state(),
    };
    let recovered = recover("S", &stream_state(&published), Some(entry)).unwrap();
    let mut p = Planners::Debezium(Box::new(planner(true)));
    p.resume("S", &recovered).unwrap();
    let rest = run(&mut p, &batches, recovered.token.as_ref());
    let again: Vec<_> = published.iter().chain(&rest).map(|m| &m.payload).collect();
    let expected: Vec<_> = reference.iter().map(|m| &m.payload).collect();
    assert_eq!(again, expected);
}

#[test]
fn a_stream_keeps_the_format_it_was_written_in() {
    let batches = history();
    let published = run(
        &mut Planners::Debezium(Box::new(planner(false))),
        &batches[..2],
        None,
    );
    let recovered = recover("S", &stream_state(&published), None).unwrap();
    let mut feldera = Planners::Feldera(Box::new(super::plan::Planner::new(
        SubjectTemplate::default(),
        super::plan::Grouping::Event,
        crate::feldera::EncoderOptions::default(),
        crate::feldera::PolicyLog::default(),
        1 << 20,
        None,
    )));
    let err = feldera.resume("S", &recovered).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("holds Debezium records"), "{err}");
    let published = run(&mut feldera, &batches[..2], None);
    let recovered = recover("S", &stream_state(&published), None).unwrap();
    let err = Planners::Debezium(Box::new(planner(false)))
        .resume("S", &recovered)
        .unwrap_err();
    assert!(err.to_string().contains("holds Feldera JSON"), "{err}");
}
