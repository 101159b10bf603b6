//! Snapshot through the CLI, as a user runs it: `pgbench_accounts` of a pgbench database
//! of scale `--scale` copied by `pgcdc stream` writing Feldera JSON — to stdout (into
//! `/dev/null`) or into `--out-dir` files — in the consistent mode (`--snapshot
//! initial-only`) and the online mode (`--snapshot online --end-lsn <now>` on a new slot),
//! with each reader count of `--readers`, next to `psql -c "COPY … TO STDOUT"` into
//! `/dev/null` (the anchor), all in one run, runs alternating within each round.
//!
//! The anchor runs before every pgcdc run and once more at the end of each round, so each
//! pgcdc run has an anchor run on either side of it: besides the ratio of medians, the
//! summary gives the median of each run's ratio to the mean of its two neighbours, which
//! a machine whose speed drifts during a round (it does, by half within minutes on a
//! shared VM) skews far less.
//!
//! `--shared-buffers SIZE` sets the server's buffer pool (default 256MB).
//!
//! With `--write-tps N[,M…]`, every pgcdc run is made at each of these write rates (0:
//! none; the anchor always runs without writes): a writer updates random accounts at
//! about N transactions a second during the run, and for the online runs the stream's lag
//! (the server's WAL insert position minus the slot's `confirmed_flush_lsn`) is sampled
//! every 50 ms while the snapshot runs: its median and maximum are reported. With a rate
//! of 0 among them, the summary gives each run under writes over the same run without.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use benches::report::{Table, thousands};

use crate::args::Args;
use crate::drain::bench_cluster;
use crate::runner::{self, Run, Server, median, mib, secs};
use cdc_testkit::Cluster;

/// The table copied (pgbench's largest).
const TABLE: &str = "public.pgbench_accounts";

/// One way of copying the table.
#[derive(Debug, Clone, PartialEq)]
struct Consumer {
    /// `psql`, `consistent` or `online`.
    mode: &'static str,
    /// `stdout` or `out-dir` (pgcdc only).
    output: &'static str,
    readers: u16,
    /// Write transactions a second during the run (0: none).
    write_tps: u32,
    /// Run the earlier build `PGCDC_BENCH_BASE_BIN` names instead of this one.
    base: bool,
}

impl Consumer {
    fn label(&self) -> String {
        let writes = if self.write_tps > 0 {
            format!(" + {} writes/s", self.write_tps)
        } else {
            String::new()
        };
        let base = if self.base { " (base build)" } else { "" };
        match self.mode {
            "psql" => format!("psql COPY text{writes}"),
            "debezium" => format!("Debezium 3.6 initial_only{writes}"),
            "debezium-incremental" => format!("Debezium 3.6 incremental{writes}"),
            mode => format!(
                "pgcdc {mode} {} ×{}{writes}{base}",
                self.output, self.readers
            ),
        }
    }

    /// The same run without writes.
    fn idle(&self) -> Consumer {
        Consumer {
            write_tps: 0,
            ..self.clone()
        }
    }
}

