//! Throwaway PostgreSQL clusters: creation, connection helpers, fault injection, teardown.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tempfile::TempDir;
use tokio_postgres::{Client, NoTls};

use crate::binaries::PgBinaries;
use crate::error::{Error, IoContext, Result};
use crate::os::{self, ServerUser};
use crate::tls::{DEFAULT_SERVER_NAMES, IssuedCert, TlsFiles};

/// Name of the superuser every cluster is created with.
pub const ADMIN_USER: &str = "postgres";

/// Password of [`ADMIN_USER`] (set under every [`AuthMethod`], so the admin can also log in
/// over TCP with a password). The kit's own admin connections use the Unix socket, where
/// [`ADMIN_USER`] is trusted, so they work under every authentication method.
pub const ADMIN_PASSWORD: &str = "postgres";

/// Address the server listens on (TCP). IPv6 is not enabled.
pub const HOST: &str = "127.0.0.1";

/// Environment variable: when set to a non-empty value other than `0`, clusters' temporary
/// directories are kept on drop (and their path printed) for post-mortem debugging.
pub const KEEP_ENV: &str = "PGCDC_TESTKIT_KEEP";

/// Ports handed out to clusters of this process and not yet released.
static RESERVED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Characters left as-is in URI components (RFC 3986 unreserved); everything else is
/// percent-encoded.
const URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

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

