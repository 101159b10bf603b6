//! The synchronous heart of the file sink: recovery at open, appending batches, and the
//! checkpoint protocol. Runs on a blocking thread; the async sink only moves it there.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use cdc_core::{ChangeEvent, Error, EventKind, Position, ResumeToken, SnapshotMarker, TableName};

use super::io_error::io_error;
use super::lock::DirLock;
use super::names::{MULTIPLEXED_FILE, is_data_file_name, legacy_table, table_file_name};
use super::no_follow::{self, Access};
use super::options::{CrashInjection, CrashPoint, FileLayout, FileSinkOptions};
use super::records::Records;
use super::state::{CheckpointState, remove_stale_temp, replace_checkpoint, sync_dir};
use super::writeback::start_writeback;
use crate::feldera::{Frame, FrameSet, Framing, PolicyLog};

/// One data file and the bytes pending for it.
#[derive(Debug)]
struct Output {
    /// The file's name in the directory.
    name: String,
    /// `None` until the file is created: a table's first rows only reserve a frame, and
    /// [`Core::create_new_files`] creates the file once its name is recorded.
    file: Option<File>,
    path: PathBuf,
    /// Bytes handed to the OS (the file's length).
    len: u64,
    /// Whether bytes were written since the last fsync.
    dirty: bool,
    /// Where the bytes start whose write-back was neither started nor synced.
    writeback_from: u64,
    frame: Frame,
}

/// Bytes appended to one file before their write-back is started ahead of the next
/// checkpoint. Large enough that a slow stream does not write the same page to the disk
/// again for every batch (as PostgreSQL's `backend_flush_after` and RocksDB's
/// `bytes_per_sync` do); small against the bytes a busy 100 ms interval appends.
const WRITEBACK_AFTER: u64 = 1 << 20;

/// The data files, as a [`FrameSet`] for the encoder.
#[derive(Debug)]
struct Outputs {
    dir: PathBuf,
    layout: FileLayout,
    framing: Framing,
    /// In the order they were first written to; never removed from.
    files: Vec<Output>,
    /// Where each file's output is in `files`, by file name.
    by_name: HashMap<String, usize>,
    /// The file name of each table written to.
    names: HashMap<TableName, String>,
    /// The table of the last [`FrameSet::frame`] call and where its output is in
    /// `files`: consecutive events of one table find their output with one comparison of
    /// table names, not a look-up by name per event (2–3% of an `--out-dir` copy's CPU).
    last: Option<(TableName, usize)>,
    /// A data file was created since the directory was last synced.
    created: bool,
}

impl Outputs {
    /// The output `name`, added (with its file not yet created) if new.
    fn output(&mut self, name: &str) -> Result<&mut Output, Error> {
        let index = self.index_of(name);
        self.output_at(index)
    }

    /// Where the output `name` is in `files`, added (with its file not yet created) if
    /// new. The name is copied only when the output is new.
    fn index_of(&mut self, name: &str) -> usize {
        if let Some(&index) = self.by_name.get(name) {
            return index;
        }
        self.files.push(Output {
            name: name.to_owned(),
            file: None,
            path: self.dir.join(name),
            len: 0,
            dirty: false,
            writeback_from: 0,
            frame: Frame::new(self.framing),
        });
        let index = self.files.len() - 1;
        self.by_name.insert(name.to_owned(), index);
        index
    }

    fn output_at(&mut self, index: usize) -> Result<&mut Output, Error> {
        self.files
            .get_mut(index)
            .ok_or_else(|| Error::sink("internal: a data file's output is missing"))
    }

    /// Current length of each file including bytes not yet written out.
    fn lengths_with_pending(&self) -> BTreeMap<String, u64> {
        self.files
            .iter()
            .map(|o| (o.name.clone(), o.len + o.frame.bytes().len() as u64))
            .collect()
    }

    /// Each file's length handed to the OS.
    fn lengths(&self) -> BTreeMap<String, u64> {
        self.files.iter().map(|o| (o.name.clone(), o.len)).collect()
    }

