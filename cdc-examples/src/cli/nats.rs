//! `pgcdc stream --sink nats://…`: the JetStream sink's flags, and its secrets read from
//! files or the environment (never from the command line, where `ps` shows them).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};

use cdc_sinks::Policies;
use cdc_sinks::jetstream::{
    DEFAULT_RESUME_BUCKET, DEFAULT_SUBJECT_TEMPLATE, Grouping, JetStreamOptions, NatsAuth,
    StreamSettings, SubjectTemplate,
};

use super::exit::CliError;
use super::values::duration_between;

/// Environment variable holding a NATS token.
pub const NATS_TOKEN_ENV: &str = "PGCDC_NATS_TOKEN";
/// Environment variable holding an nkey seed.
pub const NATS_NKEY_ENV: &str = "PGCDC_NATS_NKEY";
/// Environment variable holding the password of --nats-user.
pub const NATS_PASSWORD_ENV: &str = "PGCDC_NATS_PASSWORD";
/// Environment variable naming a `.creds` file.
pub const NATS_CREDS_ENV: &str = "PGCDC_NATS_CREDS";

/// Longest stream max-age and duplicate window accepted.
const STREAM_DURATION: (Duration, Duration) = (
    Duration::from_secs(1),
    Duration::from_secs(100 * 365 * 24 * 3600),
);

/// The JetStream sink's flags.
#[derive(Clone, Debug, Args)]
pub struct NatsArgs {
    /// Publish to NATS JetStream instead of stdout: `nats://host:4222` or `tls://host:4222`,
    /// several comma-separated for a cluster. Exactly once across crashes: the resume
    /// position is kept in JetStream itself. Needs --stream.
    #[arg(
        long,
        value_name = "URL[,URL…]",
        conflicts_with = "out_dir",
        requires = "stream"
    )]
    pub sink: Option<String>,
    /// The JetStream stream (pgcdc's alone: nothing else may publish to it).
    #[arg(long, value_name = "NAME", requires = "sink")]
    pub stream: Option<String>,
    /// Subject per table; placeholders {database}, {schema}, {table} (names outside
    /// A-Z a-z 0-9 _ - are written %XX).
    #[arg(long, value_name = "TEMPLATE", default_value = DEFAULT_SUBJECT_TEMPLATE, requires = "sink")]
    pub subject_template: String,
    /// One message per change (`event`), or per run of one table's changes within a
    /// transaction (`transaction`): fewer, larger messages, one Feldera envelope per line
    /// (Feldera JSON only: Debezium records are a message each).
    #[arg(long, value_enum, default_value_t = GroupingArg::Event, requires = "sink")]
    pub grouping: GroupingArg,
    /// Create the stream if it does not exist (retention limits, file storage).
    #[arg(long, requires = "sink")]
    pub create_stream: bool,
    /// With --create-stream: replicas (1, 3 or 5; more than 1 needs a JetStream cluster).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5), requires = "create_stream")]
    pub stream_replicas: u8,
    /// With --create-stream: remove messages older than this (e.g. `168h`). Default: kept.
    /// It must exceed any time pgcdc may be stopped (see docs/jetstream.md).
    #[arg(long, value_parser = duration_between(STREAM_DURATION), requires = "create_stream")]
    pub stream_max_age: Option<Duration>,
    /// With --create-stream: JetStream's deduplication window.
    #[arg(long, value_parser = duration_between(STREAM_DURATION), default_value = "2m", requires = "create_stream")]
    pub stream_duplicate_window: Duration,
    /// KV bucket holding pgcdc's resume entry (key: the stream's name); created if
    /// missing.
    #[arg(long, default_value = DEFAULT_RESUME_BUCKET, requires = "sink")]
    pub resume_bucket: String,
    /// A NATS `.creds` file (user JWT and nkey seed); or set PGCDC_NATS_CREDS.
    #[arg(long, value_name = "FILE", requires = "sink")]
    pub nats_creds: Option<PathBuf>,
    /// A file holding an nkey seed; or set PGCDC_NATS_NKEY to the seed.
    #[arg(long, value_name = "FILE", requires = "sink")]
    pub nats_nkey_file: Option<PathBuf>,
    /// A file holding a token; or set PGCDC_NATS_TOKEN.
    #[arg(long, value_name = "FILE", requires = "sink")]
    pub nats_token_file: Option<PathBuf>,
    /// User name; the password comes from --nats-password-file or PGCDC_NATS_PASSWORD.
    #[arg(long, value_name = "USER", requires = "sink")]
    pub nats_user: Option<String>,
    /// A file holding the password of --nats-user.
    #[arg(long, value_name = "FILE", requires = "nats_user")]
    pub nats_password_file: Option<PathBuf>,
    /// Refuse to connect without TLS (implied by tls:// URLs).
    #[arg(long, requires = "sink")]
    pub nats_require_tls: bool,
    /// PEM file of the certificate authorities to trust (default: the system's).
    #[arg(long, value_name = "FILE", requires = "sink")]
    pub nats_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers that verify clients; with --nats-tls-key.
    #[arg(long, value_name = "FILE", requires = "nats_tls_key")]
    pub nats_tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "nats_tls_cert")]
    pub nats_tls_key: Option<PathBuf>,
}

