//! Property test of the pipeline's gating over a scripted source and sink: random batch
//! sizes, random completion and checkpoint timings, random crashes. The position confirmed
//! to the source never exceeds the acknowledged watermark of the commit mode, never moves
//! backwards, is always a transaction end; after crashes and restarts a token-atomic sink
//! holds every event exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cdc_core::{
    Ack, Acknowledger, ChangeBatch, ChangeEvent, CommitMode, ConfirmHandle, EventKind, Lsn,
    Pipeline, PipelineConfig, Position, Result, ResumeToken, Sink, SinkBatch, Source,
    SourceIdentity, TxBegin, TxCommit,
};
use proptest::prelude::*;

/// A transaction of the scripted stream: `size` data events between Begin and Commit.
#[derive(Clone, Debug)]
struct Tx {
    commit_lsn: Lsn,
    end_lsn: Lsn,
    size: usize,
    /// A transaction of a table that is not configured: only progress reaches the pipeline.
    filtered: bool,
}

enum Item {
    Event(ChangeEvent),
    Progress(Lsn),
}

fn events_of(tx: &Tx) -> Vec<ChangeEvent> {
    let mut out = vec![ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: Position::new(tx.commit_lsn, 0),
        kind: EventKind::Begin(TxBegin {
            final_lsn: tx.commit_lsn,
            commit_time_micros: 0,
            xid: 1,
        }),
    }];
    for i in 0..tx.size {
        out.push(ChangeEvent {
            lsn: cdc_core::Lsn::ZERO,
            position: Position::new(tx.commit_lsn, 1 + i as u64),
            kind: EventKind::Message {
                transactional: true,
                prefix: "p".into(),
                content: bytes::Bytes::new(),
            },
        });
    }
    out.push(ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: Position::new(tx.commit_lsn, 1 + tx.size as u64),
        kind: EventKind::Commit(TxCommit {
            commit_lsn: tx.commit_lsn,
            end_lsn: tx.end_lsn,
            commit_time_micros: 0,
        }),
    });
    out
}

/// What the "server" remembers across restarts: the slot's confirmed position, and every
/// confirmation ever made (checked against the sink's acknowledgements at that moment).
#[derive(Default)]
struct Slot {
    confirmed: Lsn,
    violations: Vec<String>,
}

struct ScriptedSource {
    txs: Arc<Vec<Tx>>,
    slot: Arc<Mutex<Slot>>,
    pending: std::collections::VecDeque<Item>,
    batch_sizes: Vec<usize>,
    batch_no: usize,
    confirm: ConfirmHandle,
    /// Cumulative: what the batches handed out so far cover.
    covered_position: Option<Position>,
    covered_end: Option<Lsn>,
    /// The acknowledgement the pipeline must follow (the source's setting).
    commit_mode: CommitMode,
}

