//! The checkpoint file stored next to the data files, file naming, and the fsync helpers.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use cdc_core::{Error, Position, ResumeToken, TableName};
use serde::{Deserialize, Serialize};

use super::options::FileLayout;
use crate::feldera::Framing;

/// Name of the checkpoint file in the output directory.
pub const CHECKPOINT_FILE: &str = "pgcdc-checkpoint.json";
/// Name of the temporary file the checkpoint is written to before the rename.
pub(crate) const CHECKPOINT_TMP: &str = "pgcdc-checkpoint.json.tmp";
/// Name of the data file of [`FileLayout::Multiplexed`].
pub const MULTIPLEXED_FILE: &str = "changes.json";

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

    /// Reads the checkpoint of `dir`, `None` when there is none.
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
        Ok(Some(state))
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

/// The data file name of `table` under [`FileLayout::PerTable`]:
/// `schema.name.json`, every byte outside `[A-Za-z0-9_-]` written as `%XX`.
pub fn table_file_name(table: &TableName) -> String {
    let mut out = String::with_capacity(table.schema.len() + table.name.len() + 6);
    escape_part(&mut out, &table.schema);
    out.push('.');
    escape_part(&mut out, &table.name);
    out.push_str(".json");
    out
}

fn escape_part(out: &mut String, part: &str) {
    for &b in part.as_bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 0xF)]));
        }
    }
}

/// Whether `name` is a data file this sink could have written under `layout`.
pub(crate) fn is_data_file_name(name: &str, layout: FileLayout) -> bool {
    match layout {
        FileLayout::Multiplexed => name == MULTIPLEXED_FILE,
        FileLayout::PerTable => {
            let Some(stem) = name.strip_suffix(".json") else {
                return false;
            };
            let parts: Vec<&str> = stem.split('.').collect();
            parts.len() == 2 && parts.iter().all(|p| is_escaped_part(p))
        }
    }
}

fn is_escaped_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |j: usize| {
                bytes
                    .get(j)
                    .is_some_and(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
            };
            if !(hex(i + 1) && hex(i + 2)) {
                return false;
            }
            i += 3;
        } else if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_file_names_are_escaped_and_recognized() {
        let name = table_file_name(&TableName::new("public", "orders"));
        assert_eq!(name, "public.orders.json");
        let odd = table_file_name(&TableName::new("My Schema", "a.b/c%"));
        assert_eq!(odd, "My%20Schema.a%2Eb%2Fc%25.json");
        assert!(is_data_file_name(&name, FileLayout::PerTable));
        assert!(is_data_file_name(&odd, FileLayout::PerTable));
        assert!(!is_data_file_name(CHECKPOINT_FILE, FileLayout::PerTable));
        assert!(!is_data_file_name(MULTIPLEXED_FILE, FileLayout::PerTable));
        assert!(!is_data_file_name("notes.txt", FileLayout::PerTable));
        assert!(is_data_file_name(MULTIPLEXED_FILE, FileLayout::Multiplexed));
        assert!(!is_data_file_name(&name, FileLayout::Multiplexed));
    }
}
