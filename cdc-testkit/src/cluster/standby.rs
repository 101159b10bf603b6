//! Physical standbys without `pg_basebackup`: a file-level copy of the primary taken in
//! backup mode, then streaming replication from the primary; promotion and replay tracking.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::os::{self, ServerUser};
use crate::tls::TlsFiles;

use super::{ADMIN_USER, Cluster, Fresh};

/// How long [`Cluster::wait_for_replay`] waits.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(60);

/// Numbers the standbys of this process, for their `application_name`.
static STANDBY_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Files in the top level of the data directory that a base backup leaves out (as
/// `pg_basebackup` does); the standby gets its own `backup_label` and `standby.signal`.
const EXCLUDED_FILES: &[&str] = &[
    "postmaster.pid",
    "postmaster.opts",
    "backup_label",
    "tablespace_map",
    "backup_manifest",
    "standby.signal",
    "recovery.signal",
    "postgresql.auto.conf.tmp",
    "current_logfiles",
    "current_logfiles.tmp",
];

/// Directories whose contents a base backup leaves out (the directories themselves are
/// created empty). `pg_wal` is filled separately, after the backup ends.
const EMPTIED_DIRS: &[&str] = &[
    "pg_wal",
    "pg_replslot",
    "pg_dynshmem",
    "pg_notify",
    "pg_serial",
    "pg_snapshots",
    "pg_stat_tmp",
    "pg_subtrans",
];

/// Configures and creates a physical standby of a running [`Cluster`]; see
/// [`Cluster::standby`] for what the standby is.
#[derive(Debug, Clone)]
pub struct StandbyBuilder<'a> {
    primary: &'a Cluster,
    slot: Option<String>,
    settings: Vec<(String, String)>,
}

impl<'a> StandbyBuilder<'a> {
    /// A builder for a standby of `primary` (no replication slot, no extra settings).
    pub fn new(primary: &'a Cluster) -> Self {
        Self {
            primary,
            slot: None,
            settings: Vec::new(),
        }
    }

    /// Create the physical replication slot `name` on the primary (reserving WAL at once)
    /// before the copy, and stream through it (`primary_slot_name`). Fails at
    /// [`StandbyBuilder::build`] if the slot exists.
    pub fn slot(mut self, name: impl Into<String>) -> Self {
        self.slot = Some(name.into());
        self
    }

    /// Set a configuration parameter of the standby only (after the primary's settings and
    /// the standby settings, so it wins), e.g. `.setting("recovery_min_apply_delay", "1s")`.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// Copy the primary, configure the copy as a standby and start it; returns once the
    /// standby has reached a consistent state and accepts (read-only) connections. On
    /// failure everything created so far is removed again (a created slot stays on the
    /// primary).
    pub async fn build(self) -> Result<Cluster> {
        let primary = self.primary;
        for (name, _) in &self.settings {
            super::builder::check_setting_name(name)?;
        }
        let number = STANDBY_COUNTER.fetch_add(1, Ordering::Relaxed);
        let application_name = format!("standby_{number}");
        let mut conninfo = format!(
            "host={} port={} user={} application_name={}",
            super::client::kv_quote(&primary.socket_dir.to_string_lossy()),
            primary.port(),
            super::client::kv_quote(ADMIN_USER),
            application_name
        );
        conninfo.push_str(" connect_timeout=10");
        let mut settings = primary.settings.clone();
        settings.extend([
            ("hot_standby".to_string(), "on".to_string()),
            ("hot_standby_feedback".to_string(), "on".to_string()),
            ("primary_conninfo".to_string(), conninfo),
        ]);
        if let Some(slot) = &self.slot {
            settings.push(("primary_slot_name".to_string(), slot.clone()));
        }
        settings.extend(self.settings.iter().cloned());

        let mut standby = Cluster::allocate(Fresh {
            bins: primary.bins.clone(),
            server_user: primary.server_user,
            auth: primary.auth,
            settings,
            start_timeout: primary.start_timeout,
            stop_timeout: primary.stop_timeout,
        })?;
        // From here on, `standby`'s Drop cleans up whatever happens.
        if let Some(tls) = &primary.tls {
            let dir = standby.base_dir().join("tls");
            standby.tls = Some(TlsFiles::create(
                &dir,
                tls.server_names(),
                standby.server_user,
            )?);
        }
        if let Some(slot) = &self.slot {
            let client = primary.connect("postgres").await?;
            client
                .execute(
                    "SELECT pg_create_physical_replication_slot($1, true)",
                    &[slot],
                )
                .await?;
        }
        base_backup(primary, &standby).await?;

        let signal = standby.data_dir.join("standby.signal");
        std::fs::write(&signal, b"").ctx(|| format!("write {}", signal.display()))?;
        os::chown(&signal, standby.server_user)?;
        standby.write_conf()?;
        standby.first_start().await?;
        Ok(standby)
    }
}

