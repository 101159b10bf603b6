//! Physical standbys made without pg_basebackup: replay, read-only queries, promotion.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use cdc_testkit::{Cluster, ClusterBuilder, Error, PG_VERSIONS_ENV, PgBinaries};

/// `PGCDC_PG_VERSIONS` if set; else 14 (the old backup functions), the distribution's
/// version and 17.
fn versions() -> Vec<u32> {
    if std::env::var(PG_VERSIONS_ENV).is_ok_and(|v| !v.trim().is_empty()) {
        return cdc_testkit::versions_under_test();
    }
    let dist = PgBinaries::find().unwrap().major_version().unwrap();
    let mut v = vec![14, dist, 17];
    v.sort_unstable();
    v.dedup();
    v
}

async fn count(cluster: &Cluster) -> i64 {
    cluster
        .connect("postgres")
        .await
        .unwrap()
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_replays_serves_reads_and_promotes() {
    for version in versions() {
        let primary = ClusterBuilder::new().major(version).build().await.unwrap();
        primary
            .execute("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')")
            .await
            .unwrap();

        let standby = primary
            .standby_builder()
            .slot("standby_slot")
            .build()
            .await
            .unwrap();
        assert_ne!(standby.port(), primary.port());
        assert_ne!(standby.data_dir(), primary.data_dir());
        assert!(
            standby.is_in_recovery().await.unwrap(),
            "PostgreSQL {version}"
        );
        assert!(!primary.is_in_recovery().await.unwrap());
        assert_eq!(
            standby.server_version_num().await.unwrap() / 10_000,
            version
        );
        let feedback: String = standby
            .connect("postgres")
            .await
            .unwrap()
            .query_one("SHOW hot_standby_feedback", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(feedback, "on");

        // Written after the copy: arrives by streaming.
        primary
            .execute("INSERT INTO t SELECT g, 'x' FROM generate_series(2, 100) g")
            .await
            .unwrap();
        standby.wait_for_replay(&primary).await.unwrap();
        assert_eq!(count(&standby).await, 100, "PostgreSQL {version}");

        // Streaming through the slot.
        let client = primary.connect("postgres").await.unwrap();
        let active: bool = client
            .query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = 'standby_slot'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(active);
        let streaming: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(streaming, 1);

        // Read-only until promoted.
        let err = standby
            .execute("INSERT INTO t VALUES (1000, 'no')")
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
        );

        standby.promote().await.unwrap();
        assert!(!standby.is_in_recovery().await.unwrap());
        standby
            .execute("INSERT INTO t VALUES (1000, 'promoted')")
            .await
            .unwrap();
        assert_eq!(count(&standby).await, 101);
        assert_eq!(count(&primary).await, 100);
        // Promoting twice is a clear error.
        assert!(matches!(standby.promote().await, Err(Error::Config(_))));
        // The promoted server survives a restart as a primary.
        standby.restart().await.unwrap();
        assert!(!standby.is_in_recovery().await.unwrap());
        assert_eq!(count(&standby).await, 101);
    }
}

#[tokio::test]
async fn standby_of_a_tls_primary_survives_crash_and_primary_restart() {
    let primary = ClusterBuilder::new()
        .tls()
        .user("alice", "secret")
        .setting("wal_sender_timeout", "5s")
        .build()
        .await
        .unwrap();
    primary
        .execute("CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let standby = primary.standby().await.unwrap();
    assert!(standby.tls().is_some());
    // The primary's roles and settings came along.
    standby
        .connect_as("postgres", "alice", Some("secret"))
        .await
        .unwrap();
    let timeout: String = standby
        .connect("postgres")
        .await
        .unwrap()
        .query_one("SHOW wal_sender_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(timeout, "5s");

    standby.kill9().await.unwrap();
    primary.execute("INSERT INTO t VALUES (2)").await.unwrap();
    standby.start().await.unwrap();
    standby.wait_for_replay(&primary).await.unwrap();
    assert_eq!(count(&standby).await, 2);

    // The standby reconnects after the primary restarts.
    primary.restart().await.unwrap();
    primary.execute("INSERT INTO t VALUES (3)").await.unwrap();
    standby.wait_for_replay(&primary).await.unwrap();
    assert_eq!(count(&standby).await, 3);
    assert!(standby.is_in_recovery().await.unwrap());

    // wait_for_replay on a cluster that never was a standby.
    assert!(matches!(
        primary.wait_for_replay(&primary).await,
        Err(Error::Config(_))
    ));
}
