//! The CopyBoth stream of `START_REPLICATION`, run by a background task.
//!
//! The task owns the socket. It reads in large chunks (everything available, up to the
//! read buffer's size; under heavy traffic on plain TCP it wakes only once 256 KiB are
//! queued, see the `read_batching` module), splits CopyData frames without copying, decodes them with
//! [`cdc_pgoutput::protocol::replication`], and hands each chunk's messages to the consumer over
//! a bounded channel. When the channel is full it stops reading — backpressure reaches the
//! server through TCP — but keeps sending standby status updates on its timer, so the
//! server's `wal_sender_timeout` never fires because the consumer is slow. A keepalive
//! that requests a reply is answered as soon as it is read.
//!
//! When an update is due and what it says is decided by a sans-IO
//! [`StatusSchedule`] (tested with a fake clock); the task only feeds it what it reads
//! and the owner's flush position, sleeps until its timeout, and sends what it returns.
//!
//! A server that says nothing for too long is presumed dead (a network partition or a
//! frozen host is otherwise noticed only after many minutes of TCP retransmissions): the
//! sans-IO [`ReceiveDeadline`] says when to probe it with an update that requests a reply
//! and when to give up, and the task ends the stream with a Transient error, so the owner
//! reconnects (see [`StreamOptions::receive_timeout`]).
//!
//! The flush position in status updates is only ever what the owner set with
//! [`ReplicationStream::set_flushed`] (until then `0/0`, which the server ignores): the
//! slot never advances past what the sink acknowledged.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use cdc_core::{Error, Lsn, Result};
use futures::FutureExt;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::error::{Activity, io_error, server_error, server_error_from_fields};
use super::frame::{self, Phase};
use super::framing::{NoticeRun, decode, drain_until_closed};
use super::read_batching::{Polled, ReadBatching};
pub use super::stream_options::StreamOptions;
use super::transport::Socket;
use cdc_pgoutput::protocol::receive_deadline::ReceiveDeadline;
use cdc_pgoutput::protocol::replication::{ClientMessage, ServerMessage, StandbyStatusUpdate};
use cdc_pgoutput::protocol::status_schedule::{StatusConfig, StatusSchedule};
use cdc_pgoutput::protocol::timestamp::pg_timestamp_now;

/// State shared between the owner and the task.
#[derive(Debug, Default)]
struct Shared {
    /// The owner's flush position (raw LSN); only increases.
    flushed: AtomicU64,
    /// Highest `wal_start` of an XLogData read from the socket.
    received: AtomicU64,
    /// Status updates sent so far.
    status_updates: AtomicU64,
}

/// Sets the flush position of a [`ReplicationStream`] from anywhere (cheap to clone, `Send`
/// and `Sync`). Used by whoever learns that the sink acknowledged a transaction.
#[derive(Clone, Debug)]
pub struct FlushHandle {
    shared: Arc<Shared>,
}

impl FlushHandle {
    /// Reports everything before `lsn` as durably processed: the next status update
    /// carries it as the flush position, which advances the slot's `confirmed_flush_lsn`.
    /// Must be a transaction end the sink acknowledged. Lower values than one already set
    /// are ignored (the position never moves back).
    pub fn set_flushed(&self, lsn: Lsn) {
        self.shared.flushed.fetch_max(lsn.0, Ordering::AcqRel);
    }

    /// The flush position set so far (`0/0` if none).
    pub fn flushed(&self) -> Lsn {
        Lsn(self.shared.flushed.load(Ordering::Acquire))
    }
}

enum Command {
    /// Send a status update now.
    StatusNow,
    /// Send a final status update, Terminate, and stop.
    Close(oneshot::Sender<Result<()>>),
}

type Chunk = Vec<ServerMessage>;

