//! The synchronous heart of the file sink: recovery at open, appending batches, and the
//! checkpoint protocol. Runs on a blocking thread; the async sink only moves it there.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use cdc_core::{ChangeEvent, Error, EventKind, Position, ResumeToken, SnapshotMarker, TableName};

use super::names::{MULTIPLEXED_FILE, is_data_file_name, legacy_table, table_file_name};
use super::options::{CrashPoint, FileLayout, FileSinkOptions};
use super::state::{CHECKPOINT_TMP, CheckpointState, commit_temp, io_error, sync_dir, write_temp};
use crate::feldera::{FelderaEncoder, Frame, FrameSet, Framing};

/// One data file and the bytes pending for it.
#[derive(Debug)]
struct Output {
    file: File,
    path: PathBuf,
    /// Bytes handed to the OS (the file's length).
    len: u64,
    /// Whether bytes were written since the last fsync.
    dirty: bool,
    frame: Frame,
}

/// The data files, as a [`FrameSet`] for the encoder.
#[derive(Debug)]
struct Outputs {
    dir: PathBuf,
    layout: FileLayout,
    framing: Framing,
    files: BTreeMap<String, Output>,
    names: HashMap<TableName, String>,
    /// A data file was created since the directory was last synced.
    created: bool,
}

impl Outputs {
    fn open_output(&mut self, name: &str, len: u64) -> Result<&mut Output, Error> {
        if !self.files.contains_key(name) {
            let path = self.dir.join(name);
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| io_error("opening", &path, e))?;
            if len == 0 {
                self.created = true;
            }
            self.files.insert(
                name.to_owned(),
                Output {
                    file,
                    path,
                    len,
                    dirty: false,
                    frame: Frame::new(self.framing),
                },
            );
        }
        self.files
            .get_mut(name)
            .ok_or_else(|| Error::sink("internal: data file vanished"))
    }

    /// Current length of each file including bytes not yet written out.
    fn lengths_with_pending(&self) -> BTreeMap<String, u64> {
        self.files
            .iter()
            .map(|(n, o)| (n.clone(), o.len + o.frame.bytes().len() as u64))
            .collect()
    }

    /// Writes every frame's pending bytes to its file.
    fn write_out(&mut self) -> Result<(), Error> {
        for out in self.files.values_mut() {
            out.frame.end_batch();
            if out.frame.is_empty() {
                continue;
            }
            out.file
                .write_all(out.frame.bytes())
                .map_err(|e| io_error("writing", &out.path, e))?;
            out.len += out.frame.bytes().len() as u64;
            out.dirty = true;
            out.frame.clear();
        }
        Ok(())
    }

    fn discard_pending(&mut self) {
        for out in self.files.values_mut() {
            out.frame.reset();
        }
    }

    fn close_arrays(&mut self) {
        for out in self.files.values_mut() {
            out.frame.close_array();
        }
    }
}

impl FrameSet for Outputs {
    fn frame(&mut self, table: &TableName) -> Result<&mut Frame, Error> {
        let name = match self.layout {
            FileLayout::Multiplexed => MULTIPLEXED_FILE.to_owned(),
            FileLayout::PerTable => match self.names.get(table) {
                Some(n) => n.clone(),
                None => {
                    let n = table_file_name(table);
                    self.names.insert(table.clone(), n.clone());
                    n
                }
            },
        };
        Ok(&mut self.open_output(&name, 0)?.frame)
    }

    fn end_transaction(&mut self) {
        for out in self.files.values_mut() {
            out.frame.end_transaction();
        }
    }
}

/// Recovered, open state of a file sink directory.
#[derive(Debug)]
pub(crate) struct Core {
    options: FileSinkOptions,
    encoder: FelderaEncoder,
    outputs: Outputs,
    /// What the checkpoint file on disk says.
    durable: CheckpointState,
    applied_through: Option<Position>,
    snapshot_start: Option<BTreeMap<String, u64>>,
    /// Set when an I/O failure or an injected crash left the files in an unknown state.
    broken: bool,
    /// Replayed events skipped because their position was already applied.
    pub(crate) skipped: u64,
}

