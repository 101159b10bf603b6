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
const MORE_TYPES: &str = r#"
CREATE TYPE public.pair AS (a int, b text);
CREATE DOMAIN public.inet_d AS inet;
CREATE DOMAIN public.xml_d AS xml;
CREATE TABLE public.more_types (
  id int PRIMARY KEY,
  inet_v inet, cidr_v cidr, mac macaddr, mac8 macaddr8, inet_d public.inet_d, a_inet inet[],
  xml_v xml, xml_d public.xml_d,
  bit_v bit(4), varbit_v varbit, a_bit bit(2)[],
  money_v money, a_money money[],
  r_int int4range, r_num numrange, r_ts tsrange, r_tstz tstzrange, r_date daterange, a_range int8range[],
  mr int4multirange, mr_tstz tstzmultirange,
  comp public.pair, a_comp public.pair[],
  pt point, ln line, ls lseg, bx box, pth path, pg polygon, ci circle, a_pt point[],
  tstz timestamptz, ts timestamp, iv interval, f8 float8, f4 float4, by bytea, d date, ttz timetz,
  a_tstz timestamptz[], a_iv interval[]
);
ALTER TABLE public.more_types REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE public.more_types;
INSERT INTO public.more_types VALUES
 (1, '::1', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', '10.1.2.3', '{::1,10.1.2.3/32,192.168.0.1/24}',
  '<?xml version="1.0"?><r/>', '<?xml version="1.0"?><d>1</d>',
  B'1010', B'101', '{10,01}',
  1234.56, '{1.5,-2}',
  '[1,10)', '(0.5,1.25]', '["2024-01-01 10:00","2024-01-02")', '["2024-01-01 00:00:00+00","2024-06-01 12:30:00.5+02")', '[2000-02-29,2000-03-01]', '{"[1,2)",empty}',
  '{[1,3),[5,7)}', '{["2024-01-01 00:00+00","2024-01-02 00:00+00")}',
  '(1,"x y")', '{"(1,a)","(,)"}',
  '(0.30000000000000004,1)', '{1,2,3}', '[(0,0),(1,1)]', '(1,1),(0,0)', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(1,0))', '<(0,0),1.5>', '{"(0.1,0.2)"}',
  '2000-02-29 12:00:00.123456+00', '2400-02-29 23:59:59', '1 year 2 mons -3 days 04:05:06.5', 0.30000000000000004, 0.1, '\x00ff5c', '2000-02-29', '12:00:00+05:30',
  '{"1600-02-29 00:00:00+00",infinity}', '{"-1 days +00:00:01",P1Y}'),
 (2, '2001:db8::ff00:42:8329/64', '2001:db8::/32', NULL, NULL, '::ffff:1.2.3.4', '{}',
  '<a>x</a>', 'plain text',
  B'0000', B'', '{}',
  -0.01, '{}',
  'empty', '[-1e-30,1e30]', '(,)', '(,"2000-02-29 00:00:00+00"]', '(,)', '{}',
  '{}', '{}',
  '(,)', '{}',
  '(-0,1e300)', '{1,-1,0}', '[(1e-300,2),(3,4)]', '(0,0),(0,0)', '((0,0))', '((0,0))', '<(1,2),0>', '{}',
  '0044-03-15 12:00:00+00 BC', '0001-01-01 00:00:00 BC', '-178000000 years', '-Infinity', 'NaN', '\x', '5874897-12-31', '00:00:00-15:59',
  '{}', '{}'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"#;

/// The same rows copied by the snapshot (ids 1–3) and streamed (ids 101–103): the sink
/// must hold the same image of each, and both must equal Postgres's output functions
/// (`select_text`), whatever the server's own settings.
async fn snapshot_and_stream_agree(cluster: Cluster, binary: bool) {
    cluster.execute(MORE_TYPES).await.unwrap();
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