/// `--grouping`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupingArg {
    /// One message per change.
    Event,
    /// One message per run of one table's changes in a transaction.
    Transaction,
}

impl NatsArgs {
    /// The sink's options for `database`, or `None` without --sink.
    pub fn options(
        &self,
        database: &str,
        policies: Policies,
    ) -> Result<Option<JetStreamOptions>, CliError> {
        let (Some(sink), Some(stream)) = (&self.sink, &self.stream) else {
            return Ok(None);
        };
        let servers: Vec<String> = sink
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if servers.is_empty() {
            return Err(CliError::usage("--sink: no NATS server URL given"));
        }
        let mut tls_scheme = false;
        for server in &servers {
            match server.split_once("://") {
                Some(("nats", _)) => {}
                Some(("tls", _)) => tls_scheme = true,
                _ => {
                    return Err(CliError::usage(format!(
                        "--sink: {:?} is not a NATS URL; write nats://host:4222 or tls://host:4222",
                        server.rsplit('@').next().unwrap_or_default()
                    )));
                }
            }
        }
        let mut options = JetStreamOptions::new(servers, stream.clone(), database);
        options.subjects = SubjectTemplate::parse(&self.subject_template)
            .map_err(|e| CliError::usage(format!("--subject-template: {e}")))?;
        options.grouping = match self.grouping {
            GroupingArg::Event => Grouping::Event,
            GroupingArg::Transaction => Grouping::Transaction,
        };
        options.policies = policies;
        options.resume_bucket = self.resume_bucket.clone();
        if self.create_stream {
            let mut settings = StreamSettings::default();
            settings.replicas = usize::from(self.stream_replicas);
            settings.max_age = self.stream_max_age;
            settings.duplicate_window = self.stream_duplicate_window;
            options.create_stream = Some(settings);
        }
        options.auth = self.auth()?;
        options.tls.require = self.nats_require_tls || tls_scheme;
        options.tls.ca_file = self.nats_tls_ca.clone();
        options.tls.client_cert = self.nats_tls_cert.clone().zip(self.nats_tls_key.clone());
        Ok(Some(options))
    }

    /// The one credential given, from its file or the environment.
    fn auth(&self) -> Result<NatsAuth, CliError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut given = Vec::new();
        if let Some(path) = self
            .nats_creds
            .clone()
            .or_else(|| env(NATS_CREDS_ENV).map(PathBuf::from))
        {
            given.push(NatsAuth::CredentialsFile(path));
        }
        if let Some(path) = &self.nats_nkey_file {
            given.push(NatsAuth::NKeySeed(read_secret(path, "--nats-nkey-file")?));
        } else if let Some(seed) = env(NATS_NKEY_ENV) {
            given.push(NatsAuth::NKeySeed(seed));
        }
        if let Some(path) = &self.nats_token_file {
            given.push(NatsAuth::Token(read_secret(path, "--nats-token-file")?));
        } else if let Some(token) = env(NATS_TOKEN_ENV) {
            given.push(NatsAuth::Token(token));
        }
        if let Some(user) = &self.nats_user {
            let password = match &self.nats_password_file {
                Some(path) => read_secret(path, "--nats-password-file")?,
                None => env(NATS_PASSWORD_ENV).ok_or_else(|| {
                    CliError::usage(format!(
                        "--nats-user needs a password: --nats-password-file or {NATS_PASSWORD_ENV}"
                    ))
                })?,
            };
            given.push(NatsAuth::UserPassword(user.clone(), password));
        }
        if given.len() > 1 {
            return Err(CliError::usage(
                "give one NATS credential: a creds file, an nkey, a token, or a user and password",
            ));
        }
        Ok(given.pop().unwrap_or_default())
    }
}

/// A secret from a file, trimmed; the error names the file, never its contents.
fn read_secret(path: &Path, flag: &str) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("{flag} {}: {e}", path.display())))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(CliError::usage(format!(
            "{flag} {}: the file is empty",
            path.display()
        )));
    }
    Ok(secret.to_owned())
}
