//! A Feldera-style JSON stream to any `std::io::Write` (stdout, a pipe, a socket).

use std::io::Write;

use async_trait::async_trait;
use cdc_core::{Ack, Acknowledger, Error, Position, Result, ResumeToken, Sink, SinkBatch};

use super::{EncoderOptions, FelderaEncoder, Frame, Framing, PolicyLog};

/// Writes every table's envelopes into one stream (multiplexed; set
/// [`EncoderOptions::table_key`] so a reader can tell tables apart).
///
/// Stateless: `open` returns `None`, a checkpoint is a flush, so a restart resumes from
/// wherever the pipeline's own state says and a consumer may see events again after a
/// crash (at-least-once). Use [`crate::file::FelderaFileSink`] for exactly-once output.
/// Writes are blocking; meant for pipes and terminals.
#[derive(Debug)]
pub struct FelderaStreamSink<W> {
    writer: W,
    encoder: FelderaEncoder,
    frame: Frame,
    last_position: Option<Position>,
}

impl<W: Write + Send> FelderaStreamSink<W> {
    /// A sink writing to `writer`.
    pub fn new(writer: W, options: EncoderOptions, framing: Framing) -> Self {
        FelderaStreamSink {
            writer,
            encoder: FelderaEncoder::new(options),
            frame: Frame::new(framing),
            last_position: None,
        }
    }

    /// The encoder (policy counts, statistics).
    pub fn encoder(&self) -> &FelderaEncoder {
        &self.encoder
    }

    /// The policy counts, shared: readable while the sink runs in a pipeline.
    pub fn policy_log(&self) -> PolicyLog {
        self.encoder.policy_log().clone()
    }

    /// The writer.
    pub fn writer(&self) -> &W {
        &self.writer
    }

    /// Consumes the sink, returning the writer.
    pub fn into_writer(self) -> W {
        self.writer
    }
}

#[async_trait]
impl<W: Write + Send> Sink for FelderaStreamSink<W> {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        Ok(None)
    }

    /// Encodes the batch, writes it and flushes the writer (a stream is not durable
    /// anyway: nothing waits for a checkpoint); `Done` once the bytes are handed on. An
    /// event that cannot be encoded fails the whole batch before any of it is written.
    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        self.frame.reset();
        let mut last = self.last_position;
        for event in &batch.batch.events {
            if last.is_some_and(|p| event.position <= p) {
                continue;
            }
            self.encoder.encode_event(event, &mut self.frame)?;
            last = Some(event.position);
        }
        self.frame.end_batch();
        self.writer
            .write_all(self.frame.bytes())
            .and_then(|()| self.writer.flush())
            .map_err(|e| Error::sink("writing the Feldera JSON stream failed").with_source(e))?;
        self.frame.clear();
        self.last_position = last;
        Ok(Ack::Done)
    }

    /// Flushes the writer. Nothing is stored with `token`.
    async fn checkpoint(&mut self, _token: &ResumeToken) -> Result<Ack> {
        self.writer
            .flush()
            .map_err(|e| Error::sink("flushing the Feldera JSON stream failed").with_source(e))?;
        Ok(Ack::Done)
    }

    async fn close(&mut self) -> Result<()> {
        self.writer
            .flush()
            .map_err(|e| Error::sink("flushing the Feldera JSON stream failed").with_source(e))
    }

    /// Snapshot rows in blocks are written straight from their bytes (see
    /// [`cdc_core::RowBlock`]), with the same output as one insert per row.
    fn takes_row_blocks(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::{ReplicaIdentity, Value};

    use super::*;
    use crate::testing::{self, batch, delete, insert, pos, text};

    #[tokio::test]
    async fn a_failed_batch_writes_nothing_and_the_next_starts_a_fresh_array() {
        let t = testing::table(
            "t",
            &[("id", 23), ("v", 25)],
            &["id"],
            ReplicaIdentity::Nothing,
        );
        let options = EncoderOptions {
            table_key: true,
            ..EncoderOptions::default()
        };
        let mut sink = FelderaStreamSink::new(Vec::new(), options, Framing::ArrayPerBatch);
        assert_eq!(sink.open(Acknowledger::channel().0).await.unwrap(), None);
        let good = insert(pos(1, 1), &t, vec![Value::Int4(1), text("a")]);
        let bad = delete(pos(1, 2), &t, None);
        assert!(sink.write(batch(0, vec![good.clone(), bad])).await.is_err());
        assert!(sink.writer().is_empty());
        sink.write(batch(1, vec![good])).await.unwrap();
        sink.checkpoint(&testing::token(None)).await.unwrap();
        assert_eq!(
            String::from_utf8(sink.into_writer()).unwrap(),
            "[{\"table\":\"public.t\",\"insert\":{\"id\":1,\"v\":\"a\"}}]\n"
        );
    }
}