/// Runs the scenario and prints its tables.
pub async fn run(args: &Args) -> Result<(), String> {
    let scale: u32 = args.value("scale", 20)?;
    let rounds: usize = args.value("rounds", 3)?;
    let write_rates: Vec<u32> = args
        .list("write-tps", &["0"])
        .iter()
        .map(|r| r.parse().map_err(|_| format!("invalid write rate {r:?}")))
        .collect::<Result<_, _>>()?;
    let readers: Vec<u16> = args
        .list("readers", &["1", "2", "4"])
        .iter()
        .map(|r| r.parse().map_err(|_| format!("invalid reader count {r:?}")))
        .collect::<Result<_, _>>()?;
    let modes = args.list("modes", &["consistent", "online"]);
    let outputs = args.list("outputs", &["stdout", "out-dir"]);
    let binary = runner::pgcdc_binary()?;

    let (cluster, rows, bytes) = pgbench_cluster(args, scale).await?;
    runner::timed_sql(
        &cluster,
        "publication",
        &format!("CREATE PUBLICATION pub FOR TABLE {TABLE}"),
    )
    .await?;
    let admin = cluster
        .connect("postgres")
        .await
        .map_err(|e| e.to_string())?;

    let mut consumers = vec![Consumer {
        mode: "psql",
        output: "stdout",
        readers: 1,
        write_tps: 0,
        base: false,
    }];
    // With PGCDC_BENCH_BASE_BIN, every pgcdc run is made with that earlier build too.
    let base_binary = std::env::var("PGCDC_BENCH_BASE_BIN")
        .ok()
        .map(std::path::PathBuf::from);
    for mode in ["debezium", "debezium-incremental"] {
        if modes.iter().any(|m| m == mode) {
            consumers.push(Consumer {
                mode,
                output: "stdout",
                readers: 1,
                write_tps: 0,
                base: false,
            });
        }
    }
    if modes.iter().any(|m| m == "debezium-incremental") {
        // Debezium's incremental snapshot is driven by a signal table, which its
        // publication must hold (and where it writes its chunks' watermarks).
        runner::timed_sql(
            &cluster,
            "signal table",
            &format!(
                "CREATE TABLE public.debezium_signal (id varchar(42) PRIMARY KEY, \
                 type varchar(32) NOT NULL, data varchar(2048)); \
                 CREATE PUBLICATION pub_dbz FOR TABLE {TABLE}, public.debezium_signal"
            ),
        )
        .await?;
    }
    for mode in ["consistent", "online"] {
        if !modes.iter().any(|m| m == mode) {
            continue;
        }
        for output in ["stdout", "out-dir"] {
            if !outputs.iter().any(|o| o == output) {
                continue;
            }
            for &r in &readers {
                for &write_tps in &write_rates {
                    for base in [false, true] {
                        if base && base_binary.is_none() {
                            continue;
                        }
                        consumers.push(Consumer {
                            mode,
                            output,
                            readers: r,
                            write_tps,
                            base,
                        });
                    }
                }
            }
        }
    }
    eprintln!(
        "snapshot-cli: {rows} rows ({:.0} MB), {rounds} round(s), {} consumers{}",
        bytes as f64 / 1e6,
        consumers.len(),
        if write_rates.iter().any(|&r| r > 0) {
            format!(", writes/s {write_rates:?}")
        } else {
            String::new()
        }
    );

    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut runs: Vec<(Consumer, Run, Option<Lag>)> = Vec::new();
    // The anchor before each pgcdc run and once more after the last (see the module doc).
    let anchor = consumers.first().cloned();
    let mut sequence: Vec<Consumer> = Vec::new();
    for consumer in consumers.iter().skip(1) {
        sequence.extend(anchor.clone());
        sequence.push(consumer.clone());
    }
    sequence.extend(anchor);
    for round in 0..rounds {
        for (n, consumer) in sequence.iter().enumerate() {
            let slot = format!("snap_{round}_{n}");
            let out_dir = scratch.path().join(&slot);
            let cmd = match consumer.mode {
                "psql" => {
                    let mut cmd = runner::pg_program(&cluster, "psql");
                    cmd.args(["-X", "-q", "-h", cluster.host()])
                        .args(["-p", &cluster.port().to_string(), "-U", "postgres"])
                        .args(["-d", "postgres", "-c"])
                        .arg(format!("COPY {TABLE} TO STDOUT"));
                    cmd
                }
                "debezium" => {
                    // Debezium's initial snapshot on its own new slot, its defaults, the
                    // records counted in a callback that does nothing else.
                    let out = scratch.path().join(format!("{slot}.jsonl"));
                    debezium_count(&cluster, "pub", &slot, "initial_only", rows, 900, &out)?
                }
                "debezium-incremental" => {
                    // Debezium streaming from its own new slot, then an incremental
                    // snapshot of the table asked for through the signal table (its
                    // default chunk size), the records counted as above.
                    let out = scratch.path().join(format!("{slot}.jsonl"));
                    let mut cmd =
                        debezium_count(&cluster, "pub_dbz", &slot, "no_data", rows, 1800, &out)?;
                    cmd.args(["-p", "signal.data.collection=public.debezium_signal"])
                        .arg("--ready-file")
                        .arg(scratch.path().join(format!("{slot}.ready")));
                    cmd
                }
                mode => {
                    let program = match (&base_binary, consumer.base) {
                        (Some(base), true) => base.clone(),
                        _ => binary.clone(),
                    };
                    let mut cmd = std::process::Command::new(program);
                    cmd.args([
                        "stream",
                        "--uri",
                        &cluster.uri("postgres", "postgres", None),
                    ])
                    .args(["--publication", "pub", "--table", TABLE])
                    .args(["--snapshot-workers", &consumer.readers.to_string()])
                    .args(["--quiet", "--summary", "none"]);
                    if mode == "online" {
                        let end = runner::current_lsn(&cluster).await?;
                        cmd.args(["--snapshot", "online", "--slot", &slot, "--create-slot"])
                            .args(["--end-lsn", &end]);
                    } else {
                        cmd.args(["--snapshot", "initial-only"]);
                    }
                    if consumer.output == "out-dir" {
                        cmd.arg("--out-dir").arg(&out_dir);
                    }
                    cmd
                }
            };
            let writing = Arc::new(AtomicBool::new(true));
            let write_tps = consumer.write_tps;
            let writer = (write_tps > 0).then(|| {
                let cluster_uri = cluster.uri("postgres", "postgres", None);
                tokio::spawn(write_load(cluster_uri, rows, write_tps, writing.clone()))
            });
            let signal = (consumer.mode == "debezium-incremental").then(|| {
                tokio::spawn(signal_incremental_snapshot(
                    cluster.uri("postgres", "postgres", None),
                    scratch.path().join(format!("{slot}.ready")),
                    round,
                ))
            });
            let lag = (consumer.mode == "online").then(|| {
                let uri = cluster.uri("postgres", "postgres", None);
                tokio::spawn(sample_lag(uri, slot.clone(), writing.clone()))
            });
            // Output goes to /dev/null for psql and for pgcdc to stdout (Feldera JSON).
            let discard = consumer.output == "stdout";
            let run =
                runner::measure(&cluster, &consumer.label(), cmd, Server::Copy, discard).await;
            writing.store(false, Ordering::Release);
            if let Some(signal) = signal {
                signal.await.map_err(|e| e.to_string())??;
            }
            if let Some(writer) = writer {
                writer.await.map_err(|e| e.to_string())??;
            }
            let lag = match lag {
                Some(lag) => Some(lag.await.map_err(|e| e.to_string())?),
                None => None,
            };
            let run = run?;
            if consumer.mode == "online" {
                admin
                    .batch_execute(&format!("SELECT pg_drop_replication_slot('{slot}')"))
                    .await
                    .map_err(|e| format!("dropping {slot}: {e}"))?;
            }
            if consumer.output == "out-dir" {
                check_out_dir(&out_dir, rows, write_tps > 0)?;
                let _ = std::fs::remove_dir_all(&out_dir);
            }
            eprintln!(
                "  round {round} {}: {} s wall, {} s client CPU, {} s server CPU{}",
                consumer.label(),
                secs(run.wall),
                secs(run.client.cpu()),
                secs(run.server.cpu()),
                lag.as_ref()
                    .map(|l| format!(", lag median {} max {}", l.median_text(), l.max_text()))
                    .unwrap_or_default()
            );
            runs.push((consumer.clone(), run, lag));
        }
    }
    print_tables(&consumers, &runs, rows, bytes, scale);
    Ok(())
}

