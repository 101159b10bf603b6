//! The engine streams a table of a throwaway cluster, stops, misses changes while down,
//! resumes from its own checkpoint, and ends equal to `SELECT`.

use std::collections::BTreeMap;
use std::time::Duration;

use cdc_core::{Pipeline, PipelineConfig};
use cdc_postgres::conn::SourceConfig;
use cdc_postgres::source::{PgSource, PgSourceOptions};
use cdc_testkit::{ADMIN_USER, Cluster};
use engine_outside::EngineSink;

async fn run_until(config: &SourceConfig, path: &std::path::Path, end: &str) {
    let mut options = PgSourceOptions::new(config.clone());
    options.end_lsn = Some(end.parse().expect("an LSN"));
    let pipeline = Pipeline::new(
        PgSource::new(options),
        EngineSink::new(path),
        PipelineConfig::default().with_checkpoint_interval(Duration::from_millis(50)),
    );
    pipeline.run().await.expect("the run ends at the end LSN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_streams_and_resumes_from_its_checkpoint() {
    let cluster = Cluster::new().await.expect("a throwaway cluster");
    cluster
        .execute(
            "CREATE TABLE public.stock (sku text PRIMARY KEY, qty int NOT NULL);
             INSERT INTO public.stock SELECT 'sku-' || g, g FROM generate_series(1, 500) g;
             CREATE PUBLICATION engine FOR TABLE public.stock;",
        )
        .await
        .expect("the schema");
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let config = SourceConfig::new(&uri, "engine")
        .and_then(|c| c.with_tables(["public.stock"]))
        .expect("a source configuration");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("engine.json");

    let writes = "UPDATE public.stock SET qty = qty + 1 WHERE sku = 'sku-7';
                  DELETE FROM public.stock WHERE sku = 'sku-9';
                  INSERT INTO public.stock VALUES ('sku-new-' || txid_current(), 1);";
    cluster.execute(writes).await.expect("changes");
    let end = cluster.current_wal_lsn().await.expect("the WAL end");
    run_until(&config, &path, &end).await;
    // Changes while the engine is down wait in the slot.
    cluster.execute(writes).await.expect("more changes");
    cluster
        .execute("UPDATE public.stock SET qty = 0 WHERE sku = 'sku-1'")
        .await
        .expect("one more");
    let end = cluster.current_wal_lsn().await.expect("the WAL end");
    run_until(&config, &path, &end).await;

    let saved = EngineSink::read(&path).expect("the engine's checkpoint");
    let engine: BTreeMap<String, Option<String>> = saved.tables.0["public.stock"]
        .iter()
        .map(|(sku, row)| (sku.clone(), row["qty"].clone()))
        .collect();
    let client = cluster.connect("postgres").await.expect("a connection");
    let source: BTreeMap<String, Option<String>> = client
        .query("SELECT sku, qty::text FROM public.stock", &[])
        .await
        .expect("SELECT")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(engine.len(), 501);
    assert_eq!(engine, source);
}
