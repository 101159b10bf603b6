//! Locating the PostgreSQL server binaries.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// Environment variable naming the directory that holds `initdb` and `postgres`.
pub const PG_BIN_ENV: &str = "PG_BIN";

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

fn has_server_binaries(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}
