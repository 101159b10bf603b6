//! Opening files in the output directory without following symbolic links: a link (or a
//! FIFO, a directory, a device) planted at one of pgcdc's names is refused with an error
//! naming it, instead of redirecting pgcdc's writes or blocking the sink.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cdc_core::Error;

use super::io_error::io_error;

/// Flags of every open: `O_NOFOLLOW` makes an open of a symbolic link fail instead of
/// opening its target; `O_NONBLOCK` makes an open of a FIFO return at once instead of
/// waiting for a peer (the FIFO is then refused as not a regular file). `O_NONBLOCK` has
/// no effect on regular files, so it stays set.
const FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK;

/// How a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read only.
    Read,
    /// Append (data files).
    Append,
    /// Read and write at any position, created if missing (the lock file).
    ReadWriteCreate,
}

/// Opens the regular file at `path`. `Ok(None)`: nothing is there (and `access` does not
/// create). A symbolic link or a file that is not a regular file is an error
/// ([`cdc_core::ErrorKind::Config`]) and is left as it is.
pub(crate) fn open_regular(path: &Path, access: Access) -> Result<Option<File>, Error> {
    let mut options = OpenOptions::new();
    options.custom_flags(FLAGS);
    match access {
        Access::Read => {
            options.read(true);
        }
        Access::Append => {
            options.append(true);
        }
        Access::ReadWriteCreate => {
            options.read(true).write(true).create(true);
        }
    }
    match options.open(path) {
        Ok(file) => check_regular(path, file).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(refusal(path).unwrap_or_else(|| io_error("opening", path, e))),
    }
}

/// Creates the file at `path` for appending, exclusively: if anything is already there
/// (a file, a link, even a dangling one) this fails ([`cdc_core::ErrorKind::Config`])
/// and leaves it as it is.
pub(crate) fn create_new(path: &Path) -> Result<File, Error> {
    let created = OpenOptions::new()
        .append(true)
        .create_new(true)
        .custom_flags(FLAGS)
        .open(path);
    match created {
        Ok(file) => Ok(file),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(refusal(path)
            .unwrap_or_else(|| not_ours(path))
            .with_source(e)),
        Err(e) => Err(io_error("creating", path, e)),
    }
}

/// Succeeds when nothing is at `path`; otherwise the error [`create_new`] would fail with.
pub(crate) fn ensure_absent(path: &Path) -> Result<(), Error> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("inspecting", path, e)),
        Ok(_) => Err(refusal(path).unwrap_or_else(|| not_ours(path))),
    }
}

/// The error for a file pgcdc is about to create that someone else already made.
fn not_ours(path: &Path) -> Error {
    Error::config(format!(
        "{} already exists, but pgcdc did not create it (its checkpoint does not list it); pgcdc never writes into or removes files it did not create: move the file away, or use another output directory (a file an earlier pgcdc version created after its last checkpoint holds nothing checkpointed and may be deleted)",
        path.display()
    ))
}

/// `file` if it is a regular file, else the refusal for `path`.
fn check_regular(path: &Path, file: File) -> Result<File, Error> {
    let meta = file
        .metadata()
        .map_err(|e| io_error("inspecting", path, e))?;
    if meta.is_file() {
        Ok(file)
    } else {
        Err(not_regular(path, meta.file_type()))
    }
}

/// The refusal for what is at `path` when it is a symbolic link or not a regular file;
/// `None` when it is a regular file (or nothing, or cannot be inspected).
fn refusal(path: &Path) -> Option<Error> {
    let meta = fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        Some(Error::config(format!(
            "{} is a symbolic link; pgcdc does not follow links in its output directory (they could redirect its writes to any file): remove the link, or pass the real directory",
            path.display()
        )))
    } else if meta.is_file() {
        None
    } else {
        Some(not_regular(path, meta.file_type()))
    }
}

fn not_regular(path: &Path, file_type: fs::FileType) -> Error {
    Error::config(format!(
        "{} is not a regular file ({file_type:?}); pgcdc writes only regular files it created: remove it, or use another output directory",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use cdc_core::ErrorKind;

    use super::*;

    #[test]
    fn links_and_special_files_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "precious").unwrap();
        let link = dir.path().join("link");
        symlink(&target, &link).unwrap();
        for access in [Access::Read, Access::Append, Access::ReadWriteCreate] {
            let err = open_regular(&link, access).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config);
            assert!(err.message().contains("symbolic link"), "{err}");
        }
        let err = create_new(&link).unwrap_err();
        assert!(err.message().contains("symbolic link"), "{err}");
        let err = open_regular(dir.path(), Access::Read).unwrap_err();
        assert!(err.message().contains("not a regular file"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        for access in [Access::Read, Access::Append] {
            let err = open_regular(&fifo, access).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{err}");
            assert!(err.message().contains("not a regular file"), "{err}");
        }
    }

    #[test]
    fn create_new_refuses_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        create_new(&path).unwrap();
        assert!(ensure_absent(&path).is_err());
        let err = create_new(&path).unwrap_err();
        assert!(err.message().contains("did not create it"), "{err}");
        assert!(open_regular(&path, Access::Append).unwrap().is_some());
        assert!(
            open_regular(&dir.path().join("none"), Access::Read)
                .unwrap()
                .is_none()
        );
    }
}
