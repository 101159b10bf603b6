//! What a [`super::FelderaFileSink`] is configured with: the directory, the layout of the
//! data files, framing, encoding, and (for crash tests) where to simulate a crash.

use std::path::PathBuf;

use cdc_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::debezium::DebeziumOptions;
use crate::feldera::{EncoderOptions, Framing, TruncatePolicy};

/// How the data files are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileLayout {
    /// One file per table, e.g. `public.orders.json` (see [`super::table_file_name`]):
    /// each is what a Feldera file input for that table ingests. Default.
    #[default]
    PerTable,
    /// One file `changes.json` for every table; set [`EncoderOptions::table_key`] so a
    /// reader can tell the tables apart.
    Multiplexed,
}

/// Where a simulated crash happens inside a checkpoint (for crash tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// Data files fsynced; the checkpoint file not yet written.
    AfterDataSync,
    /// New checkpoint written to the temporary file and fsynced; not yet renamed.
    AfterTempWrite,
    /// Renamed; the directory not yet fsynced.
    AfterRename,
}

/// A simulated crash (for crash tests; never set it in production).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CrashInjection {
    /// Where.
    pub point: CrashPoint,
    /// `true`: abort the whole process there (`std::process::abort`), a real crash for
    /// tests that run the writer in a child process. `false`: fail the operation and
    /// refuse every later one, leaving the files as a crash would.
    pub abort_process: bool,
}

/// Options of [`super::FelderaFileSink`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileSinkOptions {
    /// The output directory (created if missing). It must be empty or hold this sink's
    /// earlier output.
    pub dir: PathBuf,
    /// One file per table (default) or one multiplexed file.
    pub layout: FileLayout,
    /// Newline-delimited (default) or arrays.
    pub framing: Framing,
    /// Encoding options and policies (Feldera JSON).
    pub encoder: EncoderOptions,
    /// Write Debezium records instead of Feldera JSON: one line each, in the order of the
    /// stream, in the multiplexed file (each record names its table in `destination`).
    pub debezium: Option<DebeziumOptions>,
    /// Simulated crash, for tests only.
    pub crash: Option<CrashInjection>,
}

impl FileSinkOptions {
    /// Defaults for `dir`: one file per table, newline-delimited, default (erroring)
    /// policies, no table key.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileSinkOptions {
            dir: dir.into(),
            layout: FileLayout::PerTable,
            framing: Framing::Lines,
            encoder: EncoderOptions::default(),
            debezium: None,
            crash: None,
        }
    }

    /// Checks that the options fit together: a TRUNCATE marker is not Feldera input, so
    /// it is only allowed in a multiplexed file; Debezium records go to the multiplexed
    /// file, one per line.
    pub fn validate(&self) -> Result<()> {
        if self.debezium.is_some()
            && (self.layout != FileLayout::Multiplexed || self.framing != Framing::Lines)
        {
            return Err(Error::config(
                "Debezium records go one per line into the multiplexed file (each names its table); use the multiplexed layout with newline-delimited framing",
            ));
        }
        if self.layout == FileLayout::PerTable
            && self.encoder.policies.truncate == TruncatePolicy::Marker
        {
            return Err(Error::config(
                "the truncate policy `marker` writes records Feldera rejects; use it only with the multiplexed layout (or choose `error` or `skip`)",
            ));
        }
        Ok(())
    }
}
