//! Helpers for driving the built `pgcdc` binary as a subprocess.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub mod bank;
pub mod debezium;

/// A `pgcdc` command, without the test process's libpq environment: no `PG*` variable,
/// and a password file that does not exist (so a developer's `~/.pgpass` plays no part).
pub fn pgcdc<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgcdc"));
    cmd.args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    for (var, _) in cdc_postgres::conn::ENV_PARAMETERS {
        cmd.env_remove(var);
    }
    cmd.env_remove("PGSERVICE")
        .env("PGPASSFILE", "/nonexistent/pgcdc-tests/pgpass");
    cmd
}

/// Runs `cmd` to completion (with a deadline) and returns its output.
pub fn run(mut cmd: Command, timeout: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn pgcdc");
    wait_output(child, timeout)
}

/// Waits for `child` (stdout and stderr piped) with a deadline; kills it on timeout.
pub fn wait_output(child: Child, timeout: Duration) -> Output {
    let pid = child.id();
    let done = Arc::new(Mutex::new(false));
    let flag = done.clone();
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if *flag.lock().unwrap() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal(pid, libc::SIGKILL);
        true
    });
    let output = child.wait_with_output().expect("wait for pgcdc");
    *done.lock().unwrap() = true;
    let timed_out = watchdog.join().unwrap();
    assert!(
        !timed_out,
        "pgcdc did not finish within {timeout:?}; stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; a stale pid at worst signals nothing.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Collects a child's stdout or stderr lines on a thread.
pub struct Lines {
    lines: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Lines {
    pub fn collect(reader: impl std::io::Read + Send + 'static) -> Lines {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let thread = std::thread::spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Lines {
            lines,
            thread: Some(thread),
        }
    }

    pub fn snapshot(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for the lines so far, or `timeout`.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.lines.lock().unwrap()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every line, once the stream has ended.
    pub fn finish(mut self) -> Vec<String> {
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        self.snapshot()
    }
}

/// Spawns `cmd` with its stdout and stderr collected line by line.
pub fn spawn_collecting(mut cmd: Command) -> (Child, Lines, Lines) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgcdc");
    let stdout = Lines::collect(child.stdout.take().expect("piped stdout"));
    let stderr = Lines::collect(child.stderr.take().expect("piped stderr"));
    (child, stdout, stderr)
}

/// Waits for `child` to exit, killing it after `timeout`.
pub fn wait_status(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("pgcdc did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts a failed run printed a clean error: a non-zero exit (`code` if given), a
/// non-empty stderr, no panic or backtrace.
pub fn assert_clean_failure(output: &Output, code: Option<i32>) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "expected a failure; stderr:\n{stderr}"
    );
    if let Some(code) = code {
        assert_eq!(
            output.status.code(),
            Some(code),
            "exit code; stderr:\n{stderr}"
        );
    }
    assert!(!stderr.trim().is_empty(), "no error message");
    assert!(!stderr.contains("panicked"), "panic in stderr:\n{stderr}");
    assert!(
        !stderr.contains("stack backtrace"),
        "backtrace in stderr:\n{stderr}"
    );
    stderr
}

/// Asserts stderr is exactly one non-empty line and returns it.
pub fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected a one-line error, got:\n{stderr}");
    lines[0]
}
