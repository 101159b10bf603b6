//! Throwaway PostgreSQL clusters: the [`Cluster`] handle, its constants and teardown.
//!
//! The pieces live in one file per purpose: `builder` (configuring and creating a
//! cluster), `config` (`initdb`, `postgresql.conf`, `pg_hba.conf`, reloads), `process`
//! (starting, stopping and supervising the postmaster), `client` (connection strings and
//! admin connections), `faults` (crashes and dropped connections), `ports` (free TCP
//! ports) and `standby` (physical standbys, promotion, replay).

mod builder;
mod child;
mod client;
mod config;
mod faults;
pub(crate) mod ports;
mod process;
mod standby;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::time::Duration;

use tempfile::TempDir;

use crate::binaries::PgBinaries;
use crate::error::{IoContext, Result};
use crate::os::{self, ServerUser};
use crate::tls::TlsFiles;

pub use builder::ClusterBuilder;
pub use standby::StandbyBuilder;

use child::{ServerState, read_pid_file, shutdown_immediate, tail_lines};
use ports::{release_port, reserve_port};

/// Name of the superuser every cluster is created with.
pub const ADMIN_USER: &str = "postgres";

/// Password of [`ADMIN_USER`] (set under every [`AuthMethod`], so the admin can also log in
/// over TCP with a password). The kit's own admin connections use the Unix socket, where
/// [`ADMIN_USER`] is trusted, so they work under every authentication method.
pub const ADMIN_PASSWORD: &str = "postgres";

pub use ports::HOST;

/// Environment variable: when set to a non-empty value other than `0`, clusters' temporary
/// directories are kept on drop (and their path printed) for post-mortem debugging.
pub const KEEP_ENV: &str = "PGCDC_TESTKIT_KEEP";

/// How clients other than the kit's admin connection authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AuthMethod {
    /// No password checked.
    #[default]
    Trust,
    /// Cleartext password (`password` in `pg_hba.conf`).
    Password,
    /// MD5 challenge-response. The cluster also sets `password_encryption = md5`, so roles
    /// get genuine md5 secrets (with a SCRAM secret, PostgreSQL 14+ would silently switch an
    /// `md5` line to SCRAM).
    Md5,
    /// SCRAM-SHA-256 (`password_encryption = scram-sha-256`).
    ScramSha256,
    /// Client certificate: TCP lines become `hostssl ... cert` (the certificate's CN must be
    /// the user name; issue one with [`TlsFiles::issue_client_cert`]). Implies TLS. Unix
    /// socket connections of non-admin users use SCRAM-SHA-256.
    Cert,
}

impl AuthMethod {
    /// The method's name in `pg_hba.conf`.
    pub fn hba_name(self) -> &'static str {
        match self {
            AuthMethod::Trust => "trust",
            AuthMethod::Password => "password",
            AuthMethod::Md5 => "md5",
            AuthMethod::ScramSha256 => "scram-sha-256",
            AuthMethod::Cert => "cert",
        }
    }

    /// The `password_encryption` the cluster uses with this method.
    pub fn password_encryption(self) -> &'static str {
        match self {
            AuthMethod::Md5 => "md5",
            _ => "scram-sha-256",
        }
    }
}

/// A throwaway PostgreSQL cluster in its own temporary directory, listening on
/// `127.0.0.1:<random free port>` and on a Unix socket in [`Cluster::socket_dir`].
///
/// The postmaster is a direct child of the test process, run as the current user, or as the
/// `postgres` system user when the tests run as root. Configured with `wal_level = logical`
/// (see [`ClusterBuilder::setting`] for every default).
///
/// Dropping the cluster (also while unwinding from a panic) shuts the server down
/// immediately (SIGQUIT, then SIGKILL of the postmaster and its children if it does not exit
/// within 10 s), waits until its processes are gone and removes the directory. Set
/// `PGCDC_TESTKIT_KEEP=1` to keep the directory. When dropped during a panic, the tail of
/// the server log is printed to stderr.
///
/// All methods take `&self`, so a cluster can be shared (`Arc<Cluster>`) between the code
/// under test and a task injecting faults; start/stop/kill operations are serialised.
#[derive(Debug)]
pub struct Cluster {
    state: tokio::sync::Mutex<ServerState>,
    pid: AtomicU32,
    port: AtomicU16,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
    tls: Option<TlsFiles>,
    bins: PgBinaries,
    server_user: Option<ServerUser>,
    auth: AuthMethod,
    start_timeout: Duration,
    stop_timeout: Duration,
    /// The test's settings, written after the kit's defaults into `testkit.conf`.
    settings: Vec<(String, String)>,
    /// Dropped (removed) last, in `Drop`, after the server is gone.
    base: Option<TempDir>,
}

impl Cluster {
    /// Create and start a cluster with the default configuration
    /// (`ClusterBuilder::new().build()`).
    pub async fn new() -> Result<Cluster> {
        ClusterBuilder::new().build().await
    }

