//! What to stream and how to reach the server: [`SourceConfig`] and [`ConnectionConfig`],
//! as plain data with the checks that need nothing but the data.
//!
//! The parsers live beside their formats: libpq connection strings in `conninfo.rs`
//! ([`ConnectionConfig::parse`], [`SourceConfig::new`]), Feldera's connector JSON in
//! `feldera.rs` ([`SourceConfig::from_json`]); names derived from the data in
//! `identity.rs` ([`SourceConfig::slot_name`], [`SourceConfig::source_id`]).

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use cdc_core::{BatchLimits, CommitMode, Error, Result, TableName, TableNameError};
use serde::Deserialize;

use super::secret::REDACTED;

/// The host used when a connection string names none.
///
/// libpq would use its compiled-in Unix socket directory; pgcdc does not guess a path and
/// uses TCP to `localhost` instead. Name a socket directory explicitly (`host=/run/postgresql`).
pub const DEFAULT_HOST: &str = "localhost";

/// The port used when a connection string names none.
pub const DEFAULT_PORT: u16 = 5432;

/// Longest slot name Postgres accepts (`NAMEDATALEN - 1`).
const MAX_SLOT_NAME_LEN: usize = 63;

/// Checks that `name` is a valid replication slot name: 1 to 63 characters of `a-z`,
/// `0-9` and `_` (what Postgres accepts).
pub fn validate_slot_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= MAX_SLOT_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(Error::config(format!(
            "invalid replication slot name {name:?}: use 1 to {MAX_SLOT_NAME_LEN} characters of lower-case letters, digits and underscores"
        )))
    }
}

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A host name or IP address, reached over TCP.
    Tcp(String),
    /// A directory holding the server's Unix socket (`<dir>/.s.PGSQL.<port>`). As in libpq,
    /// TLS is never used over a Unix socket, whatever the `sslmode`.
    Unix(PathBuf),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Tcp(name) => f.write_str(name),
            Host::Unix(dir) => write!(f, "{}", dir.display()),
        }
    }
}

/// Another server a connection may go to when several are named (`host=a,b`): where it
/// listens. The first server is [`ConnectionConfig::host`], `hostaddr` and `port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Host name, IP address or Unix socket directory.
    pub host: Host,
    /// Numeric address to connect to instead of resolving `host`.
    pub hostaddr: Option<IpAddr>,
    /// TCP port.
    pub port: u16,
}

/// libpq's `target_session_attrs`: which server of those named a connection accepts.
/// Each is tried in order; one that does not qualify is skipped as one that is down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TargetSessionAttrs {
    /// The first server that accepts the connection (the default).
    #[default]
    Any,
    /// A server that is not in recovery and not read-only by default
    /// (`default_transaction_read_only` off): after a failover, the promoted standby.
    ReadWrite,
    /// A server that is not in recovery.
    Primary,
    /// A server in recovery (a standby).
    Standby,
}

impl TargetSessionAttrs {
    /// The name libpq uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::Primary => "primary",
            TargetSessionAttrs::Standby => "standby",
        }
    }

    /// Whether a server in recovery (`in_recovery`) whose `default_transaction_read_only`
    /// is `read_only` qualifies.
    pub fn accepts(self, in_recovery: bool, read_only: bool) -> bool {
        match self {
            TargetSessionAttrs::Any => true,
            TargetSessionAttrs::ReadWrite => !in_recovery && !read_only,
            TargetSessionAttrs::Primary => !in_recovery,
            TargetSessionAttrs::Standby => in_recovery,
        }
    }
}

impl fmt::Display for TargetSessionAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TargetSessionAttrs {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "any" => Ok(TargetSessionAttrs::Any),
            "read-write" => Ok(TargetSessionAttrs::ReadWrite),
            "primary" => Ok(TargetSessionAttrs::Primary),
            "standby" => Ok(TargetSessionAttrs::Standby),
            other => Err(Error::config(format!(
                "unsupported target_session_attrs {other:?}: use any, read-write, primary or standby"
            ))),
        }
    }
}