impl Cluster {
    /// Create and start a physical standby of this (running) cluster, without
    /// `pg_basebackup`: [`StandbyBuilder::new(self).build()`](StandbyBuilder::build).
    ///
    /// The standby is a [`Cluster`] of its own — own temporary directory, port, Unix socket,
    /// log and (if this cluster has TLS) TLS material with a CA of its own — built from a
    /// file-level copy of this cluster's data directory taken between `pg_backup_start` and
    /// `pg_backup_stop` (`pg_start_backup`/`pg_stop_backup`, non-exclusive, on 14), leaving
    /// out what `pg_basebackup` leaves out, with the WAL written since the backup started.
    /// It runs with `standby.signal`, `hot_standby = on`, `hot_standby_feedback = on`, this
    /// cluster's settings, and `primary_conninfo` pointing at this cluster's Unix socket as
    /// [`ADMIN_USER`] (trusted there for replication under every [`super::AuthMethod`]).
    /// It has this cluster's roles, passwords and `pg_hba.conf`.
    ///
    /// Use [`Cluster::wait_for_replay`] to wait until it has caught up and
    /// [`Cluster::promote`] to turn it into a primary. Tablespaces are not supported.
    pub async fn standby(&self) -> Result<Cluster> {
        StandbyBuilder::new(self).build().await
    }

    /// A [`StandbyBuilder`] for a standby of this cluster (replication slot, settings).
    pub fn standby_builder(&self) -> StandbyBuilder<'_> {
        StandbyBuilder::new(self)
    }

    /// Promote this standby to a primary (`pg_promote`) and wait until it accepts writes.
    /// Fails with [`Error::Config`] if the server is not in recovery, and with
    /// [`Error::Timeout`] if promotion takes more than 60 s.
    pub async fn promote(&self) -> Result<()> {
        if !self.is_in_recovery().await? {
            return Err(Error::Config(
                "promote: the cluster is not a standby (not in recovery)".into(),
            ));
        }
        let client = self.connect("postgres").await?;
        let done: bool = client
            .query_one("SELECT pg_promote(true, 60)", &[])
            .await?
            .try_get(0)?;
        if !done {
            return Err(Error::Timeout(format!(
                "the standby on port {} was not promoted within 60 s; see {}",
                self.port(),
                self.log_path.display()
            )));
        }
        Ok(())
    }

    /// Wait until this standby has replayed everything `primary` has written so far: its
    /// `pg_last_wal_replay_lsn()` reaches the primary's `pg_current_wal_lsn()` as read when
    /// the call starts. Fails with [`Error::Timeout`] after 60 s (naming both positions),
    /// and with [`Error::Config`] if this cluster has never been a standby.
    pub async fn wait_for_replay(&self, primary: &Cluster) -> Result<()> {
        let target = primary.current_wal_lsn().await?;
        let client = self.connect("postgres").await?;
        let deadline = Instant::now() + REPLAY_TIMEOUT;
        loop {
            let row = client
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn, \
                     pg_last_wal_replay_lsn()::text",
                    &[&target],
                )
                .await?;
            let (caught_up, replayed): (Option<bool>, Option<String>) =
                (row.try_get(0)?, row.try_get(1)?);
            match caught_up {
                Some(true) => return Ok(()),
                None => {
                    return Err(Error::Config(format!(
                        "wait_for_replay: the cluster on port {} is not a standby (it has \
                         replayed no WAL)",
                        self.port()
                    )));
                }
                Some(false) => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "the standby on port {} replayed WAL up to {} but not up to the primary's \
                     {target} within {REPLAY_TIMEOUT:?}; see {}",
                    self.port(),
                    replayed.unwrap_or_default(),
                    self.log_path.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the server is in recovery (`pg_is_in_recovery()`): true for a standby until
    /// it is promoted.
    pub async fn is_in_recovery(&self) -> Result<bool> {
        let client = self.connect("postgres").await?;
        Ok(client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await?
            .try_get(0)?)
    }
}

/// Copy `primary`'s data directory into `standby`'s in backup mode, write the backup label,
/// and copy the WAL written since the backup started.
async fn base_backup(primary: &Cluster, standby: &Cluster) -> Result<()> {
    // Non-exclusive backup mode lasts as long as this session: keep it open.
    let client = primary.connect("postgres").await?;
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await?
        .try_get(0)?;
    let label = format!("pgcdc-testkit standby {}", standby.port());
    let (start_sql, stop_sql) = if version >= 150_000 {
        (
            "SELECT pg_backup_start($1, true)::text",
            "SELECT lsn::text, labelfile, spcmapfile FROM pg_backup_stop(false)",
        )
    } else {
        (
            "SELECT pg_start_backup($1, true, false)::text",
            "SELECT lsn::text, labelfile, spcmapfile FROM pg_stop_backup(false, false)",
        )
    };
    let start_lsn: String = client.query_one(start_sql, &[&label]).await?.try_get(0)?;
    let first_wal: String = client
        .query_one("SELECT pg_walfile_name($1::text::pg_lsn)", &[&start_lsn])
        .await?
        .try_get(0)?;

    let (src, dst, user) = (
        primary.data_dir.clone(),
        standby.data_dir.clone(),
        standby.server_user,
    );
    blocking("copy the primary's data directory", move || {
        copy_data_dir(&src, &dst, user)
    })
    .await?;

    let row = client.query_one(stop_sql, &[]).await?;
    let labelfile: String = row.try_get(1)?;
    let spcmapfile: Option<String> = row.try_get(2)?;
    if spcmapfile.is_some_and(|m| !m.trim().is_empty()) {
        return Err(Error::Config(
            "the primary has tablespaces; Cluster::standby does not support them".into(),
        ));
    }
    drop(client);
    let label_path = standby.data_dir.join("backup_label");
    std::fs::write(&label_path, labelfile).ctx(|| format!("write {}", label_path.display()))?;
    os::chmod(&label_path, 0o600)?;
    os::chown(&label_path, standby.server_user)?;

    let (src, dst, user) = (
        primary.data_dir.join("pg_wal"),
        standby.data_dir.join("pg_wal"),
        standby.server_user,
    );
    blocking("copy the primary's WAL", move || {
        copy_wal(&src, &dst, &first_wal, user)
    })
    .await
}

async fn blocking<F>(what: &'static str, f: F) -> Result<()>
where
    F: FnOnce() -> Result<()> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::io(what, std::io::Error::other(e)))?
}

