//! What the server pays to read a table in key-ordered chunks, as the online snapshot
//! does, against one sequential `COPY` of it, as the consistent snapshot does: the
//! server-side floor of each mode, without any pgcdc client work.
//!
//! `pgbench_accounts` of a pgbench database of scale `--scale` is read by `psql -f` into
//! `/dev/null` in each of these ways, all in one run, alternating within each round:
//!
//! - one `COPY … TO STDOUT (FORMAT binary)` of the table (the consistent mode's read);
//! - chunks of `--chunk-rows` rows exactly as the online mode reads them: each a
//!   `REPEATABLE READ READ ONLY` transaction that takes its snapshot and WAL position,
//!   then `COPY (SELECT … WHERE key > lo AND key <= hi ORDER BY key LIMIT 2n)`;
//! - the same `COPY`s without their transactions (what the per-chunk statements cost);
//! - the same key ranges unordered, with index scans off (a bitmap heap scan);
//! - chunks of as many heap pages (`ctid` ranges: a TID range scan), the physical-order
//!   floor that a key-ordered read cannot reach.
//!
//! Server CPU is that of the backends running the COPYs (sampled from `/proc`).
//! `--shared-buffers SIZE` sets the server's buffer pool (default 256MB, as the other
//! scenarios).

use benches::report::Table;

use crate::args::Args;
use crate::runner::{self, Run, Server, median, secs};
use crate::snapshot_cli::pgbench_cluster;

/// The table read (pgbench's largest) and its columns, as pgcdc selects them.
const TABLE: &str = "public.pgbench_accounts";
const COLUMNS: &str = "aid, bid, abalance, filler";

/// Runs the scenario and prints its table.
pub async fn run(args: &Args) -> Result<(), String> {
    let scale: u32 = args.value("scale", 20)?;
    let rounds: usize = args.value("rounds", 3)?;
    let chunk_rows: Vec<u64> = args
        .list("chunk-rows", &["10000"])
        .iter()
        .map(|s| s.parse().map_err(|_| format!("--chunk-rows {s:?}")))
        .collect::<Result<_, _>>()?;
    let (cluster, rows, bytes) = pgbench_cluster(args, scale).await?;
    // pgbench's keys are 1 to the row count.
    let (rows, pages) = (rows.max(1), (bytes / 8192).max(1) as u64);

    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut variants: Vec<(String, std::path::PathBuf)> = Vec::new();
    let mut add = |label: String, sql: String| -> Result<(), String> {
        let path = scratch.path().join(format!("{}.sql", variants.len()));
        std::fs::write(&path, sql).map_err(|e| e.to_string())?;
        variants.push((label, path));
        Ok(())
    };
    add(
        "one COPY (binary)".to_owned(),
        format!("COPY {TABLE} TO STDOUT (FORMAT binary);\n"),
    )?;
    for &n in &chunk_rows {
        let ranges: Vec<(u64, u64)> = (0..rows.div_ceil(n))
            .map(|i| (i * n, (i + 1) * n))
            .collect();
        let chunks = ranges.len() as u64;
        let key_copy = |lo: u64, hi: u64, ordered: bool| {
            let tail = if ordered {
                format!(" ORDER BY aid LIMIT {}", 2 * n)
            } else {
                String::new()
            };
            format!(
                "COPY (SELECT {COLUMNS} FROM ONLY {TABLE} WHERE (aid) > ({lo}::int4) AND (aid) <= ({hi}::int4){tail}) TO STDOUT (FORMAT binary);\n"
            )
        };
        let online: String = ranges
            .iter()
            .map(|&(lo, hi)| {
                format!(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n\
                     SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text;\n{}COMMIT;\n",
                    key_copy(lo, hi, true)
                )
            })
            .collect();
        add(
            format!("{chunks} key chunks of {n}, as online reads"),
            online,
        )?;
        let bare: String = ranges
            .iter()
            .map(|&(lo, hi)| key_copy(lo, hi, true))
            .collect();
        add(format!("{chunks} key chunks of {n}, COPY only"), bare)?;
        let bitmap: String = std::iter::once("SET enable_indexscan = off;\n".to_owned())
            .chain(ranges.iter().map(|&(lo, hi)| key_copy(lo, hi, false)))
            .collect();
        add(
            format!("{chunks} key ranges of {n}, unordered (bitmap)"),
            bitmap,
        )?;
        let per_chunk = pages.div_ceil(chunks).max(1);
        let ctid: String = (0..chunks)
            .map(|i| {
                let (lo, hi) = (i * per_chunk, (i + 1) * per_chunk);
                format!(
                    "COPY (SELECT {COLUMNS} FROM ONLY {TABLE} WHERE ctid >= '({lo},0)' AND ctid < '({hi},0)') TO STDOUT (FORMAT binary);\n"
                )
            })
            .collect();
        add(format!("{chunks} ctid chunks of {per_chunk} pages"), ctid)?;
    }
    eprintln!(
        "chunk-reads: {rows} rows, {pages} pages, {rounds} round(s), {} ways",
        variants.len()
    );

    let mut runs: Vec<(usize, Run)> = Vec::new();
    for round in 0..rounds {
        for (index, (label, path)) in variants.iter().enumerate() {
            let mut cmd = runner::pg_program(&cluster, "psql");
            cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", cluster.host()])
                .args(["-p", &cluster.port().to_string(), "-U", "postgres"])
                .args(["-d", "postgres", "-f"])
                .arg(path);
            let run = runner::measure(&cluster, label, cmd, Server::Copy, true).await?;
            eprintln!(
                "  round {round} {label}: {} s wall, {} s server CPU",
                secs(run.wall),
                secs(run.server.cpu())
            );
            runs.push((index, run));
        }
    }

    let server = |index: usize| {
        median(
            runs.iter()
                .filter(|(i, _)| *i == index)
                .map(|(_, r)| r.server.cpu().as_secs_f64())
                .collect(),
        )
    };
    let wall = |index: usize| {
        median(
            runs.iter()
                .filter(|(i, _)| *i == index)
                .map(|(_, r)| r.wall.as_secs_f64())
                .collect(),
        )
    };
    let base = server(0);
    let mut table = Table::new([
        "read (median)",
        "wall s",
        "server CPU s",
        "server CPU ÷ one COPY",
    ]);
    for (index, (label, _)) in variants.iter().enumerate() {
        let cpu = server(index);
        table.row(vec![
            label.clone(),
            format!("{:.2}", wall(index)),
            format!("{cpu:.2}"),
            if base > 0.0 {
                format!("{:.2}", cpu / base)
            } else {
                "–".to_owned()
            },
        ]);
    }
    println!(
        "\n### Server cost of chunked reads: pgbench scale {scale} ({rows} rows), {rounds} round(s)\n"
    );
    println!("{}", table.to_markdown());
    Ok(())
}
