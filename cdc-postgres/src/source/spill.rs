//! Spill storage for `PgSource`: anonymous temporary files.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::sync::Arc;

use cdc_pgoutput::changes::{SharedSpillStorage, SpillFile, SpillStorage};

/// Spills streamed transactions beyond the memory limit to anonymous temporary files in
/// the system's temporary directory (`TMPDIR`): unlinked at creation, so nothing is left
/// behind by a crash, and gone when the transaction is released.
#[derive(Clone, Copy, Debug, Default)]
pub struct TempFileSpill;

impl TempFileSpill {
    /// A shared handle, ready for [`cdc_pgoutput::changes::AssemblerConfig::spill`].
    pub fn shared() -> SharedSpillStorage {
        Arc::new(TempFileSpill)
    }
}

impl SpillStorage for TempFileSpill {
    fn create(&self) -> io::Result<Box<dyn SpillFile>> {
        let file = tempfile::tempfile().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot create a temporary file to spill a large streamed transaction \
                     (check TMPDIR and free space, or raise the stream memory limit): {e}"
                ),
            )
        })?;
        Ok(Box::new(TempSpillFile(file)))
    }
}

/// One anonymous temporary file.
#[derive(Debug)]
struct TempSpillFile(File);

impl Read for TempSpillFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TempSpillFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl Seek for TempSpillFile {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.0.seek(pos)
    }
}

impl SpillFile for TempSpillFile {
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}