/// Debezium counting `rows` records of the table from `publication` on its own new slot
/// `slot` (dropped when it stops) with `snapshot_mode`, stopping after `max_runtime`
/// seconds at the latest.
fn debezium_count(
    cluster: &Cluster,
    publication: &str,
    slot: &str,
    snapshot_mode: &str,
    rows: u64,
    max_runtime: u32,
    out: &std::path::Path,
) -> Result<std::process::Command, String> {
    let mut cmd = super::drain::debezium_command()?;
    cmd.args(["--host", cluster.host()])
        .args(["--port", &cluster.port().to_string()])
        .args(["--user", "postgres", "--dbname", "postgres"])
        .args([
            "--publication",
            publication,
            "--slot",
            slot,
            "--tables",
            TABLE,
        ])
        .args(["--snapshot-mode", snapshot_mode, "--count-only"])
        .args(["--max-events", &rows.to_string()])
        .args(["--max-runtime", &max_runtime.to_string()])
        .args(["--fresh", "--drop-slot-on-stop"])
        .arg("--out")
        .arg(out);
    Ok(cmd)
}

/// Once Debezium's connector has started (its slot exists: `ready` is written), asks it
/// for an incremental snapshot of the table by a row in its signal table, which it reads
/// from the stream.
async fn signal_incremental_snapshot(
    uri: String,
    ready: std::path::PathBuf,
    round: usize,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    while !ready.exists() {
        if started.elapsed() > Duration::from_secs(120) {
            return Err("Debezium's connector did not start within 120 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (client, connection) = tokio_postgres::connect(&uri, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("signal connection: {e}"))?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "INSERT INTO public.debezium_signal VALUES ('snapshot-{round}-{}', \
             'execute-snapshot', '{{\"data-collections\": [\"{TABLE}\"], \
             \"type\": \"incremental\"}}')",
            std::process::id()
        ))
        .await
        .map_err(|e| format!("signal insert: {e}"))
}

/// A throwaway cluster (`--shared-buffers`, default 256MB as the other scenarios) holding
/// a pgbench database of scale `scale`. At scale 20 `pgbench_accounts` is larger than
/// 256MB: chunked reads then go through the buffer pool and evict one another, while one
/// large sequential scan reads through a small ring of buffers of its own (see
/// `chunk_reads`).
///
/// `pgbench_accounts` is vacuumed and analyzed; returns the cluster, its row count and its
/// size in bytes.
pub async fn pgbench_cluster(args: &Args, scale: u32) -> Result<(Cluster, u64, i64), String> {
    let shared_buffers: String = args.value("shared-buffers", "256MB".to_owned())?;
    let cluster = bench_cluster(&[("shared_buffers", shared_buffers.as_str())]).await?;
    let started = std::time::Instant::now();
    let mut init = runner::pg_program(&cluster, "pgbench");
    init.args(["-i", "-q", "-s", &scale.to_string(), "-h", cluster.host()])
        .args([
            "-p",
            &cluster.port().to_string(),
            "-U",
            "postgres",
            "postgres",
        ])
        .stdout(std::process::Stdio::null());
    let status = init
        .status()
        .map_err(|e| format!("cannot run pgbench: {e}"))?;
    if !status.success() {
        return Err(format!("pgbench -i failed: {status}"));
    }
    eprintln!(
        "  pgbench -i -s {scale}: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    runner::timed_sql(&cluster, "vacuum", &format!("VACUUM ANALYZE {TABLE}")).await?;
    let admin = cluster
        .connect("postgres")
        .await
        .map_err(|e| e.to_string())?;
    let row = admin
        .query_one(
            &format!("SELECT count(*), pg_relation_size('{TABLE}') FROM {TABLE}"),
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    let (rows, bytes): (i64, i64) = (row.get(0), row.get(1));
    Ok((cluster, rows.max(0) as u64, bytes))
}

/// Each run of `consumer` (not the anchor) over the mean wall time of the anchor runs right
/// before and after it in `runs` (the order they ran in).
fn paired_ratios(runs: &[(Consumer, Run, Option<Lag>)], consumer: &Consumer) -> Vec<f64> {
    let is_anchor = |i: usize| runs.get(i).is_some_and(|(c, _, _)| c.mode == "psql");
    let wall = |i: usize| runs.get(i).map(|(_, r, _)| r.wall.as_secs_f64());
    if consumer.mode == "psql" {
        return Vec::new();
    }
    runs.iter()
        .enumerate()
        .filter(|(_, (c, _, _))| c == consumer)
        .filter_map(|(i, (_, run, _))| {
            let neighbours: Vec<f64> = [i.checked_sub(1), i.checked_add(1)]
                .into_iter()
                .flatten()
                .filter(|&j| is_anchor(j))
                .filter_map(wall)
                .collect();
            if neighbours.is_empty() {
                return None;
            }
            let anchor = neighbours.iter().sum::<f64>() / neighbours.len() as f64;
            Some(run.wall.as_secs_f64() / anchor)
        })
        .collect()
}

/// The stream's lag behind the server while an online snapshot runs.
#[derive(Debug, Clone, Default)]
struct Lag {
    /// Bytes of WAL between the insert position and `confirmed_flush_lsn`, per sample.
    samples: Vec<f64>,
}

impl Lag {
    fn median_text(&self) -> String {
        if self.samples.is_empty() {
            return "no samples".to_owned();
        }
        format!("{:.1} kB", median(self.samples.clone()) / 1e3)
    }

    fn max_text(&self) -> String {
        let max = self.samples.iter().copied().fold(0.0, f64::max);
        format!("{:.1} kB ({} samples)", max / 1e3, self.samples.len())
    }
}

/// Samples the lag of `slot` every 50 ms until `running` goes false (samples start once
/// the slot exists and holds a confirmed position).
async fn sample_lag(uri: String, slot: String, running: Arc<AtomicBool>) -> Lag {
    let mut lag = Lag::default();
    let Ok((client, connection)) = tokio_postgres::connect(&uri, tokio_postgres::NoTls).await
    else {
        return lag;
    };
    tokio::spawn(connection);
    while running.load(Ordering::Acquire) {
        if let Ok(Some(row)) = client
            .query_opt(
                "SELECT (pg_current_wal_insert_lsn() - confirmed_flush_lsn)::float8 \
                 FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL",
                &[&slot],
            )
            .await
            && let Ok(bytes) = row.try_get::<_, f64>(0)
        {
            lag.samples.push(bytes);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lag
}

/// Updates random accounts (and appends to `pgbench_history`, as pgbench's simple-update
/// does) at about `tps` transactions a second until `running` goes false.
async fn write_load(
    uri: String,
    rows: u64,
    tps: u32,
    running: Arc<AtomicBool>,
) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(&uri, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("write load: {e}"))?;
    tokio::spawn(connection);
    let interval = Duration::from_secs_f64(1.0 / f64::from(tps.max(1)));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut n: u64 = 0;
    while running.load(Ordering::Acquire) {
        ticker.tick().await;
        n += 1;
        // Spread over the table by a multiplicative hash, so updates land in chunks
        // already copied, being copied and not yet copied.
        let aid = 1 + (n.wrapping_mul(2_654_435_761) % rows.max(1));
        client
            .batch_execute(&format!(
                "BEGIN; UPDATE {TABLE} SET abalance = abalance + 1 WHERE aid = {aid}; \
                 INSERT INTO public.pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, {aid}, 1, now()); COMMIT;"
            ))
            .await
            .map_err(|e| format!("write load: {e}"))?;
    }
    Ok(())
}

/// The `--out-dir` output holds every row of the table (more with writes: updates).
fn check_out_dir(dir: &std::path::Path, rows: u64, writes: bool) -> Result<(), String> {
    let mut lines = 0u64;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "json")
            && path.to_string_lossy().contains("pgbench_accounts")
        {
            // Read in pieces: a whole file in this process's memory would show in the
            // peak RSS of every consumer forked after it (a child's peak counts the
            // parent's pages it started with, before exec).
            let mut file = std::fs::File::open(&path).map_err(|e| e.to_string())?;
            let mut buffer = vec![0u8; 1 << 16];
            loop {
                let n = std::io::Read::read(&mut file, &mut buffer).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                lines += buffer
                    .get(..n)
                    .unwrap_or_default()
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count() as u64;
            }
        }
    }
    if lines < rows || (!writes && lines != rows) {
        return Err(format!(
            "{} holds {lines} lines of pgbench_accounts, expected {rows}",
            dir.display()
        ));
    }
    Ok(())
}

fn print_tables(
    consumers: &[Consumer],
    runs: &[(Consumer, Run, Option<Lag>)],
    rows: u64,
    bytes: i64,
    scale: u32,
) {
    let mut table = Table::new([
        "run",
        "wall s",
        "rows/s",
        "client CPU s (user+sys)",
        "peak RSS MB",
        "server CPU s",
        "other CPU s",
        "lag median / max",
    ]);
    for (consumer, run, lag) in runs {
        table.row([
            consumer.label(),
            secs(run.wall),
            thousands(rows as f64 / run.wall.as_secs_f64()),
            format!(
                "{} ({}+{})",
                secs(run.client.cpu()),
                secs(run.client.user),
                secs(run.client.system)
            ),
            mib(run.client.max_rss_kib),
            secs(run.server.cpu()),
            secs(run.others_cpu()),
            lag.as_ref()
                .map(|l| format!("{} / {}", l.median_text(), l.max_text()))
                .unwrap_or_else(|| "–".to_owned()),
        ]);
    }
    let of = |c: &Consumer, f: &dyn Fn(&Run) -> f64| {
        median(
            runs.iter()
                .filter(|(k, _, _)| k == c)
                .map(|(_, r, _)| f(r))
                .collect(),
        )
    };
    let anchor = consumers
        .first()
        .map_or(1.0, |c| of(c, &|r: &Run| r.wall.as_secs_f64()));
    let mut summary = Table::new([
        "run (median)",
        "wall s",
        "rows/s",
        "client CPU s",
        "server CPU s",
        "wall ÷ psql COPY",
        "÷ neighbouring psql",
        "÷ same run without writes",
    ]);
    for consumer in consumers {
        let wall = of(consumer, &|r: &Run| r.wall.as_secs_f64());
        let paired = paired_ratios(runs, consumer);
        let paired = if paired.is_empty() {
            "–".to_owned()
        } else {
            format!("{:.2}", median(paired))
        };
        let idle = consumer.idle();
        let over_idle = if consumer.write_tps > 0 && consumers.contains(&idle) {
            format!("{:.2}", wall / of(&idle, &|r: &Run| r.wall.as_secs_f64()))
        } else {
            "–".to_owned()
        };
        summary.row([
            consumer.label(),
            format!("{wall:.2}"),
            thousands(rows as f64 / wall),
            format!(
                "{:.2}",
                of(consumer, &|r: &Run| r.client.cpu().as_secs_f64())
            ),
            format!(
                "{:.2}",
                of(consumer, &|r: &Run| r.server.cpu().as_secs_f64())
            ),
            format!("{:.2}", wall / anchor),
            paired,
            over_idle,
        ]);
    }
    println!(
        "\n## Snapshot through the CLI: pgbench scale {scale}, {TABLE} ({rows} rows, {:.0} MB)\n",
        bytes as f64 / 1e6,
    );
    println!("{}", table.to_markdown());
    println!("{}", summary.to_markdown());
}
