//! Supervising the postmaster: start (with retries), stop, restart, liveness, teardown
//! helpers and the server log.

use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::os;

use super::Cluster;
use super::child::{
    ServerState, StartError, kill_tree, read_from, read_pid_file, server_env, shutdown_immediate,
    tail_lines, wait_child_async,
};
use super::ports::{release_port, reserve_port};

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