#[async_trait]
impl Source for ScriptedSource {
    async fn start(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn> {
        // Tokens from this run cover at least what the resume token covered.
        self.covered_position = resume.and_then(|t| t.position);
        self.covered_end = resume.and_then(|t| t.commit_end);
        // Like a replication slot: replay every transaction ending after the confirmed LSN.
        let confirmed = self.slot.lock().unwrap().confirmed;
        self.pending = self
            .txs
            .iter()
            .filter(|t| t.end_lsn > confirmed)
            .flat_map(|t| {
                if t.filtered {
                    vec![Item::Progress(t.end_lsn)]
                } else {
                    events_of(t).into_iter().map(Item::Event).collect()
                }
            })
            .collect();
        Ok(confirmed)
    }

    fn commit_mode(&self) -> CommitMode {
        self.commit_mode
    }

    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        tokio::time::sleep(Duration::from_millis(3)).await;
        let n = self.batch_sizes[self.batch_no % self.batch_sizes.len()];
        self.batch_no += 1;
        let mut batch = ChangeBatch::new();
        if let Some(Item::Progress(end)) = self.pending.front() {
            batch.commit_end = Some(*end);
            self.pending.pop_front();
        } else {
            while batch.len() < n {
                match self.pending.front() {
                    Some(Item::Event(_)) => {
                        if let Some(Item::Event(e)) = self.pending.pop_front() {
                            batch.push(e);
                        }
                    }
                    _ => break,
                }
            }
            if batch.is_empty() {
                return Ok(None);
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
        token
    }

    fn confirm_handle(&self) -> ConfirmHandle {
        self.confirm.clone()
    }
}

/// Checks one confirmation against the sink's acknowledgements at that moment.
fn check_confirmation(
    lsn: Lsn,
    txs: &[Tx],
    slot: &Mutex<Slot>,
    sink_state: &Mutex<SinkState>,
    mode: CommitMode,
) {
    let mut slot = slot.lock().unwrap();
    if lsn < slot.confirmed {
        let message = format!("confirmed moved backwards {} -> {lsn}", slot.confirmed);
        slot.violations.push(message);
    }
    if lsn > slot.confirmed {
        let Some(tx) = txs.iter().find(|t| t.end_lsn == lsn) else {
            slot.violations
                .push(format!("confirmed {lsn} is not a transaction end"));
            return;
        };
        let commit_pos = Position::new(tx.commit_lsn, 1 + tx.size as u64);
        let sink = sink_state.lock().unwrap();
        match mode {
            CommitMode::Checkpoint => {
                // The slot never passes what the sink's durable token covers.
                let durable_end = sink.durable_token.as_ref().and_then(|t| t.commit_end);
                if durable_end.is_none_or(|end| end < lsn) {
                    slot.violations.push(format!(
                        "confirmed {lsn} beyond durable token end {durable_end:?}"
                    ));
                }
            }
            CommitMode::Completion if !tx.filtered => {
                let acked = sink.completed_position;
                if acked.is_none_or(|p| p < commit_pos) {
                    slot.violations
                        .push(format!("confirmed {lsn} beyond completed {acked:?}"));
                }
            }
            CommitMode::Completion => {}
        }
        slot.confirmed = lsn;
    }
}

fn identity() -> SourceIdentity {
    SourceIdentity {
        system_identifier: "1".into(),
        timeline: 1,
        database: "db".into(),
        slot: "s".into(),
    }
}

/// Sink state shared with the test (it survives "crashes"): a durable log + token and a
/// volatile tail.
#[derive(Default)]
struct SinkState {
    durable_log: Vec<Position>,
    durable_token: Option<ResumeToken>,
    volatile_log: Vec<Position>,
    /// Everything ever written, never dropped: what a stateless sink has emitted.
    emitted: Vec<Position>,
    durable_position: Option<Position>,
    completed_position: Option<Position>,
}

struct ScriptedSink {
    state: Arc<Mutex<SinkState>>,
    acks: Option<Acknowledger>,
    /// Whether to keep the Acknowledger (a sink acknowledging only by return value may
    /// drop it).
    keep_acks: bool,
    /// Per call: 0 = acknowledge now, n = acknowledge after n ms from a spawned task.
    delays: Vec<u64>,
    call: usize,
}

impl ScriptedSink {
    fn next_delay(&mut self) -> u64 {
        let d = self.delays[self.call % self.delays.len()];
        self.call += 1;
        d
    }
}

#[async_trait]
impl Sink for ScriptedSink {
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        if self.keep_acks {
            self.acks = Some(acks);
        }
        let mut s = self.state.lock().unwrap();
        s.volatile_log.clear();
        s.completed_position = s.durable_position;
        Ok(s.durable_token.clone())
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        let last = batch.batch.last_position();
        self.state
            .lock()
            .unwrap()
            .volatile_log
            .extend(batch.batch.events.iter().map(|e| e.position));
        self.state
            .lock()
            .unwrap()
            .emitted
            .extend(batch.batch.events.iter().map(|e| e.position));
        let delay = self.next_delay();
        let state = self.state.clone();
        let complete = move || state.lock().unwrap().completed_position = last;
        if delay == 0 {
            complete();
            return Ok(Ack::Done);
        }
        let acks = self.acks.clone().unwrap();
        let id = batch.id;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            complete();
            acks.completed(id);
        });
        Ok(Ack::Pending)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        let delay = self.next_delay();
        let state = self.state.clone();
        let token = token.clone();
        let make_durable = move |token: &ResumeToken| {
            let mut s = state.lock().unwrap();
            // Atomically: everything written up to the token's position plus the token.
            let upto = token.position;
            let newer = s
                .durable_token
                .as_ref()
                .is_none_or(|t| (t.position, t.commit_end) < (token.position, token.commit_end));
            if !newer {
                // An older checkpoint finishing after a newer one changes nothing.
                return;
            }
            let moved: Vec<Position> = s
                .volatile_log
                .iter()
                .copied()
                .filter(|p| Some(*p) <= upto)
                .collect();
            s.volatile_log.retain(|p| Some(*p) > upto);
            s.durable_log.extend(moved);
            s.durable_token = Some(token.clone());
            s.durable_position = upto;
            s.completed_position = s.completed_position.max(upto);
        };
        if delay == 0 {
            make_durable(&token);
            return Ok(Ack::Done);
        }
        let acks = self.acks.clone().unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            make_durable(&token);
            acks.durable(token);
        });
        Ok(Ack::Pending)
    }
}

