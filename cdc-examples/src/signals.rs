//! Ctrl-C and SIGTERM: the first one stops the pipeline gracefully (drain, final
//! checkpoint, final acknowledgement); a second one exits at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cdc_core::ShutdownHandle;
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;

use crate::cli::{CliError, EXIT_INTERRUPTED};

/// Watches for SIGINT and SIGTERM while a pipeline runs. Dropping it stops watching.
#[derive(Debug)]
pub(crate) struct Interrupts {
    requested: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Interrupts {
    /// Starts watching: the first signal calls `shutdown`, the second exits with
    /// [`EXIT_INTERRUPTED`].
    pub(crate) fn watch(shutdown: ShutdownHandle, quiet: bool) -> Result<Self, CliError> {
        let install =
            |kind| signal(kind).map_err(|e| CliError::other(format!("cannot handle signals: {e}")));
        let mut int = install(SignalKind::interrupt())?;
        let mut term = install(SignalKind::terminate())?;
        let requested = Arc::new(AtomicBool::new(false));
        let flag = requested.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            flag.store(true, Ordering::SeqCst);
            if !quiet {
                eprintln!(
                    "pgcdc: stopping: draining and taking a final checkpoint (interrupt again to stop at once)"
                );
            }
            shutdown.shutdown();
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            eprintln!(
                "pgcdc: stopped without a final checkpoint; a restart resumes from the previous one"
            );
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        });
        Ok(Interrupts { requested, task })
    }

    /// Whether a signal asked the pipeline to stop.
    pub(crate) fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        self.task.abort();
    }
}
