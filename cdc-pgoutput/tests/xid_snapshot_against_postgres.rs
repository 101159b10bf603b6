//! Postgres as the oracle for the online snapshot's transaction snapshots: a real
//! `pg_current_snapshot()` taken among concurrent transactions must parse to what the
//! server says its parts are, judge visibility exactly as the server's
//! `pg_visible_in_snapshot` does, and widen the 32-bit xid of each transaction (what
//! pgoutput sends) back to its full `pg_current_xact_id()`, also with a non-zero epoch.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use cdc_pgoutput::backfill::xid_snapshot::XidSnapshot;
use cdc_testkit::Cluster;
use cdc_testkit::tokio_postgres::Client;

const EPOCH: u64 = 1 << 32;

/// A transaction's ids as the server reports them: the full id and the 32-bit xid (what
/// pgoutput's Begin message carries), computed by the server both ways.
async fn xact_ids(client: &Client) -> (u64, u32) {
    let row = client
        .query_one(
            "SELECT pg_current_xact_id()::text, pg_current_xact_id()::xid::text, \
             (txid_current() % 4294967296)::text",
            &[],
        )
        .await
        .unwrap();
    let full: u64 = row.get::<_, String>(0).parse().unwrap();
    let xid32: u32 = row.get::<_, String>(1).parse().unwrap();
    let legacy: u32 = row.get::<_, String>(2).parse().unwrap();
    assert_eq!(xid32, legacy);
    assert_eq!(u64::from(xid32), full % EPOCH);
    (full, xid32)
}

/// A transaction left open on its own connection, with an xid assigned.
struct OpenXact {
    client: Client,
    full: u64,
    xid32: u32,
}

impl OpenXact {
    async fn begin(cluster: &Cluster) -> OpenXact {
        let client = cluster.connect("postgres").await.unwrap();
        client.batch_execute("BEGIN").await.unwrap();
        let (full, xid32) = xact_ids(&client).await;
        OpenXact {
            client,
            full,
            xid32,
        }
    }

    async fn end(&self, how: &str) {
        self.client.batch_execute(how).await.unwrap();
    }
}

async fn current_snapshot(client: &Client) -> XidSnapshot {
    let text: String = client
        .query_one("SELECT pg_current_snapshot()::text", &[])
        .await
        .unwrap()
        .get(0);
    XidSnapshot::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The server reads the snapshot back to the same text and the same parts.
async fn check_parts_like_postgres(client: &Client, snap: &XidSnapshot) {
    let text = snap.to_text();
    let row = client
        .query_one(
            "SELECT s::text, pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text, \
             ARRAY(SELECT x::text FROM pg_snapshot_xip(s) AS x) \
             FROM (SELECT $1::text::pg_snapshot AS s) q",
            &[&text],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), text);
    assert_eq!(row.get::<_, String>(1), snap.xmin().to_string());
    assert_eq!(row.get::<_, String>(2), snap.xmax().to_string());
    let xip: Vec<u64> = row
        .get::<_, Vec<String>>(3)
        .iter()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(xip, snap.in_progress(), "{text}");
}

/// `is_visible` agrees with `pg_visible_in_snapshot` for every id from `xmin - 5` to
/// `xmax + 5` and for `extra`.
async fn check_visibility_like_postgres(client: &Client, snap: &XidSnapshot, extra: &[u64]) {
    let mut xids: Vec<u64> = (snap.xmin().saturating_sub(5)..=snap.xmax() + 5).collect();
    xids.extend_from_slice(extra);
    let list: Vec<String> = xids.iter().map(u64::to_string).collect();
    let rows = client
        .query(
            "SELECT x, pg_visible_in_snapshot(x::xid8, $2::text::pg_snapshot) \
             FROM unnest($1::text[]) AS x",
            &[&list, &snap.to_text()],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), xids.len());
    for row in rows {
        let xid: u64 = row.get::<_, String>(0).parse().unwrap();
        let visible: bool = row.get(1);
        assert_eq!(
            snap.is_visible(xid),
            visible,
            "xid {xid} in snapshot {snap}: Postgres says visible = {visible}"
        );
    }
}