/// Configures and starts a [`Cluster`].
///
/// Defaults: [`AuthMethod::Trust`], no extra users, no TLS, the settings listed on
/// [`ClusterBuilder::setting`], binaries found by [`PgBinaries::find`], 120 s start timeout,
/// 60 s stop timeout.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    auth: AuthMethod,
    users: Vec<(String, String)>,
    settings: Vec<(String, String)>,
    tls: bool,
    server_names: Vec<String>,
    ssl_only: bool,
    hba_lines: Vec<String>,
    bins: Option<PathBuf>,
    start_timeout: Duration,
    stop_timeout: Duration,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ClusterBuilder {
    /// A builder with the defaults described on [`ClusterBuilder`].
    pub fn new() -> Self {
        Self {
            auth: AuthMethod::Trust,
            users: Vec::new(),
            settings: Vec::new(),
            tls: false,
            server_names: DEFAULT_SERVER_NAMES.iter().map(|s| s.to_string()).collect(),
            ssl_only: false,
            hba_lines: Vec::new(),
            bins: None,
            start_timeout: Duration::from_secs(120),
            stop_timeout: Duration::from_secs(60),
        }
    }

    /// Authentication method for every non-admin connection, local (Unix socket) and host
    /// (`127.0.0.1/32`, `::1/128`), normal and `replication`.
    pub fn auth(mut self, method: AuthMethod) -> Self {
        self.auth = method;
        if method == AuthMethod::Cert {
            self.tls = true;
        }
        self
    }

    /// Create a role `name` with `LOGIN REPLICATION` and `password` (any characters; stored
    /// with the method's `password_encryption`) when the cluster first starts.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.users.push((name.into(), password.into()));
        self
    }

    /// Set a server configuration parameter (`postgresql.conf` syntax for the name; the
    /// value is quoted by the kit), e.g. `.setting("wal_sender_timeout", "2s")`.
    ///
    /// Later calls win, and every call overrides the kit's defaults:
    /// `listen_addresses = '127.0.0.1'`, `port`, `unix_socket_directories`,
    /// `max_connections = 40`, `shared_buffers = 16MB`, `wal_level = logical`,
    /// `max_wal_senders = 10`, `max_replication_slots = 10`, `fsync = on`,
    /// `dynamic_shared_memory_type = mmap`, `log_replication_commands = on`,
    /// `password_encryption` (per [`AuthMethod`]) and, with TLS, `ssl` and the certificate
    /// files. Overriding `port`, `listen_addresses` or `unix_socket_directories` breaks the
    /// connection helpers.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// Enable TLS (`ssl = on`) with a fresh CA and a server certificate for `localhost` and
    /// `127.0.0.1`; see [`Cluster::tls`].
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Enable TLS with a server certificate whose subjectAltName holds exactly `names` (DNS
    /// names or IP addresses) instead of `localhost`/`127.0.0.1` — e.g. `["wrong.example"]`
    /// to make `verify-full` fail while `verify-ca` passes.
    pub fn tls_server_names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tls = true;
        self.server_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Accept TCP connections only over TLS (`hostssl` lines instead of `host`); implies
    /// TLS. A plaintext TCP connection is then rejected (SQLSTATE `28000`).
    pub fn ssl_only(mut self) -> Self {
        self.tls = true;
        self.ssl_only = true;
        self
    }

    /// Add a raw `pg_hba.conf` line. Custom lines come after the admin's `local` trust lines
    /// and before the generated ones, so they take precedence over the latter.
    pub fn hba_line(mut self, line: impl Into<String>) -> Self {
        self.hba_lines.push(line.into());
        self
    }

    /// Use the server binaries in `dir` instead of searching (see [`PgBinaries::find`]).
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bins = Some(dir.into());
        self
    }

    /// How long a start (including crash recovery) may take before it fails.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// How long [`Cluster::stop`] waits for a fast shutdown before it falls back to an
    /// immediate one.
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// Create the cluster (`initdb` into a fresh temporary directory), start it on a free
    /// port and create the configured users. When this returns, the server accepts
    /// connections. On failure everything created so far is removed again.
    pub async fn build(self) -> Result<Cluster> {
        for (name, _) in &self.settings {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            {
                return Err(Error::Config(format!("invalid setting name {name:?}")));
            }
        }
        if self.tls && self.server_names.is_empty() {
            return Err(Error::Config(
                "tls_server_names needs at least one name".into(),
            ));
        }
        let bins = match &self.bins {
            Some(dir) => PgBinaries::from_dir(dir.clone())?,
            None => PgBinaries::find()?,
        };
        let server_user = os::server_user()?;

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
            os::chown(dir, server_user)?;
        }

        let port = reserve_port()?;
        let cluster = Cluster {
            state: tokio::sync::Mutex::new(ServerState { child: None }),
            pid: AtomicU32::new(0),
            port: AtomicU16::new(port),
            log_path: base.path().join("postgres.log"),
            data_dir,
            socket_dir,
            tls: None,
            bins,
            server_user,
            auth: self.auth,
            start_timeout: self.start_timeout,
            stop_timeout: self.stop_timeout,
            base: Some(base),
        };
        // From here on, `cluster`'s Drop cleans up whatever happens.
        self.initialize(cluster).await
    }

    async fn initialize(self, mut cluster: Cluster) -> Result<Cluster> {
        cluster.initdb().await?;
        if self.tls {
            let dir = cluster.base_dir().join("tls");
            cluster.tls = Some(TlsFiles::create(
                &dir,
                &self.server_names,
                cluster.server_user,
            )?);
        }
        cluster.write_hba(&self)?;
        cluster.append_include()?;
        let settings = self.settings.clone();
        cluster.write_conf(&settings)?;

        // First start: on a port conflict pick another port.
        {
            let mut state = cluster.state.lock().await;
            let mut attempts = 0;
            loop {
                match cluster.start_attempts(&mut state, 0).await {
                    Ok(()) => break,
                    Err(StartError::PortInUse(_)) if attempts < 20 => {
                        attempts += 1;
                        let old = cluster.port();
                        let new = reserve_port()?;
                        cluster.port.store(new, Ordering::SeqCst);
                        release_port(old);
                        tracing::debug!(old, new, "port in use, retrying on another port");
                        cluster.write_conf(&settings)?;
                    }
                    Err(e) => return Err(e.into_error()),
                }
            }
        }

        let mut sql = format!(
            "SET password_encryption = {};\nALTER ROLE {} PASSWORD {};\n",
            quote_literal(self.auth.password_encryption()),
            quote_ident(ADMIN_USER),
            quote_literal(ADMIN_PASSWORD),
        );
        for (name, password) in &self.users {
            let _ = writeln!(
                sql,
                "CREATE ROLE {} LOGIN REPLICATION PASSWORD {};",
                quote_ident(name),
                quote_literal(password)
            );
        }
        cluster.execute(&sql).await?;
        Ok(cluster)
    }
}

