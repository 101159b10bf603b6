//! `pgcdc check` lists every problem of a misconfigured source with its fix; `slots` and
//! `drop-slot` show and remove slots.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_testkit::{ADMIN_USER, Cluster};
use support::*;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_lists_every_problem_of_a_misconfigured_source() {
    let cluster = Cluster::builder()
        .setting("wal_level", "replica")
        .build()
        .await
        .unwrap();
    cluster
        .execute(
            "CREATE TABLE public.orders (id int PRIMARY KEY, v text);
             CREATE TABLE public.missing_from_pub (id int PRIMARY KEY);
             CREATE TABLE public.no_identity (id int PRIMARY KEY, v text);
             ALTER TABLE public.no_identity REPLICA IDENTITY NOTHING;
             CREATE TABLE public.log (line text);
             ALTER TABLE public.log REPLICA IDENTITY FULL;
             CREATE PUBLICATION pub FOR TABLE public.orders, public.no_identity, public.log;",
        )
        .await
        .unwrap();
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let output = run(
        pgcdc([
            "check",
            "--uri",
            &uri,
            "--publication",
            "pub",
            "--table",
            "public.orders",
            "--table",
            "public.missing_from_pub",
            "--table",
            "public.no_identity",
            "--table",
            "public.log",
        ]),
        TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(3),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let expect = [
        // wal_level, with its fix.
        "wal_level is \"replica\"",
        "ALTER SYSTEM SET wal_level = logical",
        // The table missing from the publication, with its fix.
        "public.missing_from_pub is not in publication \"pub\"",
        "ALTER PUBLICATION pub ADD TABLE public.missing_from_pub",
        // Replica identity NOTHING, with its fix.
        "public.no_identity has REPLICA IDENTITY NOTHING",
        "ALTER TABLE public.no_identity REPLICA IDENTITY FULL",
        // A table the online snapshot copies whole, why, and what to do.
        "public.log has no primary key: the online snapshot copies it whole",
        "add a primary key to copy it in chunks",
        // The slot settings are reported.
        "max_slot_wal_keep_size",
        "2 errors",
    ];
    for text in expect {
        assert!(stdout.contains(text), "missing {text:?} in:\n{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_source_checks_ok_and_its_slots_can_be_listed_and_dropped() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    cluster
        .execute("SELECT pg_create_logical_replication_slot('held', 'pgoutput')")
        .await
        .unwrap();
    let uri = cluster.uri("postgres", ADMIN_USER, None);

    let output = run(
        pgcdc([
            "check",
            "--uri",
            &uri,
            "--publication",
            "pub",
            "--table",
            "public.t",
        ]),
        TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("ok: ready to stream"), "{stdout}");

    cluster
        .execute("INSERT INTO public.t SELECT g, 'x' FROM generate_series(1, 1000) g")
        .await
        .unwrap();
    let output = run(pgcdc(["slots", "--uri", &uri, "--json"]), TIMEOUT);
    assert!(output.status.success());
    let slots: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(slots.len(), 1, "{slots:?}");
    assert_eq!(slots[0]["slot_name"], "held");
    assert_eq!(slots[0]["wal_status"], "reserved");
    assert!(slots[0]["lag_bytes"].as_i64().unwrap() > 0, "{slots:?}");
    let output = run(pgcdc(["slots", "--uri", &uri]), TIMEOUT);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("held") && table.contains("pgoutput"),
        "{table}"
    );

    let output = run(pgcdc(["drop-slot", "held", "--uri", &uri]), TIMEOUT);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = run(pgcdc(["drop-slot", "held", "--uri", &uri]), TIMEOUT);
    let stderr = assert_clean_failure(&output, Some(3));
    assert!(one_line(&stderr).contains("does not exist"), "{stderr}");
    let output = run(
        pgcdc(["drop-slot", "held", "--uri", &uri, "--if-exists"]),
        TIMEOUT,
    );
    assert!(output.status.success());
}