/// libpq's `sslmode`, with libpq's semantics.
///
/// | mode | TLS | verifies the chain | verifies the host name |
/// |---|---|---|---|
/// | `disable` | never | – | – |
/// | `allow` | plaintext first; TLS if the server rejects it | if `sslrootcert` is set | no |
/// | `prefer` (default) | TLS if the server offers it, else (or if TLS fails) plaintext | if `sslrootcert` is set | no |
/// | `require` | always | if `sslrootcert` is set | no |
/// | `verify-ca` | always | yes | no |
/// | `verify-full` | always | yes | yes |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SslMode {
    /// Never use TLS.
    Disable,
    /// Try plaintext; if the server rejects the connection, try TLS.
    Allow,
    /// Try TLS; fall back to plaintext if the server does not support it, the handshake
    /// fails, or the server rejects the TLS connection.
    #[default]
    Prefer,
    /// Require TLS; do not verify the certificate unless `sslrootcert` is given (then like
    /// `verify-ca`).
    Require,
    /// Require TLS and a certificate chain that ends at `sslrootcert`.
    VerifyCa,
    /// Like `verify-ca`, and the certificate must be valid for the host name.
    VerifyFull,
}

impl SslMode {
    /// Every mode, in libpq's order.
    pub const ALL: [SslMode; 6] = [
        SslMode::Disable,
        SslMode::Allow,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    /// The libpq spelling, e.g. `verify-full`.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether this mode insists on a verified certificate chain.
    pub fn requires_verification(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        SslMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "invalid sslmode {s:?}: expected one of disable, allow, prefer, require, verify-ca, verify-full"
                ))
            })
    }
}

/// libpq's `channel_binding`: whether SCRAM authentication is bound to the TLS connection
/// (SCRAM-SHA-256-PLUS with `tls-server-end-point`, RFC 5929), with libpq's semantics.
///
/// Binding proves that the server which knows the password is the end of this TLS
/// connection. Without it, a man in the middle that the client's `sslmode` does not detect
/// (`prefer` or `require` without `sslrootcert` verify no certificate) can relay the SCRAM
/// exchange to the real server and stay logged in as the user; with it, the server sees
/// the middle's certificate in the binding and refuses. With `verify-full` it adds little.
///
/// | mode | over TLS | without TLS |
/// |---|---|---|
/// | `disable` | SCRAM-SHA-256, "client does not support binding" | the same |
/// | `prefer` (default) | SCRAM-SHA-256-PLUS if the server offers it; else SCRAM-SHA-256 with "client supports binding, server did not offer it" (a server that does support it then detects a stripped offer) | SCRAM-SHA-256 |
/// | `require` | SCRAM-SHA-256-PLUS, or an error before any password is sent: trust, password, md5 and certificate-only authentication are refused | an error |
///
/// Binding needs a hash of the server certificate by the hash function of its signature
/// algorithm (RSA PKCS#1 v1.5, RSA-PSS, ECDSA, DSA). Over TLS with `prefer` or `require`,
/// a server certificate signed otherwise (Ed25519, Ed448) is an error before
/// authentication that suggests `channel_binding=disable` (libpq fails such a SCRAM login
/// too): falling back to no binding would let a man in the middle avoid binding just by
/// presenting such a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChannelBinding {
    /// Never bind.
    Disable,
    /// Bind over TLS when the server offers it.
    #[default]
    Prefer,
    /// Bind or fail.
    Require,
}

impl ChannelBinding {
    /// Every mode, in libpq's order.
    pub const ALL: [ChannelBinding; 3] = [
        ChannelBinding::Disable,
        ChannelBinding::Prefer,
        ChannelBinding::Require,
    ];

    /// The libpq spelling, e.g. `require`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelBinding::Disable => "disable",
            ChannelBinding::Prefer => "prefer",
            ChannelBinding::Require => "require",
        }
    }
}

impl fmt::Display for ChannelBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChannelBinding {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ChannelBinding::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "invalid channel_binding {s:?}: expected one of disable, prefer, require"
                ))
            })
    }
}

/// PEM material: a file to read at connect time, or the PEM text itself.
#[derive(Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file path (read at every connection attempt, so rotated files are picked up).
    File(PathBuf),
    /// PEM text.
    Inline(String),
}

