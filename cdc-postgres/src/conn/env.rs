//! libpq's environment: the `PG*` variables that fill in what a connection string leaves
//! out, and the password file ([`super::pgpass`]), as the input [`PgEnv`] of
//! [`ConnectionConfig::parse_with_env`].
//!
//! Precedence, as in libpq, for each parameter: the connection string's value (even an
//! empty one), then the environment variable ([`ENV_PARAMETERS`]; an empty variable counts
//! as unset), then — for the password only — the password file's first matching entry,
//! then the default. The password file is looked up with the host, port, database and
//! user so resolved, and read only when the password is still missing.
//!
//! Opt-in: [`ConnectionConfig::parse`], [`SourceConfig::new`](super::SourceConfig::new)
//! and [`SourceConfig::from_json`](super::SourceConfig::from_json) never consult the
//! environment. A library runs inside someone else's process — Feldera runs many
//! connectors in one — whose `PGPASSWORD` or `PGSSLMODE` must not silently change where a
//! configuration connects or how. Command-line tools opt in with
//! `ConnectionConfig::parse_with_env(conninfo, &PgEnv::from_process())`, as `pgcdc` does.
//!
//! Not consulted: the service file (`PGSERVICE`, with a warning), `~/.postgresql/`'s
//! default certificate files, and the operating system's user name as the default user
//! (a missing user is an error that says to set one).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use cdc_core::{Error, Result};

use super::config::{ConnectionConfig, Host};
use super::conninfo;
use super::pgpass::{PassFile, read_pass_file};
use super::secret::REDACTED;

/// The environment variables consulted, and the connection parameter each stands for.
pub const ENV_PARAMETERS: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGOPTIONS", "options"),
    ("PGAPPNAME", "application_name"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGCHANNELBINDING", "channel_binding"),
];

/// The variable whose value is never shown.
const PASSWORD_VAR: &str = "PGPASSWORD";

/// What a connection string is completed from: the `PG*` variables of
/// [`ENV_PARAMETERS`], and the password file.
///
/// Built from the process with [`PgEnv::from_process`], or from explicit values (tests,
/// embedders that keep their own environment). `Debug` shows no password: `PGPASSWORD`
/// prints as `"***"`, a password file as its path or its number of entries.
#[derive(Clone, Default)]
pub struct PgEnv {
    vars: BTreeMap<&'static str, String>,
    pass_file: PassFileSource,
}

/// Where the password file comes from.
#[derive(Clone, Debug, Default)]
enum PassFileSource {
    #[default]
    None,
    /// Given (already parsed).
    Given(PassFile),
    /// Read when a password is looked up, with the permission check.
    Path(PathBuf),
}

impl fmt::Debug for PgEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vars: BTreeMap<&str, &str> = self
            .vars
            .iter()
            .map(|(name, value)| {
                let shown = if *name == PASSWORD_VAR {
                    REDACTED
                } else {
                    value.as_str()
                };
                (*name, shown)
            })
            .collect();
        f.debug_struct("PgEnv")
            .field("vars", &vars)
            .field("pass_file", &self.pass_file)
            .finish()
    }
}

impl PgEnv {
    /// No variables and no password file: resolution uses the connection string and the
    /// defaults only.
    pub fn new() -> Self {
        PgEnv::default()
    }

    /// Sets variable `name`, one of [`ENV_PARAMETERS`] (an empty value counts as unset).
    /// Any other name is a Config error.
    pub fn with_var(mut self, name: &str, value: impl Into<String>) -> Result<Self> {
        let name = ENV_PARAMETERS
            .iter()
            .map(|(var, _)| *var)
            .find(|var| *var == name)
            .ok_or_else(|| {
                Error::config(format!(
                    "{name:?} is not one of the environment variables pgcdc consults ({})",
                    ENV_PARAMETERS
                        .iter()
                        .map(|(var, _)| *var)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        let value = value.into();
        if value.is_empty() {
            self.vars.remove(name);
        } else {
            self.vars.insert(name, value);
        }
        Ok(self)
    }

    /// Uses `contents` as the password file (libpq's format; see [`super::pgpass`]).
    pub fn with_pass_file(mut self, contents: &str) -> Self {
        self.pass_file = PassFileSource::Given(PassFile::parse(contents));
        self
    }

    /// Uses the password file at `path`, read only when a password is looked up; ignored
    /// with a warning if others may read it (see [`super::pgpass::read_pass_file`]).
    pub fn with_pass_file_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.pass_file = PassFileSource::Path(path.into());
        self
    }

    /// The process's environment: the variables of [`ENV_PARAMETERS`], and the password
    /// file `PGPASSFILE` names, else `$HOME/.pgpass`. A variable that is not UTF-8 is
    /// ignored with a warning; so is `PGSERVICE` (service files are not supported).
    pub fn from_process() -> Self {
        let read = |name: &str| match std::env::var(name) {
            Ok(value) => Some(value),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                tracing::warn!("environment variable {name} is not valid UTF-8; ignored");
                None
            }
        };
        let mut env = PgEnv::new();
        for (name, _) in ENV_PARAMETERS {
            if let Some(value) = read(name).filter(|v| !v.is_empty()) {
                env.vars.insert(name, value);
            }
        }
        if read("PGSERVICE").is_some_and(|v| !v.is_empty()) {
            tracing::warn!(
                "PGSERVICE is set, but connection service files are not supported; ignored"
            );
        }
        let pass_file = read("PGPASSFILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                read("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".pgpass"))
            });
        if let Some(path) = pass_file {
            env = env.with_pass_file_path(path);
        }
        env
    }

    /// The value of variable `name`, if set and not empty.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The password file, read if it comes from a path.
    fn pass_file(&self) -> Option<std::borrow::Cow<'_, PassFile>> {
        match &self.pass_file {
            PassFileSource::None => None,
            PassFileSource::Given(file) => Some(std::borrow::Cow::Borrowed(file)),
            PassFileSource::Path(path) => read_pass_file(path).map(std::borrow::Cow::Owned),
        }
    }
}

