//! The kit's source: a history delivered in batches of drawn sizes, with a server that
//! remembers across runs what a replication slot does — how far it was confirmed (what
//! it can no longer send) and whether the snapshot completed — and behaves as `PgSource`
//! does at start: resumes after the token, takes an interrupted snapshot again after a
//! `Restarted` marker, refuses a token older than the slot.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::history::{History, Rng, SNAPSHOT_LSN};
use crate::{
    ChangeBatch, ChangeEvent, CommitMode, ConfirmHandle, Error, EventKind, Lsn, Position, Result,
    ResumeToken, SnapshotMarker, SnapshotProgress, Source, SourceIdentity,
};

/// What the simulated server keeps across runs.
#[derive(Debug, Default)]
pub(crate) struct Server {
    /// The slot's confirmed position.
    pub(crate) confirmed: Lsn,
    /// Snapshots taken so far (each copy's rows get positions after the last one's).
    snapshots: u64,
}

pub(crate) type SharedServer = Arc<Mutex<Server>>;

fn lock(server: &SharedServer) -> std::sync::MutexGuard<'_, Server> {
    server.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn identity() -> SourceIdentity {
    SourceIdentity {
        system_identifier: "7400000000000000001".into(),
        timeline: 1,
        database: "kit".into(),
        slot: "kit_slot".into(),
    }
}

/// One run's source.
pub(crate) struct KitSource {
    history: Arc<History>,
    server: SharedServer,
    commit_mode: CommitMode,
    rng: Rng,
    pending: VecDeque<ChangeEvent>,
    /// The snapshot's Completed marker, while it is still to be handed out.
    snapshot_ends_at: Option<Position>,
    covered_position: Option<Position>,
    covered_end: Option<Lsn>,
    confirm: ConfirmHandle,
}

impl KitSource {
    pub(crate) fn new(
        history: Arc<History>,
        server: SharedServer,
        commit_mode: CommitMode,
        seed: u64,
    ) -> Self {
        let observed = server.clone();
        let confirm = ConfirmHandle::with_observer(move |lsn, _idle| {
            let mut server = lock(&observed);
            server.confirmed = server.confirmed.max(lsn);
        });
        KitSource {
            history,
            server,
            commit_mode,
            rng: Rng::new(seed),
            pending: VecDeque::new(),
            snapshot_ends_at: None,
            covered_position: None,
            covered_end: None,
            confirm,
        }
    }

    /// Queues the snapshot (after a `Restarted` marker when `again`), with positions
    /// after every earlier copy's.
    fn queue_snapshot(&mut self, rows: &[(crate::SchemaRef, Vec<crate::Value>)], again: bool) {
        let base = {
            let mut server = lock(&self.server);
            server.snapshots += 1;
            server.snapshots * 1_000_000
        };
        let mut ordinal = base;
        let mut push = |kind: EventKind, pending: &mut VecDeque<ChangeEvent>| {
            pending.push_back(ChangeEvent {
                lsn: Lsn::ZERO,
                position: Position::new(SNAPSHOT_LSN, ordinal),
                kind,
            });
            ordinal += 1;
        };
        if again {
            push(
                EventKind::Snapshot(SnapshotMarker::Restarted),
                &mut self.pending,
            );
        }
        push(
            EventKind::Snapshot(SnapshotMarker::Started),
            &mut self.pending,
        );
        let mut current: Option<&crate::SchemaRef> = None;
        let mut count = 0u64;
        for (table, row) in rows {
            if current.is_none_or(|c| c.name != table.name) {
                if let Some(done) = current {
                    push(
                        EventKind::Snapshot(SnapshotMarker::TableCompleted {
                            table: done.name.clone(),
                            rows: count,
                        }),
                        &mut self.pending,
                    );
                }
                push(
                    EventKind::Snapshot(SnapshotMarker::TableStarted(table.name.clone())),
                    &mut self.pending,
                );
                current = Some(table);
                count = 0;
            }
            count += 1;
            push(
                EventKind::Insert {
                    table: table.clone(),
                    new: row.clone(),
                },
                &mut self.pending,
            );
        }
        if let Some(done) = current {
            push(
                EventKind::Snapshot(SnapshotMarker::TableCompleted {
                    table: done.name.clone(),
                    rows: count,
                }),
                &mut self.pending,
            );
        }
        push(
            EventKind::Snapshot(SnapshotMarker::Completed {
                consistent_point: SNAPSHOT_LSN,
            }),
            &mut self.pending,
        );
        self.snapshot_ends_at = self.pending.back().map(|e| e.position);
    }
}

#[async_trait]
impl Source for KitSource {
    async fn start(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn> {
        let confirmed = lock(&self.server).confirmed;
        let covered_end = resume.and_then(|t| t.commit_end).unwrap_or(Lsn::ZERO);
        if resume.is_some() && covered_end < confirmed {
            return Err(Error::resync_required(format!(
                "the slot is confirmed up to {confirmed}, but the token only covers changes up to {covered_end}: the changes between are gone from the server"
            )));
        }
        let history = self.history.clone();
        let mid_snapshot = resume.is_some_and(|t| t.snapshot.is_some());
        match (&history.snapshot, resume) {
            // A fresh start (also a sink that lost its token): a new slot and a new copy.
            (Some(rows), None) => self.queue_snapshot(rows, false),
            (Some(rows), Some(_)) if mid_snapshot => self.queue_snapshot(rows, true),
            _ => {}
        }
        let after = resume.and_then(|t| t.position).filter(|_| !mid_snapshot);
        for tx in &history.transactions {
            // Like a slot: what ends at or before the confirmed position is not sent again.
            if resume.is_some() && tx.end_lsn <= confirmed {
                continue;
            }
            for event in &tx.events {
                if after.is_none_or(|p| event.position > p) {
                    self.pending.push_back(event.clone());
                }
            }
        }
        self.covered_position = resume.and_then(|t| t.position);
        self.covered_end = resume.and_then(|t| t.commit_end);
        Ok(confirmed)
    }

    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        if self.pending.is_empty() {
            return Ok(None);
        }
        if self.rng.chance(20) {
            tokio::time::sleep(Duration::from_millis(self.rng.below(3))).await;
        }
        let largest = if self.rng.chance(20) { 400 } else { 40 };
        let size = 1 + self.rng.below(largest) as usize;
        let mut batch = ChangeBatch::new();
        while batch.len() < size {
            let Some(event) = self.pending.pop_front() else {
                break;
            };
            if let EventKind::Commit(commit) = &event.kind {
                batch.commit_end = Some(commit.end_lsn);
            }
            let completes_snapshot = self.snapshot_ends_at == Some(event.position);
            batch.push(event);
            if completes_snapshot {
                self.snapshot_ends_at = None;
                break;
            }
        }
        self.covered_position = self.covered_position.max(batch.last_position());
        self.covered_end = self.covered_end.max(batch.commit_end);
        Ok(Some(batch))
    }

    fn resume_token(&self, _batch: &ChangeBatch) -> ResumeToken {
        // Batches are handed out in order and the pipeline asks right after each one.
        let mut token = ResumeToken::new(identity(), self.covered_position);
        token.commit_end = self.covered_end;
        if self.snapshot_ends_at.is_some() {
            token.snapshot = Some(SnapshotProgress {
                consistent_point: SNAPSHOT_LSN,
                completed_tables: Vec::new(),
            });
        }
        token
    }

    fn confirm_handle(&self) -> ConfirmHandle {
        self.confirm.clone()
    }

    fn commit_mode(&self) -> CommitMode {
        self.commit_mode
    }
}
