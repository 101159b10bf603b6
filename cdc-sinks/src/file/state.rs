//! The checkpoint file stored next to the data files: what it records, reading and
//! checking it, replacing it atomically, and the fsync helpers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, Permissions};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cdc_core::{Error, Position, ResumeToken};
use serde::{Deserialize, Serialize};

use super::io_error::io_error;
use super::names::{is_data_file_name, legacy_table, table_file_name};
use super::no_follow::{self, Access};
use super::options::{CrashPoint, FileLayout};
use crate::debezium::DebeziumState;
use crate::feldera::Framing;

/// Name of the checkpoint file in the output directory.
pub const CHECKPOINT_FILE: &str = "pgcdc-checkpoint.json";
/// Name of the temporary file the checkpoint is written to before it replaces the
/// checkpoint file. Fixed, so that recovery removes exactly the one a crash left behind.
pub(crate) const CHECKPOINT_TMP: &str = "pgcdc-checkpoint.json.tmp";

const STATE_FORMAT: u32 = 1;

/// Largest checkpoint file read (far above what thousands of tables need): a bigger one
/// is damaged, and reading it whole could exhaust memory.
const MAX_CHECKPOINT_BYTES: u64 = 64 << 20;

/// What a checkpoint records: the token and, for every data file, its length when the
/// token was taken. Written atomically (temp file, fsync, rename, fsync directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointState {
    /// Format version of this file.
    pub format: u32,
    /// Layout the directory was written with.
    pub layout: FileLayout,
    /// Framing the files were written with.
    pub framing: Framing,
    /// The token the data is durable with; `None` before the first checkpoint.
    pub token: Option<ResumeToken>,
    /// The last event position whose output the files hold (≥ the token's position in
    /// practice; events at or before it are skipped on replay).
    pub applied_through: Option<Position>,
    /// Data file name → length in bytes at the checkpoint.
    pub files: BTreeMap<String, u64>,
    /// Data file lengths where the current initial snapshot started; `None` when no
    /// snapshot is in progress. Used to discard snapshot rows on a snapshot restart.
    #[serde(default)]
    pub snapshot_start: Option<BTreeMap<String, u64>>,
    /// Data files the sink may have created since this checkpoint: each name is recorded
    /// here (durably) before its file is created, so recovery removes exactly the files
    /// pgcdc created and no checkpoint covers. Absent in checkpoints of earlier versions,
    /// which never list such files.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub pending: BTreeSet<String>,
    /// Present when the files hold Debezium records: the encoder's state after the last
    /// record the checkpoint covers (a reopened sink continues from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debezium: Option<DebeziumState>,
}

impl CheckpointState {
    pub(crate) fn empty(
        layout: FileLayout,
        framing: Framing,
        debezium: Option<DebeziumState>,
    ) -> Self {
        CheckpointState {
            debezium,
            format: STATE_FORMAT,
            layout,
            framing,
            token: None,
            applied_through: None,
            files: BTreeMap::new(),
            snapshot_start: None,
            pending: BTreeSet::new(),
        }
    }

    /// Reads the checkpoint of `dir`, `None` when there is none. Refuses
    /// ([`cdc_core::ErrorKind::Config`]) a checkpoint that is a symbolic link or not a
    /// regular file, and one that names a file pgcdc never writes (see
    /// [`CheckpointState::check_names`]).
    pub(crate) fn read(dir: &Path) -> Result<Option<Self>, Error> {
        let path = dir.join(CHECKPOINT_FILE);
        let Some(file) = no_follow::open_regular(&path, Access::Read)? else {
            return Ok(None);
        };
        let mut text = String::new();
        file.take(MAX_CHECKPOINT_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| io_error("reading", &path, e))?;
        if text.len() as u64 > MAX_CHECKPOINT_BYTES {
            return Err(Error::config(format!(
                "checkpoint file {} is larger than {MAX_CHECKPOINT_BYTES} bytes, so it is not one pgcdc wrote (damaged or replaced); restore it or start over in an empty directory",
                path.display()
            )));
        }
        let state: CheckpointState = serde_json::from_str(&text).map_err(|e| {
            Error::sink(format!(
                "checkpoint file {} is not readable; it was not written by this version of pgcdc, or was damaged",
                path.display()
            ))
            .with_source(e)
        })?;
        if state.format != STATE_FORMAT {
            return Err(Error::config(format!(
                "checkpoint file {} has format {}, this build reads format {STATE_FORMAT}",
                path.display(),
                state.format
            )));
        }
        state.check_names(&path)?;
        Ok(Some(state))
    }

