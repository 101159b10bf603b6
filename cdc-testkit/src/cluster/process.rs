//! Supervising the postmaster: start (with retries), stop, restart, liveness, teardown
//! helpers and the server log.

use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::os;

use super::Cluster;
use super::ports::{release_port, reserve_port};

#[derive(Debug)]
pub(super) struct ServerState {
    /// The postmaster, our direct child, while it runs (or until we notice it exited).
    pub(super) child: Option<Child>,
}

/// Why one start attempt failed.
pub(super) enum StartError {
    /// The TCP port was taken (by another server or process).
    PortInUse(String),
    /// Anything else; the error carries the log tail.
    Other(Error),
}

impl StartError {
    pub(super) fn into_error(self) -> Error {
        match self {
            StartError::PortInUse(log) => Error::StartFailed {
                reason: "the TCP port is in use by another process".into(),
                log,
            },
            StartError::Other(e) => e,
        }
    }
}

impl Cluster {
    /// The first start of a new cluster: on a port conflict, pick another port (rewriting
    /// the configuration) and try again.
    pub(super) async fn first_start(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        let mut attempts = 0;
        loop {
            match self.start_attempts(&mut state, 0).await {
                Ok(()) => return Ok(()),
                Err(StartError::PortInUse(_)) if attempts < 20 => {
                    attempts += 1;
                    let old = self.port();
                    let new = reserve_port()?;
                    self.port.store(new, Ordering::SeqCst);
                    release_port(old);
                    tracing::debug!(old, new, "port in use, retrying on another port");
                    self.write_conf()?;
                }
                Err(e) => return Err(e.into_error()),
            }
        }
    }

    /// Whether the postmaster is running (it may still be starting or shutting down).
    pub async fn is_running(&self) -> bool {
        let mut state = self.state.lock().await;
        self.reap_if_exited(&mut state);
        state.child.is_some()
    }

    /// Start the server again after [`Cluster::stop`] or [`Cluster::kill9`] (a start after
    /// a kill performs crash recovery) on the same port and socket. Returns once the server
    /// accepts connections. No-op if it is running.
    ///
    /// If the port was taken by another process meanwhile, retries for a few seconds, then
    /// fails: the port is never silently changed.
    pub async fn start(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.reap_if_exited(&mut state);
        if state.child.is_some() {
            return Ok(());
        }
        self.start_attempts(&mut state, 30)
            .await
            .map_err(StartError::into_error)
    }

    /// Clean shutdown (fast mode: SIGINT; clients are disconnected, a shutdown checkpoint
    /// is written). If the server has not exited after the stop timeout (a walsender waiting
    /// for its client can hold up a fast shutdown), falls back to an immediate shutdown and
    /// then SIGKILL. Returns once the postmaster and its children are gone. No-op if the
    /// server is not running.
    pub async fn stop(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.reap_if_exited(&mut state);
        let Some(mut child) = state.child.take() else {
            return Ok(());
        };
        let pid = child.id();
        os::signal(pid, libc::SIGINT)?;
        if !wait_child_async(&mut child, self.stop_timeout).await {
            tracing::warn!(pid, "fast shutdown timed out; shutting down immediately");
            tokio::task::spawn_blocking(move || shutdown_immediate(child))
                .await
                .map_err(|e| Error::io("immediate shutdown", std::io::Error::other(e)))?;
        }
        self.pid.store(0, Ordering::SeqCst);
        Ok(())
    }

    /// [`Cluster::stop`] then [`Cluster::start`].
    pub async fn restart(&self) -> Result<()> {
        self.stop().await?;
        self.start().await
    }
    /// Forget a postmaster that exited on its own (reaping it).
    pub(super) fn reap_if_exited(&self, state: &mut ServerState) {
        if let Some(child) = state.child.as_mut()
            && !matches!(child.try_wait(), Ok(None))
        {
            state.child = None;
            self.pid.store(0, Ordering::SeqCst);
        }
    }
    /// Start the postmaster, retrying transient failures (a stale shared memory block still
    /// held by dying processes, ...) a few times, and a port conflict `port_retries` times.
    pub(super) async fn start_attempts(
        &self,
        state: &mut ServerState,
        port_retries: u32,
    ) -> std::result::Result<(), StartError> {
        let mut transient = 0u32;
        let mut port = 0u32;
        loop {
            let err = match self.start_once(state).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let delay = match err {
                Attempt::PortInUse(log) => {
                    if port >= port_retries {
                        return Err(StartError::PortInUse(log));
                    }
                    port += 1;
                    port
                }
                Attempt::Transient(reason, log) => {
                    if transient >= 10 {
                        return Err(StartError::Other(Error::StartFailed { reason, log }));
                    }
                    transient += 1;
                    tracing::debug!(transient, reason, "start failed transiently; retrying");
                    transient
                }
                Attempt::Fatal(e) => return Err(StartError::Other(e)),
            };
            tokio::time::sleep(Duration::from_millis(100 * u64::from(delay.min(5)))).await;
        }
    }

