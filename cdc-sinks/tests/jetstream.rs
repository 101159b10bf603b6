//! The JetStream sink against real nats-server nodes: what a consumer reads back, resuming
//! after a crash without loss or duplicates, progress without messages, streams that are
//! not pgcdc's, and a lost node of a three-node cluster mid-stream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use cdc_core::{
    Acknowledger, ChangeEvent, ErrorKind, ReplicaIdentity, ResumeToken, SchemaRef, Sink, SinkBatch,
    Value,
};
use cdc_sinks::jetstream::{
    Grouping, JetStreamOptions, JetStreamSink, StreamSettings, SubjectTemplate, headers,
};
use cdc_sinks::testing::jetstream::{ReadMessage, read_stream};
use cdc_sinks::testing::{batch, begin, commit, insert, pos, table, text};
use cdc_testkit::NatsCluster;

fn orders() -> SchemaRef {
    table(
        "orders",
        &[("id", 20), ("note", 25)],
        &["id"],
        ReplicaIdentity::Default,
    )
}

/// A transaction committing at `lsn` inserting `ids`.
fn tx(lsn: u64, ids: std::ops::Range<i64>) -> Vec<ChangeEvent> {
    let t = orders();
    let mut events = vec![begin(lsn)];
    for (i, id) in ids.enumerate() {
        events.push(insert(
            pos(lsn, i as u64 + 1),
            &t,
            vec![Value::Int8(id), text(&format!("note {id}"))],
        ));
    }
    let n = events.len() as u64;
    events.push(commit(lsn, n));
    events
}

fn options(nats: &NatsCluster, stream: &str, replicas: usize) -> JetStreamOptions {
    let mut o = JetStreamOptions::new(
        nats.url().split(',').map(str::to_owned).collect(),
        stream,
        "test",
    );
    o.create_stream = Some({
        let mut options = StreamSettings::default();
        options.replicas = replicas;
        options
    });
    o.retry_for = Duration::from_secs(60);
    o
}

async fn open(options: JetStreamOptions) -> (JetStreamSink, Option<ResumeToken>) {
    let mut sink = JetStreamSink::new(options).unwrap();
    let (acks, _rx) = Acknowledger::channel();
    let token = sink.open(acks).await.unwrap();
    (sink, token)
}

async fn write(sink: &mut JetStreamSink, b: SinkBatch) -> ResumeToken {
    let token = b.resume_token.clone();
    sink.write(b).await.unwrap();
    token
}

