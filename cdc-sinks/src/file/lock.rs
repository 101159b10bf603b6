//! The lock that keeps a second writer out of an output directory.

use std::fs::{File, TryLockError};
use std::io::{Read, Write};
use std::path::Path;

use cdc_core::Error;

use super::io_error::io_error;
use super::no_follow::{self, Access};

/// Name of the lock file in the output directory. It holds the pid of the process whose
/// sink has the directory open; it stays in place when the sink closes.
pub const LOCK_FILE: &str = "pgcdc.lock";

/// An exclusive lock on [`LOCK_FILE`] (`flock(2)`), held until dropped. The lock belongs
/// to this open file, not to the process: a second [`DirLock::acquire`] on the same
/// directory fails even inside the same process, and the lock goes when this value is
/// dropped or the process dies, however it dies.
#[derive(Debug)]
pub(crate) struct DirLock {
    /// Kept open: closing it releases the lock.
    _file: File,
}

impl DirLock {
    /// Locks `dir` (which must exist) and writes this process's pid into the lock file.
    /// Fails with [`cdc_core::ErrorKind::Config`] naming the holder's pid when another
    /// sink has the directory open, or when the lock file is a link or not a regular file.
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, Error> {
        let path = dir.join(LOCK_FILE);
        // Opened, not created exclusively, and never removed: removing a lock file while
        // another process waits on it would let two processes lock two different files
        // under one name.
        let Some(mut file) = no_follow::open_regular(&path, Access::ReadWriteCreate)? else {
            return Err(Error::sink(format!(
                "{} vanished while it was being created",
                path.display()
            )));
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // Advisory lock: reading is allowed. The holder may not have written its
                // pid yet, in which case the file is empty.
                let holder = match (&mut file).take(64).read_to_string(&mut holder) {
                    Ok(_) if !holder.trim().is_empty() => holder.trim().to_owned(),
                    _ => "unknown".to_owned(),
                };
                let this_process = if holder == std::process::id().to_string() {
                    ", this very process"
                } else {
                    ""
                };
                return Err(Error::config(format!(
                    "{} is in use by another pgcdc sink (pid {holder}{this_process}, which holds the lock {}); two writers would corrupt it: stop the other one, or use another output directory",
                    dir.display(),
                    path.display()
                )));
            }
            Err(TryLockError::Error(e)) => return Err(io_error("locking", &path, e)),
        }
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|e| io_error("writing the pid into", &path, e))?;
        Ok(DirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::ErrorKind;

    use super::*;

    #[test]
    fn a_second_lock_fails_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap(),
            format!("{}\n", std::process::id())
        );
        let err = DirLock::acquire(dir.path()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.message()
                .contains(&format!("pid {}, this very process", std::process::id())),
            "{err}"
        );
        drop(first);
        let _again = DirLock::acquire(dir.path()).unwrap();
        assert!(dir.path().join(LOCK_FILE).exists());
    }

    #[test]
    fn a_symlink_at_the_lock_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join(LOCK_FILE)).unwrap();
        let err = DirLock::acquire(dir.path()).unwrap_err();
        assert!(err.message().contains("symbolic link"), "{err}");
        assert!(!target.exists());
    }
}