    async fn start_once(&self, state: &mut ServerState) -> std::result::Result<(), Attempt> {
        let log_offset = std::fs::metadata(&self.log_path).map_or(0, |m| m.len());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .ctx(|| format!("open {}", self.log_path.display()))
            .map_err(Attempt::Fatal)?;
        let log_err = log
            .try_clone()
            .ctx(|| "duplicate the log file handle".to_string())
            .map_err(Attempt::Fatal)?;
        let program = self.bins.program("postgres");
        let mut cmd = std::process::Command::new(&program);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .current_dir(&self.data_dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .env_clear()
            .envs(server_env());
        if let Some(u) = self.server_user {
            use std::os::unix::process::CommandExt;
            cmd.uid(u.uid).gid(u.gid);
        }
        let child = cmd
            .spawn()
            .ctx(|| format!("start {}", program.display()))
            .map_err(Attempt::Fatal)?;
        let pid = child.id();
        state.child = Some(child);
        self.pid.store(pid, Ordering::SeqCst);

        let deadline = Instant::now() + self.start_timeout;
        loop {
            let exited = match state.child.as_mut().map(Child::try_wait) {
                Some(Ok(None)) => None,
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Err(e)) => Some(e.to_string()),
                None => Some("lost".into()),
            };
            if let Some(status) = exited {
                state.child = None;
                self.pid.store(0, Ordering::SeqCst);
                let new_log = read_from(&self.log_path, log_offset);
                let tail = tail_lines(&new_log, 40);
                return Err(if new_log.contains("Address already in use") {
                    Attempt::PortInUse(tail)
                } else if new_log.contains("pre-existing shared memory block")
                    || new_log.contains("lock file")
                {
                    Attempt::Transient(format!("postmaster exited ({status})"), tail)
                } else {
                    Attempt::Fatal(Error::StartFailed {
                        reason: format!("postmaster exited ({status})"),
                        log: tail,
                    })
                });
            }
            if read_pid_file(&self.data_dir).is_some_and(|p| p.pid == pid && p.ready) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                if let Some(child) = state.child.take() {
                    let _ = tokio::task::spawn_blocking(move || kill_tree(child)).await;
                }
                self.pid.store(0, Ordering::SeqCst);
                return Err(Attempt::Fatal(Error::StartFailed {
                    reason: format!("not ready after {:?}", self.start_timeout),
                    log: tail_lines(&read_from(&self.log_path, log_offset), 40),
                }));
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
}

/// Outcome of one failed start attempt.
enum Attempt {
    PortInUse(String),
    Transient(String, String),
    Fatal(Error),
}

/// Environment for server processes: nothing inherited that could change their behaviour
/// (PGPORT, PGDATA, ...), C locale so log messages are in English.
pub(super) fn server_env() -> Vec<(String, OsString)> {
    let mut env = vec![
        (
            "PATH".to_string(),
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        ),
        ("LC_ALL".to_string(), "C".into()),
        ("LANG".to_string(), "C".into()),
    ];
    for key in ["TZ", "LD_LIBRARY_PATH"] {
        if let Some(v) = std::env::var_os(key) {
            env.push((key.to_string(), v));
        }
    }
    env
}

/// Poll `child` until it exits or `timeout` passes; true if it exited (and was reaped).
async fn wait_child_async(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Poll `child` synchronously until it exits or `timeout` passes; true if it exited.
fn wait_child_blocking(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Immediate shutdown (SIGQUIT: the postmaster stops its children and cleans up shared
/// memory), falling back to SIGKILL of everything after 10 s.
pub(super) fn shutdown_immediate(mut child: Child) {
    let pid = child.id();
    if os::signal(pid, libc::SIGQUIT).is_ok()
        && wait_child_blocking(&mut child, Duration::from_secs(10))
    {
        // The postmaster waits for its children before exiting, but be sure.
        return;
    }
    kill_tree(child);
}

/// SIGKILL the postmaster and its children, reap the postmaster, wait for the children.
pub(super) fn kill_tree(mut child: Child) {
    let pid = child.id();
    let children = os::children_of(pid);
    let _ = os::signal(pid, libc::SIGKILL);
    for &c in &children {
        let _ = os::signal(c, libc::SIGKILL);
    }
    let _ = child.wait();
    // Children forked just before the kill notice the postmaster's death and exit soon.
    if !os::wait_all_dead(&children, Duration::from_secs(10)) {
        eprintln!("cdc-testkit: children of killed postmaster {pid} still alive after 10 s");
    }
}

/// The fields of `postmaster.pid` the kit uses.
pub(super) struct PidFile {
    pub(super) pid: u32,
    pub(super) ready: bool,
    pub(super) shmid: Option<i32>,
}

pub(super) fn read_pid_file(data_dir: &Path) -> Option<PidFile> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let pid = lines.first()?.trim().parse().ok()?;
    // Line 7: shared memory key and id; line 8: status ("starting", "ready", ...).
    let shmid = lines
        .get(6)
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok());
    // "standby" is what a standby without hot_standby reports once consistent.
    let ready = lines
        .get(7)
        .is_some_and(|l| matches!(l.trim(), "ready" | "standby"));
    Some(PidFile { pid, ready, shmid })
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

pub(super) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("a", 5), "a");
    }
}
