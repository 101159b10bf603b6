//! The JetStream sink: publishes the planner's messages on the sequence chain, waits for
//! their acknowledgements at each checkpoint, and repairs the chain in place when a
//! server or the stream's leader is lost.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_nats::header::{HeaderName, IntoHeaderName};
use async_nats::jetstream::context::{PublishAckFuture, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self as js, stream};
use async_nats::{HeaderMap, Subject};
use async_trait::async_trait;
use bytes::Bytes;
use cdc_core::{Ack, Acknowledger, Error, ErrorKind, ResumeToken, Sink, SinkBatch};

use super::connection::{connect, servers_for_display};
use super::headers as h;
use super::options::JetStreamOptions;
use super::plan::{Grouping, OutMessage, Planner};
use super::plan_debezium::DebeziumPlanner;
use super::planners::Planners;
use super::recovery::{ResumeEntry, recover};
use super::setup;
use crate::feldera::{EncoderOptions, PolicyLog, TruncatePolicy};

/// Unacknowledged messages kept before `write` waits for the oldest acknowledgements.
/// Below the client's limit of acknowledgements in flight, which would otherwise block
/// publishing until a checkpoint that can never come.
const WINDOW_MESSAGES: usize = 4096;
/// The same, in payload bytes.
const WINDOW_BYTES: usize = 64 << 20;
/// The client's limit of publish acknowledgements in flight.
const MAX_ACK_INFLIGHT: usize = 2 * WINDOW_MESSAGES;

/// Publishes change events to a NATS JetStream stream as Feldera JSON, exactly once
/// across crashes and restarts of pgcdc and losses of servers (see the [module
/// docs](super) for the argument and what it needs of the stream).
///
/// `open` connects, finds (or creates) the stream and reads where it ends; `write`
/// publishes without waiting; `checkpoint` waits until the stream has acknowledged every
/// message (stored on its replicas), then stores the token; an error stops the pipeline
/// with nothing unacknowledged confirmed to the source.
#[derive(Debug)]
pub struct JetStreamSink {
    options: JetStreamOptions,
    planner: Planners,
    policy_log: PolicyLog,
    connected: Option<Connected>,
    /// The sequence the next message gets.
    next_sequence: u64,
    /// Sequence of the latest message published with a token.
    token_sequence: u64,
    /// Published, not yet acknowledged, in sequence order.
    window: VecDeque<InFlight>,
    window_bytes: usize,
    /// The token on the last message with one.
    published_token: Option<ResumeToken>,
    /// The newest token known to be stored (in the stream or the resume entry).
    stored_token: Option<ResumeToken>,
    /// When the sink gives up repairing the chain (set while failures go on).
    give_up_at: Option<Instant>,
    /// Header names made once (a name made from a string is checked and copied each
    /// time; a cached one is a reference count).
    names: HeaderNames,
    stats: JetStreamStats,
}

/// Counters of a [`JetStreamSink`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JetStreamStats {
    /// Messages acknowledged by the stream.
    pub messages: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// Events skipped because the stream already held them (replay after a restart).
    pub skipped_events: u64,
    /// Messages published again after a server or leader was lost.
    pub republished: u64,
    /// Resume entries written (checkpoints that no message's token covered).
    pub resume_entries: u64,
}

#[derive(Debug)]
struct Connected {
    context: js::Context,
    stream: stream::Stream,
    resume_subject: String,
}