    /// A builder for a cluster with non-default configuration.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::new()
    }

    /// The TCP port (fixed for the cluster's lifetime, across restarts).
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::SeqCst)
    }

    /// The TCP host, `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        HOST
    }

    /// Directory holding the server's Unix socket (usable as `host=` in libpq).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The data directory (`PGDATA`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server log (stderr of every start of the postmaster, appended).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole server log so far (lossily decoded); empty if unreadable.
    pub fn log_contents(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The server binaries this cluster runs (e.g. for `pg_recvlogical`).
    pub fn bins(&self) -> &PgBinaries {
        &self.bins
    }

    /// The authentication method of non-admin connections.
    pub fn auth_method(&self) -> AuthMethod {
        self.auth
    }

    /// TLS material, if the cluster was built with TLS.
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The postmaster's pid while the server runs (as last started by the kit), else `None`.
    pub fn postmaster_pid(&self) -> Option<u32> {
        match self.pid.load(Ordering::SeqCst) {
            0 => None,
            pid => Some(pid),
        }
    }

    fn base_dir(&self) -> &Path {
        self.data_dir.parent().unwrap_or(&self.data_dir)
    }
}

/// What a new cluster directory needs: everything but the data directory's contents.
struct Fresh {
    bins: PgBinaries,
    server_user: Option<ServerUser>,
    auth: AuthMethod,
    settings: Vec<(String, String)>,
    start_timeout: Duration,
    stop_timeout: Duration,
}

impl Cluster {
    /// A stopped cluster handle with a fresh temporary directory (empty `data`, `socket`)
    /// and a reserved port. Its `Drop` removes everything again.
    fn allocate(fresh: Fresh) -> Result<Cluster> {
        // Keep the path short: a Unix socket path is limited to ~107 bytes.
        let mut parent = std::env::temp_dir();
        if parent.as_os_str().len() > 60 {
            parent = PathBuf::from("/tmp");
        }
        let base = tempfile::Builder::new()
            .prefix("pgcdc-testkit-")
            .tempdir_in(&parent)
            .ctx(|| format!("create a temporary directory in {}", parent.display()))?;
        os::chmod(base.path(), 0o755)?;
        let data_dir = base.path().join("data");
        let socket_dir = base.path().join("socket");
        for (dir, mode) in [(&data_dir, 0o700), (&socket_dir, 0o755)] {
            std::fs::create_dir(dir).ctx(|| format!("create {}", dir.display()))?;
            os::chmod(dir, mode)?;
            os::chown(dir, fresh.server_user)?;
        }
        let port = reserve_port()?;
        Ok(Cluster {
            state: tokio::sync::Mutex::new(ServerState { child: None }),
            pid: AtomicU32::new(0),
            port: AtomicU16::new(port),
            log_path: base.path().join("postgres.log"),
            data_dir,
            socket_dir,
            tls: None,
            bins: fresh.bins,
            server_user: fresh.server_user,
            auth: fresh.auth,
            start_timeout: fresh.start_timeout,
            stop_timeout: fresh.stop_timeout,
            settings: fresh.settings,
            base: Some(base),
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        let state = self.state.get_mut();
        if let Some(child) = state.child.take() {
            if panicking {
                eprintln!(
                    "cdc-testkit: cluster on port {} dropped during a panic; server log tail:\n{}",
                    self.port(),
                    tail_lines(&self.log_contents(), 30)
                );
            }
            shutdown_immediate(child);
        }
        self.pid.store(0, Ordering::SeqCst);
        // A postmaster killed with SIGKILL leaves its System V segment behind.
        if let Some(stale) = read_pid_file(&self.data_dir)
            && !os::is_alive(stale.pid)
            && let Some(shmid) = stale.shmid
        {
            os::remove_stale_shm(shmid, stale.pid);
        }
        release_port(self.port());
        if let Some(base) = self.base.take() {
            let keep = std::env::var(KEEP_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
            if keep {
                let path = base.keep();
                eprintln!("cdc-testkit: keeping cluster directory {}", path.display());
            } else {
                let path = base.path().to_path_buf();
                if let Err(e) = base.close() {
                    eprintln!("cdc-testkit: could not remove {}: {e}", path.display());
                }
            }
        }
    }
}

/// A SQL identifier, double-quoted.
pub(crate) fn quote_ident(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// A SQL string literal (standard_conforming_strings = on, the default).
pub(crate) fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote_ident(r#"we"ird"#), r#""we""ird""#);
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    /// Compile-time check: clusters can be shared (`Arc<Cluster>`) and their futures
    /// spawned on a multi-threaded runtime.
    #[allow(dead_code)]
    fn cluster_and_futures_are_send(c: &'static Cluster) {
        fn is_send_sync<T: Send + Sync>() {}
        fn is_send<T: Send>(_: T) {}
        is_send_sync::<Cluster>();
        is_send(c.start());
        is_send(c.stop());
        is_send(c.restart());
        is_send(c.kill9());
        is_send(c.connect("postgres"));
        is_send(c.execute("SELECT 1"));
        is_send(c.reload());
        is_send(c.terminate_walsenders());
        is_send(ClusterBuilder::new().build());
        is_send(ClusterBuilder::new().major(16).build());
        is_send(c.standby());
        is_send(c.standby_builder().slot("s").build());
        is_send(c.promote());
        is_send(c.wait_for_replay(c));
        is_send(c.is_in_recovery());
    }
}
