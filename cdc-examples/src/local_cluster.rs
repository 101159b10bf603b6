//! The throwaway PostgreSQL cluster behind `pgcdc demo`: the server binaries found on this
//! machine, `initdb` into a fresh temporary directory, and a server with
//! `wal_level = logical` that listens only on a Unix socket in that directory (no TCP, so
//! no port to pick and nothing reachable from other machines; the directory is private to
//! the server's user). Dropping the [`LocalCluster`] stops the server (fast shutdown) and
//! removes the directory.
//!
//! PostgreSQL refuses to run as root: run as root, `initdb` and the server run as the
//! `postgres` system user, which then owns the directory.

use std::ffi::{CString, OsStr};
use std::fmt;
use std::mem::MaybeUninit;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Environment variable naming the directory that holds `initdb` and `postgres` (the same
/// variable the test kit reads).
pub(crate) const PG_BIN_ENV: &str = "PG_BIN";

/// The superuser `initdb` creates, and the one the demo connects as.
const ADMIN_USER: &str = "postgres";

/// Only names the socket file (`.s.PGSQL.5432`): the server does not listen on TCP.
const PORT: u16 = 5432;

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a fast shutdown may take before the server is shut down immediately.
const FAST_STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Lines of the server log (or of `initdb`'s output) quoted in errors.
const LOG_TAIL_LINES: usize = 20;

/// What went wrong starting the cluster; the message names the step that failed.
#[derive(Debug)]
pub(crate) struct LocalClusterError(String);

impl fmt::Display for LocalClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LocalClusterError {}

type Result<T> = std::result::Result<T, LocalClusterError>;

fn error(message: impl Into<String>) -> LocalClusterError {
    LocalClusterError(message.into())
}

/// A running throwaway cluster. Dropping it stops the server and removes its directory.
#[derive(Debug)]
pub(crate) struct LocalCluster {
    /// The postmaster, a direct child of this process.
    server: Child,
    /// The cluster's directory: `data/`, `server.log` and the socket.
    dir: Option<TempDir>,
}

impl LocalCluster {
    /// Finds the server binaries ([`find_binaries`], with `$PG_BIN`) and starts a cluster.
    pub(crate) fn start() -> Result<LocalCluster> {
        let bin_dir = find_binaries(std::env::var_os(PG_BIN_ENV).as_deref())?;
        LocalCluster::start_with(&bin_dir)
    }

    /// Starts a cluster with the binaries in `bin_dir`; returns once the server accepts
    /// connections. On failure nothing is left behind.
    pub(crate) fn start_with(bin_dir: &Path) -> Result<LocalCluster> {
        let server_user = server_user()?;
        let dir = new_directory()?;
        let base = dir.path();
        if let Some(user) = server_user {
            std::os::unix::fs::chown(base, Some(user.uid), Some(user.gid)).map_err(|e| {
                error(format!(
                    "giving {} to the `{ADMIN_USER}` user failed: {e}",
                    base.display()
                ))
            })?;
        }
        let data = base.join("data");
        initdb(bin_dir, &data, server_user)?;

        let log_path = base.join("server.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| error(format!("creating {} failed: {e}", log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| error(format!("duplicating the server log's handle failed: {e}")))?;
        let program = bin_dir.join("postgres");
        let settings = [
            // Unix socket only.
            "listen_addresses=".to_owned(),
            format!("port={PORT}"),
            format!("unix_socket_directories={}", base.display()),
            "unix_socket_permissions=0700".to_owned(),
            "wal_level=logical".to_owned(),
            "max_wal_senders=10".to_owned(),
            "max_replication_slots=10".to_owned(),
        ];
        let mut command = server_command(&program, server_user);
        command.arg("-D").arg(&data);
        for setting in settings {
            command.arg("-c").arg(setting);
        }
        let server = command
            .current_dir(base)
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| error(format!("running {} failed: {e}", program.display())))?;
        // From here on, Drop stops the server and removes the directory.
        let mut cluster = LocalCluster {
            server,
            dir: Some(dir),
        };
        cluster.wait_until_ready(&data, &log_path)?;
        Ok(cluster)
    }

    /// key=value connection string for the superuser, over the Unix socket.
    pub(crate) fn conninfo(&self) -> String {
        format!(
            "host={} port={PORT} user={ADMIN_USER} dbname=postgres",
            conninfo_quote(&self.dir().to_string_lossy())
        )
    }

    /// The cluster's directory (removed on drop).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), TempDir::path)
    }

    fn wait_until_ready(&mut self, data: &Path, log_path: &Path) -> Result<()> {
        let pid = self.server.id();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.server.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    return Err(error(format!(
                        "the PostgreSQL server exited while starting ({status}); its log \
                         ends with:\n{}",
                        log_tail(log_path)
                    )));
                }
                Err(e) => return Err(error(format!("waiting for the server failed: {e}"))),
            }
            if is_ready(data, pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(error(format!(
                    "the PostgreSQL server did not accept connections within {}s; its log \
                     ends with:\n{}",
                    START_TIMEOUT.as_secs(),
                    log_tail(log_path)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Fast shutdown (SIGINT: clients are disconnected, a shutdown checkpoint is written),
    /// then an immediate one (SIGQUIT), then SIGKILL. Returns once the server has exited.
    fn stop(&mut self) {
        for (signal, timeout) in [
            (libc::SIGINT, FAST_STOP_TIMEOUT),
            (libc::SIGQUIT, Duration::from_secs(5)),
        ] {
            // Not yet reaped, so the pid is still the server's (it may already be exiting:
            // a terminal's Ctrl-C reaches it too).
            if !matches!(self.server.try_wait(), Ok(None)) {
                return;
            }
            send_signal(self.server.id(), signal);
            if wait_exit(&mut self.server, timeout) {
                return;
            }
            eprintln!(
                "pgcdc demo: warning: the local PostgreSQL server did not stop within {}s",
                timeout.as_secs()
            );
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_path_buf();
            if let Err(e) = dir.close() {
                eprintln!(
                    "pgcdc demo: warning: could not remove {}: {e}",
                    path.display()
                );
            }
        }
    }
}

/// The directory holding `initdb` and `postgres`, the first of:
///
/// 1. `explicit` (`$PG_BIN`): an error if it lacks them (an explicit choice is never
///    silently ignored);
/// 2. `pg_config --bindir`, if it holds them (a client-only install has `pg_config` but no
///    server);
/// 3. a directory on `PATH` holding both;
/// 4. `/usr/lib/postgresql/<version>/bin` (Debian/Ubuntu), newest version first.
pub(crate) fn find_binaries(explicit: Option<&OsStr>) -> Result<PathBuf> {
    const FIX: &str = "install the PostgreSQL server (Debian/Ubuntu: `apt-get install \
                       postgresql`), set PG_BIN to the directory holding `initdb` and \
                       `postgres`, or give --uri to use an existing database";
    if let Some(dir) = explicit {
        let dir = PathBuf::from(dir);
        if has_server_binaries(&dir) {
            return Ok(dir);
        }
        return Err(error(format!(
            "{PG_BIN_ENV}={} does not contain `initdb` and `postgres`; {FIX}",
            dir.display()
        )));
    }
    let mut searched = vec![format!("{PG_BIN_ENV} is not set")];

    match Command::new("pg_config").arg("--bindir").output() {
        Ok(out) if out.status.success() => {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if has_server_binaries(&dir) {
                return Ok(dir);
            }
            searched.push(format!(
                "`pg_config --bindir` ({}) has no server",
                dir.display()
            ));
        }
        Ok(out) => searched.push(format!("`pg_config --bindir` failed ({})", out.status)),
        Err(e) => searched.push(format!("`pg_config` did not run ({e})")),
    }

    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(dir) = std::env::split_paths(&path).find(|d| has_server_binaries(d)) {
        return Ok(dir);
    }
    searched.push("no directory on PATH has both".to_owned());

    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name();
            let key = name
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<Vec<u64>>>()?;
            Some((key, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions
        .into_iter()
        .rev()
        .find(|(_, dir)| has_server_binaries(dir))
    {
        return Ok(dir);
    }
    searched.push(format!("no {}/<version>/bin has them", root.display()));

    Err(error(format!(
        "no PostgreSQL server binaries (`initdb` and `postgres`) found ({}); {FIX}",
        searched.join("; ")
    )))
}

fn has_server_binaries(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// The system user `initdb` and the server run as, when not the current one.
#[derive(Debug, Clone, Copy)]
struct ServerUser {
    uid: u32,
    gid: u32,
}

/// `None` when the server can run as the current user; the `postgres` user when running
/// as root.
fn server_user() -> Result<Option<ServerUser>> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    lookup_user(ADMIN_USER).map(Some).ok_or_else(|| {
        error(format!(
            "PostgreSQL refuses to run as root, and there is no `{ADMIN_USER}` system user to \
             run it as; create one (`useradd --system {ADMIN_USER}`), run pgcdc demo as \
             another user, or give --uri to use an existing database"
        ))
    })
}

fn lookup_user(name: &str) -> Option<ServerUser> {
    let name = CString::new(name).ok()?;
    let mut pwd = MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf.len()` is the size of `buf`;
    // getpwnam_r writes only into `pwd` and `buf`.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            pwd.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: getpwnam_r succeeded with a non-null result, so `pwd` is initialised.
    let pwd = unsafe { pwd.assume_init() };
    Some(ServerUser {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// A fresh, private directory with a short, plain path: the socket's path must fit in
/// about 107 bytes, and it is written unquoted into `unix_socket_directories`.
fn new_directory() -> Result<TempDir> {
    let mut parent = std::env::temp_dir();
    let plain = parent
        .to_str()
        .is_some_and(|p| p.len() <= 60 && p.bytes().all(|b| b.is_ascii_graphic() && b != b','));
    if !plain {
        parent = PathBuf::from("/tmp");
    }
    tempfile::Builder::new()
        .prefix("pgcdc-demo-")
        .tempdir_in(&parent)
        .map_err(|e| {
            error(format!(
                "creating a temporary directory in {} failed: {e}",
                parent.display()
            ))
        })
}

/// `program` run as `user` (if any), with a clean environment: nothing inherited that
/// could change the server's behaviour (PGDATA, PGPORT, ...), and English messages.
fn server_command(program: &Path, user: Option<ServerUser>) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .stdin(Stdio::null());
    for key in ["TZ", "LD_LIBRARY_PATH"] {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    if let Some(user) = user {
        command.uid(user.uid).gid(user.gid);
    }
    command
}

fn initdb(bin_dir: &Path, data: &Path, user: Option<ServerUser>) -> Result<()> {
    let program = bin_dir.join("initdb");
    let mut command = server_command(&program, user);
    command
        .arg("-D")
        .arg(data)
        .args([
            "-U",
            ADMIN_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            // A throwaway cluster: skip initdb's final sync (the server still fsyncs).
            "--no-sync",
        ])
        .current_dir(data.parent().unwrap_or(data));
    let out = command
        .output()
        .map_err(|e| error(format!("running {} failed: {e}", program.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Err(error(format!(
        "{} failed ({}); its output ends with:\n{}",
        program.display(),
        out.status,
        tail(&output)
    )))
}

/// Whether `postmaster.pid` says server `pid` accepts connections.
fn is_ready(data: &Path, pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let mut lines = text.lines();
    // Line 1: the postmaster's pid; line 8: its status.
    lines.next().and_then(|l| l.trim().parse::<u32>().ok()) == Some(pid)
        && lines.nth(6).is_some_and(|l| l.trim() == "ready")
}

fn log_tail(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => tail(&String::from_utf8_lossy(&bytes)),
        Err(e) => format!("(reading {} failed: {e})", path.display()),
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// Sends `signal` to `pid` (an unreaped child, so still ours).
fn send_signal(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Polls `child` until it exits (reaping it) or `timeout` passes; true if it exited.
fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
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

/// A libpq key=value value, single-quoted with `\` and `'` escaped.
fn conninfo_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_directory_without_binaries_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-bin");
        for candidate in [dir.path(), missing.as_path()] {
            let e = find_binaries(Some(candidate.as_os_str())).unwrap_err();
            let message = e.to_string();
            assert!(
                message.contains(&format!("PG_BIN={}", candidate.display())),
                "{message}"
            );
            assert!(message.contains("--uri"), "says what to do: {message}");
        }
        let e = LocalCluster::start_with(&missing).unwrap_err().to_string();
        assert!(e.contains("initdb"), "names what failed: {e}");
    }

    #[test]
    fn readiness_is_read_from_the_pid_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_ready(dir.path(), 42));
        let pid_file = |status: &str| {
            format!("42\n/data\n1700000000\n5432\n/tmp\n\n  5432001  3\n{status:<12}\n")
        };
        std::fs::write(dir.path().join("postmaster.pid"), pid_file("starting")).unwrap();
        assert!(!is_ready(dir.path(), 42));
        std::fs::write(dir.path().join("postmaster.pid"), pid_file("ready")).unwrap();
        assert!(is_ready(dir.path(), 42));
        assert!(!is_ready(dir.path(), 43), "another server's file");
    }

    #[test]
    fn quoting_and_tails() {
        assert_eq!(conninfo_quote(r"/tmp/a'b\c"), r"'/tmp/a\'b\\c'");
        let long: String = (1..=30).map(|i| format!("{i}\n")).collect();
        assert_eq!(tail(&long).lines().next(), Some("11"));
        assert_eq!(tail("only"), "only");
    }

    /// A real cluster: logical decoding is on, and dropping it stops the server and
    /// removes the directory, also when the server already stopped (a terminal's Ctrl-C
    /// reaches it too).
    #[tokio::test]
    async fn starts_for_logical_replication_and_leaves_nothing_behind() {
        for already_stopped in [false, true] {
            let cluster = LocalCluster::start().unwrap();
            let dir = cluster.dir().to_path_buf();
            let pid = cluster.server.id();
            assert!(dir.join("data").join("PG_VERSION").is_file());

            let connection = cdc_postgres::conn::ConnectionConfig::parse(&cluster.conninfo())
                .expect("the connection string parses");
            let client = cdc_postgres::conn::connect_sql(&connection)
                .await
                .expect("connect over the Unix socket");
            let wal_level: String = client
                .query_one("SHOW wal_level", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(wal_level, "logical");
            drop(client);

            if already_stopped {
                send_signal(pid, libc::SIGINT);
            }
            drop(cluster);
            assert!(!dir.exists(), "{} is left behind", dir.display());
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "the server is still running"
            );
        }
    }
}
