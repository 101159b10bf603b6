//! Snapshot: one table of `--rows` rows copied by the library (`SnapshotMode::InitialOnly`, each
//! worker count of `--workers`) and by `psql` running `COPY … TO STDOUT` into `/dev/null`
//! (text, the anchor, and binary); runs alternate.

use benches::report::{Table, thousands};
use benches::row;

use crate::args::Args;
use crate::drain::{bench_cluster, create_table};
use crate::runner::{self, Run, Server, median, mib, secs};

/// Runs the snapshot scenario and prints its tables.
pub async fn run(args: &Args) -> Result<(), String> {
    let rows: u64 = args.value("rows", 1_000_000)?;
    let rounds: usize = args.value("rounds", 2)?;
    let workers = args.list("workers", &["1", "4"]);
    let chunk_pages = args.get("chunk-pages");
    eprintln!(
        "snapshot: {rows} rows; {rounds} round(s) of psql COPY (text, binary) and the library with {} worker(s)",
        workers.join(", ")
    );
    let cluster = bench_cluster(&[]).await?;
    create_table(&cluster).await?;
    runner::timed_sql(
        &cluster,
        &format!("insert {rows} rows"),
        &row::insert_select_sql("public.bench", 1, rows),
    )
    .await?;
    runner::timed_sql(&cluster, "vacuum analyze", "VACUUM ANALYZE public.bench").await?;
    let client = cluster
        .connect("postgres")
        .await
        .map_err(|e| e.to_string())?;
    let size = client
        .query_one(
            "SELECT pg_relation_size('public.bench'), relpages FROM pg_class WHERE oid = 'public.bench'::regclass",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    let (bytes, pages): (i64, i32) = (size.get(0), size.get(1));
    eprintln!("  table: {:.0} MB, {pages} pages", bytes as f64 / 1e6);

    let uri = cluster.uri("postgres", "postgres", None);
    let mut consumers: Vec<String> = vec!["psql-copy-text".into(), "psql-copy-binary".into()];
    consumers.extend(workers.iter().map(|w| format!("lib-{w}-workers")));
    let mut runs: Vec<(usize, Run)> = Vec::new();
    for round in 0..rounds {
        for consumer in &consumers {
            let cmd = if let Some(format) = consumer.strip_prefix("psql-copy-") {
                let sql = match format {
                    "binary" => "COPY public.bench TO STDOUT (FORMAT binary)",
                    _ => "COPY public.bench TO STDOUT",
                };
                let mut cmd = runner::pg_program(&cluster, "psql");
                cmd.args(["-X", "-q", "-h", cluster.host()])
                    .args(["-p", &cluster.port().to_string(), "-U", "postgres"])
                    .args(["-d", "postgres", "-c", sql]);
                cmd
            } else {
                let w = consumer
                    .trim_start_matches("lib-")
                    .trim_end_matches("-workers");
                let mut child_args = vec![
                    "--uri".to_owned(),
                    uri.clone(),
                    "--snapshot-only".to_owned(),
                    "--workers".to_owned(),
                    w.to_owned(),
                    "--sink".to_owned(),
                    "count".to_owned(),
                ];
                if let Some(p) = chunk_pages {
                    child_args.extend(["--chunk-pages".to_owned(), p.to_owned()]);
                }
                runner::consume_command(&child_args)?
            };
            // psql prints the table itself: straight to /dev/null.
            let discard = consumer.starts_with("psql");
            let run = runner::measure(&cluster, consumer, cmd, Server::Copy, discard).await?;
            eprintln!(
                "  round {round} {consumer}: {} s wall, {} s client CPU, {} s server CPU",
                secs(run.wall),
                secs(run.client.cpu()),
                secs(run.server.cpu())
            );
            if let Some(changes) = run.output_u64("changes")
                && changes != rows
            {
                return Err(format!("{consumer} copied {changes} rows, expected {rows}"));
            }
            runs.push((round, run));
        }
    }

    let mut table = Table::new([
        "consumer",
        "round",
        "wall s",
        "rows/s",
        "client CPU s",
        "peak RSS MB",
        "server CPU s",
        "other CPU s",
    ]);
    for (round, run) in &runs {
        table.row([
            run.label.clone(),
            round.to_string(),
            secs(run.wall),
            thousands(rows as f64 / run.wall.as_secs_f64()),
            secs(run.client.cpu()),
            mib(run.client.max_rss_kib),
            secs(run.server.cpu()),
            secs(run.others_cpu()),
        ]);
    }
    let wall_of = |c: &str| {
        median(
            runs.iter()
                .filter(|(_, r)| r.label == c)
                .map(|(_, r)| r.wall.as_secs_f64())
                .collect(),
        )
    };
    let anchor = wall_of("psql-copy-text");
    let mut summary = Table::new([
        "consumer (median)",
        "wall s",
        "rows/s",
        "wall ÷ psql COPY text",
    ]);
    for consumer in &consumers {
        let w = wall_of(consumer);
        summary.row([
            consumer.clone(),
            format!("{w:.2}"),
            thousands(rows as f64 / w),
            format!("{:.2}", w / anchor),
        ]);
    }
    println!(
        "\n## Snapshot: {rows} rows, {:.0} MB, {pages} pages\n",
        bytes as f64 / 1e6
    );
    println!("{}", table.to_markdown());
    println!("{}", summary.to_markdown());
    Ok(())
}
