//! Bad input gets a clear error on stderr and a non-zero exit code: never a panic or a
//! backtrace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_testkit::{AuthMethod, Cluster};
use support::*;

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn unknown_flag_is_a_usage_error() {
    let output = run(
        pgcdc([
            "stream",
            "--uri",
            "postgres://x@localhost/db",
            "--publication",
            "p",
            "--frobnicate",
        ]),
        TIMEOUT,
    );
    let stderr = assert_clean_failure(&output, Some(2));
    assert!(stderr.contains("--frobnicate"), "{stderr}");
}

#[test]
fn unqualified_table_says_how_to_qualify_it() {
    let output = run(
        pgcdc([
            "stream",
            "--uri",
            "postgres://x@localhost/db",
            "--publication",
            "p",
            "--table",
            "orders",
        ]),
        TIMEOUT,
    );
    let stderr = assert_clean_failure(&output, Some(2));
    let line = one_line(&stderr);
    assert!(line.contains("public.orders"), "{line}");
}

#[test]
fn unreachable_host_is_a_transient_error() {
    // A port nothing listens on: bind, note the port, release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let uri = format!("postgres://cdc@127.0.0.1:{port}/postgres?connect_timeout=5");
    for command in [
        vec![
            "stream",
            "--uri",
            &uri,
            "--publication",
            "p",
            "--table",
            "public.t",
        ],
        vec!["check", "--uri", &uri, "--publication", "p"],
        vec!["slots", "--uri", &uri],
    ] {
        let output = run(pgcdc(&command), TIMEOUT);
        let stderr = assert_clean_failure(&output, Some(4));
        let line = one_line(&stderr);
        assert!(line.contains(&port.to_string()), "names the target: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_and_missing_publication_are_configuration_errors() {
    let cluster = Cluster::builder()
        .auth(AuthMethod::ScramSha256)
        .user("cdc", "right")
        .build()
        .await
        .unwrap();
    cluster
        .execute("CREATE TABLE public.t (id int PRIMARY KEY); GRANT SELECT ON public.t TO cdc;")
        .await
        .unwrap();

    let wrong = cluster.uri("postgres", "cdc", Some("wrong"));
    let output = run(
        pgcdc([
            "stream",
            "--uri",
            &wrong,
            "--publication",
            "p",
            "--table",
            "public.t",
        ]),
        TIMEOUT,
    );
    let stderr = assert_clean_failure(&output, Some(3));
    let line = one_line(&stderr);
    assert!(line.contains("password"), "{line}");
    assert!(
        !line.contains("wrong"),
        "the password is not printed: {line}"
    );

    let right = cluster.uri("postgres", "cdc", Some("right"));
    let output = run(
        pgcdc([
            "stream",
            "--uri",
            &right,
            "--publication",
            "nosuch",
            "--table",
            "public.t",
        ]),
        TIMEOUT,
    );
    let stderr = assert_clean_failure(&output, Some(3));
    let line = one_line(&stderr);
    assert!(
        line.contains("\"nosuch\" does not exist") && line.contains("CREATE PUBLICATION"),
        "{line}"
    );
    assert_eq!(
        slot_count(&cluster).await,
        0,
        "nothing was created in the source"
    );
}

/// How many replication slots `cluster` has.
async fn slot_count(cluster: &Cluster) -> i64 {
    let client = cluster.connect("postgres").await.unwrap();
    client
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0)
}

/// Every duration, rate and size flag is checked against its range by the command line
/// parser: zero, negative, absurdly large, NaN and infinite values are usage errors (exit
/// 2) that name the flag and its range, before anything connects or starts. (`--rate
/// 1e-300`, `--checkpoint-interval 0` and huge durations used to panic.)
#[test]
fn out_of_range_durations_rates_and_sizes_are_usage_errors() {
    const STREAM: &[&str] = &[
        "stream",
        "--uri",
        "postgres://x@localhost/db",
        "--publication",
        "p",
    ];
    let cases: &[(&[&str], &str, &[&str])] = &[
        (
            STREAM,
            "--checkpoint-interval",
            &["0", "0ms", "-1s", "1000000h", "99999999999999999999h"],
        ),
        (STREAM, "--status-interval", &["0", "-5s", "100000000h"]),
        (STREAM, "--snapshot-workers", &["0", "-1", "1000000"]),
        (
            &["demo"],
            "--rate",
            &["0", "-1", "1e-300", "1e300", "NaN", "inf", "-inf"],
        ),
        (&["demo"], "--duration", &["0", "-1s", "99999999999h"]),
        (&["demo"], "--status-interval", &["0", "1000000h"]),
        (
            &["demo"],
            "--seed-rows",
            &["-1", "4294967296", "1000000000"],
        ),
    ];
    for (command, flag, values) in cases {
        for value in *values {
            let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
            args.push(format!("{flag}={value}"));
            let output = run(pgcdc(&args), TIMEOUT);
            let stderr = assert_clean_failure(&output, Some(2));
            assert!(
                stderr.contains(*flag) && (stderr.contains("between") || stderr.contains("..=")),
                "{args:?}: names the flag and its range:\n{stderr}"
            );
        }
    }
}

/// Issue 44, case 3: a replica identity index that lacks the primary key would make
/// updates and deletes name their row by NULLs (`{"delete":{"id":null}}`). Refused before
/// anything is created or written, naming the table and the fix; `check` says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_identity_index_without_the_primary_key_is_refused_up_front() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, uk int NOT NULL, v text);
             CREATE UNIQUE INDEX t_uk ON public.t (uk);
             ALTER TABLE public.t REPLICA IDENTITY USING INDEX t_uk;
             CREATE TABLE public.fine (id int, uk int NOT NULL, PRIMARY KEY (id));
             CREATE UNIQUE INDEX fine_id_uk ON public.fine (id, uk);
             ALTER TABLE public.fine REPLICA IDENTITY USING INDEX fine_id_uk;
             INSERT INTO public.t VALUES (1, 10, 'a');
             CREATE PUBLICATION pub FOR TABLE public.t, public.fine;",
        )
        .await
        .unwrap();
    let uri = cluster.uri("postgres", cdc_testkit::ADMIN_USER, None);
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("out");
    let output = run(
        pgcdc([
            "stream",
            "--uri",
            &uri,
            "--publication",
            "pub",
            "--table",
            "public.t",
            "--table",
            "public.fine",
            "--out-dir",
            out_dir.to_str().unwrap(),
        ]),
        TIMEOUT,
    );
    let stderr = assert_clean_failure(&output, Some(3));
    for text in [
        "public.t has REPLICA IDENTITY USING INDEX t_uk",
        "ALTER TABLE public.t REPLICA IDENTITY DEFAULT",
    ] {
        assert!(stderr.contains(text), "missing {text:?} in:\n{stderr}");
    }
    assert!(
        !stderr.contains("public.fine has"),
        "an index holding the key is fine:\n{stderr}"
    );
    assert_eq!(
        slot_count(&cluster).await,
        0,
        "nothing was created in the source"
    );
    let written = std::fs::read_dir(&out_dir).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| e.metadata().is_ok_and(|m| m.len() > 0 && m.is_file()))
            .count()
    });
    assert_eq!(written, 0, "nothing was written");

    let output = run(
        pgcdc(["check", "--uri", &uri, "--publication", "pub"]),
        TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(3), "{stdout}");
    for text in [
        "public.t has REPLICA IDENTITY USING INDEX t_uk",
        "ALTER TABLE public.t REPLICA IDENTITY DEFAULT",
        "1 error",
    ] {
        assert!(stdout.contains(text), "missing {text:?} in:\n{stdout}");
    }
}