/// The decoded replication messages of one slot, in order: [`ServerMessage::XLogData`]
/// (one pgoutput message each) and [`ServerMessage::PrimaryKeepalive`] (the server's WAL
/// end, useful to advance an idle slot).
///
/// Pull with [`Self::next_message`], [`Self::next_chunk`] or as a
/// [`futures::Stream`]. The end of the stream (`None`) means the server ended replication
/// (CopyDone); failures (connection lost, walsender terminated, publication dropped) arrive
/// as one `Err` and then the end. Dropping the stream closes the connection.
#[derive(Debug)]
pub struct ReplicationStream {
    rx: mpsc::Receiver<Result<Chunk>>,
    current: std::vec::IntoIter<ServerMessage>,
    /// An error [`ReplicationStream::try_next_chunk`] took from the channel, reported by
    /// the next waiting read.
    pending_error: Option<Error>,
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    task: Option<JoinHandle<()>>,
}

impl ReplicationStream {
    /// Starts the background task on `socket`, which is in CopyBoth mode; `leftover` holds
    /// bytes already read past the CopyBothResponse.
    pub(crate) fn spawn(
        socket: Socket,
        leftover: BytesMut,
        target: String,
        options: StreamOptions,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::channel(options.channel_capacity.max(1));
        let (commands, command_rx) = mpsc::unbounded_channel();
        let batching = ReadBatching::for_socket(
            &socket,
            options.receive_low_water,
            options.batch_wait,
            options.local_batching,
        );
        let mut io = StreamTask {
            batching,
            socket,
            rbuf: leftover,
            wbuf: BytesMut::with_capacity(64),
            shared: shared.clone(),
            read_size: options.read_buffer_size.max(8192),
            target,
            // `start_replication` already lowered the interval to follow the server's
            // `wal_sender_timeout` (it is the one that asks the server).
            schedule: StatusSchedule::new(StatusConfig::new(options.status_interval), now()),
            notices: NoticeRun::default(),
            // Likewise `start_replication` raised the receive timeout to follow the
            // server's.
            liveness: ReceiveDeadline::new(options.receive_timeout, now()),
            probe: false,
        };
        let task = tokio::spawn(async move {
            if let Err(e) = io.run(tx.clone(), command_rx).await {
                // Blocks until the consumer reads it or goes away; nothing else to do.
                let _ = tx.send(Err(e)).await;
            }
        });
        ReplicationStream {
            rx,
            current: Vec::new().into_iter(),
            pending_error: None,
            shared,
            commands,
            task: Some(task),
        }
    }