    /// Writes every frame's pending bytes to its file.
    fn write_out(&mut self) -> Result<(), Error> {
        for out in &mut self.files {
            out.frame.end_batch();
            if out.frame.is_empty() {
                continue;
            }
            let file = out.file.as_mut().ok_or_else(|| {
                Error::sink(format!(
                    "internal: {} was written to before it was created",
                    out.path.display()
                ))
            })?;
            file.write_all(out.frame.bytes())
                .map_err(|e| io_error("writing", &out.path, e))?;
            out.len += out.frame.bytes().len() as u64;
            if out.len.saturating_sub(out.writeback_from) >= WRITEBACK_AFTER {
                start_writeback(file, out.writeback_from, out.len - out.writeback_from);
                out.writeback_from = out.len;
            }
            out.dirty = true;
            out.frame.clear();
        }
        Ok(())
    }

    fn discard_pending(&mut self) {
        for out in &mut self.files {
            out.frame.reset();
        }
    }

    fn close_arrays(&mut self) {
        for out in &mut self.files {
            out.frame.close_array();
        }
    }
}

impl FrameSet for Outputs {
    fn frame(&mut self, table: &TableName) -> Result<&mut Frame, Error> {
        let index = match &self.last {
            Some((last, index)) if last == table => *index,
            _ => {
                let index = match self.layout {
                    FileLayout::Multiplexed => self.index_of(MULTIPLEXED_FILE),
                    FileLayout::PerTable => {
                        let name = match self.names.get(table) {
                            Some(n) => n.clone(),
                            None => {
                                let n = table_file_name(table);
                                self.names.insert(table.clone(), n.clone());
                                n
                            }
                        };
                        self.index_of(&name)
                    }
                };
                self.last = Some((table.clone(), index));
                index
            }
        };
        Ok(&mut self.output_at(index)?.frame)
    }

    fn end_transaction(&mut self) {
        for out in &mut self.files {
            out.frame.end_transaction();
        }
    }
}

/// Recovered, open state of a file sink directory.
#[derive(Debug)]
pub(crate) struct Core {
    options: FileSinkOptions,
    records: Records,
    outputs: Outputs,
    /// What the checkpoint file on disk says.
    durable: CheckpointState,
    applied_through: Option<Position>,
    snapshot_start: Option<BTreeMap<String, u64>>,
    /// Set when an I/O failure or an injected crash left the files in an unknown state.
    broken: bool,
    /// Replayed events skipped because their position was already applied.
    pub(crate) skipped: u64,
    /// Keeps other writers out of the directory while this core exists.
    _lock: DirLock,
}