/// Copy the data directory `src` to the (existing, empty) `dst`, leaving out what a base
/// backup leaves out.
fn copy_data_dir(src: &Path, dst: &Path, user: Option<ServerUser>) -> Result<()> {
    let tblspc = src.join("pg_tblspc");
    if std::fs::read_dir(&tblspc).is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::Config(format!(
            "{} is not empty: the primary has tablespaces, which Cluster::standby does not \
             support",
            tblspc.display()
        )));
    }
    for entry in std::fs::read_dir(src).ctx(|| format!("list {}", src.display()))? {
        let entry = entry.ctx(|| format!("list {}", src.display()))?;
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        if EXCLUDED_FILES.contains(&name_str.as_ref()) {
            continue;
        }
        if EMPTIED_DIRS.contains(&name_str.as_ref()) {
            let dir = dst.join(&name);
            make_dir_like(&entry.path(), &dir, user)?;
            if name_str == "pg_wal" {
                make_dir_like(&entry.path(), &dir.join("archive_status"), user)?;
            }
            continue;
        }
        copy_entry(&entry.path(), &dst.join(&name), user)?;
    }
    Ok(())
}

/// Copy one file, symlink or directory tree; files and directories that disappear while
/// the copy runs (the primary keeps running) are skipped, like `pg_basebackup` does.
fn copy_entry(src: &Path, dst: &Path, user: Option<ServerUser>) -> Result<()> {
    let name = src.file_name().map(|n| n.to_string_lossy().into_owned());
    if name
        .as_deref()
        .is_some_and(|n| n == "pg_internal.init" || n.starts_with("pgsql_tmp"))
    {
        return Ok(());
    }
    let meta = match src.symlink_metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("stat {}", src.display()), e)),
    };
    if meta.is_dir() {
        make_dir_like(src, dst, user)?;
        let entries = match std::fs::read_dir(src) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("list {}", src.display()), e)),
        };
        for entry in entries {
            let entry = entry.ctx(|| format!("list {}", src.display()))?;
            copy_entry(&entry.path(), &dst.join(entry.file_name()), user)?;
        }
    } else if meta.file_type().is_symlink() {
        let target = std::fs::read_link(src).ctx(|| format!("read link {}", src.display()))?;
        std::os::unix::fs::symlink(&target, dst)
            .ctx(|| format!("symlink {} -> {}", dst.display(), target.display()))?;
    } else if meta.is_file() {
        match std::fs::copy(src, dst) {
            Ok(_) => os::chown(dst, user)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::io(
                    format!("copy {} to {}", src.display(), dst.display()),
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// Create `dst` with the permission bits of the directory `src`, owned by the server user.
fn make_dir_like(src: &Path, dst: &Path, user: Option<ServerUser>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = src
        .metadata()
        .map_or(0o700, |m| m.permissions().mode() & 0o7777);
    std::fs::create_dir(dst).ctx(|| format!("create {}", dst.display()))?;
    os::chmod(dst, mode)?;
    os::chown(dst, user)
}

/// Copy the WAL segments from `first` (a segment file name) on, and every timeline history
/// file, from the primary's `pg_wal` to the standby's. Segments still being written are
/// copied as they are; recovery reads what is valid and streams the rest.
fn copy_wal(src: &Path, dst: &Path, first: &str, user: Option<ServerUser>) -> Result<()> {
    let mut names: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(src).ctx(|| format!("list {}", src.display()))? {
        let entry = entry.ctx(|| format!("list {}", src.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_segment = name.len() == 24 && name.chars().all(|c| c.is_ascii_hexdigit());
        if (is_segment && name.as_str() >= first) || name.ends_with(".history") {
            names.push(entry.path());
        }
    }
    for path in names {
        if let Some(name) = path.file_name() {
            copy_entry(&path, &dst.join(name), user)?;
        }
    }
    Ok(())
}
