//! Cluster lifecycle, replication basics and fault injection, against real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use cdc_testkit::{ADMIN_USER, Cluster, ClusterBuilder, Error};

#[tokio::test]
async fn starts_and_answers_queries() {
    let cluster = Cluster::new().await.unwrap();
    assert_ne!(cluster.port(), 0);
    assert!(cluster.socket_dir().exists());
    assert!(cluster.data_dir().join("PG_VERSION").exists());

    let client = cluster.connect("postgres").await.unwrap();
    let row = client.query_one("SELECT 1 + 1", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
    let wal_level: String = client
        .query_one("SHOW wal_level", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(wal_level, "logical");
    let fsync: String = client.query_one("SHOW fsync", &[]).await.unwrap().get(0);
    assert_eq!(fsync, "on");

    let version = cluster.server_version_num().await.unwrap();
    assert!(version >= 100_000, "{version}");

    // The connection helpers produce strings tokio-postgres accepts, over TCP and socket.
    for conninfo in [
        cluster.connection_string("postgres", ADMIN_USER, None),
        cluster.socket_connection_string("postgres", ADMIN_USER, None),
        cluster.admin_connection_string("postgres"),
        cluster.uri("postgres", ADMIN_USER, None),
    ] {
        let config: tokio_postgres::Config = conninfo.parse().unwrap();
        let client = common::connect_plain(&config).await.unwrap();
        let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1, "{conninfo}");
    }

    cluster.create_database("other db").await.unwrap();
    cluster
        .execute_in(
            "other db",
            "CREATE TABLE t (x int); INSERT INTO t VALUES (7)",
        )
        .await
        .unwrap();
    let client = cluster.connect("other db").await.unwrap();
    let x: i32 = client
        .query_one("SELECT x FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(x, 7);
}

#[tokio::test]
async fn settings_apply_and_survive_restart() {
    let cluster = ClusterBuilder::new()
        .setting("wal_sender_timeout", "2s")
        .setting("max_slot_wal_keep_size", "64MB")
        .setting("logical_decoding_work_mem", "64kB")
        .setting("application_name", "it's \\ quoted")
        .build()
        .await
        .unwrap();
    let show = |name: &'static str| {
        let cluster = &cluster;
        async move {
            let client = cluster.connect("postgres").await.unwrap();
            client
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert_eq!(show("wal_sender_timeout").await, "2s");
    assert_eq!(show("max_slot_wal_keep_size").await, "64MB");
    assert_eq!(show("logical_decoding_work_mem").await, "64kB");

    let port = cluster.port();
    let pid = cluster.postmaster_pid().unwrap();
    cluster.restart().await.unwrap();
    assert_eq!(cluster.port(), port);
    assert_ne!(cluster.postmaster_pid().unwrap(), pid);
    assert!(!common::alive(pid));
    assert_eq!(show("wal_sender_timeout").await, "2s");
}

#[tokio::test]
async fn invalid_setting_name_is_rejected() {
    let err = ClusterBuilder::new()
        .setting("bad name; fsync", "off")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

#[tokio::test]
async fn missing_binaries_name_what_to_install() {
    let err = ClusterBuilder::new()
        .bin_dir("/nonexistent/pg/bin")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BinariesNotFound { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("apt-get install postgresql"), "{message}");
    assert!(message.contains("/nonexistent/pg/bin"), "{message}");
}

#[tokio::test]
async fn pgoutput_slot_sees_published_insert() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text);
             CREATE PUBLICATION pub FOR TABLE items;",
        )
        .await
        .unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    client
        .execute(
            "SELECT * FROM pg_create_logical_replication_slot('s', 'pgoutput')",
            &[],
        )
        .await
        .unwrap();
    client
        .execute("INSERT INTO items VALUES (1, 'hello-testkit')", &[])
        .await
        .unwrap();

    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, \
             'proto_version', '1', 'publication_names', 'pub')",
            &[],
        )
        .await
        .unwrap();
    let messages: Vec<Vec<u8>> = rows.iter().map(|r| r.get(0)).collect();
    let kinds: Vec<u8> = messages.iter().map(|m| m[0]).collect();
    assert_eq!(kinds, b"BRIC", "message kinds");
    let insert = &messages[2];
    let needle = b"hello-testkit";
    assert!(insert.windows(needle.len()).any(|w| w == needle));

    // Peeking does not consume: the same changes are there again.
    let again = client
        .query(
            "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, \
             'proto_version', '1', 'publication_names', 'pub')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(again[0].get::<_, i64>(0), 4);
}