impl Core {
    /// Opens `options.dir`: creates it if needed, locks it, reads the checkpoint,
    /// truncates every data file back to its checkpointed length and removes the data
    /// files created after it (those the checkpoint records as pending, and only those).
    /// Touches no file pgcdc did not create: a foreign, linked or special file at one of
    /// its names, a checkpoint naming files pgcdc never writes, or a directory another
    /// sink holds is an error.
    pub(crate) fn open(
        options: FileSinkOptions,
        log: PolicyLog,
    ) -> Result<(Core, Option<ResumeToken>), Error> {
        let dir = options.dir.clone();
        fs::create_dir_all(&dir).map_err(|e| io_error("creating directory", &dir, e))?;
        let lock = DirLock::acquire(&dir)?;
        remove_stale_temp(&dir)?;
        let mut durable = match CheckpointState::read(&dir)? {
            Some(state) => {
                if state.debezium.is_some() != options.debezium.is_some() {
                    let (written, asked) = match options.debezium {
                        Some(_) => ("Feldera JSON", "Debezium records"),
                        None => ("Debezium records", "Feldera JSON"),
                    };
                    return Err(Error::config(format!(
                        "{} holds {written}, not {asked}; use the same format or another directory",
                        dir.display()
                    )));
                }
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
                let state = CheckpointState::empty(
                    options.layout,
                    options.framing,
                    Records::initial_state(&options),
                );
                replace_checkpoint(&dir, &state.to_json()?, |_| Ok(()))?;
                state
            }
        };
        let mut outputs = Outputs {
            dir: dir.clone(),
            layout: options.layout,
            framing: options.framing,
            files: Vec::new(),
            by_name: HashMap::new(),
            names: HashMap::new(),
            last: None,
            created: false,
        };
        // Created after the checkpoint: the name was recorded before the file was
        // created, so whatever is there is pgcdc's (a link is removed, not its target).
        for name in durable
            .pending
            .difference(&durable.files.keys().cloned().collect())
        {
            let path = dir.join(name);
            match fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(file = %path.display(), "removing data file created after the last checkpoint");
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("removing", &path, e)),
            }
        }
        for (name, &len) in &durable.files {
            let path = dir.join(name);
            let file = match no_follow::open_regular(&path, Access::Append)? {
                Some(file) => file,
                // An empty file whose creation no longer shows: nothing is lost.
                None if len == 0 => no_follow::create_new(&path)?,
                None => {
                    return Err(Error::sink(format!(
                        "data file {} is missing, though its checkpoint says it holds {len} bytes: it was removed outside pgcdc and checkpointed data is lost; start over in an empty directory",
                        path.display()
                    )));
                }
            };
            let actual = file
                .metadata()
                .map_err(|e| io_error("inspecting", &path, e))?
                .len();
            if actual < len {
                return Err(Error::sink(format!(
                    "data file {} is shorter ({actual} bytes) than its checkpoint says ({len} bytes): it was modified outside pgcdc and checkpointed data is lost; start over in an empty directory",
                    path.display()
                )));
            }
            if actual > len {
                tracing::info!(file = %path.display(), dropped = actual - len, "truncating data written after the last checkpoint");
                file.set_len(len)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io_error("truncating", &path, e))?;
            }
            let out = outputs.output(name)?;
            out.file = Some(file);
            out.len = len;
            out.writeback_from = len;
        }
        sync_dir(&dir)?;
        if !durable.pending.is_empty() {
            // Their files are gone (durably: the directory is synced), so the names no
            // longer need recording; a stale record could later remove a file someone
            // else made under that name.
            let state = CheckpointState {
                pending: BTreeSet::new(),
                ..durable.clone()
            };
            replace_checkpoint(&dir, &state.to_json()?, |_| Ok(()))?;
            durable = state;
        }
        let token = durable.token.clone();
        let applied_through = durable
            .applied_through
            .max(token.as_ref().and_then(|t| t.position));
        let core = Core {
            records: Records::new(&options, log, durable.debezium.clone()),
            options,
            outputs,
            snapshot_start: durable.snapshot_start.clone(),
            durable,
            applied_through,
            broken: false,
            skipped: 0,
            _lock: lock,
        };
        Ok((core, token))
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
                    self.records.marker(event, &mut self.outputs)
                }
                EventKind::Snapshot(SnapshotMarker::Restarted) => self
                    .restart_snapshot()
                    .and_then(|()| self.records.marker(event, &mut self.outputs)),
                EventKind::Snapshot(SnapshotMarker::Completed { .. }) => {
                    self.snapshot_start = None;
                    self.records.marker(event, &mut self.outputs)
                }
                _ => self.records.encode(event, &mut self.outputs),
            };
            if let Err(e) = result {
                self.outputs.discard_pending();
                return Err(e);
            }
            applied = Some(event.position);
        }
        if let Err(e) = self.records.end_batch(&mut self.outputs) {
            self.outputs.discard_pending();
            return Err(e);
        }
        self.write_out()?;
        self.applied_through = applied;
        Ok(())
    }

    /// Creates the files of new outputs, then writes every frame's pending bytes to its
    /// file. A failure leaves the sink broken.
    fn write_out(&mut self) -> Result<(), Error> {
        let result = self
            .create_new_files()
            .and_then(|()| self.outputs.write_out());
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// Creates the files of outputs that have none yet. Each name is first checked to be
    /// free and recorded as pending in the checkpoint file (durably), and only then is the
    /// file created, exclusively: recovery may remove every pending file, so it must never
    /// be one pgcdc did not create. Nothing already at the name is touched.
    fn create_new_files(&mut self) -> Result<(), Error> {
        let new: Vec<String> = self
            .outputs
            .files
            .iter()
            .filter(|out| out.file.is_none())
            .map(|out| out.name.clone())
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        for name in &new {
            no_follow::ensure_absent(&self.outputs.dir.join(name))?;
        }
        if !new.iter().all(|n| self.durable.pending.contains(n)) {
            let mut pending = self.durable.pending.clone();
            pending.extend(new.iter().cloned());
            let state = CheckpointState {
                pending,
                ..self.durable.clone()
            };
            // Not a checkpoint: the crash points of checkpoints are not simulated here.
            self.persist(state, false)?;
        }
        for name in new {
            let path = self.outputs.dir.join(&name);
            match no_follow::create_new(&path) {
                Ok(file) => {
                    self.outputs.output(&name)?.file = Some(file);
                    self.outputs.created = true;
                }
                Err(e) => {
                    // No file was created, or something appeared at the name since the
                    // check, which is not ours: withdraw the record that would let
                    // recovery remove whatever is there.
                    let mut pending = self.durable.pending.clone();
                    pending.remove(&name);
                    let state = CheckpointState {
                        pending,
                        ..self.durable.clone()
                    };
                    if let Err(undo) = self.persist(state, false) {
                        tracing::error!(file = %path.display(), error = %undo, "could not withdraw the pending record of a file pgcdc did not create; recovery may remove it");
                    }
                    return Err(e);
                }
            }
        }
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
        self.write_out()?;
        let mut files = self.durable.files.clone();
        for out in &mut self.outputs.files {
            let target = start.get(&out.name).copied().unwrap_or(0);
            if target < out.len
                && let Some(file) = &out.file
            {
                tracing::info!(file = %out.path.display(), dropped = out.len - target, "snapshot restarted: discarding its rows");
                if let Err(e) = file.set_len(target).and_then(|()| file.sync_all()) {
                    self.broken = true;
                    return Err(io_error("truncating", &out.path, e));
                }
                out.len = target;
                out.writeback_from = out.writeback_from.min(target);
            }
            // Data before the snapshot start that no checkpoint covers yet stays
            // uncovered: the durable length never grows here.
            if let Some(len) = files.get_mut(&out.name) {
                *len = (*len).min(target);
            }
        }
        let state = CheckpointState {
            files,
            snapshot_start: Some(start),
            ..self.durable.clone()
        };
        self.persist(state, true)
    }

    /// Makes everything written durable together with `token`: fsync of the data files,
    /// then the checkpoint file replaced atomically, then the directory synced.
    pub(crate) fn checkpoint(&mut self, token: &ResumeToken) -> Result<(), Error> {
        self.check_usable()?;
        self.write_out()?;
        for out in &mut self.outputs.files {
            if out.dirty
                && let Some(file) = &out.file
            {
                if let Err(e) = file.sync_data() {
                    self.broken = true;
                    return Err(io_error("syncing", &out.path, e));
                }
                out.dirty = false;
                out.writeback_from = out.len;
            }
        }
        if self.outputs.created {
            if let Err(e) = sync_dir(&self.outputs.dir) {
                self.broken = true;
                return Err(e);
            }
            self.outputs.created = false;
        }
        self.crash_point(CrashPoint::AfterDataSync)?;
        let files = self.outputs.lengths();
        // Every file created so far is listed now, so its pending record can go.
        let pending = self
            .durable
            .pending
            .iter()
            .filter(|n| !files.contains_key(*n))
            .cloned()
            .collect();
        let state = CheckpointState {
            token: Some(token.clone()),
            applied_through: self.applied_through,
            files,
            snapshot_start: self.snapshot_start.clone(),
            pending,
            debezium: self.records.state(),
            ..self.durable.clone()
        };
        self.persist(state, true)
    }

    /// Writes `state` as the checkpoint file atomically; with `crash_points`, simulates
    /// the crashes the options ask for inside it.
    fn persist(&mut self, state: CheckpointState, crash_points: bool) -> Result<(), Error> {
        let dir = self.outputs.dir.clone();
        let bytes = state.to_json()?;
        let crash = self.options.crash.filter(|_| crash_points);
        let result = replace_checkpoint(&dir, &bytes, |point| simulate_crash(crash, point));
        if let Err(e) = result {
            self.broken = true;
            return Err(e);
        }
        self.durable = state;
        Ok(())
    }

    /// Simulates a crash at `point` when the options ask for it.
    fn crash_point(&mut self, point: CrashPoint) -> Result<(), Error> {
        let result = simulate_crash(self.options.crash, point);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.outputs.dir
    }
}

/// Fails (or, for a test that asks for a real crash, aborts the process) when `crash`
/// is set for `point`.
fn simulate_crash(crash: Option<CrashInjection>, point: CrashPoint) -> Result<(), Error> {
    match crash {
        Some(injection) if injection.point == point => {
            if injection.abort_process {
                std::process::abort();
            }
            Err(Error::sink(format!("injected crash at {point:?}")))
        }
        _ => Ok(()),
    }
}

/// Names of the files in `dir` that look like this sink's data files (of this version or,
/// per table, an earlier one). Only read, to refuse a directory without a checkpoint.
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
