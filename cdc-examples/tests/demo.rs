//! `pgcdc demo`: Feldera JSON on stdout from a throwaway cluster and a live workload; a
//! clean exit on SIGINT or after `--duration`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

/// Checks every line is one Feldera envelope with a `table` key; returns the count of
/// each operation (insert, update, delete).
fn check_envelopes(lines: &[String]) -> [usize; 3] {
    let mut ops = [0; 3];
    for line in lines {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let object = value.as_object().unwrap();
        let table = object["table"].as_str().unwrap();
        assert!(
            ["pgcdc_demo.customers", "pgcdc_demo.orders"].contains(&table),
            "{line}"
        );
        assert_eq!(object.len(), 2, "one operation per envelope: {line}");
        let (op, row) = object.iter().find(|(k, _)| *k != "table").unwrap();
        let index = ["insert", "update", "delete"]
            .iter()
            .position(|o| o == op)
            .unwrap_or_else(|| panic!("unexpected envelope {op}: {line}"));
        ops[index] += 1;
        assert!(row["id"].is_i64(), "rows carry their key: {line}");
    }
    ops
}

#[test]
fn demo_streams_feldera_json_and_exits_cleanly_on_sigint() {
    let (mut child, stdout, stderr) = spawn_collecting(pgcdc([
        "demo",
        "--seed-rows",
        "300",
        "--rate",
        "25",
        "--status-interval",
        "1s",
    ]));
    let live = stdout.wait_for(Duration::from_secs(120), |lines| {
        ["\"update\"", "\"delete\""]
            .iter()
            .all(|op| lines.iter().any(|l| l.contains(op)))
    });
    assert!(
        live,
        "no live updates and deletes; stderr:\n{}",
        stderr.snapshot().join("\n")
    );
    // Output reaches stdout as soon as it is streamed, which can be before the status
    // line reports the snapshot (on its next tick): wait for that line too.
    assert!(
        stderr.wait_for(Duration::from_secs(30), |lines| lines
            .iter()
            .any(|l| l.contains("snapshot complete"))),
        "no snapshot status line; stderr:\n{}",
        stderr.snapshot().join("\n")
    );
    signal(child.id(), libc::SIGINT);
    let status = wait_status(&mut child, Duration::from_secs(60));
    let (out, err) = (stdout.finish(), stderr.finish());
    let err = err.join("\n");
    assert!(status.success(), "exit {status}; stderr:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("snapshot complete"), "{err}");
    assert!(err.contains("demo stopped on request"), "summary: {err}");
    let [inserts, updates, deletes] = check_envelopes(&out);
    assert!(
        inserts >= 500,
        "the snapshot's 200 customers and 300 orders: {inserts}"
    );
    assert!(updates > 0 && deletes > 0);
}

#[test]
fn demo_stops_by_itself_after_its_duration() {
    let output = run(
        // Long enough for the slot and the snapshot on a loaded machine (the duration
        // counts from the stream's start).
        pgcdc(["demo", "--duration", "8s", "--seed-rows", "20", "--quiet"]),
        Duration::from_secs(120),
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr:\n{err}");
    assert!(err.trim().is_empty(), "--quiet prints nothing: {err}");
    let out: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let [inserts, ..] = check_envelopes(&out);
    assert!(inserts >= 220, "{inserts}");
}
