//! What the JetStream sink is told: servers, credentials, TLS, the stream, subjects and
//! message grouping.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::plan::Grouping;
use super::subject::SubjectTemplate;
use crate::debezium::DebeziumOptions;
use crate::feldera::Policies;

/// Options of [`JetStreamSink`](super::JetStreamSink).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JetStreamOptions {
    /// Server URLs (`nats://host:4222`, `tls://host:4222`); the client fails over between
    /// them and the cluster's other advertised nodes.
    pub servers: Vec<String>,
    /// Credentials.
    pub auth: NatsAuth,
    /// TLS.
    pub tls: NatsTls,
    /// The stream. It must be pgcdc's alone (see the module docs): nothing else may
    /// publish to it.
    pub stream: String,
    /// Create the stream when it does not exist, with these settings; without it a missing
    /// stream is an error.
    pub create_stream: Option<StreamSettings>,
    /// The per-table subjects.
    pub subjects: SubjectTemplate,
    /// The source database's name: the subjects are checked against the stream's at open.
    pub database: String,
    /// One message per change, or per run of a transaction's changes of one table.
    pub grouping: Grouping,
    /// The Feldera encoder's policies. [`TruncatePolicy::Marker`](crate::feldera::TruncatePolicy::Marker)
    /// is refused: each subject is read by one Feldera table, whose parser rejects it.
    pub policies: Policies,
    /// Publish Debezium records instead of Feldera JSON: each record's value a message
    /// on its table's subject, as Debezium Server's NATS JetStream sink does (tombstones
    /// are not published; an online snapshot chunk is one message, a record per line;
    /// transaction metadata records go to the subject of the table
    /// `<name>.transaction`). Needs [`Grouping::Event`]; `policies` do not apply. A
    /// stream holds one format.
    pub debezium: Option<DebeziumOptions>,
    /// The KV bucket holding pgcdc's resume entry for the stream (key: the stream's name).
    pub resume_bucket: String,
    /// How long one JetStream request (a publish acknowledgement, a stream lookup) may take.
    pub request_timeout: Duration,
    /// How long the sink keeps retrying after a server or the stream's leader is lost
    /// before it gives up with an error.
    pub retry_for: Duration,
}

impl JetStreamOptions {
    /// Defaults for `stream` on `servers`: the default subject template, one message per
    /// change, strict policies, resume bucket `pgcdc_resume`, 5 s requests, 2 min retry.
    pub fn new(
        servers: Vec<String>,
        stream: impl Into<String>,
        database: impl Into<String>,
    ) -> Self {
        JetStreamOptions {
            servers,
            auth: NatsAuth::None,
            tls: NatsTls::default(),
            stream: stream.into(),
            create_stream: None,
            subjects: SubjectTemplate::default(),
            database: database.into(),
            grouping: Grouping::Event,
            policies: Policies::default(),
            debezium: None,
            resume_bucket: DEFAULT_RESUME_BUCKET.to_owned(),
            request_timeout: Duration::from_secs(5),
            retry_for: Duration::from_secs(120),
        }
    }
}

/// The default KV bucket of resume entries.
pub const DEFAULT_RESUME_BUCKET: &str = "pgcdc_resume";

/// How the sink authenticates. Secrets are held here only until the connection is made
/// and never appear in `Debug` output or errors.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum NatsAuth {
    /// No credentials (or user and password in the server URL).
    #[default]
    None,
    /// A `.creds` file (user JWT and nkey seed), as `nats` tooling writes them.
    CredentialsFile(PathBuf),
    /// An nkey seed (`SU…`).
    NKeySeed(String),
    /// A token.
    Token(String),
    /// User and password.
    UserPassword(String, String),
}

impl fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NatsAuth::None => f.write_str("None"),
            NatsAuth::CredentialsFile(path) => {
                f.debug_tuple("CredentialsFile").field(path).finish()
            }
            NatsAuth::NKeySeed(_) => f.write_str("NKeySeed(<redacted>)"),
            NatsAuth::Token(_) => f.write_str("Token(<redacted>)"),
            NatsAuth::UserPassword(user, _) => f
                .debug_tuple("UserPassword")
                .field(user)
                .field(&"<redacted>")
                .finish(),
        }
    }
}

/// TLS settings. A `tls://` server URL or `require` turns TLS on; the system's roots are
/// trusted unless `ca_file` names others.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct NatsTls {
    /// Refuse a connection without TLS.
    pub require: bool,
    /// PEM file of the roots to trust.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM files), for servers that verify clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Settings of a stream the sink creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSettings {
    /// Replicas (1, 3 or 5 in a cluster).
    pub replicas: usize,
    /// Messages older than this are removed (`None`: kept until the stream's other limits).
    pub max_age: Option<Duration>,
    /// The deduplication window (JetStream's default: 2 minutes).
    pub duplicate_window: Duration,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            replicas: 1,
            max_age: None,
            duplicate_window: Duration::from_secs(120),
        }
    }
}