impl Core {
    /// Opens `options.dir`: creates it if needed, reads the checkpoint, truncates every
    /// data file back to its checkpointed length and removes data files created after it.
    pub(crate) fn open(options: FileSinkOptions) -> Result<(Core, Option<ResumeToken>), Error> {
        let dir = options.dir.clone();
        fs::create_dir_all(&dir).map_err(|e| io_error("creating directory", &dir, e))?;
        let _ = fs::remove_file(dir.join(CHECKPOINT_TMP));
        let durable = match CheckpointState::read(&dir)? {
            Some(state) => {
                if state.layout != options.layout || state.framing != options.framing {
                    return Err(Error::config(format!(
                        "{} was written with layout {:?} and framing {:?}, not {:?} and {:?}; use the same options or another directory",
                        dir.display(),
                        state.layout,
                        state.framing,
                        options.layout,
                        options.framing
                    )));
                }
                state
            }
            None => {
                if let Some(name) = data_files(&dir, options.layout)?.first() {
                    return Err(Error::config(format!(
                        "{} holds data file {name} but no checkpoint file; refusing to modify files this sink did not write (use an empty directory)",
                        dir.display()
                    )));
                }
                let state = CheckpointState::empty(options.layout, options.framing);
                write_temp(&dir, &state.to_json()?)?;
                commit_temp(&dir)?;
                sync_dir(&dir)?;
                state
            }
        };
        let mut outputs = Outputs {
            dir: dir.clone(),
            layout: options.layout,
            framing: options.framing,
            files: BTreeMap::new(),
            names: HashMap::new(),
            created: false,
        };
        for name in data_files(&dir, options.layout)? {
            if !durable.files.contains_key(&name) {
                let path = dir.join(&name);
                tracing::info!(file = %path.display(), "removing data file written after the last checkpoint");
                fs::remove_file(&path).map_err(|e| io_error("removing", &path, e))?;
            }
        }
        for (name, &len) in &durable.files {
            let path = dir.join(name);
            let actual = match fs::metadata(&path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => return Err(io_error("inspecting", &path, e)),
            };
            if actual < len {
                return Err(Error::sink(format!(
                    "data file {} is shorter ({actual} bytes) than its checkpoint says ({len} bytes): it was modified outside pgcdc and checkpointed data is lost; start over in an empty directory",
                    path.display()
                )));
            }
            let out = outputs.open_output(name, len)?;
            if actual > len {
                tracing::info!(file = %path.display(), dropped = actual - len, "truncating data written after the last checkpoint");
                out.file
                    .set_len(len)
                    .and_then(|()| out.file.sync_all())
                    .map_err(|e| io_error("truncating", &path, e))?;
            }
        }
        sync_dir(&dir)?;
        outputs.created = false;
        let token = durable.token.clone();
        let applied_through = durable
            .applied_through
            .max(token.as_ref().and_then(|t| t.position));
        let core = Core {
            encoder: FelderaEncoder::new(options.encoder),
            options,
            outputs,
            snapshot_start: durable.snapshot_start.clone(),
            durable,
            applied_through,
            broken: false,
            skipped: 0,
        };
        Ok((core, token))
    }

    pub(crate) fn encoder(&self) -> &FelderaEncoder {
        &self.encoder
    }

    fn check_usable(&self) -> Result<(), Error> {
        if self.broken {
            Err(Error::sink(
                "the file sink failed earlier and its files are in an unknown state; reopen it (recovery truncates to the last checkpoint)",
            ))
        } else {
            Ok(())
        }
    }

    /// Encodes the events not yet applied and appends them to the data files (handed to
    /// the OS, not yet durable). A batch that fails to encode writes nothing.
    pub(crate) fn write_batch(&mut self, events: &[ChangeEvent]) -> Result<(), Error> {
        self.check_usable()?;
        let mut applied = self.applied_through;
        for event in events {
            if applied.is_some_and(|p| event.position <= p) {
                self.skipped += 1;
                continue;
            }
            let result = match &event.kind {
                EventKind::Snapshot(SnapshotMarker::Started) => {
                    self.outputs.close_arrays();
                    self.snapshot_start = Some(self.outputs.lengths_with_pending());
                    Ok(())
                }
                EventKind::Snapshot(SnapshotMarker::Restarted) => self.restart_snapshot(),
                EventKind::Snapshot(SnapshotMarker::Completed { .. }) => {
                    self.snapshot_start = None;
                    Ok(())
                }
                _ => self.encoder.encode_event(event, &mut self.outputs),
            };
            if let Err(e) = result {
                self.outputs.discard_pending();
                return Err(e);
            }
            applied = Some(event.position);
        }
        if let Err(e) = self.outputs.write_out() {
            self.broken = true;
            return Err(e);
        }
        self.applied_through = applied;
        Ok(())
    }

