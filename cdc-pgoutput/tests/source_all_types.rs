//! Every built-in type through the slot's pgoutput stream, in text and binary mode, with
//! ordinary and edge values: what the sink ends with, rendered as Postgres text, equals
//! what Postgres itself prints for `SELECT col::text` (the oracle).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

const SCHEMA: &str = "
CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN public.posint AS int CHECK (VALUE > 0);
CREATE TABLE public.all_types (
  id int PRIMARY KEY,
  b bool, i2 int2, i4 int4, i8 int8, o oid,
  f4 float4, f8 float8, n numeric, n_big numeric, n_scaled numeric(12,4),
  t text, vc varchar(20), bp char(5), nm name, ch \"char\",
  by bytea,
  d date, tm time, ttz timetz, ts timestamp, tstz timestamptz,
  iv interval, u uuid, j json, jb jsonb,
  a_i4 int4[], a_t text[], a_2d int8[], a_n numeric[], a_ts timestamptz[], a_box box[],
  mood public.mood, pi public.posint, inet_v inet, range_v int4range, bits bit varying(8), money_v money,
  pt point, xml_v xml, tsv tsvector
);
ALTER TABLE public.all_types REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE public.all_types;
";

const ROWS: &str = "
INSERT INTO public.all_types VALUES
 (1, true, -32768, -2147483648, -9223372036854775808, 4294967295,
  'NaN', 'Infinity', 'NaN', (repeat('9', 1000) || '.' || repeat('1', 500))::numeric, -12.3400,
  'plain', 'varchar', 'ab', 'name', 'x',
  '\\xdeadbeef00',
  'infinity', '24:00:00', '23:59:59.999999+05:30', '-infinity', 'infinity',
  '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"b\": 1,  \"a\": [1, 2]}', '{\"b\": 1, \"a\": [1, 2.50]}',
  '{1,NULL,3}', '{\"with space\",\"quote\\\"d\",NULL,\"\",\"NULL\",\"comma,\"}', '{{1,2},{3,4}}', '{1.5,NaN,-0.001}', '{\"2024-01-01 00:00:00+00\",infinity}', '{(1,2),(3,4);(5,6),(7,8)}',
  'happy', 42, '192.168.0.1/24', '[1,10)', B'1011', 12.34,
  '(1.5,2)', '<a>x</a>', 'fat:2 cat:1'),
 (2, false, 32767, 2147483647, 9223372036854775807, 0,
  '-Infinity', '-Infinity', 'Infinity', '-0.000000000000000000000000000000000001', 0,
  '', 'é ü 中文 🎉', 'abcde', '', ' ',
  '\\x',
  '0044-03-15 BC', '00:00:00', '00:00:00-08', '0001-01-01 00:00:00 BC', '12345-06-07 08:09:10.5+00',
  '-1 years -2 mons +3 days -00:00:00.000001', '00000000-0000-0000-0000-000000000000', 'null', '\"string\"',
  '{}', '{}', '[0:1][5:6]={{1,2},{3,4}}', '{-Infinity}', '{}', '{}',
  'sad', 1, '::1', 'empty', B'', -5,
  '(0,0)', '', ''),
 (3, NULL, 1, 2, 3, 4,
  1.5, 0.1, '-Infinity', '1e-30', 99999999.9999,
  'line1\nline2\ttab\\\\', NULL, NULL, NULL, NULL,
  NULL,
  '2024-02-29', '12:34:56.000001', NULL, '2000-01-01 00:00:00', '1999-12-31 23:59:59.999999+00',
  '00:00:00', NULL, '[]', '{}',
  '{NULL}', '{NULL,NULL}', NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL),
 (4, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL);
";

/// Columns whose types decode from binary (the others are read as text).
const BINARY_COLUMNS: &str = "id, b, i2, i4, i8, o, f4, f8, n, n_big, n_scaled, t, vc, bp, nm, ch, by, \
     d, tm, ttz, ts, tstz, iv, u, j, jb, a_i4, a_t, a_2d, a_n, a_ts, mood, pi";

/// Streams `table` (`all_types`, or `bin` with only binary-decodable columns) with the
/// binary option on or off.
async fn run(table: &str, binary: bool) {
    run_on(Cluster::new().await.unwrap(), table, binary).await;
}

async fn run_on(cluster: Cluster, table: &str, binary: bool) {
    cluster.execute(SCHEMA).await.unwrap();
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
    let before = ROWS
        .replace("(3, NULL", "(-3, NULL")
        .replace("(4, NULL", "(-4, NULL");
    cluster.execute(&format!("{before}{copy}")).await.unwrap();
    let handle = MemoryHandle::default();
    let mut options = options(&cluster, &[qualified.as_str()]);
    options.binary = binary;
    let running = spawn(options, &handle);
    wait_snapshot_completed(&handle).await;
    let after = ROWS
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
