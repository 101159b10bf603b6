//! Latency: rows stamped with their commit-time clock (`committed_us`, microseconds since
//! the Unix epoch from `clock_timestamp()`), written at a fixed rate, and the time each
//! reaches the consumer:
//!
//! - `stdout`: `pgcdc stream --snapshot never` (Feldera JSON on stdout), arrival when the
//!   line is read from its stdout pipe;
//! - `out-dir`: `pgcdc stream --out-dir`, arrival when a checkpoint that covers the line is
//!   visible (the exactly-once contract: a consumer reads only up to the lengths in
//!   `pgcdc-checkpoint.json`), polled every millisecond;
//! - `lib`: the library (`PgSource` → `Pipeline`) into a sink that takes the time in
//!   `write`.
//!
//! Rates are changes per second: up to 1,000 in one-row transactions, above in 100-row
//! transactions; `max` writes as fast as two connections can. Every consumer runs with
//! default settings. Prints a table and writes an SVG plot (`--plot PATH`).
//!
//! The `stdout` run also serves `--metrics-addr` and scrapes `pgcdc_lag_seconds` every
//! 100 ms while the load runs, next to the same quantity measured here (now − the commit
//! stamp of the last row read from pgcdc's stdout): the table reports how far they differ.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use benches::report::{Table, thousands};
use cdc_core::{
    Ack, Acknowledger, EventKind, Pipeline, PipelineConfig, ResumeToken, Sink, SinkBatch, Value,
};
use cdc_postgres::conn::{SnapshotMode, SourceConfig};
use cdc_postgres::source::{PgSource, PgSourceOptions};
use cdc_testkit::{ADMIN_USER, Cluster};

use crate::args::Args;
use crate::drain::{bench_cluster, create_slot};

/// Latencies in milliseconds, shared between a reader and the scenario.
type Samples = Arc<Mutex<Vec<f64>>>;

/// The stdout consumer's metrics address and the commit stamp of the last row it printed.
#[derive(Clone, Default)]
struct LagProbe {
    addr: Arc<Mutex<Option<std::net::SocketAddr>>>,
    last_seen_us: Arc<std::sync::atomic::AtomicI64>,
}

impl LagProbe {
    /// Scrapes `pgcdc_lag_seconds` every 100 ms until `stop`; returns |metric − measured|
    /// in ms for every scrape taken while rows had been seen.
    fn scrape_until(&self, stop: &std::sync::atomic::AtomicBool) -> Vec<f64> {
        let mut diffs = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
            let Some(addr) = self.addr.lock().ok().and_then(|a| *a) else {
                continue;
            };
            let now = now_us();
            let seen = self.last_seen_us.load(std::sync::atomic::Ordering::SeqCst);
            let Some(metric_s) = scrape_lag(addr) else {
                continue;
            };
            if seen > 0 {
                let measured_ms = (now - seen) as f64 / 1000.0;
                diffs.push((metric_s * 1000.0 - measured_ms).abs());
            }
        }
        diffs
    }
}

