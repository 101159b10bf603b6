//! A promotion as the source sees it: the promoted server's `TIMELINE_HISTORY`; a resume
//! token whose ordinary slot did not survive the promotion, refused with that said; a token
//! beyond the point where its timeline ended, refused as not part of the new history. And
//! failover slots: created as such on 17, refused with the reason on 15.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{ErrorKind, Lsn, Source};
use cdc_postgres::conn::timeline::parse_history;
use cdc_postgres::conn::{ConnectionConfig, ReplicationConnection};
use cdc_postgres::source::PgSource;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_is_judged_against_the_timeline_history() {
    let primary = Cluster::new().await.unwrap();
    primary
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t SELECT g, 'before' FROM generate_series(1, 50) g;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let standby = primary.standby().await.unwrap();

    // A stream on the primary, with a durable token on timeline 1.
    let handle = MemoryHandle::default();
    let mut running = spawn(options(&primary, &["public.t"]), &handle);
    primary
        .execute("INSERT INTO public.t SELECT g, 'streamed' FROM generate_series(51, 80) g")
        .await
        .unwrap();
    running
        .wait_for_equal(&primary, &handle, &["public.t"], Duration::from_secs(60))
        .await;
    running.stop().await;
    let token = handle.durable_token().unwrap();
    assert_eq!(token.source.timeline, 1);

    standby.wait_for_replay(&primary).await.unwrap();
    standby.promote().await.unwrap();

    // The promoted server's history: timeline 1 ended at or after what the token covers.
    let config = ConnectionConfig::parse(&standby.uri("postgres", "postgres", None)).unwrap();
    let mut repl = ReplicationConnection::connect(&config).await.unwrap();
    let system = repl.identify_system().await.unwrap();
    assert_eq!(system.timeline, 2);
    let history = parse_history(&repl.timeline_history(2).await.unwrap()).unwrap();
    repl.close().await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].parent, 1);
    let covered = token.commit_end.unwrap();
    assert!(
        history[0].switchpoint >= covered,
        "{history:?} vs {covered}"
    );

    // The ordinary slot did not come along, and the error says why.
    let mut source = PgSource::new(options(&standby, &["public.t"]));
    let err = source.start(Some(&token)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("promoted") && text.contains("failover slot"),
        "{text}"
    );

    // Beyond the point where timeline 1 ended: refused as not part of the history (a slot
    // of the name is made on the promoted server, as a synced failover slot would be, so
    // the start gets as far as the timeline check).
    let slot = options(&standby, &["public.t"]).config.slot_name();
    standby
        .execute(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
        ))
        .await
        .unwrap();
    let mut ahead = token.clone();
    ahead.commit_end = Some(Lsn(history[0].switchpoint.0 + 4096));
    let mut source = PgSource::new(options(&standby, &["public.t"]));
    let err = source.start(Some(&ahead)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
    assert!(
        err.to_string()
            .contains("beyond the point where timeline 1 ends"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_slot_is_created_on_17_and_refused_before() {
    for (version, supported) in [(17, true), (15, false)] {
        let cluster = Cluster::builder().major(version).build().await.unwrap();
        cluster
            .execute(
                "CREATE TABLE public.t (id int PRIMARY KEY);
                 CREATE PUBLICATION pub FOR TABLE public.t;",
            )
            .await
            .unwrap();
        let mut options = options(&cluster, &["public.t"]);
        options.config.failover = true;
        options.config.snapshot = cdc_postgres::conn::SnapshotMode::Never;
        let mut source = PgSource::new(options);
        let started = source.start(None).await;
        if supported {
            started.unwrap();
            source.close().await.unwrap();
            let failover: bool = cluster
                .connect("postgres")
                .await
                .unwrap()
                .query_one(
                    "SELECT failover FROM pg_replication_slots WHERE slot_type = 'logical'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert!(failover, "PostgreSQL {version}: not a failover slot");
        } else {
            let err = started.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{err}");
            assert!(err.to_string().contains("PostgreSQL 17+"), "{err}");
        }
    }
}
