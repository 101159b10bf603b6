//! Every supported PostgreSQL major version starts and decodes logically (binaries of
//! versions the distribution lacks come from the kit's download cache).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use cdc_testkit::{ClusterBuilder, PG_VERSIONS_ENV, PgBinaries};

/// `PGCDC_PG_VERSIONS` if set, else every supported major version.
fn versions() -> Vec<u32> {
    if std::env::var(PG_VERSIONS_ENV).is_ok_and(|v| !v.trim().is_empty()) {
        cdc_testkit::versions_under_test()
    } else {
        (14..=18).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_version_starts_and_decodes_logically() {
    for version in versions() {
        let started = Instant::now();
        let cluster = ClusterBuilder::new().major(version).build().await.unwrap();
        assert_eq!(cluster.bins().major_version().unwrap(), version);
        let num = cluster.server_version_num().await.unwrap();
        assert_eq!(num / 10_000, version, "server_version_num {num}");

        let client = cluster.connect("postgres").await.unwrap();
        let wal_level: String = client
            .query_one("SHOW wal_level", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(wal_level, "logical");
        client
            .batch_execute(
                "CREATE TABLE t (id int PRIMARY KEY, v text);
                 CREATE PUBLICATION p FOR TABLE t;",
            )
            .await
            .unwrap();
        client
            .batch_execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
            .await
            .unwrap();
        client
            .batch_execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
            .await
            .unwrap();
        let changes: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, \
                 'proto_version', '1', 'publication_names', 'p')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        // BEGIN, RELATION, two INSERTs, COMMIT.
        assert!(changes >= 5, "PostgreSQL {version}: {changes} messages");

        // Stop, start again (a clean restart works with these binaries too).
        drop(client);
        cluster.restart().await.unwrap();
        let n: i64 = cluster
            .connect("postgres")
            .await
            .unwrap()
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 2);
        eprintln!(
            "PostgreSQL {version} ({num}) from {}: {:?}",
            cluster.bins().dir().display(),
            started.elapsed()
        );
    }
}

#[test]
fn for_major_of_the_distribution_version_is_the_distribution() {
    let dist = PgBinaries::find().unwrap();
    let major = dist.major_version().unwrap();
    assert_eq!(PgBinaries::for_major(major).unwrap(), dist);
}
