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
    // Nothing was created in the source.
    let client = cluster.connect("postgres").await.unwrap();
    let slots: i64 = client
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0);
}
