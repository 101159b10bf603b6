//! Partitioned tables arrive under their configured root, whichever way the publication
//! publishes them (`publish_via_partition_root` on or off), in the snapshot and the stream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::TableName;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

async fn run(via_root: bool) {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(&format!(
            "CREATE TABLE public.m (id int, region text, v numeric, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
             CREATE TABLE public.m_eu PARTITION OF public.m FOR VALUES IN ('eu');
             CREATE TABLE public.m_us PARTITION OF public.m FOR VALUES IN ('us');
             INSERT INTO public.m SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 1000) g;
             CREATE PUBLICATION pub FOR TABLE public.m WITH (publish_via_partition_root = {via_root});"
        ))
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let mut running = spawn(options(&cluster, &["public.m"]), &handle);
    running.wait_snapshot(&handle).await;
    cluster
        .execute(
            "INSERT INTO public.m VALUES (5000, 'eu', 1), (5001, 'us', 2);
             UPDATE public.m SET v = v + 100 WHERE id < 50;
             DELETE FROM public.m WHERE id BETWEEN 100 AND 120;",
        )
        .await
        .unwrap();
    wait_for_equal(&cluster, &handle, &["public.m"], Duration::from_secs(60)).await;
    running.stop().await;
    assert_eq!(handle.tables(), vec![TableName::new("public", "m")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_published_as_themselves_arrive_under_the_root() {
    run(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_published_via_the_root_arrive_under_the_root() {
    run(true).await;
}
