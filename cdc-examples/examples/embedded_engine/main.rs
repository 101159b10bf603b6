//! Embedding pgcdc in an engine that checkpoints on its own schedule.
//!
//! The "engine" keeps its tables in memory and ingests every batch at once (`write` →
//! `Ack::Done`: processed). Durability is its own business: every two seconds it writes
//! its whole state, together with the [`ResumeToken`] that covers exactly that state, to
//! one checkpoint file (atomically: temporary file, fsync, rename), and only then reports
//! `Acknowledger::durable(token)`. The pipeline's `checkpoint` call returns `Ack::Pending`
//! and writing continues meanwhile; the replication slot advances only to what a
//! completed engine checkpoint covers.
//!
//! Which token covers the state? Every batch arrives with the token that resumes right
//! after it, and a `checkpoint` request carries the token covering everything written
//! before it (including progress the pipeline did not write, such as other tables'
//! transactions). The latest token received, by either route, covers the state exactly.
//!
//! At restart, `open` loads the engine's checkpoint and hands its token back: the stream
//! resumes right after it, so every change is applied exactly once even though the engine
//! crashed or stopped between its checkpoints.
//!
//! Run it with `cargo run -p cdc-examples --example embedded_engine`: it starts a
//! throwaway cluster, runs the engine, stops it, changes the source while it is down,
//! restarts it and checks the engine's table against `SELECT`.

mod engine;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cdc_core::{Pipeline, PipelineConfig, Result};
use cdc_postgres::conn::SourceConfig;
use cdc_postgres::source::{PgSource, PgSourceOptions};
use engine::{EngineCheckpoint, EngineSink};

/// Runs the engine on the source until `stop_after`, then stops it gracefully.
async fn run_engine(config: &SourceConfig, path: &Path, stop_after: Duration) -> Result<()> {
    let source = PgSource::new(PgSourceOptions::new(config.clone()));
    let sink = EngineSink::new(path.to_owned(), Duration::from_secs(2));
    let pipeline = Pipeline::new(source, sink, PipelineConfig::default());
    let stop = pipeline.shutdown_handle();
    tokio::spawn(async move {
        tokio::time::sleep(stop_after).await;
        stop.shutdown();
    });
    let summary = pipeline.run().await?;
    eprintln!(
        "engine stopped: {} events this run, slot confirmed up to {}",
        summary.stats.events, summary.confirmed
    );
    Ok(())
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let cluster = cdc_testkit::Cluster::new().await?;
    cluster
        .execute(
            "CREATE TABLE public.stock (sku text PRIMARY KEY, qty int NOT NULL);
             INSERT INTO public.stock SELECT 'sku-' || g, g FROM generate_series(1, 1000) g;
             CREATE PUBLICATION engine FOR TABLE public.stock;",
        )
        .await?;
    let uri = cluster.uri("postgres", cdc_testkit::ADMIN_USER, None);
    let config = SourceConfig::new(&uri, "engine")?.with_tables(["public.stock"])?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("engine-checkpoint.json");

    let writes = "UPDATE public.stock SET qty = qty + 1 WHERE sku = 'sku-7';
                  DELETE FROM public.stock WHERE sku = 'sku-9';
                  INSERT INTO public.stock VALUES ('sku-new-' || txid_current(), 1);";
    let writer = {
        let conn = cluster.connect("postgres").await?;
        tokio::spawn(async move {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = conn.batch_execute(writes).await;
            }
        })
    };
    run_engine(&config, &path, Duration::from_secs(4)).await?;
    writer.await?;
    // Changes while the engine is down are waiting in the slot.
    cluster.execute(writes).await?;
    run_engine(&config, &path, Duration::from_secs(4)).await?;

    let saved: EngineCheckpoint = serde_json::from_slice(&std::fs::read(&path)?)?;
    let engine = saved
        .tables
        .get("public.stock")
        .cloned()
        .unwrap_or_default();
    let client = cluster.connect("postgres").await?;
    let rows = client
        .query("SELECT sku, qty::text FROM public.stock", &[])
        .await?;
    let source: BTreeMap<String, Option<String>> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let engine_rows: BTreeMap<String, Option<String>> = engine
        .iter()
        .map(|(k, row)| (k.clone(), row.get("qty").cloned().flatten()))
        .collect();
    println!(
        "source has {} rows, the engine's checkpoint has {}: {}",
        source.len(),
        engine_rows.len(),
        if source == engine_rows {
            "identical"
        } else {
            "DIFFERENT"
        }
    );
    if source != engine_rows {
        return Err("the engine's checkpoint differs from the source".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs_against_a_throwaway_cluster() {
        if let Err(e) = super::main() {
            panic!("the example failed: {e}");
        }
    }
}
