//! How the file sink reports a failed file operation.

use std::path::Path;

use cdc_core::Error;

/// An I/O error as a sink error naming the operation and path.
pub(crate) fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::sink(format!("{what} {} failed", path.display())).with_source(e)
}
