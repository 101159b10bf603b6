//! The stream stays connected while its consumer does not read for longer than
//! `wal_sender_timeout` (2 s here): periodic status updates keep going while backpressure
//! holds the server back, and keepalives that request a reply are answered at once. And a
//! walsender frozen with SIGSTOP (silent, while its kernel still acknowledges our bytes)
//! is presumed dead within a bound, with a Transient error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use std::sync::Arc;
use std::time::Duration;

use cdc_core::Lsn;
use cdc_pgoutput::protocol::replication::ServerMessage;
use cdc_postgres::conn::{
    CreateSlotOptions, PgOutputOptions, ReplicationConnection, ReplicationStream, SnapshotAction,
    SourceConfig, StreamOptions,
};
use cdc_testkit::{Cluster, ClusterBuilder};
use conn_support::{SharedCluster, read_commits, uri, walsender_alive};

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    static CLUSTER: SharedCluster = SharedCluster::new();

    /// Three times the server's `wal_sender_timeout`.
    const PAUSE: Duration = Duration::from_secs(6);

    async fn cluster() -> Arc<Cluster> {
        CLUSTER
            .get(
                || {
                    ClusterBuilder::new()
                        .setting("wal_sender_timeout", "2s")
                        .user("cdc", "unused")
                },
                "CREATE TABLE public.big (id serial PRIMARY KEY, pad text);
                 CREATE PUBLICATION big_pub FOR TABLE public.big;
                 CREATE TABLE public.idle (id int PRIMARY KEY);
                 CREATE PUBLICATION idle_pub FOR TABLE public.idle;",
            )
            .await
    }

    async fn start(
        cluster: &Cluster,
        slot: &str,
        publication: &str,
        options: StreamOptions,
    ) -> (ReplicationStream, i32) {
        let config =
            SourceConfig::new(&uri(cluster, "cdc", None, "postgres", ""), publication).unwrap();
        let mut repl = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let created = repl
            .create_slot(
                slot,
                CreateSlotOptions {
                    snapshot: SnapshotAction::NoExport,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let pid = repl.backend_pid();
        let stream = repl
            .start_replication(
                slot,
                created.consistent_point,
                &PgOutputOptions::new([publication]),
                options,
            )
            .await
            .unwrap();
        (stream, pid)
    }

    #[tokio::test]
    async fn a_consumer_that_stops_reading_is_not_disconnected() {
        let cluster = cluster().await;
        let options = {
            let mut options = StreamOptions::default();
            options.channel_capacity = 1;
            options.read_buffer_size = 16 * 1024;
            options
        };
        let (mut stream, pid) = start(&cluster, "slow_slot", "big_pub", options).await;

        // About 20 MB of changes in 20 transactions: far more than the channel and the
        // socket buffers hold, so the server has to wait for us.
        const TRANSACTIONS: usize = 20;
        let admin = cluster.connect("postgres").await.unwrap();
        for _ in 0..TRANSACTIONS {
            admin
                .batch_execute("INSERT INTO public.big (pad) SELECT repeat('x', 2000) FROM generate_series(1, 500)")
                .await
                .unwrap();
        }
        let end: Lsn = cluster.current_wal_lsn().await.unwrap().parse().unwrap();

        let updates_before = stream.status_updates_sent();
        tokio::time::sleep(PAUSE).await;
        assert!(
            walsender_alive(&cluster, pid).await,
            "the server dropped a consumer that did not read"
        );
        assert!(
            stream.status_updates_sent() >= updates_before + 3,
            "status updates kept going while nobody read"
        );
        assert!(
            stream.received() < end,
            "the task stopped reading while the channel was full (backpressure)"
        );

        let (commits, _) = read_commits(&mut stream, TRANSACTIONS, Duration::from_secs(120)).await;
        assert_eq!(commits.len(), TRANSACTIONS);
        assert!(commits.windows(2).all(|w| w[0] < w[1]));
        assert!(walsender_alive(&cluster, pid).await);
        stream.set_flushed(*commits.last().unwrap());
        stream.close().await.unwrap();
        cluster
            .execute("SELECT pg_drop_replication_slot('slow_slot')")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn keepalives_that_request_a_reply_are_answered_at_once() {
        let cluster = cluster().await;
        // No timer worth the name: only the answers to the server's pings keep us connected.
        let options = {
            let mut options = StreamOptions::default();
            options.status_interval = Duration::from_secs(3600);
            options.follow_wal_sender_timeout = false;
            options
        };
        let (mut stream, pid) = start(&cluster, "idle_slot", "idle_pub", options).await;
        // The timer ticked once, at the start; every later update answers a ping.
        let updates_before = stream.status_updates_sent();
        tokio::time::sleep(PAUSE).await;
        assert!(
            walsender_alive(&cluster, pid).await,
            "the server dropped an idle consumer"
        );
        assert!(
            stream.status_updates_sent() >= updates_before + 2,
            "the server's pings were answered"
        );
        // What was queued meanwhile is keepalives only (coalesced; see the unit tests).
        while let Ok(message) =
            tokio::time::timeout(Duration::from_millis(200), stream.next_message()).await
        {
            assert!(matches!(
                message.unwrap(),
                Some(ServerMessage::PrimaryKeepalive(_))
            ));
        }
        stream.close().await.unwrap();
        cluster
            .execute("SELECT pg_drop_replication_slot('idle_slot')")
            .await
            .unwrap();
    }

    /// Stops a process with SIGSTOP; continues it when dropped (also when a test fails).
    struct Frozen(i32);

    impl Frozen {
        fn new(pid: i32) -> Frozen {
            // SAFETY: kill(2) has no memory effects; `pid` is a walsender of our own
            // throwaway cluster.
            assert_eq!(
                unsafe { libc::kill(pid, libc::SIGSTOP) },
                0,
                "SIGSTOP {pid}"
            );
            Frozen(pid)
        }
    }

    impl Drop for Frozen {
        fn drop(&mut self) {
            // SAFETY: as above.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }

    #[tokio::test]
    async fn a_frozen_walsender_is_presumed_dead_within_the_bound() {
        let cluster = cluster().await;
        // Raised to twice the server's 2 s: the stream gives up after 4 s of silence.
        let options = {
            let mut options = StreamOptions::default();
            options.receive_timeout = Some(Duration::from_secs(1));
            options
        };
        let (mut stream, pid) = start(&cluster, "frozen_slot", "idle_pub", options).await;
        let frozen = Frozen::new(pid);
        let started = std::time::Instant::now();
        let failed = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match stream.next_message().await {
                    Ok(Some(_)) => {}
                    Ok(None) => panic!("the stream ended cleanly"),
                    Err(e) => return e,
                }
            }
        })
        .await
        .expect("the stream noticed the frozen server");
        let elapsed = started.elapsed();
        drop(frozen);
        assert!(failed.is_transient(), "{failed}");
        assert!(failed.to_string().contains("presumed dead"), "{failed}");
        assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");
        drop(stream);
        // Continued, the walsender finds the connection closed and releases the slot.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while walsender_alive(&cluster, pid).await {
            assert!(
                std::time::Instant::now() < deadline,
                "walsender {pid} stays"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cluster
            .execute("SELECT pg_drop_replication_slot('frozen_slot')")
            .await
            .unwrap();
    }
}
