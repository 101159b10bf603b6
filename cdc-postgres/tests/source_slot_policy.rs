//! The library's slot policy: a slot the sink's token does not show to be this stream's
//! is replaced only when `SlotPolicy::may_replace` says so, and created only when
//! `may_create` does — an engine whose state store lost its token keeps the slot (and
//! whatever it retains) and learns why the run stopped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::ErrorKind;
use cdc_postgres::source::SlotPolicy;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

async fn slot_lsn(cluster: &Cluster, slot: &str) -> Option<String> {
    cluster
        .connect("postgres")
        .await
        .unwrap()
        .query_opt(
            "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

async fn run_to_error(options: cdc_postgres::source::PgSourceOptions) -> cdc_core::Error {
    let running = spawn(options, &MemoryHandle::default());
    tokio::time::timeout(Duration::from_secs(60), running.task)
        .await
        .expect("the run did not stop")
        .unwrap()
        .expect_err("the run should be refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_without_a_token_is_replaced_or_created_only_when_allowed() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t SELECT g, 'x' FROM generate_series(1, 10) g;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let mut options = options(&cluster, &["public.t"]);
    let slot = options.config.slot_name();
    // Another consumer's slot under the same name, and a sink without a token.
    cluster
        .execute(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
        ))
        .await
        .unwrap();
    let before = slot_lsn(&cluster, &slot).await;
    assert!(before.is_some());
    options.slot_policy = SlotPolicy::default();
    let err = run_to_error(options.clone()).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("may_replace"), "{err}");
    assert_eq!(
        slot_lsn(&cluster, &slot).await,
        before,
        "the slot was touched"
    );

    // Allowed: the slot is replaced, and the table copied.
    options.slot_policy.may_replace = true;
    let handle = MemoryHandle::default();
    let mut running = spawn(options.clone(), &handle);
    running
        .wait_for_equal(&cluster, &handle, &["public.t"], Duration::from_secs(60))
        .await;
    running.stop().await;

    // No slot and no permission to create one.
    cluster
        .execute(&format!("SELECT pg_drop_replication_slot('{slot}')"))
        .await
        .unwrap();
    options.slot_policy = SlotPolicy::new(false, false);
    let err = run_to_error(options).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("may_create"), "{err}");
    assert_eq!(slot_lsn(&cluster, &slot).await, None);
}
