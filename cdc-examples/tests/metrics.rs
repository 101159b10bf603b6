//! `pgcdc stream --metrics-addr`: `/metrics` scraped during a real stream (snapshot, then
//! writes, then a walsender kill) and read with an independent parser (the
//! `prometheus-parse` crate); `/health` while Postgres is stopped and after it restarts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use cdc_testkit::{ADMIN_USER, Cluster};
use prometheus_parse::{Sample, Scrape, Value};
use support::*;

const WAIT: Duration = Duration::from_secs(60);

/// `GET path` → (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))
        .unwrap_or_else(|e| panic!("the scrape does not parse: {e}\n{body}"))
        .samples
}

fn value(sample: &Sample) -> f64 {
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("unexpected sample {other:?}"),
    }
}

/// The sample `name` whose labels include `labels`.
fn find(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.metric == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(k).is_some_and(|x| x == *v))
        })
        .map(value)
}

fn wait_for(addr: SocketAddr, what: &str, condition: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + WAIT;
    loop {
        let samples = scrape(addr);
        if condition(&samples) {
            return samples;
        }
        if Instant::now() > deadline {
            let (_, body) = get(addr, "/metrics");
            panic!("{what} never held; last scrape:\n{body}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_health(addr: SocketAddr, status: u16, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let (got, body) = get(addr, "/health");
        if got == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/health stayed {got} ({body}), expected {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_real_stream_and_health_follows_the_server() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text, x float8);
             INSERT INTO public.t SELECT g, 'row' FROM generate_series(1, 1000) g;
             CREATE TABLE public.log (line text);
             ALTER TABLE public.log REPLICA IDENTITY FULL;
             INSERT INTO public.log SELECT 'line ' || g FROM generate_series(1, 50) g;",
        )
        .await
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let args = [
        "stream",
        "--uri",
        &uri,
        "--publication",
        "pub",
        "--table",
        "public.t",
        "--table",
        "public.log",
        "--create-publication",
        "--create-slot",
        "--out-dir",
        out.path().to_str().unwrap(),
        "--metrics-addr",
        "127.0.0.1:0",
        "--health-grace",
        "1s",
        "--on-non-finite",
        "null",
    ];
    let (mut child, _stdout, stderr) = spawn_collecting(pgcdc(args));
    let addr = metrics_address(&stderr);

    // The snapshot: every row counted once, the table done.
    let table = [("table", "public.t")];
    let samples = wait_for(addr, "snapshot complete", |s| {
        find(s, "pgcdc_snapshot_complete", &[]) == Some(1.0)
            && find(s, "pgcdc_snapshot_table_done", &table) == Some(1.0)
    });
    assert_eq!(
        find(
            &samples,
            "pgcdc_changes_total",
            &[("table", "public.t"), ("op", "snapshot")]
        ),
        Some(1000.0)
    );
    assert_eq!(
        find(&samples, "pgcdc_snapshot_rows_total", &table),
        Some(1000.0)
    );
    // The table without a key was copied whole, and the metrics and the progress lines
    // say so and why.
    assert_eq!(
        find(
            &samples,
            "pgcdc_snapshot_table_read_whole",
            &[("table", "public.log"), ("reason", "no primary key")]
        ),
        Some(1.0)
    );
    assert_eq!(
        find(&samples, "pgcdc_snapshot_chunk_rereads_total", &[]),
        Some(0.0)
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !stderr
        .snapshot()
        .iter()
        .any(|l| l.contains("copying public.log whole while the stream waits (no primary key"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            stderr.snapshot()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for family in [
        "pgcdc_received_bytes_total",
        "pgcdc_received_messages_total",
        "pgcdc_received_lsn",
        "pgcdc_written_lsn",
        "pgcdc_durable_lsn",
        "pgcdc_confirmed_lsn",
        "pgcdc_lag_bytes",
        "pgcdc_lag_seconds",
        "pgcdc_checkpoints_total",
        "pgcdc_batches_in_flight",
        "pgcdc_prepared_transactions_waiting",
    ] {
        assert!(find(&samples, family, &[]).is_some(), "no {family}");
    }
    assert_eq!(
        find(&samples, "pgcdc_state", &[("state", "streaming")]),
        Some(1.0)
    );
    assert_eq!(get(addr, "/health").0, 200);

    // Writes: the counters move by exactly what was written.
    cluster
        .execute(
            "INSERT INTO public.t SELECT g, 'new' FROM generate_series(1001, 1250) g;
             UPDATE public.t SET v = 'changed' WHERE id <= 100;
             DELETE FROM public.t WHERE id > 1200;",
        )
        .await
        .unwrap();
    let changes = |s: &[Sample], op: &str| {
        find(
            s,
            "pgcdc_changes_total",
            &[("table", "public.t"), ("op", op)],
        )
    };
    let samples = wait_for(addr, "the writes counted", |s| {
        changes(s, "insert") == Some(250.0)
            && changes(s, "update") == Some(100.0)
            && changes(s, "delete") == Some(50.0)
    });
    assert!(find(&samples, "pgcdc_received_messages_total", &[]).unwrap() >= 400.0);
    // Idle: lag back to 0, durable and confirmed caught up with what was written.
    let samples = wait_for(addr, "lag back to 0", |s| {
        find(s, "pgcdc_lag_seconds", &[]) == Some(0.0)
            && find(s, "pgcdc_durable_lsn", &[]) >= find(s, "pgcdc_written_lsn", &[])
    });
    assert!(find(&samples, "pgcdc_checkpoints_total", &[]).unwrap() >= 1.0);
    assert!(
        samples
            .iter()
            .any(|s| s.metric == "pgcdc_slot_retained_wal_bytes"
                && s.labels.get("wal_status") == Some("reserved")),
        "no slot retention"
    );

    // A walsender kill: counted as a reconnect, then streaming again.
    assert!(cluster.terminate_walsenders().await.unwrap() >= 1);
    wait_for(addr, "the reconnect counted", |s| {
        s.iter()
            .filter(|x| x.metric == "pgcdc_reconnects_total")
            .map(value)
            .sum::<f64>()
            >= 1.0
            && find(s, "pgcdc_state", &[("state", "streaming")]) == Some(1.0)
    });
    cluster
        .execute("INSERT INTO public.t VALUES (5000, 'after the kill')")
        .await
        .unwrap();
    wait_for(addr, "the insert after the kill", |s| {
        changes(s, "insert") == Some(251.0)
    });
    // A value the output policy handles, counted by column.
    cluster
        .execute("INSERT INTO public.t VALUES (5001, 'nan', 'NaN')")
        .await
        .unwrap();
    wait_for(addr, "the policy application counted", |s| {
        find(
            s,
            "pgcdc_policy_applications_total",
            &[
                ("table", "public.t"),
                ("column", "x"),
                ("case", "non_finite"),
                ("action", "null"),
            ],
        ) == Some(1.0)
            && changes(s, "insert") == Some(252.0)
    });
    assert_eq!(get(addr, "/health").0, 200);

    // Postgres stopped: unhealthy once reconnecting past the grace; healthy again after.
    cluster.stop().await.unwrap();
    let reason = wait_health(addr, 503, Duration::from_secs(20));
    assert!(reason.contains("reconnecting"), "{reason}");
    cluster.start().await.unwrap();
    wait_health(addr, 200, Duration::from_secs(60));

    signal(child.id(), libc::SIGINT);
    let status = wait_status(&mut child, WAIT);
    assert!(status.success(), "{status:?}: {:?}", stderr.snapshot());

    // Rerun: it resumes a stream whose snapshot is complete and copies nothing, so the
    // snapshot is complete from the start (an alert on the gauge must not fire on a
    // restart).
    let (mut child, _stdout, stderr) = spawn_collecting(pgcdc(args));
    let addr = metrics_address(&stderr);
    let samples = wait_for(addr, "streaming again", |s| {
        find(s, "pgcdc_state", &[("state", "streaming")]) == Some(1.0)
    });
    assert_eq!(find(&samples, "pgcdc_snapshot_complete", &[]), Some(1.0));
    assert_eq!(
        find(
            &samples,
            "pgcdc_changes_total",
            &[("table", "public.t"), ("op", "snapshot")]
        )
        .unwrap_or(0.0),
        0.0,
        "nothing copied again"
    );
    signal(child.id(), libc::SIGINT);
    let status = wait_status(&mut child, WAIT);
    assert!(status.success(), "{status:?}: {:?}", stderr.snapshot());
}

/// The address `pgcdc` printed for its metrics endpoint.
fn metrics_address(stderr: &Lines) -> SocketAddr {
    assert!(
        stderr.wait_for(WAIT, |lines| lines
            .iter()
            .any(|l| l.contains("metrics on http://"))),
        "no metrics address on stderr: {:?}",
        stderr.snapshot()
    );
    stderr
        .snapshot()
        .iter()
        .find_map(|l| {
            l.split("http://")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .map(str::to_owned)
        })
        .unwrap()
        .parse()
        .unwrap()
}
