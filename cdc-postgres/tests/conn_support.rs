//! Helpers shared by the `conn_*` integration tests (included with `mod conn_support;`;
//! also built as its own, empty, test target).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use cdc_core::Lsn;
use cdc_pgoutput::protocol::replication::ServerMessage;
use cdc_postgres::conn::{
    PreflightOptions, ProblemKind, ReplicationStream, SourceConfig, connect_sql, preflight,
};
use cdc_testkit::{Cluster, ClusterBuilder};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::Mutex;

/// One cluster shared by the tests of a file while any of them runs (tests run in
/// parallel; a cluster per test would be slow on small machines). Each test uses its own
/// users, tables, publications and slots.
#[derive(Debug)]
pub struct SharedCluster {
    slot: Mutex<Weak<Cluster>>,
}

impl Default for SharedCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedCluster {
    /// An empty holder, for a `static`.
    pub const fn new() -> Self {
        SharedCluster {
            slot: Mutex::const_new(Weak::new()),
        }
    }

    /// The running cluster, or a new one from `build` with `setup` (SQL run as the admin
    /// in database `postgres`) applied.
    pub async fn get(&self, build: impl FnOnce() -> ClusterBuilder, setup: &str) -> Arc<Cluster> {
        let mut slot = self.slot.lock().await;
        if let Some(cluster) = slot.upgrade() {
            return cluster;
        }
        let cluster = Arc::new(build().build().await.expect("start a test cluster"));
        if !setup.is_empty() {
            cluster.execute(setup).await.expect("cluster setup SQL");
        }
        *slot = Arc::downgrade(&cluster);
        cluster
    }
}

/// Percent-encodes a URI component (everything but ASCII letters and digits).
pub fn enc(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

/// `postgres://user:password@127.0.0.1:port/db?query`.
pub fn uri(cluster: &Cluster, user: &str, password: Option<&str>, db: &str, query: &str) -> String {
    let mut s = format!("postgres://{}", enc(user));
    if let Some(p) = password {
        s.push(':');
        s.push_str(&enc(p));
    }
    s.push_str(&format!("@127.0.0.1:{}/{}", cluster.port(), enc(db)));
    if !query.is_empty() {
        s.push('?');
        s.push_str(query);
    }
    s
}

/// Polls `check` until it returns `Some`, failing after `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the backend `pid` uses TLS, per `pg_stat_ssl`.
pub async fn backend_uses_tls(cluster: &Cluster, pid: i32) -> bool {
    let admin = cluster.connect("postgres").await.unwrap();
    admin
        .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .get(0)
}

/// Whether the SQL session `client` uses TLS, per `pg_stat_ssl`.
pub async fn sql_uses_tls(client: &tokio_postgres::Client) -> bool {
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The slot's `confirmed_flush_lsn`.
pub async fn confirmed_flush(cluster: &Cluster, slot: &str) -> Option<Lsn> {
    let lsn = cluster.slot_confirmed_flush_lsn(slot).await.unwrap()?;
    Some(lsn.parse().unwrap())
}

/// Whether the walsender `pid` is still connected.
pub async fn walsender_alive(cluster: &Cluster, pid: i32) -> bool {
    let admin = cluster.connect("postgres").await.unwrap();
    admin
        .query_opt("SELECT 1 FROM pg_stat_replication WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .is_some()
}

/// The end LSN of a pgoutput Commit message (`C`, flags, commit LSN, end LSN, time), if
/// `data` is one.
pub fn commit_end(data: &[u8]) -> Option<Lsn> {
    if data.first() != Some(&b'C') || data.len() < 26 {
        return None;
    }
    let end: [u8; 8] = data[10..18].try_into().ok()?;
    Some(Lsn(u64::from_be_bytes(end)))
}

/// Reads until `count` Commit messages arrived (within `limit`); returns their end LSNs
/// and every XLogData payload's first byte seen, in order.
pub async fn read_commits(
    stream: &mut ReplicationStream,
    count: usize,
    limit: Duration,
) -> (Vec<Lsn>, Vec<u8>) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut commits = Vec::new();
    let mut tags = Vec::new();
    while commits.len() < count {
        let message = tokio::time::timeout_at(deadline, stream.next_message())
            .await
            .unwrap_or_else(|_| panic!("timed out after {} of {count} commits", commits.len()))
            .expect("stream error")
            .expect("stream ended");
        if let ServerMessage::XLogData(x) = message {
            if let Some(&tag) = x.data.first() {
                tags.push(tag);
            }
            if let Some(end) = commit_end(&x.data) {
                commits.push(end);
            }
        }
    }
    (commits, tags)
}

/// A source of `publication` (narrowed to `tables` when not empty) on database
/// `postgres`, as the role `cdc` with the password `cdc-secret`.
pub fn source(cluster: &Cluster, publication: &str, tables: &[&str]) -> SourceConfig {
    SourceConfig::new(
        &uri(cluster, "cdc", Some("cdc-secret"), "postgres", ""),
        publication,
    )
    .unwrap()
    .with_tables(tables)
    .unwrap()
}

/// `preflight` for `config` over a new SQL connection.
pub async fn check(
    config: &SourceConfig,
    options: PreflightOptions,
) -> cdc_postgres::conn::PreflightReport {
    let client = connect_sql(&config.connection).await.unwrap();
    preflight(&client, config, &options).await.unwrap()
}

/// The kinds of `report`'s problems, in order.
pub fn kinds(report: &cdc_postgres::conn::PreflightReport) -> Vec<ProblemKind> {
    report.problems.iter().map(|p| p.kind.clone()).collect()
}
