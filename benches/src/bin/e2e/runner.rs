//! Running one consumer as a child process and measuring it: wall time from spawn to exit,
//! the child's CPU time and peak RSS (`wait4`), and the CPU time of the server processes
//! serving it (the walsender of its slot, or the backends running COPY), sampled from
//! `/proc/<pid>/stat` while it runs.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use benches::measure::{self, MachineCpu, Usage};
use cdc_testkit::Cluster;

/// Which server processes work for the consumer.
#[derive(Debug, Clone)]
pub enum Server {
    /// The walsender holding this slot.
    Slot(String),
    /// Every backend whose current (or last) statement is a COPY.
    Copy,
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct Run {
    /// What ran.
    pub label: String,
    /// Wall time from spawn to exit.
    pub wall: Duration,
    /// The child's CPU time and peak RSS.
    pub client: Usage,
    /// CPU time of the server processes that served it (no peak RSS).
    pub server: Usage,
    /// `key=value` lines the child printed.
    pub output: HashMap<String, String>,
    /// CPU time of the whole machine during the run.
    pub machine: MachineCpu,
}

impl Run {
    /// Busy CPU time of everything else on the machine during the run (other server
    /// processes, other programs): a measure of interference.
    pub fn others_cpu(&self) -> Duration {
        self.machine
            .busy
            .saturating_sub(self.client.cpu() + self.server.cpu())
    }

    /// A number the child printed.
    pub fn output_u64(&self, key: &str) -> Option<u64> {
        self.output.get(key).and_then(|v| v.parse().ok())
    }
}

/// This benchmark binary re-executed as `e2e consume <args>`.
pub fn consume_command(args: &[String]) -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("consume").args(args);
    Ok(cmd)
}

/// A PostgreSQL client program of the cluster's installation (`pg_recvlogical`, `psql`),
/// run as the `postgres` system user when we are root (as a DBA would run it).
pub fn pg_program(cluster: &Cluster, name: &str) -> Command {
    let mut path: PathBuf = cluster.bins().program(name);
    if !path.exists() {
        path = PathBuf::from(name);
    }
    let mut cmd = Command::new(path);
    as_postgres_user(&mut cmd);
    cmd
}

fn as_postgres_user(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    // SAFETY: a NUL-terminated name; the returned record is read at once, before any
    // other call that could overwrite it.
    let pw = unsafe { libc::getpwnam(c"postgres".as_ptr()) };
    if pw.is_null() {
        return;
    }
    // SAFETY: non-null pointer to the static passwd record just returned.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    cmd.uid(uid).gid(gid).env("HOME", "/tmp");
}

async fn server_pids(client: &tokio_postgres::Client, server: &Server) -> Vec<u32> {
    let rows = match server {
        Server::Slot(slot) => {
            client
                .query(
                    "SELECT active_pid FROM pg_replication_slots \
                     WHERE slot_name = $1 AND active_pid IS NOT NULL",
                    &[slot],
                )
                .await
        }
        Server::Copy => {
            client
                .query(
                    "SELECT pid FROM pg_stat_activity \
                     WHERE query ILIKE 'copy%' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
        }
    };
    rows.map(|rows| {
        rows.iter()
            .filter_map(|r| r.get::<_, Option<i32>>(0))
            .filter_map(|pid| u32::try_from(pid).ok())
            .collect()
    })
    .unwrap_or_default()
}

/// Spawns `cmd`, waits for it, and measures it (see the module documentation). Fails when
/// the child fails. Its standard output is read as `key=value` lines, or with `discard`
/// goes to `/dev/null` (for a program that prints the data itself, like `psql -c COPY`).
pub async fn measure(
    cluster: &Cluster,
    label: &str,
    mut cmd: Command,
    server: Server,
    discard: bool,
) -> Result<Run, String> {
    let sampler = cluster
        .connect("postgres")
        .await
        .map_err(|e| format!("sampler connection: {e}"))?;
    cmd.stdin(Stdio::null())
        .stdout(if discard {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stderr(Stdio::inherit());
    let machine_before = measure::machine_cpu();
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {label}: {e}"))?;
    let stdout = child.stdout.take();
    let waiter = tokio::task::spawn_blocking(move || {
        let exit = measure::wait_child(child);
        (exit, Instant::now(), measure::machine_cpu())
    });
    tokio::pin!(waiter);

    let mut cpu: BTreeMap<u32, Usage> = BTreeMap::new();
    let mut tick = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    let (exit, ended, machine_after) = loop {
        tokio::select! {
            biased;
            done = &mut waiter => break done.map_err(|e| format!("waiting for {label}: {e}"))?,
            _ = ticker.tick() => {
                // The walsender of a slot does not change; COPY backends come and go.
                let refresh = match server {
                    Server::Slot(_) => cpu.is_empty(),
                    Server::Copy => tick.is_multiple_of(5),
                };
                if refresh {
                    for pid in server_pids(&sampler, &server).await {
                        cpu.entry(pid).or_default();
                    }
                }
                tick += 1;
                sample(&mut cpu);
            }
        }
    };
    // The server side may still be finishing; one last look.
    sample(&mut cpu);
    let exit = exit.map_err(|e| format!("waiting for {label}: {e}"))?;
    let wall = ended.duration_since(started);
    let mut text = String::new();
    if let Some(mut out) = stdout {
        let _ = out.read_to_string(&mut text);
    }
    if exit.code != Some(0) {
        return Err(format!("{label} failed (exit {:?}): {text}", exit.code));
    }
    let output = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok(Run {
        label: label.to_owned(),
        wall,
        client: exit.usage,
        server: cpu.values().fold(Usage::default(), |sum, u| Usage {
            user: sum.user + u.user,
            system: sum.system + u.system,
            max_rss_kib: 0,
        }),
        output,
        machine: machine_after.since(&machine_before),
    })
}

fn sample(cpu: &mut BTreeMap<u32, Usage>) {
    for (pid, seen) in cpu.iter_mut() {
        if let Some(usage) = measure::process_cpu(*pid)
            && usage.cpu() >= seen.cpu()
        {
            *seen = usage;
        }
    }
}

/// Median of `values` (the mean of the middle two for an even count); zero when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Seconds with two decimals.
pub fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

/// KiB as MB with one decimal.
pub fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The cluster's current WAL insert position: the end of the last record written (with
/// `synchronous_commit = off` the write position, `pg_current_wal_lsn()`, can still be
/// before the last commits).
pub async fn current_lsn(cluster: &Cluster) -> Result<String, String> {
    let client = cluster
        .connect("postgres")
        .await
        .map_err(|e| e.to_string())?;
    let row = client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// Runs `sql` as the admin and reports how long it took.
pub async fn timed_sql(cluster: &Cluster, what: &str, sql: &str) -> Result<(), String> {
    let started = Instant::now();
    cluster
        .execute(sql)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    eprintln!("  {what}: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The release `pgcdc` next to this binary.
pub fn pgcdc_binary() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.with_file_name("pgcdc");
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: build it first (cargo build --release --bin pgcdc)",
            path.display()
        ))
    }
}
