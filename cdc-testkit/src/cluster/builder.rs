//! [`ClusterBuilder`]: configuring, creating and first-starting a cluster.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::binaries::PgBinaries;
use crate::error::{Error, Result};
use crate::os;
use crate::tls::{DEFAULT_SERVER_NAMES, TlsFiles};

use super::{ADMIN_PASSWORD, ADMIN_USER, AuthMethod, Cluster, Fresh, quote_ident, quote_literal};

/// Where the builder gets its server binaries.
#[derive(Debug, Clone)]
enum BinSource {
    /// [`PgBinaries::find`].
    Find,
    /// [`PgBinaries::from_dir`].
    Dir(PathBuf),
    /// [`PgBinaries::for_major`].
    Major(u32),
}

/// Configures and starts a [`Cluster`].
///
/// Defaults: [`AuthMethod::Trust`], no extra users, no TLS, the settings listed on
/// [`ClusterBuilder::setting`], binaries found by [`PgBinaries::find`] (see
/// [`ClusterBuilder::major`] for other versions), 120 s start timeout,
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
    bins: BinSource,
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
            bins: BinSource::Find,
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
    /// Overrides an earlier [`ClusterBuilder::major`].
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bins = BinSource::Dir(dir.into());
        self
    }

    /// Run PostgreSQL major version `version` (e.g. `16`): the distribution's binaries if
    /// they are that version, otherwise binaries from the kit's cache, downloaded on first
    /// use (see [`PgBinaries::for_major`]). Overrides an earlier [`ClusterBuilder::bin_dir`].
    pub fn major(mut self, version: u32) -> Self {
        self.bins = BinSource::Major(version);
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
            check_setting_name(name)?;
        }
        if self.tls && self.server_names.is_empty() {
            return Err(Error::Config(
                "tls_server_names needs at least one name".into(),
            ));
        }
        let bins = match &self.bins {
            BinSource::Dir(dir) => PgBinaries::from_dir(dir.clone())?,
            BinSource::Find => PgBinaries::find()?,
            &BinSource::Major(version) => {
                tokio::task::spawn_blocking(move || PgBinaries::for_major(version))
                    .await
                    .map_err(|e| {
                        Error::io(
                            format!("find PostgreSQL {version} binaries"),
                            std::io::Error::other(e),
                        )
                    })??
            }
        };
        let cluster = Cluster::allocate(Fresh {
            bins,
            server_user: os::server_user()?,
            auth: self.auth,
            settings: self.settings.clone(),
            start_timeout: self.start_timeout,
            stop_timeout: self.stop_timeout,
        })?;
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
        cluster.write_hba(self.auth, self.ssl_only, &self.hba_lines)?;
        cluster.append_include()?;
        cluster.write_conf()?;
        cluster.first_start().await?;

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

/// A configuration parameter name the kit can write unquoted into `testkit.conf`.
pub(super) fn check_setting_name(name: &str) -> Result<()> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        return Err(Error::Config(format!("invalid setting name {name:?}")));
    }
    Ok(())
}
