//! The consistent snapshot's rows in blocks: a sink that takes row blocks (the Feldera
//! JSON stream) writes them straight from the COPY's bytes, and must write exactly what it
//! writes for the same rows decoded one by one — every built-in type and the corpus's
//! edge values, NULLs, text that needs escaping, blocks cut at 512 rows. The oracle is
//! the row-by-row path (the decoders checked against Postgres's output functions in
//! `source_all_types`), reached by the same sink told not to take blocks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cdc_core::{
    Ack, Acknowledger, EventKind, Pipeline, Result, ResumeToken, RunEnd, Sink, SinkBatch,
};
use cdc_postgres::conn::SnapshotMode;
use cdc_postgres::source::PgSource;
use cdc_sinks::feldera::{EncoderOptions, FelderaStreamSink, Framing, Policies};
use cdc_testkit::Cluster;
use cdc_testkit::corpus::{ALL_TYPES_ROWS, ALL_TYPES_SCHEMA, MORE_TYPES_ROWS, MORE_TYPES_SCHEMA};
use support::*;

/// A `Write` whose bytes the test reads after the run.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The Feldera JSON stream sink, taking row blocks or not as told, counting the blocks it
/// was handed.
struct Probe {
    inner: FelderaStreamSink<Shared>,
    takes_blocks: bool,
    blocks: Arc<AtomicUsize>,
}

#[async_trait]
impl Sink for Probe {
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        self.inner.open(acks).await
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        let blocks = batch
            .batch
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::InsertBlock { .. }))
            .count();
        self.blocks.fetch_add(blocks, Ordering::SeqCst);
        self.inner.write(batch).await
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        self.inner.checkpoint(token).await
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }

    fn takes_row_blocks(&self) -> bool {
        self.takes_blocks
    }
}

const TABLES: [&str; 3] = ["public.all_types", "public.more_types", "public.wide"];

async fn prepare(cluster: &Cluster) {
    cluster
        .execute(&format!(
            "{ALL_TYPES_SCHEMA}
             {ALL_TYPES_ROWS}
             {MORE_TYPES_SCHEMA}
             {MORE_TYPES_ROWS}
             -- Past a block (512 rows), integers at their limits, text that needs escaping
             -- and text that does not, NULLs in every column.
             CREATE TABLE public.wide (id int8 PRIMARY KEY, s int2, i int4, t text, v varchar(20),
                                       c char(5), n name, f float8);
             INSERT INTO public.wide
             SELECT -9223372036854775808 + g - 1,
                    CASE g % 5 WHEN 0 THEN NULL WHEN 1 THEN -32768 WHEN 2 THEN 32767 ELSE g % 300 END,
                    CASE g % 7 WHEN 0 THEN NULL WHEN 1 THEN -2147483648 WHEN 2 THEN 2147483647 ELSE -g END,
                    CASE g % 4 WHEN 0 THEN NULL
                               WHEN 1 THEN 'tab' || chr(9) || 'quote\"back\\slash' || chr(1) || 'ü€𝄞'
                               WHEN 2 THEN ''
                               ELSE repeat('x', g % 90) END,
                    CASE WHEN g % 6 = 0 THEN NULL ELSE 'v' || g END,
                    CASE WHEN g % 8 = 0 THEN NULL ELSE 'c' || (g % 10) END,
                    CASE WHEN g % 9 = 0 THEN NULL ELSE ('n' || g)::name END,
                    CASE WHEN g % 3 = 0 THEN NULL ELSE g / 7.0 END
             FROM generate_series(1, 1300) AS g;
             INSERT INTO public.wide VALUES (9223372036854775807, 0, 0, 'last', NULL, NULL, NULL, 'NaN');
             CREATE PUBLICATION pub FOR TABLE public.all_types, public.more_types, public.wide;"
        ))
        .await
        .unwrap();
}

/// Copies the tables once (`initial-only`) with `workers` readers into the Feldera JSON
/// stream, taking row blocks or not; the output and how many blocks the sink was handed.
async fn copy(cluster: &Cluster, workers: usize, takes_blocks: bool) -> (String, usize) {
    let mut options = options(cluster, &TABLES);
    options.config.snapshot = SnapshotMode::InitialOnly;
    options.snapshot_workers = workers;
    let out = Shared::default();
    let blocks = Arc::new(AtomicUsize::new(0));
    // Every value of the corpus written (infinite dates, NaN, arrays not from 1).
    let policies = Policies::lossless();
    let sink = Probe {
        inner: FelderaStreamSink::new(
            out.clone(),
            EncoderOptions::new(policies, true),
            Framing::Lines,
        ),
        takes_blocks,
        blocks: blocks.clone(),
    };
    let summary = Pipeline::new(PgSource::new(options), sink, pipeline_config())
        .run()
        .await
        .unwrap();
    assert_eq!(summary.end, RunEnd::SourceEnded);
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    (text, blocks.load(Ordering::SeqCst))
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_in_blocks_are_written_exactly_as_rows_decoded_one_by_one() {
    let cluster = Cluster::new().await.unwrap();
    prepare(&cluster).await;

    // One reader: the tables in turn, the rows in the COPY's order, byte for byte.
    let (blocks_out, blocks) = copy(&cluster, 1, true).await;
    let (rows_out, none) = copy(&cluster, 1, false).await;
    assert!(blocks >= 3, "the sink was handed {blocks} blocks");
    assert_eq!(none, 0, "blocks reached a sink that does not take them");
    assert_eq!(blocks_out.lines().count(), rows_out.lines().count());
    assert_eq!(blocks_out, rows_out);
    let wide = rows_out
        .lines()
        .filter(|l| l.starts_with("{\"table\":\"public.wide\""))
        .count();
    assert_eq!(wide, 1301, "every row of public.wide");
    assert!(rows_out.contains("\"t\":\"tab\\tquote\\\"back\\\\slash\\u0001ü€𝄞\""));

    // Two readers (the order across tables may differ): the same lines.
    let (blocks_out, blocks) = copy(&cluster, 2, true).await;
    let (rows_out, _) = copy(&cluster, 2, false).await;
    assert!(blocks >= 3);
    assert_eq!(sorted_lines(&blocks_out), sorted_lines(&rows_out));
}