impl fmt::Debug for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PemSource::File(path) => f.debug_tuple("File").field(path).finish(),
            // Inline material may be a private key: never print it.
            PemSource::Inline(_) => f.debug_tuple("Inline").field(&REDACTED).finish(),
        }
    }
}

/// TLS settings, shared by the replication and the SQL connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// The `sslmode`.
    pub mode: SslMode,
    /// Trusted CA certificates (`sslrootcert`). Required by `verify-ca` and `verify-full`;
    /// with any other TLS mode, when given, the chain is verified (as libpq does).
    pub root_cert: Option<PemSource>,
    /// Client certificate chain (`sslcert`), leaf first.
    pub client_cert: Option<PemSource>,
    /// The client certificate's private key (`sslkey`).
    pub client_key: Option<PemSource>,
    /// `channel_binding`: whether SCRAM is bound to the TLS connection (default `prefer`).
    pub channel_binding: ChannelBinding,
}

/// How to reach and log in to one PostgreSQL server: the parsed form of a libpq connection
/// string (see [`conninfo`](super::conninfo) for the accepted syntax and parameters).
///
/// `Debug` never prints the password or inline key material.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionConfig {
    /// Host name, IP address or Unix socket directory.
    pub host: Host,
    /// Numeric address to connect to instead of resolving `host` (libpq `hostaddr`); the
    /// host name is still used for TLS verification.
    pub hostaddr: Option<IpAddr>,
    /// TCP port (also names the Unix socket file).
    pub port: u16,
    /// Database name.
    pub dbname: String,
    /// Role to log in as.
    pub user: String,
    /// Password, if any (for `password`, `md5` and `scram-sha-256` authentication).
    pub password: Option<String>,
    /// TLS settings.
    pub tls: TlsConfig,
    /// `application_name` reported to the server (`pg_stat_activity`).
    pub application_name: Option<String>,
    /// Bound on establishing a connection (socket, TLS and authentication). `None` waits
    /// as long as the operating system does.
    pub connect_timeout: Option<Duration>,
    /// Command-line options sent to the server at startup (libpq `options`, e.g.
    /// `-c statement_timeout=0`).
    pub options: Option<String>,
    /// The servers after the first, when several are named (`host=a,b`, or
    /// `postgres://a:5432,b:5432/db`): each connection tries them in order, the first
    /// ([`Self::host`]) first, and takes the first one `target_session_attrs` accepts.
    pub fallback_hosts: Vec<Endpoint>,
    /// Which server of those named a connection accepts.
    pub target_session_attrs: TargetSessionAttrs,
}

impl fmt::Debug for ConnectionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionConfig")
            .field("host", &self.host)
            .field("hostaddr", &self.hostaddr)
            .field("port", &self.port)
            .field("dbname", &self.dbname)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| REDACTED))
            .field("tls", &self.tls)
            .field("application_name", &self.application_name)
            .field("connect_timeout", &self.connect_timeout)
            .field("options", &self.options)
            .field("fallback_hosts", &self.fallback_hosts)
            .field("target_session_attrs", &self.target_session_attrs)
            .finish()
    }
}

impl ConnectionConfig {
    /// Checks settings that only make sense together: `verify-ca`/`verify-full` need
    /// `sslrootcert`, and a client certificate needs its key (and vice versa).
    pub fn validate(&self) -> Result<()> {
        if self.tls.mode.requires_verification() && self.tls.root_cert.is_none() {
            return Err(Error::config(format!(
                "sslmode={} needs the CA certificate to verify the server against: set sslrootcert (or ssl_ca_pem / ssl_ca_location)",
                self.tls.mode
            )));
        }
        match (&self.tls.client_cert, &self.tls.client_key) {
            (Some(_), None) => Err(Error::config(
                "a client certificate (sslcert) is configured without its private key: set sslkey",
            )),
            (None, Some(_)) => Err(Error::config(
                "a client private key (sslkey) is configured without its certificate: set sslcert",
            )),
            _ => Ok(()),
        }
    }

    /// Whether the connection goes over a Unix socket (and so never uses TLS).
    pub fn is_unix_socket(&self) -> bool {
        matches!(self.host, Host::Unix(_))
    }

