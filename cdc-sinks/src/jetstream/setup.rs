//! At open: the stream (found or created, and checked), the resume entry's bucket, and the
//! stored state recovery reads.

use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::stream::{
    self, Config, DiscardPolicy, LastRawMessageErrorKind, RetentionPolicy, StorageType,
};
use async_nats::jetstream::{self as js, context::GetStreamErrorKind};
use bytes::Bytes;
use cdc_core::Error;

use super::options::JetStreamOptions;
use super::recovery::{ResumeEntry, StoredMessage, StreamState};
use super::subject::filter_covers;

/// The stream pgcdc publishes to, found or created, and checked.
pub(crate) async fn ensure_stream(
    context: &js::Context,
    options: &JetStreamOptions,
) -> Result<stream::Stream, Error> {
    let name = &options.stream;
    let filter = options.subjects.filter(&options.database);
    let mut stream = match context.get_stream(name).await {
        Ok(stream) => stream,
        Err(e) if is_stream_not_found(e.kind()) => {
            let Some(settings) = options.create_stream else {
                return Err(Error::config(format!(
                    "JetStream stream {name:?} does not exist; create it (subjects: {filter}, retention: limits) or let pgcdc create it (--create-stream)"
                )));
            };
            let config = Config {
                name: name.clone(),
                subjects: vec![filter.clone()],
                retention: RetentionPolicy::Limits,
                discard: DiscardPolicy::Old,
                storage: StorageType::File,
                num_replicas: settings.replicas,
                max_age: settings.max_age.unwrap_or(Duration::ZERO),
                duplicate_window: settings.duplicate_window,
                max_messages: -1,
                max_bytes: -1,
                max_messages_per_subject: -1,
                ..Config::default()
            };
            tracing::info!(stream = %name, subjects = %filter, replicas = settings.replicas, "creating the JetStream stream");
            context
                .create_stream(config)
                .await
                .map_err(|e| Error::sink(format!("cannot create JetStream stream {name:?}: {e}")))?
        }
        Err(e) => {
            return Err(Error::sink(format!(
                "cannot look up JetStream stream {name:?}: {e}; is JetStream enabled on the server (-js)?"
            )));
        }
    };
    let info = stream
        .info()
        .await
        .map_err(|e| Error::sink(format!("cannot read JetStream stream {name:?}: {e}")))?;
    check_config(name, &filter, &info.config)?;
    Ok(stream)
}

/// The stream's settings pgcdc depends on.
fn check_config(name: &str, filter: &str, config: &Config) -> Result<(), Error> {
    if !config.subjects.iter().any(|s| filter_covers(s, filter)) {
        return Err(Error::config(format!(
            "JetStream stream {name:?} has subjects {:?}, which do not cover pgcdc's {filter}; add {filter} to the stream's subjects, or choose a --subject-template the stream covers",
            config.subjects
        )));
    }
    let refuse = |why: &str| Err(Error::config(format!("JetStream stream {name:?} {why}")));
    if config.no_ack {
        return refuse(
            "does not acknowledge publishes (no_ack); pgcdc confirms a change to Postgres only once the stream has acknowledged it",
        );
    }
    if config.sealed {
        return refuse("is sealed: nothing can be published to it");
    }
    if config.mirror.is_some() {
        return refuse("is a mirror: nothing can be published to it");
    }
    if config.retention != RetentionPolicy::Limits {
        tracing::warn!(stream = %name, retention = ?config.retention, "the stream removes messages once consumed; consumers that start later (a new Feldera pipeline) cannot replay from the start");
    }
    Ok(())
}

fn is_stream_not_found(kind: GetStreamErrorKind) -> bool {
    matches!(kind, GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// The stream of the KV bucket holding resume entries (`KV_<bucket>`, laid out as a NATS
/// KV bucket, so `nats kv get <bucket> <key>` shows an entry), found or created with the
/// data stream's replicas.
pub(crate) async fn ensure_resume_bucket(
    context: &js::Context,
    bucket: &str,
    replicas: usize,
) -> Result<stream::Stream, Error> {
    if bucket.is_empty()
        || !bucket
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(Error::config(format!(
            "resume bucket {bucket:?}: a KV bucket name holds only letters, digits, _ and -"
        )));
    }
    let name = format!("KV_{bucket}");
    match context.get_stream(&name).await {
        Ok(stream) => Ok(stream),
        Err(e) if is_stream_not_found(e.kind()) => {
            // Made by hand, not with create_key_value: that needs account details a
            // 2.9 server does not report.
            let config = Config {
                name: name.clone(),
                subjects: vec![format!("$KV.{bucket}.>")],
                max_messages_per_subject: 1,
                max_messages: -1,
                max_bytes: -1,
                discard: DiscardPolicy::Old,
                allow_rollup: true,
                deny_delete: true,
                allow_direct: true,
                num_replicas: replicas,
                storage: StorageType::File,
                ..Config::default()
            };
            context.create_stream(config).await.map_err(|e| {
                Error::sink(format!(
                    "cannot create the KV bucket {bucket:?} for pgcdc's resume entries: {e}"
                ))
            })
        }
        Err(e) => Err(Error::sink(format!(
            "cannot look up the KV bucket {bucket:?} of pgcdc's resume entries: {e}"
        ))),
    }
}

/// The KV subject of `stream`'s resume entry. Stream names may hold bytes a KV key may
/// not; those are written `=XX`.
pub(crate) fn resume_subject(bucket: &str, stream: &str) -> String {
    let mut key = String::with_capacity(stream.len());
    for b in stream.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            key.push(char::from(b));
        } else {
            key.push_str(&format!("={b:02X}"));
        }
    }
    format!("$KV.{bucket}.{key}")
}

