//! What a running stream shows on stderr: a progress bar with rows/s and ETA while the
//! initial snapshot is copied (from the tables' estimated row counts), then a periodic
//! one-line status (changes/s, lag in bytes and seconds, acknowledged position).
//!
//! When stderr is not a terminal the bar is replaced by a snapshot line per status
//! interval, so logs of a service stay readable.

use std::io::IsTerminal;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cdc_core::{Lsn, PipelineStats, StatsSnapshot};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::counting_sink::{Counts, Tally};
use crate::observed_source::SourceInfo;

/// Seconds from the Unix epoch to 2000-01-01 UTC (Postgres's epoch).
const PG_EPOCH_UNIX_SECS: u64 = 946_684_800;

/// A running display; [`Reporter::stop`] clears it.
#[derive(Debug)]
pub struct Reporter {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Starts the display on stderr, refreshed from `stats`, `tally` and `info`, with a
    /// status line every `interval`. With `quiet`, shows nothing.
    pub fn spawn(
        stats: PipelineStats,
        tally: Tally,
        info: SourceInfo,
        interval: Duration,
        quiet: bool,
    ) -> Reporter {
        let (stop, stop_rx) = watch::channel(false);
        let task =
            (!quiet).then(|| tokio::spawn(Screen::new(stats, tally, info, interval).run(stop_rx)));
        Reporter { stop, task }
    }

    /// Stops the display and removes the bar.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

struct Screen {
    stats: PipelineStats,
    tally: Tally,
    info: SourceInfo,
    interval: Duration,
    tty: bool,
    bar: Option<ProgressBar>,
    announced_snapshot: bool,
    /// Tables already said to be copied whole.
    announced_whole: Vec<String>,
    last_line: Instant,
    last_changes: u64,
    last_rows: u64,
}

impl Screen {
    fn new(stats: PipelineStats, tally: Tally, info: SourceInfo, interval: Duration) -> Self {
        Screen {
            stats,
            tally,
            info,
            interval: interval.max(Duration::from_millis(100)),
            tty: std::io::stderr().is_terminal(),
            bar: None,
            announced_snapshot: false,
            announced_whole: Vec::new(),
            last_line: Instant::now(),
            last_changes: 0,
            last_rows: 0,
        }
    }

    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let tick = if self.tty {
            Duration::from_millis(200)
        } else {
            self.interval.min(Duration::from_secs(1))
        };
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = ticker.tick() => self.refresh(),
            }
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn refresh(&mut self) {
        if !self.info.started() {
            return;
        }
        let counts = self.tally.counts();
        self.announce_tables_read_whole();
        if counts.snapshot_running {
            self.snapshot_progress(&counts);
            return;
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if counts.snapshot_complete && !self.announced_snapshot {
            self.announced_snapshot = true;
            eprintln!(
                "pgcdc: snapshot complete: {} rows of {} tables in {:.1}s; streaming from {}",
                counts.snapshot_rows(),
                counts.snapshot_tables_done(),
                counts.snapshot_duration_secs.unwrap_or_default(),
                counts.consistent_point.unwrap_or_default()
            );
        }
        if self.last_line.elapsed() >= self.interval {
            let stats = self.stats.snapshot();
            eprintln!(
                "pgcdc: {}",
                status_line(
                    &stats,
                    &counts,
                    self.info.received(),
                    self.since_last(&counts)
                )
            );
            self.last_changes = counts.streamed_changes();
            self.last_line = Instant::now();
        }
    }

    /// Says once per table that the online snapshot copies it whole, holding the stream.
    fn announce_tables_read_whole(&mut self) {
        for whole in self.info.tables_read_whole() {
            if self.announced_whole.contains(&whole.table) {
                continue;
            }
            if let Some(bar) = &self.bar {
                bar.suspend(|| eprintln!("pgcdc: {}", read_whole_line(&whole)));
            } else {
                eprintln!("pgcdc: {}", read_whole_line(&whole));
            }
            self.announced_whole.push(whole.table);
        }
    }

    fn since_last(&self, counts: &Counts) -> (u64, f64) {
        let delta = counts.streamed_changes().saturating_sub(self.last_changes);
        (
            delta,
            delta as f64 / self.last_line.elapsed().as_secs_f64().max(1e-3),
        )
    }

    fn snapshot_progress(&mut self, counts: &Counts) {
        let estimate = self.info.estimated_rows();
        let rows = counts.snapshot_rows();
        if self.tty {
            let bar = self.bar.get_or_insert_with(|| new_bar(estimate));
            if let Some(estimate) = estimate {
                bar.set_length(estimate.max(rows));
            }
            bar.set_position(rows);
            return;
        }
        if self.last_line.elapsed() >= self.interval {
            let rate =
                rows.saturating_sub(self.last_rows) as f64 / self.last_line.elapsed().as_secs_f64();
            let total = estimate.map_or_else(String::new, |e| format!(" of ~{e}"));
            eprintln!(
                "pgcdc: snapshot: {rows}{total} rows copied, {} of {} tables done, {rate:.0} rows/s",
                counts.snapshot_tables_done(),
                self.info.tables().len()
            );
            self.last_rows = rows;
            self.last_line = Instant::now();
        }
    }
}

fn new_bar(estimate: Option<u64>) -> ProgressBar {
    let (bar, template) = match estimate {
        Some(len) => (
            ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr()),
            "snapshot {wide_bar} {human_pos}/~{human_len} rows  {per_sec}  ETA {eta}",
        ),
        None => (
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            "snapshot {spinner} {human_pos} rows  {per_sec}  {elapsed}",
        ),
    };
    let style =
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// `copying public.log whole while the stream waits (no primary key)`.
pub fn read_whole_line(whole: &cdc_postgres::source::TableReadWhole) -> String {
    format!(
        "copying {} whole while the stream waits ({}; changes to every table queue on the server until it is done)",
        whole.table, whole.reason
    )
}

/// `streaming: 1234 changes (+56, 11.2/s), lag 0 B / 0.0 s, acknowledged 0/16B3748`.
pub fn status_line(
    stats: &StatsSnapshot,
    counts: &Counts,
    received: Lsn,
    (delta, rate): (u64, f64),
) -> String {
    let received = received.max(stats.received_lsn);
    let lag_bytes = received.bytes_since(stats.confirmed_lsn);
    format!(
        "streaming: {} changes (+{delta}, {rate:.1}/s), lag {} / {:.1} s, acknowledged {}, {} checkpoints",
        counts.streamed_changes(),
        human_bytes(lag_bytes),
        lag_seconds(lag_bytes, stats.last_commit_time_micros),
        stats.confirmed_lsn,
        stats.checkpoints,
    )
}

/// How old the newest received transaction is, when something received is not yet
/// acknowledged; 0 when everything received is acknowledged.
fn lag_seconds(lag_bytes: u64, last_commit_micros: i64) -> f64 {
    if lag_bytes == 0 || last_commit_micros <= 0 {
        return 0.0;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as f64
        - (PG_EPOCH_UNIX_SECS as f64 * 1e6);
    ((now - last_commit_micros as f64) / 1e6).max(0.0)
}

/// `1.5 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_human_readable() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }

    #[test]
    fn no_lag_when_everything_received_is_acknowledged() {
        assert_eq!(lag_seconds(0, 1), 0.0);
        assert!(lag_seconds(10, 1) > 1e8, "a commit in 2000 is old");
    }
}