    /// The configuration for each server named, in the order they are tried: this one
    /// with its first server only, then one per [`Self::fallback_hosts`] entry.
    pub fn per_server(&self) -> Vec<ConnectionConfig> {
        let single = |endpoint: &Endpoint| ConnectionConfig {
            host: endpoint.host.clone(),
            hostaddr: endpoint.hostaddr,
            port: endpoint.port,
            fallback_hosts: Vec::new(),
            ..self.clone()
        };
        let first = Endpoint {
            host: self.host.clone(),
            hostaddr: self.hostaddr,
            port: self.port,
        };
        std::iter::once(&first)
            .chain(&self.fallback_hosts)
            .map(single)
            .collect()
    }
}

/// A table as configured: schema-qualified, or a bare name that preflight rejects with the
/// qualified candidates it finds in the publication.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TableRef {
    /// `schema.table`.
    Qualified(TableName),
    /// A bare table name (case-folded like Postgres does). Never accepted for streaming;
    /// kept only so the error can name the candidates.
    Unqualified(String),
}

impl TableRef {
    /// Parses a table name with Postgres identifier rules (`Public.Orders` folds to
    /// `public.orders`; `"Orders"` keeps its case). A malformed name is a Config error; a
    /// bare name parses as [`TableRef::Unqualified`].
    pub fn parse(input: &str) -> Result<Self> {
        match TableName::parse(input) {
            Ok(name) => Ok(TableRef::Qualified(name)),
            Err(TableNameError::Unqualified { .. }) => TableName::parse_identifier(input)
                .map(TableRef::Unqualified)
                .map_err(|e| Error::config(e.to_string())),
            Err(e) => Err(Error::config(e.to_string())),
        }
    }

    /// The qualified name, if it is one.
    pub fn qualified(&self) -> Option<&TableName> {
        match self {
            TableRef::Qualified(name) => Some(name),
            TableRef::Unqualified(_) => None,
        }
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableRef::Qualified(name) => name.fmt(f),
            TableRef::Unqualified(name) => cdc_core::table_name::write_identifier(f, name),
        }
    }
}

impl<'de> Deserialize<'de> for TableRef {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        TableRef::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// pgoutput's `streaming` option: whether the server sends a transaction larger than its
/// `logical_decoding_work_mem` while it is still in progress (the client buffers it, in
/// memory up to a limit and then in a temporary file, and delivers it at commit; an
/// aborted one is dropped) instead of spilling it to disk itself and sending it at commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Streaming {
    /// The best the server offers (default): `Parallel` on PostgreSQL 16+, `On` on 14 and
    /// 15, `Off` before.
    #[default]
    Auto,
    /// Large transactions arrive only once committed; the server spills them to its own
    /// disk meanwhile.
    Off,
    /// Large in-progress transactions are streamed (PostgreSQL 14+, protocol 2).
    On,
    /// Like `On`, with protocol 4 (PostgreSQL 16+): aborts also carry their LSN and time.
    Parallel,
}

impl Streaming {
    /// What `Auto` means on a server of `server_version_num`; the other choices as they are.
    pub fn resolve(self, server_version_num: u32) -> Streaming {
        match self {
            Streaming::Auto if server_version_num >= 160000 => Streaming::Parallel,
            Streaming::Auto if server_version_num >= 140000 => Streaming::On,
            Streaming::Auto => Streaming::Off,
            other => other,
        }
    }
}

/// What happens before streaming when the slot is new.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SnapshotMode {
    /// Copy every configured table under the slot's exported snapshot, then stream from
    /// the slot's consistent point (the consistent mode, spelled `initial` or
    /// `consistent`): the initial state is one transactionally consistent picture, but
    /// the exporting walsender stays idle in a transaction until the last row is copied,
    /// and an interrupted copy starts over.
    #[serde(alias = "consistent")]
    Initial,
    /// Copy as [`SnapshotMode::Initial`] does, through a temporary slot, and stop: no
    /// streaming (Debezium's `initial_only`). The run ends when the last row is
    /// delivered; nothing is left on the server.
    InitialOnly,
    /// Do not copy existing rows; stream changes from the slot's consistent point only.
    Never,
    /// Stream at once and read the tables in primary-key chunks alongside (online
    /// snapshot, the default): every chunk is its own short transaction, chunk progress
    /// is in the resume token, the slot advances during the copy. Keys whose order only
    /// the server knows (text under a linguistic collation, enums, …) are compared by the
    /// server. A table without a primary key is read whole under one snapshot while the
    /// stream waits, and copied again after a TRUNCATE if interrupted.
    #[default]
    Online,
}