/// Concurrent transactions around a snapshot: running ones (some committed or rolled back
/// after it), committed ones, and one started after it. Checks the parts, the visibility
/// of every id near the snapshot, and that each transaction's 32-bit xid widens to its
/// full id. Returns the full ids seen, to check the epoch.
async fn snapshot_among_concurrent_transactions(cluster: &Cluster) -> Vec<u64> {
    let observer = cluster.connect("postgres").await.unwrap();
    let committed_late = OpenXact::begin(cluster).await;
    let committed_early = OpenXact::begin(cluster).await;
    let rolled_back_late = OpenXact::begin(cluster).await;
    let still_open = OpenXact::begin(cluster).await;
    committed_early.end("COMMIT").await;
    // An autocommit statement that takes an xid: its own committed transaction.
    let (autocommit_full, autocommit_xid32) = xact_ids(&observer).await;

    let snap = current_snapshot(&observer).await;

    committed_late.end("COMMIT").await;
    rolled_back_late.end("ROLLBACK").await;
    let started_after = OpenXact::begin(cluster).await;
    started_after.end("COMMIT").await;

    // What each transaction looked like to the snapshot. (Other backends, e.g. an
    // autovacuum ANALYZE, may hold xids of their own, so the lists are not exact.)
    for running in [&committed_late, &rolled_back_late, &still_open] {
        assert!(snap.in_progress().contains(&running.full), "{snap}");
        assert!(!snap.is_visible(running.full));
        assert!(!snap.is_visible_xid32(running.xid32));
    }
    assert!(snap.xmin() <= committed_late.full);
    assert!(!snap.in_progress().contains(&committed_early.full));
    assert!(snap.is_visible(committed_early.full));
    assert!(snap.is_visible_xid32(committed_early.xid32));
    assert!(snap.is_visible(autocommit_full));
    assert!(snap.is_visible_xid32(autocommit_xid32));
    assert!(started_after.full >= snap.xmax(), "{snap}");
    assert!(!snap.is_visible(started_after.full));
    assert!(!snap.is_visible_xid32(started_after.xid32));

    let all = [
        &committed_late,
        &committed_early,
        &rolled_back_late,
        &still_open,
        &started_after,
    ];
    for x in all {
        assert_eq!(snap.widen(x.xid32), x.full, "{snap}");
    }
    assert_eq!(snap.widen(autocommit_xid32), autocommit_full);

    let mut fulls: Vec<u64> = all.iter().map(|x| x.full).collect();
    fulls.push(autocommit_full);
    check_parts_like_postgres(&observer, &snap).await;
    check_visibility_like_postgres(&observer, &snap, &fulls).await;

    // A second snapshot, after the changes: only `still_open` runs on.
    let later = current_snapshot(&observer).await;
    assert!(later.in_progress().contains(&still_open.full));
    assert!(later.is_visible(committed_late.full));
    assert!(later.is_visible(started_after.full));
    check_parts_like_postgres(&observer, &later).await;
    check_visibility_like_postgres(&observer, &later, &fulls).await;
    for x in all {
        assert_eq!(later.widen(x.xid32), x.full);
    }
    still_open.end("ROLLBACK").await;
    fulls
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_visibility_and_widening_match_postgres() {
    let cluster = Cluster::new().await.unwrap();
    let fulls = snapshot_among_concurrent_transactions(&cluster).await;
    assert!(
        fulls.iter().all(|&f| f < EPOCH),
        "a fresh cluster is in epoch 0"
    );
}

/// `pg_resetwal -e 1` on the stopped cluster moves the server to xid epoch 1 (its 32-bit
/// xids stay where they were, so nothing else changes): full ids are then above 2^32 and
/// `widen` must add the epoch. Skipped when the binaries have no `pg_resetwal` (the kit's
/// downloaded packages do not).
#[tokio::test(flavor = "multi_thread")]
async fn widening_with_a_nonzero_epoch() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;

    let cluster = Cluster::new().await.unwrap();
    let resetwal = cluster.bins().program("pg_resetwal");
    if !resetwal.is_file() {
        eprintln!("skipped: no {}", resetwal.display());
        return;
    }
    cluster.stop().await.unwrap();
    // pg_resetwal refuses to run as root; run it as the data directory's owner (the user
    // the kit runs the server as).
    let owner = std::fs::metadata(cluster.data_dir()).unwrap();
    let output = std::process::Command::new(&resetwal)
        .args(["-e", "1", "-D"])
        .arg(cluster.data_dir())
        .uid(owner.uid())
        .gid(owner.gid())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "pg_resetwal: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    cluster.start().await.unwrap();

    let fulls = snapshot_among_concurrent_transactions(&cluster).await;
    assert!(fulls.iter().all(|&f| f / EPOCH == 1), "{fulls:?}");
}

/// Every text this parser accepts, Postgres reads as the same snapshot; every text Postgres
/// rejects, this parser rejects. The parser is stricter only where documented.
#[tokio::test(flavor = "multi_thread")]
async fn parser_is_postgres_input_function_or_stricter() {
    let cluster = Cluster::new().await.unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let inputs = [
        "10:20:10,14,15",
        "748:748:",
        "3:4:3",
        "010:020:015",
        "4294967297:4294967300:4294967298",
        "18446744073709551614:18446744073709551615:18446744073709551614",
        "10:20:14,",
        "10:20:14,14",
        " 10:20:",
        "10: 20:",
        "+10:20:",
        "-1:20:",
        "20:10:",
        "0:10:",
        "0:0:",
        "10:4294967296:",
        "4294967296:4294967300:",
        "10:20:9",
        "10:20:20",
        "10:20:15,14",
        "10:20:,14",
        "10:20:14 ",
        "a:b:",
        "10:20",
        "10:20:30:",
        "",
        "18446744073709551616:18446744073709551617:",
    ];
    let mut stricter = BTreeMap::new();
    for input in inputs {
        let ours = XidSnapshot::parse(input);
        let theirs = client
            .query_one("SELECT $1::text::pg_snapshot::text", &[&input])
            .await
            .map(|row| row.get::<_, String>(0));
        match (&ours, theirs) {
            (Ok(s), Ok(t)) => assert_eq!(s.to_text(), t, "{input:?}"),
            (Ok(s), Err(e)) => panic!("{input:?}: accepted as {s}, Postgres says {e}"),
            (Err(_), Ok(t)) => {
                stricter.insert(input, t);
            }
            (Err(_), Err(_)) => {}
        }
    }
    // Postgres's input function skips leading white space, takes a sign, a trailing comma
    // and duplicates, and saturates numbers beyond 64 bits; it never prints such text.
    let expected: BTreeMap<&str, String> = [
        ("10:20:14,", "10:20:14"),
        ("10:20:14,14", "10:20:14"),
        (" 10:20:", "10:20:"),
        ("10: 20:", "10:20:"),
        ("+10:20:", "10:20:"),
        (
            "18446744073709551616:18446744073709551617:",
            "18446744073709551615:18446744073709551615:",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_owned()))
    .collect();
    assert_eq!(stricter, expected);
}