    /// The next message; `Ok(None)` once the server ended the stream.
    pub async fn next_message(&mut self) -> Result<Option<ServerMessage>> {
        if let Some(message) = self.current.next() {
            return Ok(Some(message));
        }
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        match self.rx.recv().await {
            Some(Ok(chunk)) => {
                self.current = chunk.into_iter();
                Ok(self.current.next())
            }
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }

    /// Every message that is already here (at least one, waiting if none is), for batch
    /// processing; `Ok(None)` once the server ended the stream.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<ServerMessage>>> {
        let rest: Vec<ServerMessage> = std::mem::take(&mut self.current).collect();
        if !rest.is_empty() {
            return Ok(Some(rest));
        }
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        match self.rx.recv().await {
            Some(Ok(chunk)) => Ok(Some(chunk)),
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }

    /// Every message that is already here, without waiting: `None` when nothing is (the
    /// stream's end and errors are left for [`ReplicationStream::next_chunk`] to report).
    pub fn try_next_chunk(&mut self) -> Option<Vec<ServerMessage>> {
        let rest: Vec<ServerMessage> = std::mem::take(&mut self.current).collect();
        if !rest.is_empty() {
            return Some(rest);
        }
        match self.rx.try_recv() {
            Ok(Ok(chunk)) => Some(chunk),
            Ok(Err(e)) => {
                // Put it back in front: the next `next_chunk` reports it.
                self.pending_error = Some(e);
                None
            }
            Err(_) => None,
        }
    }

    /// See [`FlushHandle::set_flushed`].
    pub fn set_flushed(&self, lsn: Lsn) {
        self.shared.flushed.fetch_max(lsn.0, Ordering::AcqRel);
    }

    /// The flush position set so far.
    pub fn flushed(&self) -> Lsn {
        Lsn(self.shared.flushed.load(Ordering::Acquire))
    }

    /// A handle to set the flush position from another task.
    pub fn flush_handle(&self) -> FlushHandle {
        FlushHandle {
            shared: self.shared.clone(),
        }
    }

    /// The highest WAL start position of any XLogData read from the socket so far (which
    /// may still be waiting in the channel).
    pub fn received(&self) -> Lsn {
        Lsn(self.shared.received.load(Ordering::Acquire))
    }

    /// How many standby status updates the task has sent (diagnostics and tests).
    pub fn status_updates_sent(&self) -> u64 {
        self.shared.status_updates.load(Ordering::Acquire)
    }

    /// Asks the task to send a status update now (e.g. right after a checkpoint, so the
    /// slot advances without waiting for the timer).
    pub fn send_status_now(&self) {
        let _ = self.commands.send(Command::StatusNow);
    }

    /// Sends a final status update with the current flush position, ends the session and
    /// waits (up to 10 s) until the server hung up — by then the walsender has processed
    /// the update and released the slot, so a new session can take it over at once.
    /// Messages not yet consumed are discarded.
    pub async fn close(mut self) -> Result<()> {
        let (done_tx, done_rx) = oneshot::channel();
        let sent = self.commands.send(Command::Close(done_tx)).is_ok();
        // Unblock a task waiting to deliver a chunk.
        self.rx.close();
        while self.rx.try_recv().is_ok() {}
        let result = if sent {
            done_rx.await.unwrap_or(Ok(()))
        } else {
            Ok(())
        };
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        result
    }
}

impl Drop for ReplicationStream {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl futures::Stream for ReplicationStream {
    type Item = Result<ServerMessage>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(message) = this.current.next() {
                return Poll::Ready(Some(Ok(message)));
            }
            if let Some(e) = this.pending_error.take() {
                return Poll::Ready(Some(Err(e)));
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(chunk))) => this.current = chunk.into_iter(),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Whether `chunk` holds anything but keepalives.
fn has_data(chunk: &Chunk) -> bool {
    chunk
        .iter()
        .any(|m| matches!(m, ServerMessage::XLogData(_)))
}

/// Appends `new` to `pending`, keeping only the newest of consecutive keepalives (a newer
/// keepalive says everything an older one did; reply requests were already answered).
fn merge(pending: &mut Option<Chunk>, mut new: Chunk) {
    if new.is_empty() {
        return;
    }
    let queued = match pending {
        Some(queued) => {
            queued.append(&mut new);
            queued
        }
        None => pending.insert(new),
    };
    queued.dedup_by(|later, earlier| {
        let both = matches!(later, ServerMessage::PrimaryKeepalive(_))
            && matches!(earlier, ServerMessage::PrimaryKeepalive(_));
        if both {
            // Keep the later one in the earlier slot; the removed slot holds the older.
            std::mem::swap(later, earlier);
        }
        both
    });
}

/// What one pass over the read buffer found.
#[derive(Default)]
struct Parsed {
    chunk: Chunk,
    finish: Option<Finish>,
}

/// Why the stream ends; the messages before it are still delivered.
enum Finish {
    /// The server ended the stream (CopyDone).
    Ended,
    /// The server reported an error, or sent something malformed.
    Failed(Error),
}

struct StreamTask {
    /// Low-water reads on plain TCP (see `read_batching`).
    batching: Option<ReadBatching>,
    socket: Socket,
    rbuf: BytesMut,
    wbuf: BytesMut,
    shared: Arc<Shared>,
    read_size: usize,
    target: String,
    /// When status updates are due and what they report.
    schedule: StatusSchedule,
    /// NoticeResponses in a row (logged and dropped).
    notices: NoticeRun,
    /// When a silent server is probed and when it is presumed dead.
    liveness: ReceiveDeadline,
    /// The next status update requests a reply (a probe of a silent server).
    probe: bool,
}

/// The clock of the schedule: tokio's, so that it agrees with the timer that wakes the
/// task.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl StreamTask {
    async fn run(
        &mut self,
        tx: mpsc::Sender<Result<Chunk>>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) -> Result<()> {
        // Wakes the task when the schedule says an update is due; re-armed only when the
        // deadline moved (after an update went out).
        let status_timer = tokio::time::sleep_until(self.schedule.poll_timeout().into());
        tokio::pin!(status_timer);
        // Wakes the task to probe a silent server or to give up on it; only armed while
        // the socket is read (see `ReceiveDeadline`).
        let liveness_timer = tokio::time::sleep_until(tokio::time::Instant::now());
        tokio::pin!(liveness_timer);
        // While the low-water mark is set: reads what waits below it.
        let batch_wait = self
            .batching
            .as_ref()
            .map_or(Duration::from_millis(2), ReadBatching::wait);
        let mut batch_timer = tokio::time::interval(batch_wait);
        batch_timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Messages read but not yet in the channel. While they include XLogData the
        // socket is not read (backpressure); while they are only a keepalive, reading goes
        // on (a newer keepalive replaces an older one), so that an idle stream keeps
        // answering the server's pings even when nobody consumes.
        let mut pending: Option<Chunk> = None;
        let mut finish = None;
        // Bytes that arrived with CopyBothResponse.
        if !self.rbuf.is_empty() {
            finish = self.process(&mut pending).await?;
        }
        loop {
            if let Some(finish) = finish.take() {
                if let Some(chunk) = pending.take() {
                    let _ = tx.send(Ok(chunk)).await;
                }
                return match finish {
                    Finish::Ended => self.shutdown().await,
                    Finish::Failed(e) => Err(e),
                };
            }
            let deliver = pending.is_some();
            let read = pending.as_ref().is_none_or(|chunk| !has_data(chunk));
            if read && self.rbuf.capacity() - self.rbuf.len() < self.read_size / 4 {
                self.rbuf.reserve(self.read_size);
            }
            // A busy local connection waits for the timer even when bytes are queued: the
            // point is to let them pile up on the walsender's side.
            let (batching, on_timer_only) = self
                .batching
                .as_ref()
                .map_or((false, false), |b| (b.active(), b.reads_on_timer_only()));
            let buffered = self.rbuf.len();
            let due = tokio::time::Instant::from_std(self.schedule.poll_timeout());
            if status_timer.deadline() != due {
                status_timer.as_mut().reset(due);
            }
            self.liveness.set_reading(read, now());
            let silence_check = self
                .liveness
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            if let Some(at) = silence_check
                && liveness_timer.deadline() != at
            {
                liveness_timer.as_mut().reset(at);
            }
            tokio::select! {
                biased;
                command = commands.recv() => {
                    if self.handle(command).await? {
                        return Ok(());
                    }
                }
                () = &mut status_timer => self.transmit().await?,
                () = &mut liveness_timer, if silence_check.is_some() => self.check_silence().await?,
                permit = tx.reserve(), if deliver => match permit {
                    Ok(permit) => {
                        if let Some(chunk) = pending.take() {
                            permit.send(Ok(chunk));
                        }
                    }
                    Err(_) => return self.shutdown().await,
                },
                _ = tx.closed(), if !deliver => return self.shutdown().await,
                _ = batch_timer.tick(), if read && batching => {
                    if self.poll_batched()? {
                        self.read_available()?;
                        if on_timer_only && self.rbuf.len() == self.rbuf.capacity() {
                            // More may be queued than one buffer holds: read again as soon
                            // as this is handed on, not a whole wait later.
                            batch_timer.reset_immediately();
                        }
                        finish = self.process(&mut pending).await?;
                    }
                }
                result = self.socket.read_buf(&mut self.rbuf), if read && !on_timer_only => {
                    let n = result.map_err(|e| {
                        io_error(e, &format!("reading the replication stream from {}", self.target))
                    })?;
                    if n == 0 {
                        return Err(Error::transient(format!(
                            "the server at {} closed the replication connection unexpectedly",
                            self.target
                        )));
                    }
                    self.read_available()?;
                    if let Some(batching) = self.batching.as_mut() {
                        batching.after_read(&self.socket, self.rbuf.len().saturating_sub(buffered));
                        if batching.active() {
                            // Heavy traffic reads here; the timer is only for what stays
                            // below the mark afterwards.
                            batch_timer.reset();
                        }
                    }
                    finish = self.process(&mut pending).await?;
                }
            }
        }
    }