    /// Checks that every file name the checkpoint lists (lengths, snapshot start, pending
    /// files) is one pgcdc writes under the checkpoint's layout, so that no name joined
    /// onto the directory can reach a file outside it or one pgcdc does not own. `path`
    /// is the checkpoint's, for the message.
    pub(super) fn check_names(&self, path: &Path) -> Result<(), Error> {
        let names = self
            .files
            .keys()
            .chain(self.snapshot_start.iter().flat_map(|s| s.keys()))
            .chain(&self.pending);
        for name in names {
            if is_data_file_name(name, self.layout) {
                continue;
            }
            if self.layout == FileLayout::PerTable
                && let Some(table) = legacy_table(name)
            {
                return Err(Error::config(format!(
                    "checkpoint file {} lists data file {name:?}, the name earlier pgcdc versions gave table {table}; this version writes that table to {:?}, so that tables whose names differ only in case get different files on case-insensitive filesystems: start over in an empty directory (and point the consumer at the new name), or keep using the earlier pgcdc for this directory",
                    path.display(),
                    table_file_name(&table)
                )));
            }
            return Err(Error::config(format!(
                "checkpoint file {} lists data file {name:?}, which pgcdc never writes under the {:?} layout: the checkpoint is not one pgcdc wrote (tampered with or damaged); restore the original or start over in an empty directory",
                path.display(),
                self.layout
            )));
        }
        Ok(())
    }

    /// Serialized form.
    pub(crate) fn to_json(&self) -> Result<Vec<u8>, Error> {
        serde_json::to_vec_pretty(self)
            .map_err(|e| Error::sink("serializing the checkpoint failed").with_source(e))
    }
}

/// Replaces the checkpoint file of `dir` with `bytes` atomically: writes them to
/// [`CHECKPOINT_TMP`], created exclusively (a file or link already there is an error,
/// never written through), fsyncs it, renames it over [`CHECKPOINT_FILE`] (the commit
/// point; a link at that name is replaced, not followed) and fsyncs the directory.
/// `crash` is called at each [`CrashPoint`] and aborts the replacement when it fails,
/// leaving the files as a crash there would.
pub(crate) fn replace_checkpoint(
    dir: &Path,
    bytes: &[u8],
    mut crash: impl FnMut(CrashPoint) -> Result<(), Error>,
) -> Result<(), Error> {
    let tmp_path = dir.join(CHECKPOINT_TMP);
    let mut tmp = tempfile::Builder::new()
        .prefix(CHECKPOINT_TMP)
        .rand_bytes(0)
        // Like `File::create`: readable by whoever may read the data files (umask applies).
        .permissions(Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::config(format!(
                    "{} appeared while the sink was running; pgcdc creates it only while it writes a checkpoint and removes a stale one when it opens the directory, so something else writes into this directory: remove it and stop the other writer",
                    tmp_path.display()
                ))
                .with_source(e)
            } else {
                io_error("creating", &tmp_path, e)
            }
        })?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| io_error("writing", &tmp_path, e))?;
    if let Err(e) = crash(CrashPoint::AfterTempWrite) {
        // A crash leaves the temporary file behind; so does the simulated one. If keeping
        // it fails, the file is removed instead, which recovery handles just as well.
        let _ = tmp.keep();
        return Err(e);
    }
    tmp.persist(dir.join(CHECKPOINT_FILE))
        .map_err(|e| io_error("renaming", &tmp_path, e.error))?;
    crash(CrashPoint::AfterRename)?;
    sync_dir(dir)
}

/// Removes a temporary checkpoint file a crash left behind (the name is pgcdc's own, so
/// whatever is there, file or link, goes; a link's target is untouched).
pub(crate) fn remove_stale_temp(dir: &Path) -> Result<(), Error> {
    let path = dir.join(CHECKPOINT_TMP);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error("removing", &path, e)),
        _ => Ok(()),
    }
}

/// Makes the directory's entries (creations, renames, removals) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("syncing directory", dir, e))
}
