//! Large transaction memory: one transaction of `--rows` inserts consumed by the library,
//! protocol v1 (the transaction arrives after its commit) and streaming modes
//! (`Streaming::On`, protocol v2, and on PostgreSQL 16+ `Streaming::Parallel`, protocol
//! v4: the in-progress transaction is streamed; server setting
//! `logical_decoding_work_mem = 64kB`; `PGCDC_BENCH_PG=17` picks the server version). Each mode runs in its own child process, which
//! reports its peak RSS (`VmHWM`), so peaks never mix. `--consumer lib-count+opt=value…`
//! passes per-consumer options as in `drain`: `+stream-memory=BYTES` for the buffer bound,
//! `+heap-sample-ms=20` for the peak heap in use (a memory run: sampling costs CPU).

use benches::report::{Table, thousands};
use benches::row;

use crate::args::Args;
use crate::drain::{bench_cluster, create_slot, create_table, stream_consumer};
use crate::runner::{self, mib, secs};

/// Runs the large-transaction scenario and prints its table.
pub async fn run(args: &Args) -> Result<(), String> {
    let rows: u64 = args.value("rows", 1_000_000)?;
    let rounds: usize = args.value("rounds", 1)?;
    let cluster = bench_cluster(&[("logical_decoding_work_mem", "64kB")]).await?;
    let version = cluster
        .server_version_num()
        .await
        .map_err(|e| e.to_string())?;
    // v4 (parallel streaming) where the server has it.
    let modes: &[(&str, &str)] = if version >= 160000 {
        &[
            ("v1", "off"),
            ("v2-streaming", "on"),
            ("v4-parallel", "parallel"),
        ]
    } else {
        &[("v1", "off"), ("v2-streaming", "on")]
    };
    eprintln!(
        "bigtx: one transaction of {rows} inserts on PostgreSQL {version}; {rounds} round(s) of {}",
        modes.iter().map(|m| m.0).collect::<Vec<_>>().join(", ")
    );
    create_table(&cluster).await?;
    let mut slots = Vec::new();
    for round in 0..rounds {
        for &(mode, streaming) in modes {
            let slot = format!("bigtx_{round}_{}", mode.replace('-', "_"));
            create_slot(&cluster, &slot).await?;
            slots.push((round, mode, streaming, slot));
        }
    }
    runner::timed_sql(
        &cluster,
        &format!("insert {rows} rows in one transaction"),
        &row::insert_select_sql("public.bench", 1, rows),
    )
    .await?;
    let end = runner::current_lsn(&cluster).await?;
    let stats = cluster
        .connect("postgres")
        .await
        .map_err(|e| e.to_string())?;

    let mut table = Table::new([
        "mode",
        "round",
        "wall s",
        "changes/s",
        "client CPU s",
        "peak RSS MB (VmHWM)",
        "peak heap MB (sampled)",
        "walsender CPU s",
        "server spilled MB",
        "server streamed MB",
    ]);
    // `--consumer lib-count+stream-memory=8388608`: per-consumer options as in `drain`.
    let consumer = args.get("consumer").unwrap_or("lib-count");
    for (round, mode, streaming, slot) in &slots {
        let label = format!("lib-{mode}");
        let (cmd, server) = stream_consumer(
            &cluster,
            consumer,
            slot,
            &end,
            args,
            &["--streaming", streaming],
        )?;
        let run = runner::measure(&cluster, &label, cmd, server, false).await?;
        let changes = run.output_u64("changes").unwrap_or(0);
        if changes != rows {
            return Err(format!(
                "{label} delivered {changes} changes, expected {rows}"
            ));
        }
        let hwm = run
            .output_u64("vmhwm_kib")
            .unwrap_or(run.client.max_rss_kib);
        eprintln!(
            "  round {round} {label}: {} s wall, peak RSS {} MB (ru_maxrss {} MB)",
            secs(run.wall),
            mib(hwm),
            mib(run.client.max_rss_kib)
        );
        // Decoding statistics are reported by the walsender when it exits; give it a moment.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let (spilled, streamed) = stats
            .query_opt(
                "SELECT spill_bytes, stream_bytes FROM pg_stat_replication_slots WHERE slot_name = $1",
                &[slot],
            )
            .await
            .ok()
            .flatten()
            .map_or((0, 0), |r| (r.get::<_, i64>(0), r.get::<_, i64>(1)));
        table.row([
            label,
            round.to_string(),
            secs(run.wall),
            thousands(rows as f64 / run.wall.as_secs_f64()),
            secs(run.client.cpu()),
            mib(hwm),
            run.output_u64("heap_peak_kib")
                .filter(|&kib| kib > 0)
                .map_or_else(|| "–".to_string(), mib),
            secs(run.server.cpu()),
            format!("{:.0}", spilled as f64 / 1e6),
            format!("{:.0}", streamed as f64 / 1e6),
        ]);
    }
    println!(
        "\n## Large transaction: {rows} inserts in one transaction (logical_decoding_work_mem = 64kB)\n"
    );
    println!("{}", table.to_markdown());
    Ok(())
}
