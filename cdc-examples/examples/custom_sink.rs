//! A custom sink in under 60 lines: print every row change as `table op col=value ...`.
//!
//! Run it with `cargo run -p cdc-examples --example custom_sink`: it starts a throwaway
//! PostgreSQL cluster (cdc-testkit), streams a table while a few changes are made, and
//! stops after five seconds.

use async_trait::async_trait;
use cdc_core::{Ack, Acknowledger, EventKind, Result, ResumeToken, Row, Sink, SinkBatch};
use cdc_core::{OldRowKind, Pipeline, PipelineConfig, TableSchema};

/// Prints changes; keeps no state. `open` returns no token (so a restart takes a new
/// snapshot: at-least-once) and both acknowledgements are immediate (`Ack::Done`).
#[derive(Debug, Default)]
struct PrintSink {
    /// Kept for the life of the sink, as the pipeline expects.
    acks: Option<Acknowledger>,
}

/// `col=value ...`; only the key columns when `key_only` (an old row logged as its key).
fn show(table: &TableSchema, row: &Row, key_only: bool) -> String {
    let key = table.key_indexes();
    let columns = table.columns.iter().zip(row).enumerate();
    columns
        .filter(|(i, _)| !key_only || key.contains(i))
        .map(|(_, (c, v))| format!("{}={}", c.name, v.to_pg_text().unwrap_or("NULL".into())))
        .collect::<Vec<_>>()
        .join(" ")
}

#[async_trait]
impl Sink for PrintSink {
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        self.acks = Some(acks);
        Ok(None)
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        for event in &batch.batch.events {
            let line = match &event.kind {
                EventKind::Insert { table, new } => format!("insert {}", show(table, new, false)),
                EventKind::Update { table, new, .. } => {
                    format!("update {}", show(table, new, false))
                }
                EventKind::Delete {
                    table,
                    old: Some(old),
                } => {
                    let key_only = old.kind == OldRowKind::Key;
                    format!("delete {}", show(table, &old.values, key_only))
                }
                EventKind::Commit(c) => format!("commit at {}", c.commit_lsn),
                _ => continue,
            };
            let table = event
                .table()
                .map(|t| t.name.to_string())
                .unwrap_or_default();
            println!("{:<14} {line}", table);
        }
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, _token: &ResumeToken) -> Result<Ack> {
        Ok(Ack::Done)
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let cluster = cdc_testkit::Cluster::new().await?;
    cluster
        .execute(
            "CREATE TABLE public.pets (id int PRIMARY KEY, name text, legs int);
             INSERT INTO public.pets VALUES (1, 'Rex', 4), (2, 'Tweety', 2);
             CREATE PUBLICATION pets FOR TABLE public.pets;",
        )
        .await?;
    let uri = cluster.uri("postgres", cdc_testkit::ADMIN_USER, None);
    let config =
        cdc_postgres::conn::SourceConfig::new(&uri, "pets")?.with_tables(["public.pets"])?;
    let source =
        cdc_postgres::source::PgSource::new(cdc_postgres::source::PgSourceOptions::new(config));
    let pipeline = Pipeline::new(source, PrintSink::default(), PipelineConfig::default());
    let stop = pipeline.shutdown_handle();
    let running = tokio::spawn(pipeline.run());
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    cluster
        .execute(
            "BEGIN; INSERT INTO public.pets VALUES (3, 'Nemo', 0);
             UPDATE public.pets SET name = 'Rex II' WHERE id = 1;
             DELETE FROM public.pets WHERE id = 2; COMMIT;",
        )
        .await?;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    stop.shutdown();
    let summary = running.await??;
    eprintln!(
        "done: {} events, confirmed up to {}",
        summary.stats.events, summary.confirmed
    );
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