/// `pgcdc_lag_seconds` from `/metrics` at `addr`.
fn scrape_lag(addr: std::net::SocketAddr) -> Option<f64> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix("pgcdc_lag_seconds "))
        .and_then(|v| v.trim().parse().ok())
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `committed_us` of a Feldera JSON line, if it is an insert of the latency table.
fn committed_us(line: &str) -> Option<i64> {
    let rest = line.split("\"committed_us\":").nth(1)?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Runs the scenario.
pub async fn run(args: &Args) -> Result<(), String> {
    let consumers = args.list("consumers", &["stdout", "out-dir", "lib"]);
    let rates = args.list("rates", &["10", "1000", "50000", "max"]);
    let seconds: u64 = args.value("seconds", 5)?;
    let plot: PathBuf = args
        .get("plot")
        .map_or_else(|| PathBuf::from("target/latency.svg"), PathBuf::from);
    let pgcdc = crate::runner::pgcdc_binary()?;
    let cluster = bench_cluster(&[]).await?;
    cluster
        .execute(
            "CREATE TABLE public.lat (id bigserial PRIMARY KEY, committed_us int8 NOT NULL, pad text);
             CREATE PUBLICATION pub FOR TABLE public.lat;",
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut table = Table::new([
        "consumer",
        "rate (changes/s)",
        "achieved changes/s",
        "samples",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "pgcdc_lag_seconds − measured: median / max abs. difference, ms",
    ]);
    let mut points: Vec<(String, f64, [f64; 4])> = Vec::new();
    for consumer in &consumers {
        for rate in &rates {
            let slot = format!("lat_{}_{}", consumer.replace('-', "_"), rate);
            create_slot(&cluster, &slot).await?;
            let samples: Samples = Arc::new(Mutex::new(Vec::new()));
            let probe = LagProbe::default();
            let running =
                start_consumer(consumer, &cluster, &slot, &pgcdc, &samples, &probe).await?;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let scraping = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let scraper = (consumer == "stdout").then(|| {
                let probe = probe.clone();
                let stop = scraping.clone();
                std::thread::spawn(move || probe.scrape_until(&stop))
            });
            let written = load(&cluster, rate, Duration::from_secs(seconds)).await?;
            scraping.store(true, std::sync::atomic::Ordering::SeqCst);
            let mut lag_diffs = scraper
                .map(|s| s.join().unwrap_or_default())
                .unwrap_or_default();
            lag_diffs.sort_by(f64::total_cmp);
            let agreement = if lag_diffs.is_empty() {
                "–".to_owned()
            } else {
                format!(
                    "{:.1} / {:.1} ({} scrapes)",
                    lag_diffs[lag_diffs.len() / 2],
                    lag_diffs[lag_diffs.len() - 1],
                    lag_diffs.len()
                )
            };
            // Let the tail arrive (a consumer that fell behind at `max` catches up).
            let deadline = Instant::now() + Duration::from_secs(120);
            while samples.lock().map_or(0, |s| s.len() as u64) < written
                && Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            running.stop().await?;
            cluster
                .execute(&format!("SELECT pg_drop_replication_slot('{slot}')"))
                .await
                .map_err(|e| e.to_string())?;
            let mut all = std::mem::take(&mut *samples.lock().map_err(|e| e.to_string())?);
            all.retain(|s| s.is_finite());
            all.sort_by(f64::total_cmp);
            let pct = |p: f64| {
                all.get(((all.len() as f64 * p).ceil() as usize).saturating_sub(1))
                    .copied()
                    .unwrap_or(f64::NAN)
            };
            let stats = [
                pct(0.50),
                pct(0.95),
                pct(0.99),
                all.last().copied().unwrap_or(f64::NAN),
            ];
            let achieved = written as f64 / seconds as f64;
            eprintln!(
                "  {consumer} at {rate}: {} samples of {written} rows, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                all.len(),
                stats[0],
                stats[2],
                stats[3]
            );
            if all.len() as u64 != written {
                return Err(format!(
                    "{consumer} at {rate}: {} rows arrived, {written} were written",
                    all.len()
                ));
            }
            table.row([
                consumer.clone(),
                rate.clone(),
                thousands(achieved),
                all.len().to_string(),
                format!("{:.1}", stats[0]),
                format!("{:.1}", stats[1]),
                format!("{:.1}", stats[2]),
                format!("{:.1}", stats[3]),
                agreement,
            ]);
            points.push((consumer.clone(), achieved, stats));
        }
    }
    println!("\n## Latency: commit to arrival at the consumer, default settings\n");
    println!("{}", table.to_markdown());
    std::fs::write(&plot, svg_plot(&points)).map_err(|e| format!("{}: {e}", plot.display()))?;
    eprintln!("plot written to {}", plot.display());
    Ok(())
}

/// Writes at `rate` changes/s for `duration`; returns the rows written.
async fn load(cluster: &Cluster, rate: &str, duration: Duration) -> Result<u64, String> {
    let (per_tx, period) = match rate {
        "max" => (100u64, None),
        r => {
            let r: f64 = r.parse().map_err(|_| format!("--rates: {r:?}"))?;
            let per_tx = if r > 1000.0 { 100 } else { 1 };
            (per_tx, Some(Duration::from_secs_f64(per_tx as f64 / r)))
        }
    };
    let sql = format!(
        "INSERT INTO public.lat (committed_us, pad) \
         SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8, 'p' FROM generate_series(1, {per_tx})"
    );
    let clients = [
        cluster
            .connect("postgres")
            .await
            .map_err(|e| e.to_string())?,
        cluster
            .connect("postgres")
            .await
            .map_err(|e| e.to_string())?,
    ];
    // The benchmark cluster commits asynchronously (for throughput runs); a walsender
    // sends only WAL that is flushed, so an asynchronous commit would wait for the WAL
    // writer (up to 3 × wal_writer_delay). Commit as a default server does.
    for client in &clients {
        client
            .batch_execute("SET synchronous_commit = on")
            .await
            .map_err(|e| e.to_string())?;
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (index, client) in clients.into_iter().enumerate() {
        let sql = sql.clone();
        tasks.push(tokio::spawn(async move {
            let mut written = 0u64;
            let mut n = index as u32;
            loop {
                if let Some(period) = period {
                    // Two writers interleave: writer 0 takes even ticks, writer 1 odd.
                    let due = started + period * n;
                    if due > started + duration {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                    n += 2;
                } else if started.elapsed() >= duration {
                    break;
                }
                client
                    .batch_execute(&sql)
                    .await
                    .map_err(|e| e.to_string())?;
                written += per_tx;
            }
            Ok::<u64, String>(written)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.map_err(|e| e.to_string())??;
    }
    Ok(total)
}

/// A consumer being measured.
enum Running {
    Process {
        child: Child,
        reader: Option<std::thread::JoinHandle<()>>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    },
    Library {
        shutdown: cdc_core::ShutdownHandle,
        task: tokio::task::JoinHandle<cdc_core::Result<cdc_core::RunSummary>>,
    },
}

impl Running {
    async fn stop(self) -> Result<(), String> {
        match self {
            Running::Process {
                mut child,
                reader,
                stop,
            } => {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                }
                let status = child.wait().map_err(|e| e.to_string())?;
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                if let Some(reader) = reader {
                    let _ = reader.join();
                }
                if !status.success() {
                    return Err(format!("pgcdc exited with {status}"));
                }
                Ok(())
            }
            Running::Library { shutdown, task } => {
                shutdown.shutdown();
                task.await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    }
}

async fn start_consumer(
    consumer: &str,
    cluster: &Cluster,
    slot: &str,
    pgcdc: &Path,
    samples: &Samples,
    probe: &LagProbe,
) -> Result<Running, String> {
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let base = [
        "stream",
        "--uri",
        &uri,
        "--publication",
        "pub",
        "--table",
        "public.lat",
        "--slot",
        slot,
        "--snapshot",
        "never",
        "--quiet",
        "--summary",
        "none",
    ];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    match consumer {
        "stdout" => {
            let mut child = Command::new(pgcdc)
                .args(base)
                .args(["--metrics-addr", "127.0.0.1:0"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let stderr = child.stderr.take().ok_or("no stderr")?;
            let addr = probe.addr.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(found) = line
                        .split("http://")
                        .nth(1)
                        .and_then(|rest| rest.split('/').next())
                        .and_then(|a| a.parse().ok())
                        && let Ok(mut slot) = addr.lock()
                    {
                        *slot = Some(found);
                    }
                    eprintln!("{line}");
                }
            });
            let samples = samples.clone();
            let last_seen = probe.last_seen_us.clone();
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(at) = committed_us(&line) {
                        let now = now_us();
                        last_seen.store(at, std::sync::atomic::Ordering::SeqCst);
                        if let Ok(mut s) = samples.lock() {
                            s.push((now - at) as f64 / 1000.0);
                        }
                    }
                }
            });
            Ok(Running::Process {
                child,
                reader: Some(reader),
                stop,
            })
        }
        "out-dir" => {
            let dir = std::env::temp_dir().join(format!("pgcdc-latency-{slot}"));
            let _ = std::fs::remove_dir_all(&dir);
            let child = Command::new(pgcdc)
                .args(base)
                .arg("--out-dir")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| e.to_string())?;
            let samples = samples.clone();
            let flag = stop.clone();
            let reader = std::thread::spawn(move || follow_checkpoints(&dir, &samples, &flag));
            Ok(Running::Process {
                child,
                reader: Some(reader),
                stop,
            })
        }
        "lib" => {
            let config = SourceConfig::new(&uri, "pub")
                .and_then(|c| c.with_tables(["public.lat"]))
                .map_err(|e| e.to_string())?;
            let mut config = config;
            config.slot = Some(slot.to_owned());
            config.snapshot = SnapshotMode::Never;
            let options = PgSourceOptions::new(config);
            let pipeline = Pipeline::new(
                PgSource::new(options),
                LatencySink {
                    samples: samples.clone(),
                },
                PipelineConfig::default(),
            );
            let shutdown = pipeline.shutdown_handle();
            let task = tokio::spawn(pipeline.run());
            Ok(Running::Library { shutdown, task })
        }
        other => Err(format!(
            "--consumers: {other:?} (expected stdout, out-dir or lib)"
        )),
    }
}

/// Polls the out-dir's checkpoint every millisecond; each line a new checkpoint covers
/// arrives when that checkpoint is seen.
fn follow_checkpoints(dir: &Path, samples: &Samples, stop: &std::sync::atomic::AtomicBool) {
    let checkpoint = dir.join("pgcdc-checkpoint.json");
    let data = dir.join("public.lat.json");
    let mut last_text = String::new();
    let mut read_upto = 0u64;
    let mut partial = String::new();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
        let Ok(text) = std::fs::read_to_string(&checkpoint) else {
            continue;
        };
        if text == last_text {
            continue;
        }
        let seen = now_us();
        last_text = text;
        let Some(len) = committed_length(&last_text) else {
            continue;
        };
        if len <= read_upto {
            continue;
        }
        let Ok(mut file) = std::fs::File::open(&data) else {
            continue;
        };
        let mut bytes = Vec::new();
        use std::io::Seek;
        if file.seek(std::io::SeekFrom::Start(read_upto)).is_err()
            || file
                .by_ref()
                .take(len - read_upto)
                .read_to_end(&mut bytes)
                .is_err()
        {
            continue;
        }
        read_upto = len;
        partial.push_str(&String::from_utf8_lossy(&bytes));
        let mut lines: Vec<&str> = partial.split('\n').collect();
        let rest = lines.pop().unwrap_or_default().to_owned();
        if let Ok(mut s) = samples.lock() {
            for line in lines {
                if let Some(at) = committed_us(line) {
                    s.push((seen - at) as f64 / 1000.0);
                }
            }
        }
        partial = rest;
    }
}

/// The length the checkpoint records for `public.lat.json`.
fn committed_length(checkpoint: &str) -> Option<u64> {
    let rest = checkpoint
        .split("\"public.lat.json\":")
        .nth(1)?
        .trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Takes each insert's arrival time as the batch is written.
struct LatencySink {
    samples: Samples,
}

#[async_trait]
impl Sink for LatencySink {
    async fn open(&mut self, _acks: Acknowledger) -> cdc_core::Result<Option<ResumeToken>> {
        Ok(None)
    }

    async fn write(&mut self, batch: SinkBatch) -> cdc_core::Result<Ack> {
        let now = now_us();
        if let Ok(mut s) = self.samples.lock() {
            for event in &batch.batch.events {
                if let EventKind::Insert { new, .. } = &event.kind
                    && let Some(Value::Int8(at)) = new.get(1)
                {
                    s.push((now - at) as f64 / 1000.0);
                }
            }
        }
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, _token: &ResumeToken) -> cdc_core::Result<Ack> {
        Ok(Ack::Done)
    }

    async fn close(&mut self) -> cdc_core::Result<()> {
        Ok(())
    }
}

/// Percentiles (p50, p95, p99, max) against achieved rate, one line per consumer and
/// percentile, log-log axes.
fn svg_plot(points: &[(String, f64, [f64; 4])]) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 440.0, 70.0, 170.0, 30.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let rates: Vec<f64> = points.iter().map(|p| p.1.max(1.0)).collect();
    let lats: Vec<f64> = points
        .iter()
        .flat_map(|p| p.2)
        .filter(|v| v.is_finite())
        .map(|v| v.max(0.1))
        .collect();
    let (rmin, rmax) = (
        rates
            .iter()
            .copied()
            .fold(f64::MAX, f64::min)
            .log10()
            .floor(),
        rates.iter().copied().fold(1.0, f64::max).log10().ceil(),
    );
    let (lmin, lmax) = (
        lats.iter()
            .copied()
            .fold(f64::MAX, f64::min)
            .log10()
            .floor(),
        lats.iter().copied().fold(1.0, f64::max).log10().ceil(),
    );
    let x = |r: f64| left + (r.max(1.0).log10() - rmin) / (rmax - rmin).max(1.0) * pw;
    let y = |l: f64| top + ph - (l.max(0.1).log10() - lmin) / (lmax - lmin).max(1.0) * ph;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"18\" font-size=\"14\">Commit-to-arrival latency (ms) against changes/s, default settings</text>\n"
    );
    for d in (rmin as i32)..=(rmax as i32) {
        let xv = x(10f64.powi(d));
        svg.push_str(&format!(
            "<line x1=\"{xv:.1}\" y1=\"{top}\" x2=\"{xv:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{xv:.1}\" y=\"{:.1}\" text-anchor=\"middle\">1e{d}</text>\n",
            top + ph,
            top + ph + 18.0
        ));
    }
    for d in (lmin as i32)..=(lmax as i32) {
        let yv = y(10f64.powi(d));
        svg.push_str(&format!(
            "<line x1=\"{left}\" y1=\"{yv:.1}\" x2=\"{:.1}\" y2=\"{yv:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            left + pw,
            left - 6.0,
            yv + 4.0,
            10f64.powi(d)
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">changes per second (achieved)</text>\n",
        left + pw / 2.0,
        h - 10.0
    ));
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let dashes = ["", "6,3", "2,2", "1,4"];
    let names = ["p50", "p95", "p99", "max"];
    let mut consumers: Vec<&str> = points.iter().map(|p| p.0.as_str()).collect();
    consumers.dedup();
    let mut legend_y = top + 10.0;
    for (ci, consumer) in consumers.iter().enumerate() {
        let color = colors[ci % colors.len()];
        for (pi, name) in names.iter().enumerate() {
            let line: Vec<String> = points
                .iter()
                .filter(|p| p.0 == *consumer && p.2[pi].is_finite())
                .map(|p| format!("{:.1},{:.1}", x(p.1), y(p.2[pi])))
                .collect();
            if line.is_empty() {
                continue;
            }
            svg.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" stroke-dasharray=\"{}\" points=\"{}\"/>\n",
                dashes[pi],
                line.join(" ")
            ));
            svg.push_str(&format!(
                "<line x1=\"{:.1}\" y1=\"{legend_y:.1}\" x2=\"{:.1}\" y2=\"{legend_y:.1}\" stroke=\"{color}\" stroke-width=\"2\" stroke-dasharray=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\">{consumer} {name}</text>\n",
                left + pw + 10.0,
                left + pw + 40.0,
                dashes[pi],
                left + pw + 46.0,
                legend_y + 4.0
            ));
            legend_y += 16.0;
        }
    }
    svg.push_str("</svg>\n");
    svg
}