#[derive(Debug)]
struct ServerState {
    /// The postmaster, our direct child, while it runs (or until we notice it exited).
    child: Option<Child>,
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
    /// Dropped (removed) last, in `Drop`, after the server is gone.
    base: Option<TempDir>,
}

/// Why one start attempt failed.
enum StartError {
    /// The TCP port was taken (by another server or process).
    PortInUse(String),
    /// Anything else; the error carries the log tail.
    Other(Error),
}

impl StartError {
    fn into_error(self) -> Error {
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

    /// libpq key=value connection string for `user` over TCP (`host=127.0.0.1 port=...
    /// dbname=... user=... [password=...]`). Values are single-quoted with `\` and `'`
    /// backslash-escaped, so any characters are safe. Append e.g. `sslmode=...` as needed.
    pub fn connection_string(&self, db: &str, user: &str, password: Option<&str>) -> String {
        self.kv_string(HOST, db, user, password)
    }

    /// Like [`Cluster::connection_string`], over the Unix socket (`host=<socket dir>`).
    pub fn socket_connection_string(&self, db: &str, user: &str, password: Option<&str>) -> String {
        let host = self.socket_dir.to_string_lossy().into_owned();
        self.kv_string(&host, db, user, password)
    }

    /// key=value connection string for the admin over the Unix socket; works under every
    /// [`AuthMethod`] (the admin is trusted on the socket).
    pub fn admin_connection_string(&self, db: &str) -> String {
        self.socket_connection_string(db, ADMIN_USER, None)
    }

    fn kv_string(&self, host: &str, db: &str, user: &str, password: Option<&str>) -> String {
        let mut s = format!(
            "host={} port={} dbname={} user={}",
            kv_quote(host),
            self.port(),
            kv_quote(db),
            kv_quote(user)
        );
        if let Some(p) = password {
            let _ = write!(s, " password={}", kv_quote(p));
        }
        s
    }

    /// libpq URI for `user` over TCP: `postgresql://user[:password]@127.0.0.1:port/db`, with
    /// user, password and database percent-encoded (everything but RFC 3986 unreserved
    /// characters). Append `?sslmode=...` as needed.
    pub fn uri(&self, db: &str, user: &str, password: Option<&str>) -> String {
        let mut s = format!("postgresql://{}", utf8_percent_encode(user, URI_COMPONENT));
        if let Some(p) = password {
            let _ = write!(s, ":{}", utf8_percent_encode(p, URI_COMPONENT));
        }
        let _ = write!(
            s,
            "@{HOST}:{}/{}",
            self.port(),
            utf8_percent_encode(db, URI_COMPONENT)
        );
        s
    }

    /// A [`tokio_postgres::Config`] for `user` over TCP to `127.0.0.1` (no TLS settings).
    pub fn tcp_config(
        &self,
        db: &str,
        user: &str,
        password: Option<&str>,
    ) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(HOST)
            .port(self.port())
            .dbname(db)
            .user(user)
            .application_name("cdc-testkit");
        if let Some(p) = password {
            config.password(p);
        }
        config
    }

