//! Where the change assembler puts streamed transactions that outgrow their memory bound.
//!
//! The protocol crate does no I/O of its own, so the storage is the caller's choice: a
//! [`SpillStorage`] creates one private, append-then-read-back [`SpillFile`] per spilled
//! transaction. `cdc-postgres` gives `PgSource` anonymous temporary files; [`MemorySpill`]
//! keeps the bytes in memory (tests, or embedding without a filesystem — the memory bound
//! then only decides when bytes move into one contiguous buffer, not how many are held).

use std::fmt;
use std::io::{self, Cursor, Read, Seek, Write};
use std::sync::Arc;

/// A private byte store for one spilled transaction: written sequentially, cut back to an
/// earlier length when a subtransaction aborts, then read from the start. Dropping it must
/// release the storage.
pub trait SpillFile: Read + Write + Seek + Send + Sync + fmt::Debug {
    /// Cuts the store to its first `len` bytes (`len` is never beyond the end). The
    /// position is set by the caller afterwards.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

/// Creates [`SpillFile`]s. Shared by every transaction of an assembler.
pub trait SpillStorage: Send + Sync + fmt::Debug {
    /// A new, empty store. Errors are reported as the assembler's error for the message
    /// that needed the spill.
    fn create(&self) -> io::Result<Box<dyn SpillFile>>;
}

/// A shared handle to a [`SpillStorage`], as the assembler's configuration holds it.
pub type SharedSpillStorage = Arc<dyn SpillStorage>;

/// Keeps "spilled" bytes in memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemorySpill;

impl MemorySpill {
    /// A shared handle, ready for [`super::AssemblerConfig::spill`].
    pub fn shared() -> SharedSpillStorage {
        Arc::new(MemorySpill)
    }
}

impl SpillStorage for MemorySpill {
    fn create(&self) -> io::Result<Box<dyn SpillFile>> {
        Ok(Box::new(MemorySpillFile::default()))
    }
}

/// The store [`MemorySpill`] creates.
#[derive(Debug, Default)]
pub struct MemorySpillFile(Cursor<Vec<u8>>);

impl Read for MemorySpillFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for MemorySpillFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for MemorySpillFile {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.0.seek(pos)
    }
}

impl SpillFile for MemorySpillFile {
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length beyond memory"))?;
        self.0.get_mut().truncate(len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn memory_spill_file_truncates_and_reads_back() {
        let mut file = MemorySpill.create().unwrap();
        file.write_all(b"hello world").unwrap();
        file.truncate(5).unwrap();
        file.seek(io::SeekFrom::End(0)).unwrap();
        file.write_all(b"!").unwrap();
        file.seek(io::SeekFrom::Start(0)).unwrap();
        let mut back = String::new();
        file.read_to_string(&mut back).unwrap();
        assert_eq!(back, "hello!");
    }
}
