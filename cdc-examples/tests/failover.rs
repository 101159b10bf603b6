//! Failover with failover slots (PostgreSQL 17+): a primary with a physical standby that
//! syncs logical slots (`sync_replication_slots`), guarded by `synchronized_standby_slots`
//! on the primary; `pgcdc stream --failover --out-dir` under write load; the primary
//! killed with SIGKILL (after the consumer was killed, or while it streams), the standby
//! promoted, and pgcdc rerun against the new primary. The files, replayed, equal
//! `SELECT *` on the new primary with no change applied twice. And what cannot be
//! survived ends in its own error: an ordinary slot (gone after the promotion), and a
//! saved position beyond what a lagging standby had when it was promoted. `check
//! --failover` names each gap in the configuration, on the primary and on the standby.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cdc_core::Lsn;
use cdc_testkit::{ADMIN_USER, Cluster};
use rand::Rng;
use support::bank::*;
use support::*;

const SEED_ACCOUNTS: i64 = 20_000;
/// The physical slot the standby streams through (named in `synchronized_standby_slots`).
const STANDBY_SLOT: &str = "standby_1";
/// Named explicitly: the default slot name hashes host and port, which a promotion changes.
const SLOT: &str = "pgcdc_ha";
const TIMEOUT: Duration = Duration::from_secs(180);

/// A primary (`major`) with the crash tests' schema and a standby that syncs failover
/// slots. `guarded`: the primary waits for the standby before sending logical changes
/// (`synchronized_standby_slots`), as a failover setup must.
async fn primary_and_syncing_standby(major: u32, guarded: bool) -> (Cluster, Cluster) {
    let primary = Cluster::builder().major(major).build().await.unwrap();
    create_schema(&primary, SEED_ACCOUNTS).await;
    // Slot synchronization needs a database in primary_conninfo (the testkit's has none);
    // the later setting wins.
    let conninfo = format!(
        "{} application_name=standby_ha",
        primary.admin_connection_string("postgres")
    );
    let standby = primary
        .standby_builder()
        .slot(STANDBY_SLOT)
        .setting("sync_replication_slots", "on")
        .setting("primary_conninfo", conninfo)
        .build()
        .await
        .unwrap();
    if guarded {
        primary
            .execute(&format!(
                "ALTER SYSTEM SET synchronized_standby_slots = '{STANDBY_SLOT}'"
            ))
            .await
            .unwrap();
        primary.reload().await.unwrap();
    }
    standby.wait_for_replay(&primary).await.unwrap();
    (primary, standby)
}

/// The stream of every test here: a failover slot named explicitly.
fn failover_stream(out: &tempfile::TempDir) -> OutDirStream {
    OutDirStream::new(out.path().join("out"), &["--slot", SLOT, "--failover"])
}

/// Runs to the current end of `cluster`'s WAL and checks the files against it.
async fn finish_and_compare(stream: &OutDirStream, cluster: &Cluster) {
    let end = cluster.current_wal_lsn().await.unwrap();
    stream.finish_and_compare(cluster, &end, cluster).await;
}

