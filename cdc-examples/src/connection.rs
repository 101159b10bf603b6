//! Where the command line's connection comes from: the connection string from `--uri`,
//! `--uri-file` or `--uri-env` (at most one), completed from libpq's environment — the
//! `PG*` variables and the password file — as `psql` would
//! ([`ConnectionConfig::parse_with_env`]).
//!
//! `--uri` is visible to every user of the machine (`ps`, `/proc/*/cmdline`); the file,
//! the variable, `PGPASSWORD` and `~/.pgpass` are not.

use std::path::Path;

use cdc_postgres::conn::{ConnectionConfig, ENV_PARAMETERS, PgEnv, Secret};

use crate::cli::{CliError, ConnArgs, EXIT_CONFIG};

/// Longest `--uri-file` read: a connection string is a line, not a file's worth.
const MAX_URI_FILE_BYTES: u64 = 64 * 1024;

/// The connection string the flags give, if any: `--uri`'s value, the contents of
/// `--uri-file` (surrounding white space, such as the final newline, removed), or the
/// value of the variable `--uri-env` names. A file or variable that cannot be read or is
/// empty is a configuration error; no error shows the connection string.
pub fn conninfo(args: &ConnArgs) -> Result<Option<Secret>, CliError> {
    if let Some(uri) = &args.uri {
        return Ok(Some(uri.clone()));
    }
    if let Some(path) = &args.uri_file {
        return read_uri_file(path).map(Some);
    }
    if let Some(name) = &args.uri_env {
        return match std::env::var(name) {
            Ok(value) if value.trim().is_empty() => Err(config(format!(
                "--uri-env {name}: the environment variable is empty"
            ))),
            Ok(value) => Ok(Some(Secret::from(value.trim()))),
            Err(std::env::VarError::NotPresent) => Err(config(format!(
                "--uri-env {name}: the environment variable is not set"
            ))),
            Err(std::env::VarError::NotUnicode(_)) => Err(config(format!(
                "--uri-env {name}: the environment variable is not valid UTF-8"
            ))),
        };
    }
    Ok(None)
}

/// The connection: the flags' connection string (or an empty one) completed from the
/// process's `PG*` variables and password file. Neither a flag nor a variable is a usage
/// error.
pub fn resolve(args: &ConnArgs) -> Result<ConnectionConfig, CliError> {
    let conninfo = conninfo(args)?;
    let env = PgEnv::from_process();
    if conninfo.is_none() && ENV_PARAMETERS.iter().all(|(var, _)| env.var(var).is_none()) {
        return Err(CliError::usage(
            "no connection given: use --uri, --uri-file or --uri-env, or libpq's environment variables (PGHOST, PGUSER, PGDATABASE, ...)",
        ));
    }
    let conninfo = conninfo.unwrap_or_default();
    Ok(ConnectionConfig::parse_with_env(conninfo.expose(), &env)?)
}

fn read_uri_file(path: &Path) -> Result<Secret, CliError> {
    let shown = path.display();
    let metadata = std::fs::metadata(path)
        .map_err(|e| config(format!("--uri-file {shown}: cannot read it: {e}")))?;
    if metadata.len() > MAX_URI_FILE_BYTES {
        return Err(config(format!(
            "--uri-file {shown}: larger than {MAX_URI_FILE_BYTES} bytes; it should hold one connection string"
        )));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| config(format!("--uri-file {shown}: cannot read it: {e}")))?;
    // The contents are never quoted: they hold the password.
    let text = String::from_utf8(bytes)
        .map_err(|_| config(format!("--uri-file {shown}: not valid UTF-8 text")))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(config(format!("--uri-file {shown}: the file is empty")));
    }
    Ok(Secret::from(text))
}

fn config(message: String) -> CliError {
    CliError {
        code: EXIT_CONFIG,
        message: format!("error: {message}"),
    }
}
