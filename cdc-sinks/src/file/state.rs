//! The checkpoint file stored next to the data files: what it records, reading and
//! checking it, and the fsync helpers.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use cdc_core::{Error, Position, ResumeToken};
use serde::{Deserialize, Serialize};

use super::names::{is_data_file_name, legacy_table, table_file_name};
use super::options::FileLayout;
use crate::feldera::Framing;

/// Name of the checkpoint file in the output directory.
pub const CHECKPOINT_FILE: &str = "pgcdc-checkpoint.json";
/// Name of the temporary file the checkpoint is written to before the rename.
pub(crate) const CHECKPOINT_TMP: &str = "pgcdc-checkpoint.json.tmp";

const STATE_FORMAT: u32 = 1;

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
}

impl CheckpointState {
    pub(crate) fn empty(layout: FileLayout, framing: Framing) -> Self {
        CheckpointState {
            format: STATE_FORMAT,
            layout,
            framing,
            token: None,
            applied_through: None,
            files: BTreeMap::new(),
            snapshot_start: None,
        }
    }

    /// Reads the checkpoint of `dir`, `None` when there is none. Refuses
    /// ([`cdc_core::ErrorKind::Config`]) a checkpoint that names a file pgcdc never writes
    /// (see [`CheckpointState::check_names`]).
    pub(crate) fn read(dir: &Path) -> Result<Option<Self>, Error> {
        let path = dir.join(CHECKPOINT_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("reading", &path, e)),
        };
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

    /// Checks that every file name the checkpoint lists (lengths, snapshot start) is one pgcdc writes under the checkpoint's layout, so that no name joined
    /// onto the directory can reach a file outside it or one pgcdc does not own. `path`
    /// is the checkpoint's, for the message.
    pub(super) fn check_names(&self, path: &Path) -> Result<(), Error> {
        let names = self
            .files
            .keys()
            .chain(self.snapshot_start.iter().flat_map(|s| s.keys()));
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

/// Writes `bytes` to the temp file and fsyncs it (the first half of an atomic replace).
pub(crate) fn write_temp(dir: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = dir.join(CHECKPOINT_TMP);
    let mut file = File::create(&tmp).map_err(|e| io_error("creating", &tmp, e))?;
    file.write_all(bytes)
        .map_err(|e| io_error("writing", &tmp, e))?;
    file.sync_all().map_err(|e| io_error("syncing", &tmp, e))
}

/// Renames the temp file over the checkpoint file (the commit point).
pub(crate) fn commit_temp(dir: &Path) -> Result<(), Error> {
    let tmp = dir.join(CHECKPOINT_TMP);
    fs::rename(&tmp, dir.join(CHECKPOINT_FILE)).map_err(|e| io_error("renaming", &tmp, e))
}

/// Makes the directory's entries (creations, renames, removals) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("syncing directory", dir, e))
}

/// An I/O error as a sink error naming the operation and path.
pub(crate) fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::sink(format!("{what} {} failed", path.display())).with_source(e)
}