    /// Discards every row written since the snapshot started: writes out pending bytes,
    /// truncates the files to their lengths at the snapshot start and records that at
    /// once, with the last durable token, so that a crash cannot resurrect them.
    fn restart_snapshot(&mut self) -> Result<(), Error> {
        let Some(start) = self.snapshot_start.clone() else {
            return Err(Error::sink(
                "the source restarted the initial snapshot, but this directory holds no record of where it started; start over in an empty directory",
            ));
        };
        self.outputs.close_arrays();
        if let Err(e) = self.outputs.write_out() {
            self.broken = true;
            return Err(e);
        }
        let mut files = self.durable.files.clone();
        for (name, out) in &mut self.outputs.files {
            let target = start.get(name).copied().unwrap_or(0);
            if target < out.len {
                tracing::info!(file = %out.path.display(), dropped = out.len - target, "snapshot restarted: discarding its rows");
                if let Err(e) = out.file.set_len(target).and_then(|()| out.file.sync_all()) {
                    self.broken = true;
                    return Err(io_error("truncating", &out.path, e));
                }
                out.len = target;
            }
            // Data before the snapshot start that no checkpoint covers yet stays
            // uncovered: the durable length never grows here.
            if let Some(len) = files.get_mut(name) {
                *len = (*len).min(target);
            }
        }
        let state = CheckpointState {
            files,
            snapshot_start: Some(start),
            ..self.durable.clone()
        };
        self.persist(state)
    }

    /// Makes everything written durable together with `token`: fsync of the data files,
    /// then the checkpoint file replaced atomically, then the directory synced.
    pub(crate) fn checkpoint(&mut self, token: &ResumeToken) -> Result<(), Error> {
        self.check_usable()?;
        if let Err(e) = self.outputs.write_out() {
            self.broken = true;
            return Err(e);
        }
        for out in self.outputs.files.values_mut() {
            if out.dirty {
                if let Err(e) = out.file.sync_data() {
                    self.broken = true;
                    return Err(io_error("syncing", &out.path, e));
                }
                out.dirty = false;
            }
        }
        if self.outputs.created {
            sync_dir(&self.outputs.dir)?;
            self.outputs.created = false;
        }
        self.crash_point(CrashPoint::AfterDataSync)?;
        let state = CheckpointState {
            token: Some(token.clone()),
            applied_through: self.applied_through,
            files: self
                .outputs
                .files
                .iter()
                .map(|(n, o)| (n.clone(), o.len))
                .collect(),
            snapshot_start: self.snapshot_start.clone(),
            ..self.durable.clone()
        };
        self.persist(state)
    }

    /// Writes `state` as the checkpoint file atomically.
    fn persist(&mut self, state: CheckpointState) -> Result<(), Error> {
        let dir = self.outputs.dir.clone();
        let bytes = state.to_json()?;
        let result = write_temp(&dir, &bytes)
            .and_then(|()| self.crash_point(CrashPoint::AfterTempWrite))
            .and_then(|()| commit_temp(&dir))
            .and_then(|()| self.crash_point(CrashPoint::AfterRename))
            .and_then(|()| sync_dir(&dir));
        if let Err(e) = result {
            self.broken = true;
            return Err(e);
        }
        self.durable = state;
        Ok(())
    }

    /// Simulates a crash at `point` when the options ask for it.
    fn crash_point(&mut self, point: CrashPoint) -> Result<(), Error> {
        let Some(injection) = self.options.crash else {
            return Ok(());
        };
        if injection.point != point {
            return Ok(());
        }
        if injection.abort_process {
            std::process::abort();
        }
        self.broken = true;
        Err(Error::sink(format!("injected crash at {point:?}")))
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.outputs.dir
    }
}

/// Names of the files in `dir` that look like this sink's data files (of this version or,
/// per table, an earlier one).
fn data_files(dir: &Path, layout: FileLayout) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_error("listing", dir, e))? {
        let entry = entry.map_err(|e| io_error("listing", dir, e))?;
        if let Some(name) = entry.file_name().to_str()
            && (is_data_file_name(name, layout)
                || (layout == FileLayout::PerTable && legacy_table(name).is_some()))
        {
            out.push(name.to_owned());
        }
    }
    out.sort();
    Ok(out)
}