/// Header names, made once per sink.
#[derive(Debug, Default)]
struct HeaderNames(Vec<(&'static str, HeaderName)>);

impl HeaderNames {
    fn get(&mut self, name: &'static str) -> HeaderName {
        if let Some((_, made)) = self.0.iter().find(|(n, _)| *n == name) {
            return made.clone();
        }
        let made = name.into_header_name();
        self.0.push((name, made.clone()));
        made
    }
}

/// A published message awaiting its acknowledgement.
#[derive(Debug)]
struct InFlight {
    sequence: u64,
    /// Made once: each send clones a reference, not the name.
    subject: Subject,
    /// Its headers, chain included; the header map is made from them at each send (the
    /// first, and again only after a lost server).
    headers: Vec<(&'static str, String)>,
    payload: Bytes,
    /// `None` once the outcome is unknown (the chain is being repaired).
    ack: Option<PublishAckFuture>,
}

impl InFlight {
    /// Its `Nats-Msg-Id` (empty when it has none).
    fn message_id(&self) -> &str {
        self.headers
            .iter()
            .find(|(name, _)| *name == h::NATS_MSG_ID)
            .map_or("", |(_, id)| id.as_str())
    }
}

impl JetStreamSink {
    /// A sink with these options; nothing is contacted before `open`.
    pub fn new(options: JetStreamOptions) -> Result<Self, Error> {
        let policy_log = PolicyLog::default();
        // Replaced by the server's max_payload at open.
        let max_message_bytes = 1 << 20;
        let planner = match &options.debezium {
            Some(debezium) => {
                if options.grouping != Grouping::Event {
                    return Err(Error::config(
                        "Debezium records are published one per message (as Debezium Server does); grouping a transaction's changes into a message is for Feldera JSON",
                    ));
                }
                Planners::Debezium(Box::new(DebeziumPlanner::new(
                    options.subjects.clone(),
                    debezium.clone(),
                    max_message_bytes,
                )))
            }
            None => {
                if options.policies.truncate == TruncatePolicy::Marker {
                    return Err(Error::config(
                        "the JetStream sink cannot write truncate markers: each subject is one table's Feldera input, whose parser rejects them; choose the error or skip truncate policy",
                    ));
                }
                Planners::Feldera(Box::new(Planner::new(
                    options.subjects.clone(),
                    options.grouping,
                    EncoderOptions {
                        policies: options.policies,
                        table_key: false,
                    },
                    policy_log.clone(),
                    max_message_bytes,
                    None,
                )))
            }
        };
        Ok(JetStreamSink {
            options,
            planner,
            policy_log,
            connected: None,
            next_sequence: 1,
            token_sequence: 0,
            window: VecDeque::new(),
            window_bytes: 0,
            published_token: None,
            stored_token: None,
            give_up_at: None,
            names: HeaderNames::default(),
            stats: JetStreamStats::default(),
        })
    }

    /// The policy counts, shared: readable while the sink runs in a pipeline.
    pub fn policy_log(&self) -> PolicyLog {
        self.policy_log.clone()
    }

    /// The counters so far.
    pub fn stats(&self) -> JetStreamStats {
        JetStreamStats {
            skipped_events: self.planner.skipped(),
            ..self.stats
        }
    }

    fn connected(&mut self) -> Result<&mut Connected, Error> {
        self.connected
            .as_mut()
            .ok_or_else(|| Error::sink("internal: the JetStream sink was used before open"))
    }

    /// Adds the chain headers and publishes (without waiting for the acknowledgement).
    async fn publish_new(&mut self, message: OutMessage) -> Result<(), Error> {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let mut headers = message.headers;
        let carries_token = headers.iter().any(|(name, _)| *name == h::TOKEN);
        headers.push((h::NATS_EXPECTED_LAST_SEQUENCE, (sequence - 1).to_string()));
        headers.push((h::TOKEN_SEQ, self.token_sequence.to_string()));
        if carries_token {
            self.token_sequence = sequence;
        }
        let payload = Bytes::from(message.payload);
        self.window_bytes += payload.len();
        self.window.push_back(InFlight {
            sequence,
            subject: Subject::from(message.subject),
            headers,
            payload,
            ack: None,
        });
        let index = self.window.len() - 1;
        match self.send(index).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::Transient => self.repair(e).await,
            Err(e) => Err(e),
        }
    }

    /// Sends the window's message at `index`.
    async fn send(&mut self, index: usize) -> Result<(), Error> {
        let Some(connected) = self.connected.as_ref() else {
            return Err(Error::sink(
                "internal: the JetStream sink was used before open",
            ));
        };
        let Some(entry) = self.window.get(index) else {
            return Ok(());
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &entry.headers {
            headers.insert(self.names.get(name), value.as_str());
        }
        let publish = PublishMessage::build()
            .payload(entry.payload.clone())
            .headers(headers);
        let result = connected
            .context
            .send_publish(entry.subject.clone(), publish)
            .await;
        match result {
            Ok(ack) => {
                if let Some(entry) = self.window.get_mut(index) {
                    entry.ack = Some(ack);
                }
                Ok(())
            }
            Err(e) => Err(publish_error(&self.options.stream, entry, e.kind(), &e)),
        }
    }

    /// Waits for acknowledgements until at most `keep` messages are unacknowledged.
    async fn settle(&mut self, keep: usize) -> Result<(), Error> {
        while self.window.len() > keep {
            let Some(front) = self.window.front_mut() else {
                break;
            };
            let Some(ack) = front.ack.take() else {
                self.repair(Error::transient("a publish was not sent"))
                    .await?;
                continue;
            };
            match ack.await {
                Ok(ack) if ack.sequence == front.sequence => {
                    self.stats.messages += 1;
                    self.stats.payload_bytes += front.payload.len() as u64;
                    self.window_bytes -= front.payload.len();
                    self.window.pop_front();
                    self.give_up_at = None;
                }
                Ok(ack) => {
                    return Err(Error::sink(format!(
                        "JetStream stream {:?} stored message {} at sequence {}, not {}: something else publishes to the stream, which must be pgcdc's alone",
                        self.options.stream,
                        front.message_id(),
                        ack.sequence,
                        front.sequence
                    )));
                }
                Err(e) => {
                    let error = publish_error(&self.options.stream, front, e.kind(), &e);
                    if error.kind() != ErrorKind::Transient {
                        return Err(error);
                    }
                    self.repair(error).await?;
                }
            }
        }
        Ok(())
    }

    /// After a failed publish or acknowledgement: finds how far the stream got, drops
    /// what it has from the window, and publishes the rest again (same sequences, same
    /// ids), retrying until `retry_for` has passed since the failures began.
    async fn repair(&mut self, cause: Error) -> Result<(), Error> {
        let give_up_at = *self
            .give_up_at
            .get_or_insert_with(|| Instant::now() + self.options.retry_for);
        let mut last_error = cause;
        let mut pause = Duration::from_millis(100);
        loop {
            tracing::warn!(error = %last_error, stream = %self.options.stream, "JetStream publish failed; repairing the sequence chain");
            for entry in &mut self.window {
                entry.ack = None;
            }
            match self.try_repair().await {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Transient => last_error = e,
                Err(e) => return Err(e),
            }
            if Instant::now() >= give_up_at {
                return Err(Error::transient(format!(
                    "JetStream stream {:?} on {} has not accepted messages for {:?}; last error: {last_error}. Nothing unacknowledged was confirmed to Postgres: rerun to resume",
                    self.options.stream,
                    servers_for_display(&self.options.servers),
                    self.options.retry_for
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    async fn try_repair(&mut self) -> Result<(), Error> {
        let name = self.options.stream.clone();
        let connected = self.connected()?;
        let last = connected
            .stream
            .info()
            .await
            .map_err(|e| Error::transient(format!("cannot read JetStream stream {name:?}: {e}")))?
            .state
            .last_sequence;
        let (Some(first), Some(back)) = (self.window.front(), self.window.back()) else {
            return Ok(());
        };
        let (base, back) = (first.sequence, back.sequence);
        if last + 1 < base {
            return Err(Error::sink(format!(
                "JetStream stream {name:?} ends at sequence {last}, but it had acknowledged messages up to {}: it was purged or lost data; start over (delete the stream, the resume entry and the replication slot)",
                base - 1
            )));
        }
        if last >= base {
            let id = if last <= back {
                let stream = &self.connected()?.stream;
                setup::message_id(stream, &name, last).await?
            } else {
                None
            };
            let index = usize::try_from(last - base).unwrap_or(usize::MAX);
            let ours = self.window.get(index).map(InFlight::message_id);
            if id.is_none() || id.as_deref() != ours {
                return Err(Error::sink(format!(
                    "JetStream stream {name:?} holds at sequence {last} a message pgcdc did not publish there: something else publishes to the stream, which must be pgcdc's alone"
                )));
            }
            for entry in self.window.drain(..=index) {
                self.stats.messages += 1;
                self.stats.payload_bytes += entry.payload.len() as u64;
                self.window_bytes -= entry.payload.len();
            }
        }
        for index in 0..self.window.len() {
            self.send(index).await?;
            self.stats.republished += 1;
        }
        Ok(())
    }
}

/// A publish error as the sink sees it: transient (repaired by republishing) or not.
fn publish_error(
    stream: &str,
    entry: &InFlight,
    kind: PublishErrorKind,
    error: &dyn std::fmt::Display,
) -> Error {
    match kind {
        PublishErrorKind::MaxPayloadExceeded => Error::sink(format!(
            "message {} for {} exceeds the NATS server's max_payload: raise max_payload, or (online snapshot chunks) lower --chunk-rows",
            entry.message_id(),
            entry.subject
        )),
        PublishErrorKind::StreamNotFound
        | PublishErrorKind::WrongLastSequence
        | PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending
        | PublishErrorKind::Other
        | PublishErrorKind::WrongLastMessageId => Error::transient(format!(
            "publishing {} to JetStream stream {stream:?}: {error}",
            entry.message_id()
        )),
    }
}

#[async_trait]
impl Sink for JetStreamSink {
    async fn open(&mut self, _acks: Acknowledger) -> cdc_core::Result<Option<ResumeToken>> {
        let client = connect(&self.options).await?;
        let max_payload = client.server_info().max_payload;
        let context = js::ContextBuilder::new()
            .timeout(self.options.request_timeout)
            .max_ack_inflight(MAX_ACK_INFLIGHT)
            .backpressure_on_inflight(true)
            .build(client);
        let mut stream = setup::ensure_stream(&context, &self.options).await?;
        let replicas = stream.cached_info().config.num_replicas.max(1);
        let bucket =
            setup::ensure_resume_bucket(&context, &self.options.resume_bucket, replicas).await?;
        let resume_subject =
            setup::resume_subject(&self.options.resume_bucket, &self.options.stream);
        let state = setup::read_stream_state(&mut stream, &self.options.stream).await?;
        let entry = setup::read_resume_entry(&bucket, &resume_subject).await?;
        let recovered = recover(&self.options.stream, &state, entry)?;
        tracing::info!(
            stream = %self.options.stream,
            last_sequence = state.last_sequence,
            resume = ?recovered.token.as_ref().and_then(|t| t.position).map(|p| p.to_string()),
            "JetStream stream opened"
        );
        self.planner.resume(&self.options.stream, &recovered)?;
        self.planner.set_max_message_bytes(max_payload);
        self.next_sequence = state.last_sequence + 1;
        self.token_sequence = recovered.token_sequence;
        self.stored_token = recovered.token.clone();
        self.published_token = None;
        self.connected = Some(Connected {
            context,
            stream,
            resume_subject,
        });
        Ok(recovered.token)
    }

    async fn write(&mut self, batch: SinkBatch) -> cdc_core::Result<Ack> {
        self.connected()?;
        let messages = self
            .planner
            .plan(&batch.batch.events, &batch.resume_token)?;
        let carries_token = !messages.is_empty();
        for message in messages {
            self.publish_new(message).await?;
            if self.window.len() > WINDOW_MESSAGES || self.window_bytes > WINDOW_BYTES {
                self.settle(WINDOW_MESSAGES / 2).await?;
            }
        }
        if carries_token {
            // The planner put the batch's token on its last message.
            self.published_token = Some(batch.resume_token);
        }
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> cdc_core::Result<Ack> {
        self.settle(0).await?;
        if self.stored_token.as_ref() == Some(token) {
            return Ok(Ack::Done);
        }
        if self.published_token.as_ref() != Some(token) {
            // No message carries this token (the batches since the last one published
            // nothing): the resume entry keeps the progress.
            let entry = ResumeEntry {
                stream_sequence: self.next_sequence - 1,
                token: token.clone(),
                debezium: self.planner.state(),
            };
            let connected = self.connected()?;
            let (context, subject) = (connected.context.clone(), connected.resume_subject.clone());
            setup::retrying(self.options.retry_for, "writing the resume entry", || {
                setup::write_resume_entry(&context, &subject, &entry)
            })
            .await?;
            self.stats.resume_entries += 1;
        }
        self.stored_token = Some(token.clone());
        Ok(Ack::Done)
    }

    async fn close(&mut self) -> cdc_core::Result<()> {
        self.settle(0).await?;
        self.connected = None;
        Ok(())
    }
}