/// Waits until the standby holds a synced, persistent copy of [`SLOT`] (a copy that is
/// still temporary is dropped at promotion).
async fn wait_for_synced_slot(standby: &Cluster) {
    let client = standby.connect("postgres").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let synced: Option<bool> = client
            .query_opt(
                "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1",
                &[&SLOT],
            )
            .await
            .unwrap()
            .map(|row| row.get(0));
        if synced == Some(true) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby has no synced copy of {SLOT} ({synced:?}); see {}",
            standby.log_path().display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn start_workload(client: cdc_testkit::tokio_postgres::Client, first_id: i64) -> Workload {
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(workload_until_lost(client, stop.clone(), first_id));
    Workload { stop, task }
}

struct Workload {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl Workload {
    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// After the promotion: pgcdc resumes on the new primary under more writes, is killed
/// once more (its saved position now on the new timeline), and finishes; the files equal
/// the new primary's tables.
async fn resume_on_new_primary(stream: &OutDirStream, new_primary: &Cluster) {
    let load = start_workload(
        new_primary.connect("postgres").await.unwrap(),
        SEED_ACCOUNTS * 10,
    );
    let (child, stderr) = stream.spawn(new_primary);
    let wait = rand::rng().random_range(1500..3000);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    kill_and_report(
        child,
        stderr,
        &format!("on the new primary: killed after {wait} ms"),
    );
    let changes = load.stop().await;
    assert!(changes > 0, "no writes on the new primary");
    finish_and_compare(stream, new_primary).await;
}

async fn consumer_killed_then_primary_killed(major: u32) {
    let (primary, standby) = primary_and_syncing_standby(major, true).await;
    let out = tempfile::tempdir().unwrap();
    let stream = failover_stream(&out);
    let load = start_workload(
        primary.connect("postgres").await.unwrap(),
        SEED_ACCOUNTS + 1,
    );
    let (child, stderr) = stream.spawn(&primary);
    // A synced copy is persisted only once the slot moved on the primary after the copy
    // was made, so a consumer is needed for that; in production this is long done.
    wait_for_synced_slot(&standby).await;
    let wait = rand::rng().random_range(0..3000);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    kill_and_report(
        child,
        stderr,
        &format!("PostgreSQL {major}: killed {wait} ms after the slot was synced"),
    );
    // The primary dies under load, with the consumer's last checkpoint at a random point.
    tokio::time::sleep(Duration::from_millis(300)).await;
    primary.kill9().await.unwrap();
    assert!(load.stop().await > 0);
    standby.promote().await.unwrap();
    resume_on_new_primary(&stream, &standby).await;
}

/// Under write load on the primary, starts pgcdc with `spawn`, waits until the standby
/// holds a persistent copy of the slot and 1–3 s more, then SIGKILLs the primary and
/// promotes the standby. Returns the still running pgcdc and the wait in milliseconds.
async fn primary_dies_while_streaming(
    primary: &Cluster,
    standby: &Cluster,
    spawn: impl FnOnce() -> (Child, Lines),
) -> (Child, Lines, u64) {
    let load = start_workload(
        primary.connect("postgres").await.unwrap(),
        SEED_ACCOUNTS + 1,
    );
    let (child, stderr) = spawn();
    wait_for_synced_slot(standby).await;
    let wait = rand::rng().random_range(1000..3000);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    primary.kill9().await.unwrap();
    assert!(load.stop().await > 0);
    standby.promote().await.unwrap();
    (child, stderr, wait)
}

async fn primary_killed_while_streaming(major: u32) {
    let (primary, standby) = primary_and_syncing_standby(major, true).await;
    let out = tempfile::tempdir().unwrap();
    let stream = failover_stream(&out);
    let (child, stderr, wait) =
        primary_dies_while_streaming(&primary, &standby, || stream.spawn(&primary)).await;
    // pgcdc keeps trying the dead primary; it is stopped once the standby is promoted.
    assert!(
        stderr.wait_for(Duration::from_secs(30), |lines| lines
            .iter()
            .any(|l| l.contains("reconnecting"))),
        "pgcdc did not notice the primary's death: {:?}",
        stderr.snapshot()
    );
    kill_and_report(
        child,
        stderr,
        &format!("PostgreSQL {major}: primary killed {wait} ms in"),
    );
    resume_on_new_primary(&stream, &standby).await;
}

/// The highest "acknowledged X/Y" in pgcdc's progress lines.
fn acknowledged(lines: &[String]) -> Option<Lsn> {
    lines
        .iter()
        .filter_map(|line| {
            let rest = line.split("acknowledged ").nth(1)?;
            rest.split([',', ' ']).next()?.parse::<Lsn>().ok()
        })
        .max()
}

/// A connection string naming both servers with `target_session_attrs=read-write`, as
/// libpq allows: `check` and the stream go to the primary; when it is killed and the
/// standby promoted, the running pgcdc reconnects to the new primary by itself (the
/// timeline switch judged in-process) and streams on, with no restart; a rerun with the
/// same string resumes there too. The files equal `SELECT *` on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_uri_follows_the_promotion_without_a_restart() {
    let (primary, standby) = primary_and_syncing_standby(17, true).await;
    let uri = format!(
        "postgresql://{ADMIN_USER}@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        standby.port(),
        primary.port()
    );
    // The standby is named first: read-write skips it.
    let (code, out) = check_failover(&uri, SLOT);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("standby"), "check went to the standby: {out}");

    let out_dir = tempfile::tempdir().unwrap();
    let stream = failover_stream(&out_dir);
    let (child, stderr, wait) =
        primary_dies_while_streaming(&primary, &standby, || stream.spawn_for_uri(&uri)).await;

    let load = start_workload(
        standby.connect("postgres").await.unwrap(),
        SEED_ACCOUNTS * 10,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(load.stop().await > 0, "no writes on the new primary");
    let end: Lsn = standby.current_wal_lsn().await.unwrap().parse().unwrap();
    let followed = stderr.wait_for(Duration::from_secs(90), |lines| {
        acknowledged(lines).is_some_and(|lsn| lsn >= end)
    });
    let lines = stderr.snapshot();
    assert!(
        followed,
        "the running pgcdc did not stream on from the new primary to {end}: {}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains("reconnecting")),
        "{lines:?}"
    );
    kill_and_report(
        child,
        stderr,
        &format!("multi-host: primary killed {wait} ms in, followed to {end}"),
    );
    stream
        .finish_and_compare_for_uri(&uri, &end.to_string(), &standby)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_killed_then_primary_killed_on_17() {
    consumer_killed_then_primary_killed(17).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_killed_then_primary_killed_on_18() {
    consumer_killed_then_primary_killed(18).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_while_streaming_on_17() {
    primary_killed_while_streaming(17).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_while_streaming_on_18() {
    primary_killed_while_streaming(18).await;
}

/// An ordinary slot is not synced: after the promotion it is missing, and pgcdc says that
/// the standby was promoted and that a failover slot would have survived — not "dropped",
/// and not a silent fresh start into the same directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_slot_is_missing_after_promotion_with_the_reason() {
    let (primary, standby) = primary_and_syncing_standby(17, false).await;
    let out = tempfile::tempdir().unwrap();
    let stream = failover_stream(&out);
    let ordinary: Vec<String> = stream
        .args(&primary, &[])
        .into_iter()
        .filter(|a| a != "--failover")
        .collect();
    let load = start_workload(
        primary.connect("postgres").await.unwrap(),
        SEED_ACCOUNTS + 1,
    );
    let mut child = pgcdc(&ordinary)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Lines::collect(child.stderr.take().unwrap());
    // Killed once streaming with a checkpoint on disk (which the refusal must leave as is).
    let streaming = stderr.wait_for(Duration::from_secs(90), |lines| {
        acknowledged(lines).is_some_and(|lsn| lsn > Lsn::ZERO)
    });
    assert!(streaming, "{}", stderr.snapshot().join("\n"));
    kill_and_report(child, stderr, "ordinary slot: killed");
    load.stop().await;
    standby.wait_for_replay(&primary).await.unwrap();
    primary.kill9().await.unwrap();
    standby.promote().await.unwrap();

    let stderr = refused_without_a_fresh_start(&stream, &standby);
    assert!(
        stderr.contains("promoted") && stderr.contains("not a failover slot"),
        "{stderr}"
    );
    assert!(!stderr.contains("was dropped"), "{stderr}");
}

/// Without `synchronized_standby_slots`, pgcdc may have applied changes the standby never
/// received. The standby stops (lags) while pgcdc streams on; the primary dies; the
/// standby is promoted with a synced slot whose history ends before pgcdc's saved
/// position: resuming there would skip or repeat changes, so pgcdc refuses, saying the
/// saved position is not part of the new primary's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_beyond_the_new_primarys_history_is_refused() {
    let (primary, standby) = primary_and_syncing_standby(17, false).await;
    let out = tempfile::tempdir().unwrap();
    let stream = failover_stream(&out);
    let load = start_workload(
        primary.connect("postgres").await.unwrap(),
        SEED_ACCOUNTS + 1,
    );
    let (child, stderr) = stream.spawn(&primary);
    wait_for_synced_slot(&standby).await;
    standby.stop().await.unwrap();
    // pgcdc streams on; its files now hold changes the stopped standby does not have.
    let standby_end: Lsn = primary.current_wal_lsn().await.unwrap().parse().unwrap();
    let beyond = stderr.wait_for(Duration::from_secs(90), |lines| {
        acknowledged(lines).is_some_and(|lsn| lsn > standby_end)
    });
    assert!(beyond, "{}", stderr.snapshot().join("\n"));
    kill_and_report(child, stderr, "lagging standby: killed");
    load.stop().await;
    primary.kill9().await.unwrap();
    standby.start().await.unwrap();
    standby.promote().await.unwrap();

    let stderr = refused_without_a_fresh_start(&stream, &standby);
    assert!(
        stderr.contains("not part of this server's history"),
        "{stderr}"
    );
}

/// `text` with each log line's timestamp (the first word of a line that starts with a
/// digit) removed: two runs log the same lines at different times.
fn without_log_times(text: &str) -> String {
    text.lines()
        .map(|line| match line.split_once(' ') {
            Some((time, rest))
                if line.starts_with(|c: char| c.is_ascii_digit()) && time.ends_with('Z') =>
            {
                rest
            }
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs pgcdc against `cluster` twice, expecting exit 5 both times with the same error,
/// the checkpoint as the killed run left it, and the files the same after either run (the
/// first cuts what the killed run wrote past its checkpoint): no fresh start into the
/// directory. Returns the error output.
fn refused_without_a_fresh_start(stream: &OutDirStream, cluster: &Cluster) -> String {
    let checkpoint_path = stream.dir.join("pgcdc-checkpoint.json");
    let checkpoint = std::fs::read(&checkpoint_path).unwrap();
    let output = run(pgcdc(stream.args(cluster, &[])), TIMEOUT);
    let stderr = assert_clean_failure(&output, Some(5));
    let after_first = dir_listing(&stream.dir);
    let again = run(pgcdc(stream.args(cluster, &[])), TIMEOUT);
    assert_eq!(
        without_log_times(&assert_clean_failure(&again, Some(5))),
        without_log_times(&stderr)
    );
    assert_eq!(dir_listing(&stream.dir), after_first, "the output changed");
    assert_eq!(
        std::fs::read(&checkpoint_path).unwrap(),
        checkpoint,
        "the checkpoint changed"
    );
    stderr
}

/// Every file in `dir` with its size.
fn dir_listing(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                entry.metadata().unwrap().len(),
            )
        })
        .collect()
}

/// `pgcdc check --failover` of `slot` against `uri`: its exit code and stdout.
fn check_failover(uri: &str, slot: &str) -> (Option<i32>, String) {
    let args = [
        "check",
        "--uri",
        uri,
        "--publication",
        "pub",
        "--slot",
        slot,
        "--failover",
    ];
    let output = run(pgcdc(args), TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!stdout.contains("panicked"), "{stdout}");
    (output.status.code(), stdout)
}

/// `check --failover` against the primary and against the standby names each gap that
/// would lose the slot at a promotion (or stall the stream), and says when the standby
/// holds a copy that survives; a synced copy on the standby is not streamed from, and
/// `--failover` against a standby is refused with where to run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_what_keeps_a_failover_slot() {
    let (primary, standby) = primary_and_syncing_standby(17, false).await;
    let (code, out) = check_failover(&admin_uri(&primary), SLOT);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("synchronized_standby_slots is empty"), "{out}");

    let alter_primary =
        |value: &str| format!("ALTER SYSTEM SET synchronized_standby_slots = '{value}'");
    primary
        .execute(&alter_primary("no_such_slot"))
        .await
        .unwrap();
    primary.reload().await.unwrap();
    let (code, out) = check_failover(&admin_uri(&primary), SLOT);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("\"no_such_slot\" named in synchronized_standby_slots does not exist")
            && out.contains("stalls"),
        "{out}"
    );
    primary.execute(&alter_primary(STANDBY_SLOT)).await.unwrap();
    primary.reload().await.unwrap();
    let (code, out) = check_failover(&admin_uri(&primary), SLOT);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("synchronized_standby_slots"), "{out}");

    // The standby: no copy yet.
    let (code, out) = check_failover(&admin_uri(&standby), SLOT);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("no copy of replication slot"), "{out}");
    assert!(!out.contains("sync_replication_slots = off"), "{out}");
    // An ordinary slot on the primary is named as such.
    primary
        .execute("SELECT pg_create_logical_replication_slot('plain', 'pgoutput')")
        .await
        .unwrap();
    let (_, out) = check_failover(&admin_uri(&primary), "plain");
    assert!(
        out.contains("\"plain\" exists but is not a failover slot"),
        "{out}"
    );

    // The failover slot, streamed from on the primary, reaches the standby as a copy that
    // survives a promotion.
    let out_dir = tempfile::tempdir().unwrap();
    let stream = failover_stream(&out_dir);
    let load = start_workload(
        primary.connect("postgres").await.unwrap(),
        SEED_ACCOUNTS + 1,
    );
    let (child, stderr) = stream.spawn(&primary);
    wait_for_synced_slot(&standby).await;
    let (code, out) = check_failover(&admin_uri(&standby), SLOT);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("survives a promotion"), "{out}");
    assert!(
        !out.contains("no copy") && !out.contains("temporary"),
        "{out}"
    );

    // Streaming from the synced copy on the standby, or creating a failover slot there, is
    // refused with where to run it.
    // (Another output directory: the running stream holds the lock on its own.)
    let other = tempfile::tempdir().unwrap();
    let elsewhere = failover_stream(&other);
    let output = run(pgcdc(elsewhere.args(&standby, &[])), TIMEOUT);
    let err = assert_clean_failure(&output, Some(3));
    assert!(
        err.contains("synced copy of the primary's failover slot"),
        "{err}"
    );
    let args: Vec<String> = elsewhere
        .args(&standby, &[])
        .into_iter()
        .map(|a| if a == SLOT { "other".to_owned() } else { a })
        .collect();
    let output = run(pgcdc(args), TIMEOUT);
    let err = assert_clean_failure(&output, Some(3));
    assert!(
        err.contains("the server is a standby") && err.contains("Stream from the primary"),
        "{err}"
    );
    kill_and_report(child, stderr, "check test: stopped");
    load.stop().await;
}
