//! Starting the write-back of appended bytes early, so that a checkpoint's fsync finds
//! most of them on their way to the disk instead of writing them all while the sink waits.

use std::fs::File;

/// Asks the kernel to start writing `len` bytes of `file` from `offset` to the disk and
/// returns at once (Linux `sync_file_range` with `SYNC_FILE_RANGE_WRITE`). Durability is
/// unchanged: only the checkpoint's fsync makes bytes durable, and it reports any write
/// error. A failure here is therefore only logged. Elsewhere it does nothing.
pub(crate) fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: the descriptor is open for the lifetime of `file`; the call reads no
        // memory of ours.
        let rc = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "sync_file_range failed; the checkpoint's fsync writes the bytes instead");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}
