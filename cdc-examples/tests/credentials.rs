//! The password need not be on the command line (where `ps` and `/proc/*/cmdline` show it):
//! `pgcdc` takes it from `PGPASSWORD`, from the password file (`~/.pgpass`, or
//! `PGPASSFILE`), and the whole connection string from a file (`--uri-file`) or an
//! environment variable (`--uri-env`), against a cluster that demands SCRAM-SHA-256; and
//! `demo` runs against (and cleans up) a database given that way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use cdc_testkit::{ADMIN_PASSWORD, ADMIN_USER, AuthMethod, Cluster, HOST};
use support::*;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Characters that need escaping in every place a password can be written.
const PASSWORD: &str = "s3cr:t @/?\\é";

async fn cluster() -> Cluster {
    let cluster = Cluster::builder()
        .auth(AuthMethod::ScramSha256)
        .user("cdc", PASSWORD)
        .build()
        .await
        .unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY);
             GRANT SELECT ON public.t TO cdc;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    cluster
}

/// `pgcdc check` of publication `pub` with `args` (the connection), `HOME` in `home`
/// (holding no password file unless the test writes one) and no password file named.
fn check(args: &[&str], home: &Path) -> Command {
    let mut cmd = pgcdc(["check", "--publication", "pub", "--table", "public.t"]);
    cmd.args(args).env("HOME", home).env_remove("PGPASSFILE");
    cmd
}

/// Asserts the check succeeded and returns its stderr.
#[track_caller]
fn assert_ready(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success() && stdout.contains("ok: ready to stream"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    stderr
}

/// Asserts the check failed to log in: exit 3, a clean error that says why.
#[track_caller]
fn assert_no_password(output: &Output) {
    let stderr = assert_clean_failure(output, Some(3));
    assert!(stderr.contains("password"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_can_come_from_pgpassword() {
    let cluster = cluster().await;
    let home = tempfile::tempdir().unwrap();
    let uri = cluster.uri("postgres", "cdc", None);

    // Control: without it the login fails, so the runs below really use the variable.
    assert_no_password(&run(check(&["--uri", &uri], home.path()), TIMEOUT));

    let mut cmd = check(&["--uri", &uri], home.path());
    cmd.env("PGPASSWORD", PASSWORD);
    assert_ready(&run(cmd, TIMEOUT));

    // Everything from libpq's variables, no connection string at all.
    let port = cluster.port().to_string();
    let mut cmd = check(&[], home.path());
    cmd.env("PGHOST", HOST)
        .env("PGPORT", &port)
        .env("PGUSER", "cdc")
        .env("PGDATABASE", "postgres")
        .env("PGPASSWORD", PASSWORD)
        .env("PGSSLMODE", "disable");
    assert_ready(&run(cmd, TIMEOUT));

    // The connection string's own password wins over the variable.
    let mut cmd = check(&["--uri", &uri.replace("cdc@", "cdc:wrong@")], home.path());
    cmd.env("PGPASSWORD", PASSWORD);
    assert_no_password(&run(cmd, TIMEOUT));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_can_come_from_a_password_file() {
    let cluster = cluster().await;
    let home = tempfile::tempdir().unwrap();
    let uri = cluster.uri("postgres", "cdc", None);
    let pgpass = home.path().join(".pgpass");
    let escaped = PASSWORD.replace('\\', "\\\\").replace(':', "\\:");
    std::fs::write(
        &pgpass,
        format!(
            "# other servers first\nelsewhere:*:*:*:nope\n{HOST}:{}:*:cdc:{escaped}\n",
            cluster.port()
        ),
    )
    .unwrap();

    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_ready(&run(check(&["--uri", &uri], home.path()), TIMEOUT));

    // PGPASSFILE names another file.
    let elsewhere = tempfile::tempdir().unwrap();
    let mut cmd = check(&["--uri", &uri], elsewhere.path());
    cmd.env("PGPASSFILE", &pgpass);
    assert_ready(&run(cmd, TIMEOUT));

    // A file others may read is ignored, with a warning, as libpq does.
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = run(check(&["--uri", &uri], home.path()), TIMEOUT);
    assert_no_password(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("group or world access"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_string_can_come_from_a_file_or_a_variable() {
    let cluster = cluster().await;
    let home = tempfile::tempdir().unwrap();
    let uri = cluster.uri("postgres", "cdc", Some(PASSWORD));
    let file = home.path().join("source.conninfo");
    std::fs::write(&file, format!("{uri}\n")).unwrap();
    let file = file.to_str().unwrap();

    assert_ready(&run(check(&["--uri-file", file], home.path()), TIMEOUT));
    let mut cmd = check(&["--uri-env", "SOURCE_URI"], home.path());
    cmd.env("SOURCE_URI", &uri);
    assert_ready(&run(cmd, TIMEOUT));
    // The key=value form from a file, the password from the environment.
    std::fs::write(
        file,
        format!(
            "host={HOST} port={} dbname=postgres user=cdc\n",
            cluster.port()
        ),
    )
    .unwrap();
    let mut cmd = check(&["--uri-file", file], home.path());
    cmd.env("PGPASSWORD", PASSWORD);
    assert_ready(&run(cmd, TIMEOUT));

    // Only one source of the connection string; what is wrong with it is said clearly.
    let output = run(
        check(&["--uri", &uri, "--uri-file", file], home.path()),
        TIMEOUT,
    );
    let stderr = assert_clean_failure(&output, Some(2));
    assert!(!stderr.contains("s3cr"), "{stderr}");
    let missing = home.path().join("missing");
    for (args, code, says) in [
        (
            vec!["--uri-file", missing.to_str().unwrap()],
            3,
            "--uri-file",
        ),
        (vec!["--uri-env", "PGCDC_TEST_UNSET"], 3, "PGCDC_TEST_UNSET"),
        (vec![], 2, "--uri"),
    ] {
        let output = run(check(&args, home.path()), TIMEOUT);
        let stderr = assert_clean_failure(&output, Some(code));
        assert!(one_line(&stderr).contains(says), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_against_the_database_of_uri_env_and_cleans_up() {
    let cluster = cluster().await;
    let home = tempfile::tempdir().unwrap();
    let mut cmd = pgcdc([
        "demo",
        "--uri-env",
        "DEMO_SOURCE",
        "--duration",
        "2s",
        "--seed-rows",
        "10",
        "--quiet",
    ]);
    cmd.env("HOME", home.path())
        .env("DEMO_SOURCE", cluster.uri("postgres", ADMIN_USER, None))
        .env("PGPASSWORD", ADMIN_PASSWORD);
    let output = run(cmd, TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("\"insert\""),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let client = cluster.connect("postgres").await.unwrap();
    let left: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_replication_slots)
                  + (SELECT count(*) FROM pg_namespace WHERE nspname = 'pgcdc_demo')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the demo's slot and schema are dropped at exit");
}