impl SnapshotMode {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMode::Initial => "initial",
            SnapshotMode::InitialOnly => "initial_only",
            SnapshotMode::Never => "never",
            SnapshotMode::Online => "online",
        }
    }
}

/// Everything a Postgres source needs: where the server is, which publication and tables
/// to stream, the slot, and how to batch and acknowledge.
///
/// Built from a connection string ([`SourceConfig::new`], in `conninfo.rs`) or deserialized
/// from JSON in the shape of Feldera's `postgres_cdc` connector
/// ([`SourceConfig::from_json`]; see [`super::SourceConfigJson`] for every field).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceConfig {
    /// How to reach the server.
    pub connection: ConnectionConfig,
    /// The publication's exact name (as in `pg_publication.pubname`; not case-folded).
    pub publication: String,
    /// The slot to use; `None` uses [`SourceConfig::slot_name`]'s derived default.
    pub slot: Option<String>,
    /// The tables to stream. Empty means every table of the publication.
    pub tables: Vec<TableRef>,
    /// Whether to copy existing rows first.
    pub snapshot: SnapshotMode,
    /// How far the slot may advance: after durable checkpoints (default) or after
    /// completion.
    pub commit_mode: CommitMode,
    /// Limits that end a batch.
    pub batch: BatchLimits,
    /// Streaming of large in-progress transactions (default: the best the server offers).
    pub streaming: Streaming,
    /// Decode prepared transactions at `PREPARE TRANSACTION` (PostgreSQL 15+; default
    /// off). They are still delivered once, at `COMMIT PREPARED`, in commit order; the
    /// slot is created with two-phase enabled (an existing one is switched on at start).
    /// While a prepared transaction is open the slot is confirmed no further than its
    /// PREPARE, so a restart receives it again.
    pub two_phase: bool,
    /// Create the slot as a failover slot (PostgreSQL 17+; default off): standbys with
    /// `sync_replication_slots` keep a synced copy, so the stream survives a promotion.
    pub failover: bool,
}

impl SourceConfig {
    /// A configuration for `connection` and `publication`, with no table filter (every
    /// table of the publication), the derived slot name, an initial snapshot, checkpoint
    /// commit mode and default batch limits; checked with [`SourceConfig::validate`].
    pub fn from_connection(
        connection: ConnectionConfig,
        publication: impl Into<String>,
    ) -> Result<Self> {
        let config = SourceConfig {
            connection,
            publication: publication.into(),
            slot: None,
            tables: Vec::new(),
            snapshot: SnapshotMode::default(),
            commit_mode: CommitMode::default(),
            batch: BatchLimits::default(),
            streaming: Streaming::default(),
            two_phase: false,
            failover: false,
        };
        config.validate()?;
        Ok(config)
    }

    /// Adds tables by name (`schema.table`; a bare name is kept and rejected by preflight
    /// with the candidates from the publication). A malformed name is a Config error.
    pub fn with_tables<I, S>(mut self, tables: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for table in tables {
            self.tables.push(TableRef::parse(table.as_ref())?);
        }
        Ok(self)
    }

    /// Uses `slot` instead of the derived slot name. The name must match `[a-z0-9_]{1,63}`.
    pub fn with_slot(mut self, slot: impl Into<String>) -> Result<Self> {
        let slot = slot.into();
        validate_slot_name(&slot)?;
        self.slot = Some(slot);
        Ok(self)
    }

    /// Checks the publication name, the slot name and the connection settings.
    pub fn validate(&self) -> Result<()> {
        self.connection.validate()?;
        if self.publication.trim().is_empty() {
            return Err(Error::config("publication must not be empty"));
        }
        if self.publication.contains('\0') {
            return Err(Error::config("publication name contains a NUL character"));
        }
        if let Some(slot) = &self.slot {
            validate_slot_name(slot)?;
        }
        Ok(())
    }

