//! A COPY read in groups of whole rows, each group one message: segments for the decoding
//! tasks (`parallel_decode`), or blocks for a sink that takes row blocks (`row_blocks`).

use cdc_core::Error;

use super::copy_binary::{CopyBinaryDecoder, FieldSpan};
use super::copy_rows::{ROWS_PER_MESSAGE, check_ended};
use crate::conn::sql_session::{CopyOut, SqlSession};

/// A group ends at this many bytes (its rows' and their fields' spans), if not at
/// [`ROWS_PER_MESSAGE`] rows before (a row larger than this is a group of its own).
const SEGMENT_BYTES: usize = 1 << 20;

/// Whole rows of one COPY gathered for one message.
pub(super) trait RowGroup {
    /// What one message carries.
    type Out;
    /// Adds a row: its bytes and its fields' spans within them.
    fn push(&mut self, row: &[u8], spans: &[Option<FieldSpan>]) -> Result<(), Error>;
    /// Rows held.
    fn rows(&self) -> usize;
    /// Bytes held.
    fn size(&self) -> usize;
    /// The rows held, for a message; the group starts over with room for as much.
    fn take(&mut self) -> Result<Self::Out, Error>;
}

/// A COPY read in groups of [`ROWS_PER_MESSAGE`] whole rows (fewer when they reach
/// [`SEGMENT_BYTES`]).
pub(super) struct GroupedCopy<G> {
    framer: CopyBinaryDecoder,
    group: G,
    ended: bool,
}

impl<G: RowGroup> GroupedCopy<G> {
    /// A reader of a COPY of rows `width` fields wide, gathering them in `group`.
    pub(super) fn new(width: usize, group: G) -> Self {
        GroupedCopy {
            framer: CopyBinaryDecoder::new(Some(width)),
            group,
            ended: false,
        }
    }

    /// The groups one read of `copy` completes (the caller hands them on before the next
    /// read, so a full queue holds the COPY back and memory stays bounded); at the end of
    /// the COPY, checked whole, its last group; `None` once everything was handed out.
    /// Errors name `context`.
    pub(super) async fn next(
        &mut self,
        session: &mut SqlSession,
        copy: &mut CopyOut,
        context: &str,
    ) -> Result<Option<Vec<G::Out>>, Error> {
        if self.ended {
            return Ok(None);
        }
        let mut full = Vec::new();
        let (framer, group) = (&mut self.framer, &mut self.group);
        let more = session
            .copy_data(copy, |data| {
                framer.decode(
                    data,
                    |row, spans| {
                        group.push(row, spans)?;
                        if group.rows() == ROWS_PER_MESSAGE || group.size() >= SEGMENT_BYTES {
                            full.push(group.take()?);
                        }
                        Ok(())
                    },
                    |e| Error::protocol(format!("{context}: {e}")),
                )
            })
            .await?;
        if !more {
            self.ended = true;
            check_ended(&self.framer, context)?;
            if self.group.rows() > 0 {
                full.push(self.group.take()?);
            }
        }
        Ok(Some(full))
    }
}
