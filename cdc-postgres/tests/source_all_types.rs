//! Every built-in type through the slot's pgoutput stream, in text and binary mode, with
//! ordinary and edge values: what the sink ends with, rendered as Postgres text, equals
//! what Postgres itself prints for `SELECT col::text` (the oracle).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use cdc_testkit::corpus::{ALL_TYPES_ROWS, ALL_TYPES_SCHEMA, MORE_TYPES_ROWS, MORE_TYPES_SCHEMA};
use support::*;

fn schema() -> String {
    format!(
        "{ALL_TYPES_SCHEMA}
         ALTER TABLE public.all_types REPLICA IDENTITY FULL;
         CREATE PUBLICATION pub FOR TABLE public.all_types;"
    )
}

/// Columns whose types decode from binary (the others are read as text).
const BINARY_COLUMNS: &str = "id, b, i2, i4, i8, o, f4, f8, n, n_big, n_scaled, t, vc, bp, nm, ch, by, \
     d, tm, ttz, ts, tstz, iv, u, j, jb, a_i4, a_t, a_2d, a_n, a_ts, mood, pi";

/// Streams `table` (`all_types`, or `bin` with only binary-decodable columns) with the
/// binary option on or off.
async fn run(table: &str, binary: bool) {
    run_on(Cluster::new().await.unwrap(), table, binary).await;
}

async fn run_on(cluster: Cluster, table: &str, binary: bool) {
    cluster.execute(&schema()).await.unwrap();
    cluster
        .execute(&format!(
            "CREATE TABLE public.bin AS SELECT {BINARY_COLUMNS} FROM public.all_types WITH NO DATA;
             ALTER TABLE public.bin ADD PRIMARY KEY (id);
             ALTER PUBLICATION pub ADD TABLE public.bin;"
        ))
        .await
        .unwrap();
    let copy = format!("INSERT INTO public.bin SELECT {BINARY_COLUMNS} FROM public.all_types;");
    let qualified = format!("public.{table}");
    // Rows 1 and 2 arrive through the snapshot (binary COPY), the others and the updates
    // through the stream.
    let before = ALL_TYPES_ROWS
        .replace("(3, NULL", "(-3, NULL")
        .replace("(4, NULL", "(-4, NULL");
    cluster.execute(&format!("{before}{copy}")).await.unwrap();
    let handle = MemoryHandle::default();
    let mut options = options(&cluster, &[qualified.as_str()]);
    options.binary = binary;
    let running = spawn(options, &handle);
    wait_snapshot_completed(&handle).await;
    let after = ALL_TYPES_ROWS
        .replace("(1, true", "(11, true")
        .replace("(2, false", "(12, false")
        .replace("(3, NULL", "(13, NULL")
        .replace("(4, NULL", "(14, NULL");
    cluster
        .execute(&format!(
            "DELETE FROM public.all_types; {after}
             DELETE FROM public.bin WHERE id > 10; INSERT INTO public.bin SELECT {BINARY_COLUMNS} FROM public.all_types;"
        ))
        .await
        .unwrap();
    cluster
        .execute(&format!(
            "UPDATE {qualified} SET t = 'updated', f8 = -0.0 WHERE id IN (11, 12);
             UPDATE {qualified} SET id = 21 WHERE id = 13;
             DELETE FROM {qualified} WHERE id = 14;"
        ))
        .await
        .unwrap();
    wait_for_equal(
        &cluster,
        &handle,
        &[qualified.as_str()],
        Duration::from_secs(60),
    )
    .await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_in_text_mode_matches_postgres() {
    run("all_types", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_without_a_binary_decoder_keep_their_text_when_binary_is_asked() {
    run("all_types", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_in_binary_mode_matches_postgres() {
    run("bin", true).await;
}

/// Part of the version suite: every type, binary where it decodes, text for the rest, on
/// each version in `PGCDC_PG_VERSIONS` (with the default streaming of each version).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_matches_postgres_on_every_version() {
    for version in cdc_testkit::versions_under_test() {
        let cluster = Cluster::builder().major(version).build().await.unwrap();
        run_on(cluster, "all_types", true).await;
        let cluster = Cluster::builder().major(version).build().await.unwrap();
        run_on(cluster, "bin", true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_mode_does_not_depend_on_the_server_date_and_interval_styles() {
    let cluster = Cluster::builder()
        .setting("DateStyle", "SQL, DMY")
        .setting("IntervalStyle", "sql_standard")
        .setting("TimeZone", "America/St_Johns")
        .setting("extra_float_digits", "0")
        .build()
        .await
        .unwrap();
    run_on(cluster, "all_types", false).await;
}

/// Types whose text the snapshot once got from a cast to text instead of the output
/// function (`inet`, `xml`, their domains and arrays) and types whose text depends on the
/// session's settings (ranges and multiranges of timestamps, geometric types with
/// `extra_float_digits`, `bytea`, `interval`).
fn more_types() -> String {
    format!(
        "{MORE_TYPES_SCHEMA}
         ALTER TABLE public.more_types REPLICA IDENTITY FULL;
         CREATE PUBLICATION pub FOR TABLE public.more_types;
         {MORE_TYPES_ROWS}"
    )
}

/// The same rows copied by the snapshot (ids 1–3) and streamed (ids 101–103): the sink
/// must hold the same image of each, and both must equal Postgres's output functions
/// (`select_text`), whatever the server's own settings.
async fn snapshot_and_stream_agree(cluster: Cluster, binary: bool) {
    cluster.execute(&more_types()).await.unwrap();
    let handle = MemoryHandle::default();
    let mut options = options(&cluster, &["public.more_types"]);
    options.binary = binary;
    let mut running = spawn(options, &handle);
    running.wait_snapshot(&handle).await;
    cluster
        .execute(
            "CREATE TEMP TABLE copied AS SELECT * FROM public.more_types;
             UPDATE copied SET id = id + 100;
             INSERT INTO public.more_types SELECT * FROM copied;",
        )
        .await
        .unwrap();
    running
        .wait_for_equal(
            &cluster,
            &handle,
            &["public.more_types"],
            Duration::from_secs(60),
        )
        .await;
    let rows = sink_text(&handle, "public.more_types");
    assert_eq!(rows.len(), 6);
    for id in 1..=3 {
        let find = |id: i32| {
            rows.iter()
                .find(|r| r[0].as_deref() == Some(id.to_string().as_str()))
                .unwrap_or_else(|| panic!("row {id} missing"))
        };
        let (snapshot, streamed) = (find(id), find(id + 100));
        assert_eq!(snapshot[1..], streamed[1..], "row {id}: snapshot vs stream");
    }
    // The first row's inet and xml are the output functions' text, not a cast's.
    let first = rows.iter().find(|r| r[0].as_deref() == Some("1")).unwrap();
    assert_eq!(first[1].as_deref(), Some("::1"));
    assert_eq!(first[7].as_deref(), Some("<r/>"));
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_stream_give_every_type_the_same_text_in_text_mode() {
    snapshot_and_stream_agree(Cluster::new().await.unwrap(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_stream_give_every_type_the_same_text_under_unusual_server_settings() {
    let cluster = Cluster::builder()
        .setting("DateStyle", "SQL, DMY")
        .setting("IntervalStyle", "sql_standard")
        .setting("TimeZone", "Asia/Kolkata")
        .setting("extra_float_digits", "0")
        .setting("bytea_output", "escape")
        .setting("idle_in_transaction_session_timeout", "1s")
        .setting("statement_timeout", "5s")
        .build()
        .await
        .unwrap();
    snapshot_and_stream_agree(cluster, true).await;
}