/// The ids inserted by the messages, in stream order, asserting each message's
/// headers say what the payload holds and no event position appears twice.
fn inserted_ids(messages: &[ReadMessage]) -> Vec<i64> {
    let mut seen = HashSet::new();
    let mut ids = Vec::new();
    for m in messages {
        let key = (
            m.header(headers::SOURCE).unwrap().to_owned(),
            m.header(headers::POSITION).unwrap().to_owned(),
            m.header(headers::PART).unwrap_or("0").to_owned(),
        );
        assert!(seen.insert(key.clone()), "{key:?} appears twice");
        for record in m.records() {
            ids.push(record["insert"]["id"].as_i64().unwrap());
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_checkpoint_resumes_where_the_stream_ends() {
    let nats = NatsCluster::single().await.unwrap();
    let (mut sink, token) = open(options(&nats, "CDC", 1)).await;
    assert_eq!(token, None, "a new stream resumes from the start");
    let t1 = write(&mut sink, batch(1, tx(0x100, 0..3))).await;
    sink.checkpoint(&t1).await.unwrap();
    // Written, not checkpointed: the messages land (the server acknowledges them on its
    // own), then the process dies.
    let t2 = write(&mut sink, batch(2, tx(0x200, 3..5))).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while inserted_ids(&read_stream(&nats.url(), "CDC").await).len() < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the written messages never landed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(sink);

    let (mut sink, token) = open(options(&nats, "CDC", 1)).await;
    assert_eq!(token, Some(t2.clone()), "the last message's token resumes");
    // A source resuming from an older point replays; the sink skips what is there.
    let mut replay = tx(0x200, 3..5);
    replay.extend(tx(0x300, 5..6));
    let t3 = write(&mut sink, batch(3, replay)).await;
    sink.checkpoint(&t3).await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(sink.stats().skipped_events, 4);

    let messages = read_stream(&nats.url(), "CDC").await;
    assert_eq!(inserted_ids(&messages), (0..6).collect::<Vec<_>>());
    let last = messages.last().unwrap();
    assert_eq!(last.subject, "pgcdc.test.public.orders");
    assert_eq!(last.header(headers::TX_LAST), Some("true"));
    assert_eq!(last.header(headers::TOKEN), Some(t3.to_json().as_str()));
    assert_eq!(last.header(headers::COMMIT_LSN), Some("0/300"));
    assert_eq!(
        last.header(headers::NATS_EXPECTED_LAST_SEQUENCE),
        Some((last.sequence - 1).to_string().as_str())
    );
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.sequence, i as u64 + 1, "no gap in the stream");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_without_messages_is_kept_in_the_resume_entry() {
    let nats = NatsCluster::single().await.unwrap();
    let (mut sink, _) = open(options(&nats, "IDLE", 1)).await;
    let t1 = write(&mut sink, batch(1, tx(0x100, 0..2))).await;
    sink.checkpoint(&t1).await.unwrap();
    // A transaction with no rows for the sink: nothing to publish, but the position
    // moves on and must survive a restart.
    let t2 = write(&mut sink, batch(2, vec![begin(0x500), commit(0x500, 1)])).await;
    sink.checkpoint(&t2).await.unwrap();
    assert_eq!(sink.stats().resume_entries, 1);
    drop(sink);
    let (_, token) = open(options(&nats, "IDLE", 1)).await;
    assert_eq!(token, Some(t2));
    assert_eq!(read_stream(&nats.url(), "IDLE").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_grouping_puts_a_tables_run_in_one_message() {
    let nats = NatsCluster::single().await.unwrap();
    let mut o = options(&nats, "GROUPED", 1);
    o.grouping = Grouping::Transaction;
    let (mut sink, _) = open(o).await;
    let t1 = write(&mut sink, batch(1, tx(0x100, 0..50))).await;
    sink.checkpoint(&t1).await.unwrap();
    let messages = read_stream(&nats.url(), "GROUPED").await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].records().len(), 50);
    assert_eq!(messages[0].header(headers::LAST_POSITION), Some("0/100#50"));
    assert_eq!(inserted_ids(&messages), (0..50).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_are_missing_too_narrow_or_shared_are_refused() {
    let nats = NatsCluster::single().await.unwrap();
    let mut missing = options(&nats, "NOPE", 1);
    missing.create_stream = None;
    let mut sink = JetStreamSink::new(missing).unwrap();
    let e = sink.open(Acknowledger::channel().0).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("--create-stream"), "{e}");

    let client = async_nats::connect(nats.url()).await.unwrap();
    let context = async_nats::jetstream::new(client);
    context
        .create_stream(async_nats::jetstream::stream::Config {
            name: "NARROW".into(),
            subjects: vec!["pgcdc.test.public.orders".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut sink = JetStreamSink::new(options(&nats, "NARROW", 1)).unwrap();
    let e = sink.open(Acknowledger::channel().0).await.unwrap_err();
    assert!(e.to_string().contains("do not cover"), "{e}");

    // Someone else published into pgcdc's stream.
    let shared = || {
        let mut o = options(&nats, "SHARED", 1);
        o.subjects = SubjectTemplate::parse("shared.{database}.{schema}.{table}").unwrap();
        o
    };
    let (mut sink, _) = open(shared()).await;
    let t1 = write(&mut sink, batch(1, tx(0x100, 0..1))).await;
    sink.checkpoint(&t1).await.unwrap();
    drop(sink);
    context
        .publish("shared.test.public.orders", "{\"insert\":{}}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut sink = JetStreamSink::new(shared()).unwrap();
    let e = sink.open(Acknowledger::channel().0).await.unwrap_err();
    assert!(e.to_string().contains("pgcdc's messages only"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_stream_in_a_three_node_cluster_loses_and_duplicates_nothing() {
    let nats = NatsCluster::start(3).await.unwrap();
    let (mut sink, _) = open(options(&nats, "R3", 3)).await;
    let client = async_nats::connect(nats.url().split(',').collect::<Vec<_>>())
        .await
        .unwrap();
    let context = async_nats::jetstream::new(client);
    let mut next_id = 0;
    let mut killed = None;
    for round in 0..60u64 {
        if round == 20 {
            // Kill the stream's leader: the sink must repair its chain on the others.
            let mut stream = context.get_stream("R3").await.unwrap();
            let leader = stream
                .info()
                .await
                .unwrap()
                .cluster
                .clone()
                .and_then(|c| c.leader)
                .unwrap();
            let index: usize = leader.trim_start_matches('n').parse::<usize>().unwrap() - 1;
            eprintln!("killing the stream leader {leader}");
            nats.kill9(index).unwrap();
            killed = Some(index);
        }
        if round == 45
            && let Some(index) = killed
        {
            nats.restart(index).await.unwrap();
        }
        let lsn = 0x1000 + round * 0x100;
        let t = write(&mut sink, batch(round + 1, tx(lsn, next_id..next_id + 40))).await;
        next_id += 40;
        if round % 5 == 4 {
            sink.checkpoint(&t).await.unwrap();
        }
    }
    eprintln!("stats: {:?}", sink.stats());
    let messages = read_stream(&nats.url(), "R3").await;
    assert_eq!(inserted_ids(&messages), (0..next_id).collect::<Vec<_>>());
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.sequence, i as u64 + 1, "no gap in the stream");
    }
}