#[tokio::test]
async fn kill9_then_start_recovers_committed_data() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE t (id int PRIMARY KEY);
             INSERT INTO t SELECT generate_series(1, 1000);",
        )
        .await
        .unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let pid = cluster.postmaster_pid().unwrap();
    let children = common::children_of(pid);
    assert!(!children.is_empty());

    cluster.kill9().await.unwrap();
    assert!(!common::alive(pid), "postmaster survived kill9");
    for c in &children {
        assert!(!common::alive(*c), "child {c} survived kill9");
    }
    assert!(cluster.postmaster_pid().is_none());
    assert!(!cluster.is_running().await);
    assert!(client.query_one("SELECT 1", &[]).await.is_err());
    assert!(matches!(cluster.kill9().await, Err(Error::NotRunning)));

    cluster.start().await.unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1000);
    let log = cluster.log_contents();
    assert!(
        log.contains("automatic recovery in progress"),
        "no crash recovery in the log:\n{log}"
    );
}

#[tokio::test]
async fn stop_and_start() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute("CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    cluster.stop().await.unwrap();
    assert!(!cluster.is_running().await);
    assert!(cluster.connect("postgres").await.is_err());
    cluster.stop().await.unwrap(); // no-op

    cluster.start().await.unwrap();
    cluster.start().await.unwrap(); // no-op
    let client = cluster.connect("postgres").await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    assert!(
        !cluster
            .log_contents()
            .contains("automatic recovery in progress")
    );
}

#[tokio::test]
async fn terminate_walsenders_disconnects_replication_client() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE t (id int PRIMARY KEY);
             CREATE PUBLICATION pub FOR TABLE t;",
        )
        .await
        .unwrap();
    // Not in the same implicit transaction as the writes above.
    cluster
        .execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        .await
        .unwrap();
    assert_eq!(cluster.terminate_walsenders().await.unwrap(), 0);

    let mut recv = std::process::Command::new(cluster.bins().program("pg_recvlogical"))
        .arg("--dbname")
        .arg(cluster.admin_connection_string("postgres"))
        .args([
            "--slot",
            "s",
            "--start",
            "--no-loop",
            "--file",
            "/dev/null",
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=pub",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();

    let client = cluster.connect("postgres").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "walsender never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    assert_eq!(cluster.terminate_walsenders().await.unwrap(), 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = recv.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            recv.kill().unwrap();
            panic!("pg_recvlogical did not notice the terminated walsender");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!status.success());
}

#[tokio::test]
async fn two_clusters_run_in_parallel() {
    let (a, b) = tokio::join!(Cluster::new(), Cluster::new());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.port(), b.port());
    assert_ne!(a.data_dir(), b.data_dir());
    assert_ne!(
        a.system_identifier().await.unwrap(),
        b.system_identifier().await.unwrap()
    );

    a.execute("CREATE TABLE only_in_a (x int)").await.unwrap();
    let ca = a.connect("postgres").await.unwrap();
    let cb = b.connect("postgres").await.unwrap();
    let (ra, rb) = tokio::join!(
        ca.query_one("SELECT to_regclass('only_in_a') IS NOT NULL", &[]),
        cb.query_one("SELECT to_regclass('only_in_a') IS NOT NULL", &[]),
    );
    assert!(ra.unwrap().get::<_, bool>(0));
    assert!(!rb.unwrap().get::<_, bool>(0));

    // Faults in one do not touch the other.
    a.kill9().await.unwrap();
    let one: i32 = cb.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

#[tokio::test]
async fn drop_stops_server_and_removes_directory() {
    let cluster = Cluster::new().await.unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let pid = cluster.postmaster_pid().unwrap();
    let children = common::children_of(pid);
    let base = cluster.data_dir().parent().unwrap().to_path_buf();
    assert!(base.exists());

    drop(cluster);
    assert!(!base.exists(), "{} still exists", base.display());
    assert!(!common::alive(pid), "postmaster {pid} still running");
    for c in children {
        assert!(!common::alive(c), "server process {c} still running");
    }
    assert!(client.query_one("SELECT 1", &[]).await.is_err());
}

#[tokio::test]
async fn drop_after_kill9_cleans_up() {
    let cluster = Cluster::new().await.unwrap();
    let base = cluster.data_dir().parent().unwrap().to_path_buf();
    cluster.kill9().await.unwrap();
    drop(cluster);
    assert!(!base.exists());
}

#[test]
fn drop_during_panic_cleans_up() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let cluster = Cluster::new().await.unwrap();
            *base.lock().unwrap() = Some((
                cluster.data_dir().parent().unwrap().to_path_buf(),
                cluster.postmaster_pid().unwrap(),
            ));
            panic!("deliberate test panic");
        })
    }));
    assert!(result.is_err());
    let (base, pid) = base.lock().unwrap().take().unwrap();
    assert!(!base.exists());
    assert!(!common::alive(pid));
}