impl ConnectionConfig {
    /// Parses `conninfo` like [`ConnectionConfig::parse`] and completes it from `env` as
    /// libpq does (see the [module documentation](self) for the precedence): each
    /// parameter the connection string leaves out comes from its `PG*` variable, and a
    /// missing password from the password file. `conninfo` may be empty.
    ///
    /// Errors are Config errors; one caused by a variable names it (and shows its value,
    /// except `PGPASSWORD`'s).
    pub fn parse_with_env(conninfo: &str, env: &PgEnv) -> Result<Self> {
        // libpq would default to the operating system's user name; pgcdc does not guess.
        let names_user = conninfo::parse_pairs(conninfo)?
            .iter()
            .any(|(key, value)| key == "user" && !value.is_empty());
        if !names_user && env.var("PGUSER").is_none() {
            return Err(Error::config(
                "no user to log in as: name one in the connection string (user=..., or user@ in a URI) or set PGUSER",
            ));
        }
        let mut defaults = Vec::new();
        for (var, key) in ENV_PARAMETERS {
            if let Some(value) = env.var(var) {
                defaults.push((*key, value, *var));
            }
        }
        let mut config = conninfo::parse_with_defaults(conninfo, &defaults)?;
        if config.password.is_none()
            && let Some(file) = env.pass_file()
        {
            // One password for the connection: the entry of the first server, in the order
            // they are tried, that has one.
            config.password = config.per_server().iter().find_map(|server| {
                let host = match &server.host {
                    Host::Tcp(name) => name.clone(),
                    Host::Unix(dir) => dir.to_string_lossy().into_owned(),
                };
                file.lookup(&host, server.port, &server.dbname, &server.user)
                    .map(|p| p.expose().to_owned())
            });
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::config::SslMode;
    use std::time::Duration;

    fn env(vars: &[(&str, &str)]) -> PgEnv {
        vars.iter().fold(PgEnv::new(), |env, (name, value)| {
            env.with_var(name, *value).unwrap()
        })
    }

    #[test]
    fn variables_fill_in_what_the_string_leaves_out() {
        let env = env(&[
            ("PGHOST", "env-host"),
            ("PGPORT", "6432"),
            ("PGDATABASE", "env-db"),
            ("PGUSER", "env-user"),
            ("PGPASSWORD", "env-pw"),
            ("PGSSLMODE", "require"),
            ("PGAPPNAME", "env-app"),
            ("PGCONNECT_TIMEOUT", "7"),
            ("PGOPTIONS", "-c work_mem=64MB"),
        ]);
        let c = ConnectionConfig::parse_with_env("", &env).unwrap();
        assert_eq!(c.host, Host::Tcp("env-host".into()));
        assert_eq!(c.port, 6432);
        assert_eq!(c.dbname, "env-db");
        assert_eq!(c.user, "env-user");
        assert_eq!(c.password.as_deref(), Some("env-pw"));
        assert_eq!(c.tls.mode, SslMode::Require);
        assert_eq!(c.application_name.as_deref(), Some("env-app"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(7)));
        assert_eq!(c.options.as_deref(), Some("-c work_mem=64MB"));

        // The connection string wins, parameter by parameter, in both forms.
        for conninfo in [
            "postgres://cdc:pw@db:5433/shop?sslmode=disable",
            "host=db port=5433 dbname=shop user=cdc password=pw sslmode=disable",
        ] {
            let c = ConnectionConfig::parse_with_env(conninfo, &env).unwrap();
            assert_eq!(c.host, Host::Tcp("db".into()));
            assert_eq!(
                (c.port, c.dbname.as_str(), c.user.as_str()),
                (5433, "shop", "cdc")
            );
            assert_eq!(c.password.as_deref(), Some("pw"));
            assert_eq!(c.tls.mode, SslMode::Disable);
            assert_eq!(c.application_name.as_deref(), Some("env-app"));
        }
        // An empty value in the string is a value: the variable does not apply.
        let c = ConnectionConfig::parse_with_env("user=cdc application_name=''", &env).unwrap();
        assert_eq!(c.application_name, None);
    }

    #[test]
    fn without_an_environment_it_is_parse() {
        let conninfo = "postgres://cdc:pw@db/shop?sslmode=require";
        assert_eq!(
            ConnectionConfig::parse_with_env(conninfo, &PgEnv::new()).unwrap(),
            ConnectionConfig::parse(conninfo).unwrap()
        );
        let err = ConnectionConfig::parse_with_env("host=db", &PgEnv::new()).unwrap_err();
        assert!(err.message().contains("PGUSER"), "{err}");
    }

    #[test]
    fn password_precedence_string_then_variable_then_file() {
        let file = "db:5432:shop:cdc:from-file\n";
        let with_file = PgEnv::new().with_pass_file(file);
        let with_both = env(&[("PGPASSWORD", "from-env")]).with_pass_file(file);
        let conninfo = "host=db dbname=shop user=cdc";
        let password = |conninfo: &str, env: &PgEnv| {
            ConnectionConfig::parse_with_env(conninfo, env)
                .unwrap()
                .password
        };
        assert_eq!(password(conninfo, &with_file).as_deref(), Some("from-file"));
        assert_eq!(password(conninfo, &with_both).as_deref(), Some("from-env"));
        assert_eq!(
            password(&format!("{conninfo} password=given"), &with_both).as_deref(),
            Some("given")
        );
        // An explicitly empty password is a password: the file is not consulted.
        assert_eq!(
            password(&format!("{conninfo} password=''"), &with_file).as_deref(),
            Some("")
        );
        // The file is matched with the resolved host, port, database and user.
        assert_eq!(password("host=db dbname=other user=cdc", &with_file), None);
        let env = env(&[("PGHOST", "db"), ("PGDATABASE", "shop")]).with_pass_file(file);
        assert_eq!(password("user=cdc", &env).as_deref(), Some("from-file"));
        // hostaddr stands in for a missing host; Unix socket directories match as written.
        let env = PgEnv::new().with_pass_file(
            "10.0.0.5:5432:*:cdc:by-address\n/run/postgresql:5432:*:cdc:by-socket\nlocalhost:5432:*:cdc:by-default\n",
        );
        assert_eq!(
            password("hostaddr=10.0.0.5 user=cdc", &env).as_deref(),
            Some("by-address")
        );
        assert_eq!(
            password("host=/run/postgresql user=cdc", &env).as_deref(),
            Some("by-socket")
        );
        assert_eq!(password("user=cdc", &env).as_deref(), Some("by-default"));
    }

    #[cfg(unix)]
    #[test]
    fn a_password_file_others_may_read_is_ignored() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".pgpass");
        std::fs::write(&path, "*:*:*:cdc:from-file\n").unwrap();
        let env = PgEnv::new().with_pass_file_path(&path);
        for (mode, expected) in [(0o644, None), (0o600, Some("from-file"))] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let c = ConnectionConfig::parse_with_env("host=db user=cdc", &env).unwrap();
            assert_eq!(c.password.as_deref(), expected, "mode {mode:o}");
        }
    }

    #[test]
    fn bad_variables_are_named() {
        let err =
            ConnectionConfig::parse_with_env("user=cdc", &env(&[("PGPORT", "54x")])).unwrap_err();
        assert!(
            err.message().contains("PGPORT") && err.message().contains("54x"),
            "{err}"
        );
        // Not when the string sets the parameter (the variable is not consulted).
        assert!(
            ConnectionConfig::parse_with_env("user=cdc port=5432", &env(&[("PGPORT", "54x")]))
                .is_ok()
        );
        let err =
            ConnectionConfig::parse_with_env("user=cdc", &env(&[("PGSSLMODE", "verify-full")]))
                .unwrap_err();
        assert!(err.message().contains("sslrootcert"), "{err}");
        let err =
            ConnectionConfig::parse_with_env("user=cdc", &env(&[("PGPASSWORD", "hunter2\0x")]))
                .unwrap_err();
        assert!(
            err.message().contains("PGPASSWORD") && !err.message().contains("hunter2"),
            "{err}"
        );
        assert!(PgEnv::new().with_var("PGSERVICE", "x").is_err());
    }

    #[test]
    fn debug_shows_no_password() {
        let env = env(&[("PGPASSWORD", "hunter2"), ("PGHOST", "db")])
            .with_pass_file("*:*:*:*:swordfish\n");
        let text = format!("{env:?} {env:#?}");
        assert!(
            !text.contains("hunter2") && !text.contains("swordfish"),
            "{text}"
        );
        assert!(text.contains("PGHOST"), "{text}");
    }
}