/// Reads the resume entry (`None`: none, or deleted).
pub(crate) async fn read_resume_entry(
    bucket: &stream::Stream,
    subject: &str,
) -> Result<Option<ResumeEntry>, Error> {
    match bucket.get_last_raw_message_by_subject(subject).await {
        Ok(message) => {
            let deleted = message
                .headers
                .get("KV-Operation")
                .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
            if deleted || message.payload.is_empty() {
                return Ok(None);
            }
            serde_json::from_slice(&message.payload).map(Some).map_err(|e| {
                Error::sink(format!(
                    "pgcdc's resume entry {subject} does not parse ({e}); it was not written by this pgcdc. Delete it to start over"
                ))
            })
        }
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(Error::transient(format!(
            "cannot read pgcdc's resume entry {subject}: {e}"
        ))),
    }
}

/// Writes the resume entry and waits for its acknowledgement.
pub(crate) async fn write_resume_entry(
    context: &js::Context,
    subject: &str,
    entry: &ResumeEntry,
) -> Result<(), Error> {
    let payload = serde_json::to_vec(entry)
        .map_err(|e| Error::sink(format!("cannot encode the resume entry: {e}")))?;
    let ack = context
        .publish(subject.to_owned(), Bytes::from(payload))
        .await
        .map_err(|e| Error::transient(format!("cannot write the resume entry {subject}: {e}")))?;
    ack.await
        .map_err(|e| Error::transient(format!("the resume entry {subject} was not stored: {e}")))?;
    Ok(())
}

/// The stream's last sequence and the messages recovery reads.
pub(crate) async fn read_stream_state(
    stream: &mut stream::Stream,
    name: &str,
) -> Result<StreamState, Error> {
    let last_sequence = stream
        .info()
        .await
        .map_err(|e| Error::transient(format!("cannot read JetStream stream {name:?}: {e}")))?
        .state
        .last_sequence;
    let last = read_message(stream, name, last_sequence).await?;
    let token_message = match &last {
        Some(m) if m.token.is_none() && m.token_sequence > 0 => {
            read_message(stream, name, m.token_sequence).await?
        }
        _ => None,
    };
    Ok(StreamState {
        last_sequence,
        last,
        token_message,
    })
}

/// The message at `sequence` as recovery reads it; `None` when it is gone.
pub(crate) async fn read_message(
    stream: &stream::Stream,
    name: &str,
    sequence: u64,
) -> Result<Option<StoredMessage>, Error> {
    if sequence == 0 {
        return Ok(None);
    }
    match stream.get_raw_message(sequence).await {
        Ok(message) => StoredMessage::parse(name, sequence, |k| {
            message.headers.get(k).map(|v| v.as_str())
        })
        .map(Some),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(Error::transient(format!(
            "cannot read message {sequence} of JetStream stream {name:?}: {e}"
        ))),
    }
}

/// The `Nats-Msg-Id` of the message at `sequence` (`None`: gone).
pub(crate) async fn message_id(
    stream: &stream::Stream,
    name: &str,
    sequence: u64,
) -> Result<Option<String>, Error> {
    match stream.get_raw_message(sequence).await {
        Ok(message) => Ok(message
            .headers
            .get(super::headers::NATS_MSG_ID)
            .map(|v| v.as_str().to_owned())),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(Error::transient(format!(
            "cannot read message {sequence} of JetStream stream {name:?}: {e}"
        ))),
    }
}

/// Runs `op` until it succeeds or `retry_for` has passed (servers restart, leaders are
/// elected), with a growing pause between tries; the error is the last one.
pub(crate) async fn retrying<T, F, Fut>(
    retry_for: Duration,
    what: &str,
    mut op: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + retry_for;
    let mut pause = Duration::from_millis(50);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() == cdc_core::ErrorKind::Transient && Instant::now() < deadline => {
                tracing::warn!(error = %e, "{what} failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_keys_are_valid_kv_keys_and_distinct() {
        assert_eq!(resume_subject("b", "CDC_1"), "$KV.b.CDC_1");
        assert_eq!(resume_subject("b", "a=b"), "$KV.b.a=3Db");
        assert_ne!(resume_subject("b", "a=3Db"), resume_subject("b", "a=b"));
    }
}
