//! Fault injection: crashing the server and cutting replication connections.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::Cluster;
use super::child::{kill_tree, read_pid_file};

impl Cluster {
    /// Terminate every walsender (`pg_terminate_backend`) and wait until they are gone.
    /// Returns how many were terminated. Replication clients see their connection drop.
    pub async fn terminate_walsenders(&self) -> Result<usize> {
        let client = self.connect("postgres").await?;
        let rows = client
            .query(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE backend_type = 'walsender'",
                &[],
            )
            .await?;
        let mut pids = Vec::new();
        for row in rows {
            let pid: i32 = row.try_get(0)?;
            let terminated: bool = row.try_get(1)?;
            if terminated {
                pids.push(pid);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                    &[&pids],
                )
                .await?
                .try_get(0)?;
            if left == 0 {
                return Ok(pids.len());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "{left} terminated walsender(s) still running after 30 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    /// Crash the server: SIGKILL the postmaster (pid as in `postmaster.pid`) and all its
    /// children at once — no shutdown checkpoint, nothing flushed beyond what the server had
    /// already written — and wait until every one of them is gone. Data committed before
    /// (with `fsync = on` and `synchronous_commit = on`, the defaults) survives; the next
    /// [`Cluster::start`] performs crash recovery. Fails with [`Error::NotRunning`] if the
    /// server is not running.
    pub async fn kill9(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.reap_if_exited(&mut state);
        let Some(child) = state.child.take() else {
            return Err(Error::NotRunning);
        };
        if let Some(pid) = read_pid_file(&self.data_dir).map(|p| p.pid)
            && pid != child.id()
        {
            tracing::warn!(
                pid,
                child = child.id(),
                "postmaster.pid names another process"
            );
        }
        self.pid.store(0, Ordering::SeqCst);
        tokio::task::spawn_blocking(move || kill_tree(child))
            .await
            .map_err(|e| Error::io("kill -9", std::io::Error::other(e)))?;
        Ok(())
    }
}
