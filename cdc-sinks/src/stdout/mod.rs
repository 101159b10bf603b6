//! Human-readable or JSON lines, one per event, for demos and debugging.

use std::io::Write;

use async_trait::async_trait;
use cdc_core::{Ack, Acknowledger, ChangeEvent, Error, Result, ResumeToken, Sink, SinkBatch};

mod debug_json;
#[cfg(test)]
mod fixtures;
mod text;

use debug_json::JsonRenderer;

use crate::debezium::{DebeziumEncoder, DebeziumOptions};

/// How the stdout sink prints events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StdoutFormat {
    /// `INSERT public.t @0/16B3748#1: id=1 name='x'`. Default.
    #[default]
    Text,
    /// One JSON object per event: `{"op":"insert","position":"0/16B3748#1","table":"public.t","new":{…}}`.
    /// Values as in the Feldera encoding with
    /// [`Policies::lossless`](crate::feldera::Policies::lossless) (NaN, infinities and
    /// out-of-range dates as strings); unchanged TOAST columns are left out of `new` and
    /// listed in `"unchanged"`.
    Json,
    /// Debezium records, one per line (see [`crate::debezium`]); named and described by
    /// [`StdoutSink::with_debezium`].
    Debezium,
}

/// Prints every event to a writer (stdout by default).
///
/// Keeps no state: `open` returns `None`, a checkpoint is a flush. Writes are blocking
/// (fine for a terminal or a pipe; use it for demos and debugging, not throughput).
#[derive(Debug)]
pub struct StdoutSink<W> {
    writer: W,
    format: StdoutFormat,
    buf: Vec<u8>,
    json: JsonRenderer,
    debezium: DebeziumEncoder,
}

impl StdoutSink<std::io::Stdout> {
    /// A sink printing to the process's standard output.
    pub fn stdout(format: StdoutFormat) -> Self {
        StdoutSink::new(std::io::stdout(), format)
    }
}

impl<W: Write + Send> StdoutSink<W> {
    /// A sink printing to `writer` (tests pass a `Vec<u8>`).
    pub fn new(writer: W, format: StdoutFormat) -> Self {
        StdoutSink {
            writer,
            format,
            buf: Vec::with_capacity(16 * 1024),
            json: JsonRenderer::new(),
            debezium: DebeziumEncoder::new(DebeziumOptions::new("pgcdc", "")),
        }
    }

    /// The Debezium records' name and database (with [`StdoutFormat::Debezium`]).
    pub fn with_debezium(mut self, options: DebeziumOptions) -> Self {
        self.debezium = DebeziumEncoder::new(options);
        self
    }

    /// The writer.
    pub fn writer(&self) -> &W {
        &self.writer
    }

    /// Consumes the sink, returning the writer.
    pub fn into_writer(self) -> W {
        self.writer
    }

    /// Appends the line for `event` to `out`. Text never fails; JSON fails with
    /// `Rejected` on a value it cannot express (binary-form values of unknown types, an
    /// unchanged TOAST value in a full row, malformed `json`), leaving `out` as it was.
    pub fn render(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) -> Result<()> {
        match self.format {
            StdoutFormat::Text => {
                text::render(event, out);
                Ok(())
            }
            StdoutFormat::Json => self.json.render(event, out),
            StdoutFormat::Debezium => self.debezium.encode(event, out),
        }
    }
}

