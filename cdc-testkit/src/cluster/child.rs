//! The server's processes without the cluster around them: the environment they run in,
//! shutdown and kill, the postmaster's pid file, the state of a running server, and the
//! tail of its log.

use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::os;

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
pub(super) async fn wait_child_async(child: &mut Child, timeout: Duration) -> bool {
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

pub(super) fn read_from(path: &Path, offset: u64) -> String {
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