    /// The configured tables, all schema-qualified, or a Config error naming the first bare
    /// name. Preflight gives a better error (with candidates); this is for callers without
    /// a catalog at hand.
    pub fn qualified_tables(&self) -> Result<Vec<TableName>> {
        self.tables
            .iter()
            .map(|t| match t {
                TableRef::Qualified(name) => Ok(name.clone()),
                TableRef::Unqualified(name) => Err(Error::config(format!(
                    "table {name:?} is not schema-qualified: write it as schema.table, e.g. public.{name}"
                ))),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_parses_every_libpq_spelling_and_rejects_others() {
        for mode in SslMode::ALL {
            assert_eq!(mode.as_str().parse::<SslMode>().unwrap(), mode);
        }
        let err = "verify_full".parse::<SslMode>().unwrap_err();
        assert!(err.to_string().contains("verify-full"), "{err}");
    }

    #[test]
    fn channel_binding_parses_every_libpq_spelling_and_rejects_others() {
        for mode in ChannelBinding::ALL {
            assert_eq!(mode.as_str().parse::<ChannelBinding>().unwrap(), mode);
        }
        assert_eq!(ChannelBinding::default(), ChannelBinding::Prefer);
        let err = "required".parse::<ChannelBinding>().unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::Config);
        assert!(
            err.to_string().contains("disable, prefer, require"),
            "{err}"
        );
    }

    #[test]
    fn verify_modes_need_a_root_certificate() {
        let err = ConnectionConfig::parse("host=db user=u sslmode=verify-full").unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::Config);
        assert!(err.message().contains("sslrootcert"), "{err}");
        assert!(
            ConnectionConfig::parse("host=db user=u sslmode=verify-ca sslrootcert=/ca.pem").is_ok()
        );
    }

    #[test]
    fn client_certificate_and_key_come_together() {
        let err = ConnectionConfig::parse("host=db user=u sslcert=/c.pem").unwrap_err();
        assert!(err.message().contains("sslkey"), "{err}");
        let err = ConnectionConfig::parse("host=db user=u sslkey=/k.pem").unwrap_err();
        assert!(err.message().contains("sslcert"), "{err}");
    }

    #[test]
    fn debug_redacts_password_and_inline_keys() {
        let mut config = ConnectionConfig::parse("host=db user=u password=hunter2").unwrap();
        config.tls.client_key = Some(PemSource::Inline("-----BEGIN PRIVATE KEY-----".into()));
        let text = format!("{config:?}");
        assert!(
            !text.contains("hunter2") && !text.contains("PRIVATE"),
            "{text}"
        );
    }

    #[test]
    fn table_refs_keep_bare_names_for_preflight() {
        assert_eq!(
            TableRef::parse("Public.Orders").unwrap(),
            TableRef::Qualified(TableName::new("public", "orders"))
        );
        assert_eq!(
            TableRef::parse("Orders").unwrap(),
            TableRef::Unqualified("orders".into())
        );
        assert_eq!(
            TableRef::parse("\"Orders\"").unwrap().to_string(),
            "\"Orders\""
        );
        assert!(TableRef::parse("a.b.c").is_err());
        assert!(TableRef::parse("").is_err());
    }

    #[test]
    fn source_config_defaults_and_qualified_tables() {
        let config = SourceConfig::new("postgres://u@db/shop", "pub")
            .unwrap()
            .with_tables(["public.orders", "orders"])
            .unwrap();
        assert_eq!(config.snapshot, SnapshotMode::Online);
        assert_eq!(config.commit_mode, CommitMode::Checkpoint);
        assert!(config.slot_name().starts_with("pgcdc_"));
        let err = config.qualified_tables().unwrap_err();
        assert!(err.message().contains("public.orders"), "{err}");
        assert!(SourceConfig::new("postgres://u@db/shop", " ").is_err());
        assert!(config.clone().with_slot("Bad-Name").is_err());
        assert_eq!(config.with_slot("mine_1").unwrap().slot_name(), "mine_1");
    }
}