#[async_trait]
impl<W: Write + Send> Sink for StdoutSink<W> {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        Ok(None)
    }

    /// Renders every event of the batch, writes and flushes them (the output is not
    /// durable anyway, so nothing waits for a checkpoint); `Done` once written.
    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut result = Ok(());
        for event in &batch.batch.events {
            result = self.render(event, &mut buf);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() && self.format == StdoutFormat::Debezium {
            self.debezium.end_of_batch(&mut buf);
        }
        let result = result.and_then(|()| {
            self.writer
                .write_all(&buf)
                .and_then(|()| self.writer.flush())
                .map_err(|e| Error::sink("writing to the stdout sink failed").with_source(e))
        });
        self.buf = buf;
        result.map(|()| Ack::Done)
    }

    /// Flushes the writer; nothing is stored with the token.
    async fn checkpoint(&mut self, _token: &ResumeToken) -> Result<Ack> {
        self.writer
            .flush()
            .map_err(|e| Error::sink("flushing the stdout sink failed").with_source(e))?;
        Ok(Ack::Done)
    }

    async fn close(&mut self) -> Result<()> {
        if self.format == StdoutFormat::Debezium {
            // A snapshot row held for its label (see `DebeziumEncoder::finish`).
            let mut rest = Vec::new();
            self.debezium.finish(&mut rest);
            self.writer
                .write_all(&rest)
                .map_err(|e| Error::sink("writing to the stdout sink failed").with_source(e))?;
        }
        self.writer
            .flush()
            .map_err(|e| Error::sink("flushing the stdout sink failed").with_source(e))
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::{ReplicaIdentity, Value};

    use super::*;
    use crate::testing::{self, batch, delete, insert, old_key, pos, text, update};

    fn output(format: StdoutFormat) -> String {
        let k = testing::table(
            "k",
            &[("id", 23), ("body", 25), ("x", 701)],
            &["id"],
            ReplicaIdentity::Default,
        );
        let events = vec![
            testing::begin(16),
            insert(
                pos(16, 1),
                &k,
                vec![Value::Int4(1), text("it's"), Value::Float8(f64::NAN)],
            ),
            update(
                pos(16, 2),
                &k,
                None,
                vec![Value::Int4(1), Value::Unchanged, Value::Null],
            ),
            update(
                pos(16, 3),
                &k,
                old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
                vec![Value::Int4(2), text("b"), Value::Float8(0.5)],
            ),
            delete(
                pos(16, 4),
                &k,
                old_key(vec![Value::Int4(2), Value::Null, Value::Null]),
            ),
            testing::commit(16, 5),
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut sink = StdoutSink::new(Vec::new(), format);
        rt.block_on(async {
            assert_eq!(sink.open(Acknowledger::channel().0).await.unwrap(), None);
            assert_eq!(sink.write(batch(0, events)).await.unwrap(), Ack::Done);
            assert_eq!(
                sink.checkpoint(&testing::token(None)).await.unwrap(),
                Ack::Done
            );
        });
        String::from_utf8(sink.into_writer()).unwrap()
    }

    #[test]
    fn text_lines_show_op_table_position_and_values() {
        assert_eq!(
            output(StdoutFormat::Text),
            "BEGIN xid=1 final_lsn=0/10 @0/10#0\n\
             INSERT public.k @0/10#1: id=1 body='it''s' x=NaN\n\
             UPDATE public.k @0/10#2: id=1 body=<unchanged> x=NULL (no old row)\n\
             UPDATE public.k @0/10#3: id=2 body='b' x=0.5 (old key: id=1)\n\
             DELETE public.k @0/10#4: (old key: id=2)\n\
             COMMIT lsn=0/10 end_lsn=0/18 @0/10#5\n"
        );
    }

    #[test]
    fn json_lines_are_valid_json_with_unchanged_columns_listed() {
        let out = output(StdoutFormat::Json);
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[0]["op"], "begin");
        assert_eq!(lines[0]["commit_time"], "2000-01-01T00:00:00.000000Z");
        assert_eq!(
            lines[1]["new"],
            serde_json::json!({"id": 1, "body": "it's", "x": "NaN"})
        );
        assert_eq!(lines[2]["new"], serde_json::json!({"id": 1, "x": null}));
        assert_eq!(lines[2]["unchanged"], serde_json::json!(["body"]));
        assert_eq!(lines[2]["old"], serde_json::Value::Null);
        assert_eq!(lines[3]["old"], serde_json::json!({"id": 1}));
        assert_eq!(lines[3]["old_kind"], "key");
        assert_eq!(lines[4]["op"], "delete");
        assert_eq!(lines[4]["table"], "public.k");
        assert_eq!(lines[4]["position"], "0/10#4");
        assert_eq!(lines[5]["end_lsn"], "0/18");
    }
}
