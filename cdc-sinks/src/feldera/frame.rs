//! Framing: how envelopes are laid out in one output (newline-delimited, or JSON arrays).

use cdc_core::{Result, TableName};

/// How the envelopes of one output are framed.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// One envelope per line (NDJSON; Feldera `array=false`, `lines=single`). Default.
    #[default]
    Lines,
    /// One JSON array of envelopes per written batch, followed by a newline (Feldera
    /// `array=true`). Feldera discards a whole array if one envelope in it is bad.
    ArrayPerBatch,
    /// One JSON array per source transaction (closed at its commit, and at the end of a
    /// batch that ends in the middle of a large transaction), so transaction boundaries
    /// stay visible to the consumer.
    ArrayPerTransaction,
}

/// One output's pending bytes: envelopes framed per [`Framing`], appended to a reused
/// buffer that the owner writes out and clears.
#[derive(Clone, Debug, Default)]
pub struct Frame {
    framing: Framing,
    buf: Vec<u8>,
    array_open: bool,
}

/// A point in a [`Frame`] to roll back to when an event fails half-way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameMark {
    len: usize,
    array_open: bool,
}

impl Frame {
    /// An empty frame.
    pub fn new(framing: Framing) -> Self {
        Frame {
            framing,
            buf: Vec::with_capacity(64 * 1024),
            array_open: false,
        }
    }

    /// The framing.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The bytes produced since the last [`Frame::clear`]. Complete JSON values only after
    /// [`Frame::end_batch`] (an array may still be open before).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Whether no bytes are pending.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Forgets the pending bytes (after the owner wrote them out), keeping the capacity.
    /// An open array stays open: its continuation is written after the cleared bytes.
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Forgets the pending bytes and any open array: the next envelope starts a fresh
    /// frame. Used after a failed batch whose bytes are discarded.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.array_open = false;
    }

    /// Starts one envelope: opens the array or writes the separator, and returns the
    /// buffer to write the envelope's JSON value into.
    pub(crate) fn begin_value(&mut self) -> &mut Vec<u8> {
        match self.framing {
            Framing::Lines => {}
            Framing::ArrayPerBatch | Framing::ArrayPerTransaction => {
                if self.array_open {
                    self.buf.push(b',');
                } else {
                    self.buf.push(b'[');
                    self.array_open = true;
                }
            }
        }
        &mut self.buf
    }

    /// Appends complete records, each a line ending in `\n` (newline-delimited
    /// framing; another format's records, e.g. Debezium's).
    pub(crate) fn append_lines(&mut self, lines: &[u8]) {
        self.buf.extend_from_slice(lines);
    }

    /// Ends the envelope started by [`Frame::begin_value`].
    pub(crate) fn end_value(&mut self) {
        if self.framing == Framing::Lines {
            self.buf.push(b'\n');
        }
    }

    /// Closes an open array, if any.
    pub fn close_array(&mut self) {
        if self.array_open {
            self.buf.extend_from_slice(b"]\n");
            self.array_open = false;
        }
    }

    /// A transaction ended: closes the array under [`Framing::ArrayPerTransaction`].
    pub fn end_transaction(&mut self) {
        if self.framing == Framing::ArrayPerTransaction {
            self.close_array();
        }
    }

    /// A batch ended: closes any open array, so the bytes are complete JSON values.
    pub fn end_batch(&mut self) {
        self.close_array();
    }

    pub(crate) fn mark(&self) -> FrameMark {
        FrameMark {
            len: self.buf.len(),
            array_open: self.array_open,
        }
    }

    /// Drops everything written after `mark`. Only valid for a mark taken since the last
    /// [`Frame::clear`].
    pub(crate) fn rollback(&mut self, mark: FrameMark) {
        self.buf.truncate(mark.len);
        self.array_open = mark.array_open;
    }
}

/// The outputs an encoder writes to: one frame for everything (a multiplexed stream) or
/// one per table.
pub trait FrameSet {
    /// The frame that receives the envelopes of `table`. May create it.
    fn frame(&mut self, table: &TableName) -> Result<&mut Frame>;

    /// A source transaction ended (see [`Framing::ArrayPerTransaction`]).
    fn end_transaction(&mut self);
}

impl FrameSet for Frame {
    fn frame(&mut self, _table: &TableName) -> Result<&mut Frame> {
        Ok(self)
    }

    fn end_transaction(&mut self) {
        Frame::end_transaction(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(frame: &mut Frame, text: &str) {
        frame.begin_value().extend_from_slice(text.as_bytes());
        frame.end_value();
    }

    #[test]
    fn lines_end_each_envelope_with_a_newline() {
        let mut f = Frame::new(Framing::Lines);
        envelope(&mut f, "{}");
        envelope(&mut f, "[]");
        f.end_batch();
        assert_eq!(f.bytes(), b"{}\n[]\n");
    }

    #[test]
    fn arrays_per_batch_and_per_transaction() {
        let mut f = Frame::new(Framing::ArrayPerBatch);
        envelope(&mut f, "1");
        f.end_transaction();
        envelope(&mut f, "2");
        f.end_batch();
        f.end_batch();
        assert_eq!(f.bytes(), b"[1,2]\n");

        let mut f = Frame::new(Framing::ArrayPerTransaction);
        envelope(&mut f, "1");
        f.end_transaction();
        envelope(&mut f, "2");
        f.end_batch();
        assert_eq!(f.bytes(), b"[1]\n[2]\n");
    }

    #[test]
    fn rollback_restores_bytes_and_array_state() {
        let mut f = Frame::new(Framing::ArrayPerBatch);
        let mark = f.mark();
        envelope(&mut f, "1");
        f.rollback(mark);
        envelope(&mut f, "2");
        f.end_batch();
        assert_eq!(f.bytes(), b"[2]\n");
    }
}