    /// The liveness timer fired: ends the stream with a Transient error if the server was
    /// silent for the whole receive timeout, else probes it if a probe is due.
    async fn check_silence(&mut self) -> Result<()> {
        let at = now();
        if let Some(silence) = self.liveness.poll_expired(at) {
            return Err(Error::transient(format!(
                "no data from the server at {} for {} s; the connection is presumed dead",
                self.target,
                silence.as_secs()
            )));
        }
        if self.liveness.poll_probe(at) {
            tracing::debug!(target = %self.target, "the server is silent; requesting a reply");
            self.probe = true;
            self.schedule.request_status();
            self.transmit().await?;
        }
        Ok(())
    }

    /// The batch timer fired: reads what is queued below the low-water mark. True if
    /// bytes were read.
    fn poll_batched(&mut self) -> Result<bool> {
        let Some(batching) = self.batching.as_mut() else {
            return Ok(false);
        };
        let polled = batching.poll(&self.socket, &mut self.rbuf).map_err(|e| {
            io_error(
                e,
                &format!("reading the replication stream from {}", self.target),
            )
        })?;
        match polled {
            Polled::Read(_) => Ok(true),
            Polled::Idle => Ok(false),
            Polled::Closed => Err(Error::transient(format!(
                "the server at {} closed the replication connection unexpectedly",
                self.target
            ))),
        }
    }