    /// Connect to `db` as the admin superuser over the Unix socket (works under every
    /// [`AuthMethod`]). The connection task is spawned on the current tokio runtime; it ends
    /// when the client is dropped or the server goes away.
    pub async fn connect(&self, db: &str) -> Result<Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.socket_dir)
            .port(self.port())
            .dbname(db)
            .user(ADMIN_USER)
            .application_name("cdc-testkit");
        connect_spawned(&config).await
    }

    /// Connect to `db` as `user` over TCP without TLS, authenticating with the cluster's
    /// method. A rejected login is an [`Error::Postgres`] whose [`Error::code`] is the
    /// SQLSTATE (`28P01` for a wrong password).
    pub async fn connect_as(&self, db: &str, user: &str, password: Option<&str>) -> Result<Client> {
        connect_spawned(&self.tcp_config(db, user, password)).await
    }

    /// Run `sql` in database `postgres` as the admin, over a fresh connection. Several
    /// `;`-separated statements run in one implicit transaction (simple query protocol, as
    /// `psql -c` does) unless `sql` contains its own `BEGIN`/`COMMIT`; so e.g.
    /// `pg_create_logical_replication_slot` must not share a call with writes.
    pub async fn execute(&self, sql: &str) -> Result<()> {
        self.execute_in("postgres", sql).await
    }

    /// [`Cluster::execute`] in database `db`.
    pub async fn execute_in(&self, db: &str, sql: &str) -> Result<()> {
        let client = self.connect(db).await?;
        client.batch_execute(sql).await?;
        Ok(())
    }

    /// `CREATE DATABASE` with the given name (quoted as an identifier, so used verbatim).
    pub async fn create_database(&self, name: &str) -> Result<()> {
        self.execute(&format!("CREATE DATABASE {}", quote_ident(name)))
            .await
    }

    /// Create a role with `LOGIN REPLICATION` and `password`, hashed with the cluster's
    /// `password_encryption` (see [`AuthMethod`]).
    pub async fn create_user(&self, name: &str, password: &str) -> Result<()> {
        self.execute(&format!(
            "SET password_encryption = {}; CREATE ROLE {} LOGIN REPLICATION PASSWORD {};",
            quote_literal(self.auth.password_encryption()),
            quote_ident(name),
            quote_literal(password)
        ))
        .await
    }

    /// `server_version_num` of the running server (e.g. `150004`).
    pub async fn server_version_num(&self) -> Result<u32> {
        let client = self.connect("postgres").await?;
        let row = client.query_one("SHOW server_version_num", &[]).await?;
        let text: String = row.try_get(0)?;
        text.trim()
            .parse()
            .map_err(|_| Error::Config(format!("unexpected server_version_num {text:?}")))
    }

    /// The cluster's system identifier (`pg_control_system()`); unique per cluster.
    pub async fn system_identifier(&self) -> Result<u64> {
        let client = self.connect("postgres").await?;
        let row = client
            .query_one("SELECT system_identifier FROM pg_control_system()", &[])
            .await?;
        let id: i64 = row.try_get(0)?;
        Ok(id as u64)
    }

    /// Re-read the configuration files (`pg_hba.conf`, settings, TLS certificates) and wait
    /// until new connections see the reloaded configuration.
    pub async fn reload(&self) -> Result<()> {
        let client = self.connect("postgres").await?;
        let before: String = client
            .query_one("SELECT pg_conf_load_time()::text", &[])
            .await?
            .try_get(0)?;
        client.execute("SELECT pg_reload_conf()", &[]).await?;
        drop(client);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let client = self.connect("postgres").await?;
            let now: String = client
                .query_one("SELECT pg_conf_load_time()::text", &[])
                .await?
                .try_get(0)?;
            if now != before {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(
                    "waiting for the configuration reload".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Make the server present `cert` (e.g. from [`TlsFiles::issue_server_cert`]) from now
    /// on: overwrites `server.crt`/`server.key` and reloads. Fails with [`Error::Config`] on
    /// a cluster without TLS.
    pub async fn replace_server_cert(&self, cert: &IssuedCert) -> Result<()> {
        let tls = self
            .tls
            .as_ref()
            .ok_or_else(|| Error::Config("the cluster was built without TLS".into()))?;
        tls.install_server_cert(&cert.cert_pem, &cert.key_pem)?;
        self.reload().await
    }

    /// Terminate every walsender (`pg_terminate_backend`) and wait until they are gone.
    /// Returns how many were terminated. Replication clients see their connection drop.
    pub async fn terminate_walsenders(&self) -> Result<usize> {
        let client = self.connect("postgres").await?;
        let rows = client
            .query(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE backend_type = 'walsender'",
                &[],
            )
            .await?;
        let mut pids = Vec::new();
        for row in rows {
            let pid: i32 = row.try_get(0)?;
            let terminated: bool = row.try_get(1)?;
            if terminated {
                pids.push(pid);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                    &[&pids],
                )
                .await?
                .try_get(0)?;
            if left == 0 {
                return Ok(pids.len());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "{left} terminated walsender(s) still running after 30 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
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

    /// Crash the server: SIGKILL the postmaster (pid as in `postmaster.pid`) and all its
    /// children at once — no shutdown checkpoint, nothing flushed beyond what the server had
    /// already written — and wait until every one of them is gone. Data committed before
    /// (with `fsync = on` and `synchronous_commit = on`, the defaults) survives; the next
    /// [`Cluster::start`] performs crash recovery. Fails with [`Error::NotRunning`] if the
    /// server is not running.
    pub async fn kill9(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.reap_if_exited(&mut state);
        let Some(child) = state.child.take() else {
            return Err(Error::NotRunning);
        };
        if let Some(pid) = read_pid_file(&self.data_dir).map(|p| p.pid)
            && pid != child.id()
        {
            tracing::warn!(
                pid,
                child = child.id(),
                "postmaster.pid names another process"
            );
        }
        self.pid.store(0, Ordering::SeqCst);
        tokio::task::spawn_blocking(move || kill_tree(child))
            .await
            .map_err(|e| Error::io("kill -9", std::io::Error::other(e)))?;
        Ok(())
    }

    fn base_dir(&self) -> &Path {
        self.data_dir.parent().unwrap_or(&self.data_dir)
    }

    /// Forget a postmaster that exited on its own (reaping it).
    fn reap_if_exited(&self, state: &mut ServerState) {
        if let Some(child) = state.child.as_mut()
            && !matches!(child.try_wait(), Ok(None))
        {
            state.child = None;
            self.pid.store(0, Ordering::SeqCst);
        }
    }

    async fn initdb(&self) -> Result<()> {
        let program = self.bins.program("initdb");
        let mut cmd = tokio::process::Command::new(&program);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .args([
                "-U",
                ADMIN_USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                // Skips only initdb's own final sync; the server still fsyncs.
                "--no-sync",
            ])
            .current_dir(self.base_dir())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd.env_clear();
        for (k, v) in server_env() {
            cmd.env(k, v);
        }
        if let Some(u) = self.server_user {
            cmd.uid(u.uid).gid(u.gid);
        }
        let out = cmd
            .output()
            .await
            .ctx(|| format!("run {}", program.display()))?;
        if !out.status.success() {
            return Err(Error::Command {
                program,
                status: out.status.to_string(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        Ok(())
    }

    fn write_hba(&self, b: &ClusterBuilder) -> Result<()> {
        let method = b.auth.hba_name();
        let local_method = match b.auth {
            AuthMethod::Cert => AuthMethod::ScramSha256.hba_name(),
            _ => method,
        };
        let host = if b.ssl_only || b.auth == AuthMethod::Cert {
            "hostssl"
        } else {
            "host"
        };
        let mut hba = String::from(
            "# Generated by cdc-testkit.\n\
             # The kit's admin connections: trusted on the Unix socket only.\n",
        );
        let _ = writeln!(hba, "local all         {ADMIN_USER} trust");
        let _ = writeln!(hba, "local replication {ADMIN_USER} trust");
        if !b.hba_lines.is_empty() {
            hba.push_str("# Lines added by the test.\n");
            for line in &b.hba_lines {
                hba.push_str(line);
                hba.push('\n');
            }
        }
        hba.push_str("# Everyone else.\n");
        let _ = writeln!(hba, "local all         all {local_method}");
        let _ = writeln!(hba, "local replication all {local_method}");
        for addr in ["127.0.0.1/32", "::1/128"] {
            let _ = writeln!(hba, "{host} all         all {addr} {method}");
            let _ = writeln!(hba, "{host} replication all {addr} {method}");
        }
        let path = self.data_dir.join("pg_hba.conf");
        std::fs::write(&path, hba).ctx(|| format!("write {}", path.display()))?;
        os::chown(&path, self.server_user)
    }

    fn append_include(&self) -> Result<()> {
        use std::io::Write;
        let path = self.data_dir.join("postgresql.conf");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        f.write_all(b"\n# Added by cdc-testkit.\ninclude 'testkit.conf'\n")
            .ctx(|| format!("write {}", path.display()))
    }

    fn write_conf(&self, settings: &[(String, String)]) -> Result<()> {
        let mut conf: Vec<(String, String)> = vec![
            ("listen_addresses".into(), HOST.into()),
            ("port".into(), self.port().to_string()),
            (
                "unix_socket_directories".into(),
                self.socket_dir.to_string_lossy().into_owned(),
            ),
            ("max_connections".into(), "40".into()),
            ("shared_buffers".into(), "16MB".into()),
            ("wal_level".into(), "logical".into()),
            ("max_wal_senders".into(), "10".into()),
            ("max_replication_slots".into(), "10".into()),
            ("fsync".into(), "on".into()),
            // DSM segments as files in the data directory: nothing is left in /dev/shm
            // when a test kills the server with SIGKILL.
            ("dynamic_shared_memory_type".into(), "mmap".into()),
            ("logging_collector".into(), "off".into()),
            ("log_line_prefix".into(), "%m [%p] %q%a %u@%d ".into()),
            ("log_replication_commands".into(), "on".into()),
            (
                "password_encryption".into(),
                self.auth.password_encryption().into(),
            ),
        ];
        if let Some(tls) = &self.tls {
            conf.push(("ssl".into(), "on".into()));
            let server = tls.server_cert();
            conf.push((
                "ssl_cert_file".into(),
                server.cert_path.to_string_lossy().into_owned(),
            ));
            conf.push((
                "ssl_key_file".into(),
                server.key_path.to_string_lossy().into_owned(),
            ));
            conf.push((
                "ssl_ca_file".into(),
                tls.ca_cert_path().to_string_lossy().into_owned(),
            ));
        }
        conf.extend(settings.iter().cloned());
        let mut text = String::from("# Generated by cdc-testkit; later lines win.\n");
        for (name, value) in conf {
            let _ = writeln!(text, "{name} = {}", conf_quote(&value));
        }
        let path = self.data_dir.join("testkit.conf");
        std::fs::write(&path, text).ctx(|| format!("write {}", path.display()))?;
        os::chown(&path, self.server_user)
    }

    /// Start the postmaster, retrying transient failures (a stale shared memory block still
    /// held by dying processes, ...) a few times, and a port conflict `port_retries` times.
    async fn start_attempts(
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

async fn connect_spawned(config: &tokio_postgres::Config) -> Result<Client> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "cdc-testkit connection ended");
        }
    });
    Ok(client)
}

/// Environment for server processes: nothing inherited that could change their behaviour
/// (PGPORT, PGDATA, ...), C locale so log messages are in English.
fn server_env() -> Vec<(String, OsString)> {
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
fn shutdown_immediate(mut child: Child) {
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
fn kill_tree(mut child: Child) {
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
struct PidFile {
    pid: u32,
    ready: bool,
    shmid: Option<i32>,
}

fn read_pid_file(data_dir: &Path) -> Option<PidFile> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let pid = lines.first()?.trim().parse().ok()?;
    // Line 7: shared memory key and id; line 8: status ("starting", "ready", ...).
    let shmid = lines
        .get(6)
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok());
    let ready = lines.get(7).is_some_and(|l| l.trim() == "ready");
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

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn reserve_port() -> Result<u16> {
    for _ in 0..100 {
        let listener = std::net::TcpListener::bind((HOST, 0))
            .ctx(|| "bind 127.0.0.1:0 to find a free port".to_string())?;
        let port = listener
            .local_addr()
            .ctx(|| "read the bound address".to_string())?
            .port();
        drop(listener);
        let mut reserved = RESERVED_PORTS
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if reserved.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::Config("could not find a free TCP port".into()))
}

fn release_port(port: u16) {
    RESERVED_PORTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&port);
}

/// `value` as a single-quoted libpq key=value value.
fn kv_quote(value: &str) -> String {
    let mut s = String::with_capacity(value.len() + 2);
    s.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('\'');
    s
}

/// `value` as a single-quoted `postgresql.conf` string.
fn conf_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
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
        assert_eq!(kv_quote(r"a'b\c d"), r"'a\'b\\c d'");
        assert_eq!(conf_quote(r"x'y\z"), r"'x''y\\z'");
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
    }

    #[test]
    fn tail() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("a", 5), "a");
    }
}