/// Transactions (size, filtered), batch sizes, ack delays, crash times, completion mode.
type Scenario = (Vec<(usize, bool)>, Vec<usize>, Vec<u64>, Vec<u64>, bool);

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec((0usize..6, prop::bool::weighted(0.3)), 1..25),
        prop::collection::vec(1usize..9, 1..6),
        prop::collection::vec(prop_oneof![Just(0u64), 1u64..40], 1..8),
        prop::collection::vec(5u64..200, 0..4),
        any::<bool>(),
    )
}

fn run_scenario(
    tx_sizes: Vec<(usize, bool)>,
    batch_sizes: Vec<usize>,
    delays: Vec<u64>,
    crash_after_ms: Vec<u64>,
    completion: bool,
) -> std::result::Result<(), TestCaseError> {
    run_scenario_with(
        tx_sizes,
        batch_sizes,
        delays,
        crash_after_ms,
        completion,
        true,
        Duration::from_millis(20),
    )
}

fn run_scenario_with(
    tx_sizes: Vec<(usize, bool)>,
    batch_sizes: Vec<usize>,
    delays: Vec<u64>,
    crash_after_ms: Vec<u64>,
    completion: bool,
    keep_acks: bool,
    checkpoint_interval: Duration,
) -> std::result::Result<(), TestCaseError> {
    let mode = if completion {
        CommitMode::Completion
    } else {
        CommitMode::Checkpoint
    };
    let mut lsn = 100u64;
    let txs: Arc<Vec<Tx>> = Arc::new(
        tx_sizes
            .iter()
            .map(|&(size, filtered)| {
                lsn += 10;
                Tx {
                    commit_lsn: Lsn(lsn),
                    end_lsn: Lsn(lsn + 8),
                    size,
                    filtered,
                }
            })
            .collect(),
    );
    let slot = Arc::new(Mutex::new(Slot::default()));
    let sink_state = Arc::new(Mutex::new(SinkState::default()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let config = PipelineConfig::default()
        .with_checkpoint_interval(checkpoint_interval)
        .with_max_in_flight(4096, 4);
    runtime.block_on(async {
        let make = || {
            let confirm = {
                let (txs, slot, sink_state) = (txs.clone(), slot.clone(), sink_state.clone());
                ConfirmHandle::with_observer(move |lsn, _idle| {
                    check_confirmation(lsn, &txs, &slot, &sink_state, mode)
                })
            };
            let source = ScriptedSource {
                txs: txs.clone(),
                slot: slot.clone(),
                confirm,
                pending: Default::default(),
                batch_sizes: batch_sizes.clone(),
                batch_no: 0,
                covered_position: None,
                covered_end: None,
                commit_mode: mode,
            };
            let sink = ScriptedSink {
                state: sink_state.clone(),
                acks: None,
                keep_acks,
                delays: delays.clone(),
                call: 0,
            };
            Pipeline::new(source, sink, config.clone())
        };
        for crash in &crash_after_ms {
            // A crash: the run future is dropped mid-flight.
            let _ = tokio::time::timeout(Duration::from_millis(*crash), make().run()).await;
            // Let orphaned acknowledgement tasks finish (or not) — they may still report
            // durability of what they were handed, which a real sink could do too.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Virtual time: a pipeline that waits forever times out at once instead of hanging.
        let summary = tokio::time::timeout(Duration::from_secs(3600), make().run())
            .await
            .expect("the final run never finished")
            .unwrap();
        assert_eq!(summary.end, cdc_core::RunEnd::SourceEnded);
    });

    let slot = slot.lock().unwrap();
    prop_assert!(slot.violations.is_empty(), "{:?}", slot.violations);
    let sink = sink_state.lock().unwrap();
    let expected: Vec<Position> = txs
        .iter()
        .filter(|t| !t.filtered)
        .flat_map(events_of)
        .map(|e| e.position)
        .collect();
    if mode == CommitMode::Checkpoint {
        // Token-atomic sink: every event exactly once, in order.
        prop_assert_eq!(&sink.durable_log, &expected);
    } else {
        // At least once for a stateless sink: nothing emitted is lost, duplicates allowed.
        // (A stateful sink's volatile window can be lost in this mode, by design.)
        let mut seen: BTreeMap<Position, usize> = BTreeMap::new();
        for p in sink.emitted.iter() {
            *seen.entry(*p).or_default() += 1;
        }
        for p in &expected {
            prop_assert!(seen.contains_key(p), "lost {p}");
        }
    }
    if let Some(last) = txs.last() {
        prop_assert_eq!(slot.confirmed, last.end_lsn);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn confirmed_position_never_exceeds_acknowledged_and_crashes_lose_nothing(
        (tx_sizes, batch_sizes, delays, crashes, completion) in scenario()
    ) {
        run_scenario(tx_sizes, batch_sizes, delays, crashes, completion)?;
    }
}

#[test]
fn a_zero_checkpoint_interval_checkpoints_every_millisecond_instead_of_panicking() {
    let txs = (0..20).map(|i| (1 + i % 4, i % 3 != 0)).collect();
    run_scenario_with(txs, vec![3], vec![0], vec![], false, true, Duration::ZERO).unwrap();
}

#[test]
fn empty_stream_ends_cleanly() {
    run_scenario(vec![], vec![3], vec![0], vec![], false).unwrap();
}

#[test]
fn only_unconfigured_traffic_still_advances_the_slot() {
    run_scenario(
        vec![(2, true), (0, true), (3, true)],
        vec![3],
        vec![0, 9],
        vec![25],
        false,
    )
    .unwrap();
}

#[test]
fn asynchronous_acknowledgements_with_crashes() {
    run_scenario(
        [3, 0, 5, 1, 2, 4].map(|n| (n, n == 1)).to_vec(),
        vec![2, 5],
        vec![0, 30, 7],
        vec![15, 60],
        false,
    )
    .unwrap();
}

#[test]
fn a_sink_that_drops_its_acknowledger_still_streams() {
    // Every write and checkpoint acknowledged by return value; the dropped Acknowledger
    // must not stall (or spin) the pipeline.
    let txs = [4, 2, 0, 7].map(|n| (n, false)).to_vec();
    run_scenario_with(
        txs,
        vec![3],
        vec![0],
        vec![],
        false,
        false,
        Duration::from_millis(20),
    )
    .unwrap();
}

#[test]
fn restart_after_unconfigured_traffic_keeps_token_and_slot_in_agreement() {
    // Found by the property test: tokens after a restart must cover what the resume
    // token covered, or a newer checkpoint looks older than the stored one.
    let txs = vec![
        (1, false),
        (0, false),
        (0, true),
        (3, false),
        (0, true),
        (0, false),
        (0, true),
        (0, false),
        (0, true),
        (4, false),
        (1, false),
        (0, true),
    ];
    run_scenario(txs, vec![3], vec![0], vec![40], false).unwrap();
}

#[test]
fn drain_with_pending_checkpoints_after_a_crash_finishes() {
    // Found by the property test: the final run hung in drain.
    let txs = vec![
        (3, false),
        (1, false),
        (4, false),
        (0, false),
        (4, false),
        (0, true),
        (1, false),
        (5, false),
        (1, false),
        (0, true),
        (0, true),
        (5, false),
        (0, true),
        (0, false),
        (2, false),
        (1, false),
        (5, false),
        (0, true),
    ];
    run_scenario(txs, vec![3], vec![0, 5, 21], vec![85], false).unwrap();
}