    /// Parses what is buffered, answers a reply request at once, and queues the messages
    /// in `pending`. Returns why the stream ends, if it does.
    async fn process(&mut self, pending: &mut Option<Chunk>) -> Result<Option<Finish>> {
        let read_at = now();
        // Any bytes are a sign of life, complete messages or not.
        self.liveness.on_received(read_at);
        let parsed = self.parse();
        for message in &parsed.chunk {
            self.schedule.on_server_message(message, read_at);
        }
        // A stream that ends sends its last update on the way out (or cannot: writing to
        // a failed connection would only hide the server's error).
        if parsed.finish.is_none() {
            self.transmit().await?;
        }
        merge(pending, parsed.chunk);
        Ok(parsed.finish)
    }

    /// Reads whatever else is already available without waiting, up to the buffer's
    /// spare capacity, so one parse pass sees many messages.
    fn read_available(&mut self) -> Result<()> {
        while self.rbuf.capacity() > self.rbuf.len() {
            match self.socket.read_buf(&mut self.rbuf).now_or_never() {
                Some(Ok(0)) | None => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    return Err(io_error(
                        e,
                        &format!("reading the replication stream from {}", self.target),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Handles an owner command; true when the task should stop.
    async fn handle(&mut self, command: Option<Command>) -> Result<bool> {
        match command {
            Some(Command::StatusNow) => {
                self.schedule.request_status();
                self.transmit().await?;
                Ok(false)
            }
            Some(Command::Close(done)) => {
                self.schedule.request_status();
                let result = self.transmit().await;
                self.terminate().await;
                let _ = done.send(result);
                Ok(true)
            }
            // The owner is gone.
            None => {
                self.terminate().await;
                Ok(true)
            }
        }
    }

    /// The consumer dropped the stream: say goodbye with the last flush position.
    async fn shutdown(&mut self) -> Result<()> {
        self.schedule.request_status();
        let _ = self.transmit().await;
        self.terminate().await;
        Ok(())
    }

    async fn terminate(&mut self) {
        self.wbuf.clear();
        frontend::terminate(&mut self.wbuf);
        let _ = self.socket.write_all(&self.wbuf).await;
        let _ = self.socket.flush().await;
        self.wbuf.clear();
        drain_until_closed(&mut self.socket, &mut self.rbuf).await;
    }

    /// Gives the schedule the owner's latest flush position and sends the status update
    /// it says is due now, if any (write = max(received, flushed); flush = apply = the
    /// owner's position), stamped with the wall clock.
    async fn transmit(&mut self) -> Result<()> {
        self.schedule
            .confirm_flushed(Lsn(self.shared.flushed.load(Ordering::Acquire)));
        let Some(report) = self.schedule.poll_transmit(now()) else {
            return Ok(());
        };
        let mut update = report.to_message(pg_timestamp_now());
        // A probe of a silent server asks the walsender to answer at once.
        update.reply_requested = std::mem::take(&mut self.probe);
        self.send_status(update).await
    }

    /// Sends a standby status update.
    async fn send_status(&mut self, update: StandbyStatusUpdate) -> Result<()> {
        let update = ClientMessage::StandbyStatusUpdate(update);
        let mut body = BytesMut::with_capacity(34);
        update.encode(&mut body);
        self.wbuf.clear();
        frontend::CopyData::new(&body[..])
            .map_err(|e| Error::protocol(format!("cannot frame a status update: {e}")))?
            .write(&mut self.wbuf);
        self.socket
            .write_all(&self.wbuf)
            .await
            .map_err(|e| io_error(e, &format!("sending a status update to {}", self.target)))?;
        self.socket
            .flush()
            .await
            .map_err(|e| io_error(e, &format!("sending a status update to {}", self.target)))?;
        self.wbuf.clear();
        self.shared.status_updates.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Splits every complete frame off the read buffer and decodes it, up to the end of
    /// the stream or the first failure (the messages before it are kept).
    fn parse(&mut self) -> Parsed {
        let mut parsed = Parsed::default();
        let mut received = 0u64;
        while parsed.finish.is_none() {
            // The session is authenticated: CopyData may be up to 1 GiB, most else is small.
            let frame = match frame::split_frame(&mut self.rbuf, Phase::Authenticated) {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    // Room for more of a large message, growing with what arrived.
                    frame::make_room(&mut self.rbuf, Phase::Authenticated);
                    break;
                }
                Err(e) => {
                    parsed.finish = Some(Finish::Failed(Error::protocol(format!(
                        "the server at {} sent {e} in the replication stream",
                        self.target
                    ))));
                    break;
                }
            };
            if frame.tag() != b'N' {
                self.notices.reset();
            }
            match frame.tag() {
                b'd' => match ServerMessage::decode(frame.body()) {
                    Ok(ServerMessage::XLogData(data)) => {
                        received = received.max(data.wal_start.0);
                        parsed.chunk.push(ServerMessage::XLogData(data));
                    }
                    Ok(ServerMessage::PrimaryKeepalive(keepalive)) => {
                        parsed
                            .chunk
                            .push(ServerMessage::PrimaryKeepalive(keepalive));
                    }
                    Err(e) => {
                        let message =
                            format!("malformed replication message from {}: {e}", self.target);
                        parsed.finish =
                            Some(Finish::Failed(Error::protocol(message).with_source(e)));
                    }
                },
                b'c' => parsed.finish = Some(Finish::Ended),
                b'E' | b'N' => match decode(&frame) {
                    Ok(Message::ErrorResponse(body)) => {
                        let server = server_error_from_fields(body.fields());
                        let context = format!("the replication stream from {} failed", self.target);
                        parsed.finish = Some(Finish::Failed(server_error(
                            server,
                            Activity::Streaming,
                            &context,
                        )));
                    }
                    Ok(Message::NoticeResponse(body)) => {
                        if let Err(e) = self.notices.on_notice(body.fields(), &self.target) {
                            parsed.finish = Some(Finish::Failed(e));
                        }
                    }
                    _ => {
                        parsed.finish = Some(Finish::Failed(Error::protocol(format!(
                            "malformed error or notice in the replication stream from {}",
                            self.target
                        ))));
                    }
                },
                // After CopyDone the server finishes the command; nothing to do.
                b'C' | b'Z' | b'S' => {}
                other => {
                    parsed.finish = Some(Finish::Failed(Error::protocol(format!(
                        "unexpected {} message ({:?}) in the replication stream from {}",
                        frame::message_name(other),
                        char::from(other),
                        self.target
                    ))));
                }
            }
        }
        if received > 0 {
            self.shared.received.fetch_max(received, Ordering::AcqRel);
        }
        parsed
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
