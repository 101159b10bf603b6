//! The child side of a library run: `e2e consume …` streams (or snapshots) with `PgSource`
//! through a `Pipeline` into a counting sink or the Feldera JSON sink writing to
//! `std::io::sink()`, then prints `key=value` lines for the parent.
//!
//! Options: `--uri`, `--publication pub`, `--table public.bench`, then either
//! `--slot NAME --end LSN` (stream from a pre-created slot, no snapshot) or
//! `--snapshot-only --workers N [--chunk-pages N]`; `--sink count|feldera`,
//! `--format binary|text` (tuple format, default binary as the library's default),
//! `--streaming off|on`, `--threads N` (tokio workers, default 2), and stream tuning
//! `--read-buffer BYTES`, `--channel-capacity N`, `--max-events N`, `--low-water BYTES`
//! (`StreamOptions::receive_low_water`), `--batch-wait-us N` (`StreamOptions::batch_wait`),
//! `--local-rcvbuf BYTES` and `--local-wait-us N` (`StreamOptions::local_batching`; a
//! receive buffer of 0 turns it off),
//! `--stream-memory BYTES` (`PgSourceOptions::stream_memory_limit`); `--heap-sample-ms N`
//! samples the heap in use every N ms and reports its peak (default 0: off; memory runs
//! only, it costs CPU).

use std::process::ExitCode;
use std::time::Instant;

use benches::measure;
use benches::sinks::{Counted, Discard};
use cdc_core::{Lsn, Pipeline, PipelineConfig, Sink};
use cdc_postgres::conn::{LocalBatching, SnapshotMode, SourceConfig, Streaming};
use cdc_postgres::source::{PgSource, PgSourceOptions};
use cdc_sinks::feldera::{EncoderOptions, FelderaStreamSink, Framing};

use crate::args::Args;

/// The `consume` command: one library run; `key=value` results on stdout.
pub fn main(args: &Args) -> ExitCode {
    let threads = match args.value("threads", 2usize) {
        Ok(n) => n.max(1),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(consume(args)) {
        Ok(lines) => {
            println!("{lines}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("consume failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn options(args: &Args) -> Result<PgSourceOptions, String> {
    let uri = args.required("uri")?;
    let publication = args.get("publication").unwrap_or("pub");
    let table = args.get("table").unwrap_or("public.bench");
    let mut config = SourceConfig::new(uri, publication)
        .and_then(|c| c.with_tables([table]))
        .map_err(|e| e.to_string())?;
    if let Some(slot) = args.get("slot") {
        config = config.with_slot(slot).map_err(|e| e.to_string())?;
        config.snapshot = SnapshotMode::Never;
    }
    if let Some(max) = args.get("max-events") {
        config.batch.max_events = max.parse().map_err(|_| "invalid --max-events")?;
    }
    let mut options = PgSourceOptions::new(config);
    if let Some(end) = args.get("end") {
        options.end_lsn = Some(end.parse::<Lsn>().map_err(|e| format!("--end: {e}"))?);
    }
    options.binary = match args.get("format").unwrap_or("binary") {
        "binary" => true,
        "text" => false,
        other => return Err(format!("--format {other:?}: expected binary or text")),
    };
    options.config.streaming = match args.get("streaming").unwrap_or("off") {
        "auto" => Streaming::Auto,
        "off" => Streaming::Off,
        "on" => Streaming::On,
        "parallel" => Streaming::Parallel,
        other => {
            return Err(format!(
                "--streaming {other:?}: expected auto, off, on or parallel"
            ));
        }
    };
    if args.flag("snapshot-only") {
        options.config.snapshot = SnapshotMode::InitialOnly;
    }
    options.snapshot_workers = args.value("workers", options.snapshot_workers)?;
    options.snapshot_chunk_pages = args.value("chunk-pages", options.snapshot_chunk_pages)?;
    options.stream_memory_limit = args.value("stream-memory", options.stream_memory_limit)?;
    options.stream.read_buffer_size = args.value("read-buffer", options.stream.read_buffer_size)?;
    options.stream.channel_capacity =
        args.value("channel-capacity", options.stream.channel_capacity)?;
    options.stream.receive_low_water = args.value("low-water", options.stream.receive_low_water)?;
    let batch_wait_us = args.value(
        "batch-wait-us",
        options.stream.batch_wait.as_micros() as u64,
    )?;
    options.stream.batch_wait = std::time::Duration::from_micros(batch_wait_us);
    // `--local-rcvbuf 0` reads a local server like a remote one (before `LocalBatching`).
    let local = options.stream.local_batching.unwrap_or_default();
    let local_rcvbuf = args.value("local-rcvbuf", local.receive_buffer)?;
    let local_wait_us = args.value("local-wait-us", local.wait.as_micros() as u64)?;
    options.stream.local_batching = (local_rcvbuf > 0).then_some(LocalBatching {
        receive_buffer: local_rcvbuf,
        wait: std::time::Duration::from_micros(local_wait_us),
    });
    Ok(options)
}

async fn run<S: Sink + 'static>(
    options: PgSourceOptions,
    sink: Counted<S>,
    heap_sample_ms: u64,
) -> Result<String, String> {
    let counts = sink.counts();
    let heap = (heap_sample_ms > 0)
        .then(|| measure::HeapSampler::start(std::time::Duration::from_millis(heap_sample_ms)));
    let started = Instant::now();
    let summary = Pipeline::new(PgSource::new(options), sink, PipelineConfig::default())
        .run()
        .await
        .map_err(|e| e.to_string())?;
    let elapsed = started.elapsed();
    let heap_peak_kib = heap.map_or(0, |h| h.finish() / 1024);
    let usage = measure::self_usage().map_err(|e| e.to_string())?;
    Ok(format!(
        "changes={}\nevents={}\nbatches={}\nconfirmed={}\nelapsed_us={}\ncpu_us={}\nvmhwm_kib={}\nheap_peak_kib={}",
        counts.changes(),
        counts.events(),
        counts.batches(),
        summary.confirmed,
        elapsed.as_micros(),
        usage.cpu().as_micros(),
        measure::proc_status_kib("VmHWM").unwrap_or(0),
        heap_peak_kib,
    ))
}

async fn consume(args: &Args) -> Result<String, String> {
    let options = options(args)?;
    let heap_sample_ms = args.value("heap-sample-ms", 0u64)?;
    match args.get("sink").unwrap_or("count") {
        "count" => run(options, Counted::new(Discard), heap_sample_ms).await,
        "feldera" => {
            let sink = FelderaStreamSink::new(
                std::io::sink(),
                {
                    let mut options = EncoderOptions::default();
                    options.table_key = true;
                    options
                },
                Framing::Lines,
            );
            run(options, Counted::new(sink), heap_sample_ms).await
        }
        other => Err(format!("--sink {other:?}: expected count or feldera")),
    }
}
