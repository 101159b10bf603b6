//! Rows left in the form their source read them, decoded only where a sink needs values.
//!
//! A snapshot copies millions of rows that a sink writing JSON turns straight back into
//! text. Building a [`Value`] for every field, a [`Row`] and an event for every row, and
//! dropping them all again costs more than the encoding itself. A [`RowBlock`] keeps a
//! few hundred rows as the bytes the source received (for PostgreSQL, binary COPY fields)
//! with where each field lies, and the source's [`FieldDecoder`] that reads them. A sink
//! that declares it takes blocks ([`crate::Sink::takes_row_blocks`]) writes the fields
//! whose [`FieldLayout`] it knows directly and asks the decoder for the others; every
//! other sink is handed one ordinary `Insert` per row by the pipeline ([`expand_blocks`]),
//! decoded by the same decoder, so what a sink sees never depends on the source's choice.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::{ChangeEvent, Error, EventKind, Position, Row, Value};

/// How a column's field bytes are laid out in a [`RowBlock`], for a sink that writes them
/// without decoding. The source's [`FieldDecoder::decode`] gives exactly the value the
/// layout describes for bytes that fit it, and fails for bytes that do not (a wrong
/// length, invalid UTF-8): a sink reading a field directly must fall back to `decode`
/// whenever the bytes do not fit, so that it reports the same error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FieldLayout {
    /// Two bytes, a big-endian two's complement integer: [`Value::Int2`].
    Int2,
    /// Four bytes, a big-endian two's complement integer: [`Value::Int4`].
    Int4,
    /// Eight bytes, a big-endian two's complement integer: [`Value::Int8`].
    Int8,
    /// UTF-8 text: [`Value::Text`] of exactly these bytes.
    Text,
    /// Anything else: only [`FieldDecoder::decode`] reads it.
    Other,
}

/// Reads the fields of the rows a source put in [`RowBlock`]s.
pub trait FieldDecoder: Send + Sync {
    /// The layout of column `column`'s bytes ([`FieldLayout::Other`] for a column the
    /// decoder does not know).
    fn layout(&self, column: usize) -> FieldLayout;

    /// Decodes column `column`'s field, the bytes `data[range]` (a value may keep a slice
    /// of `data` rather than a copy). Errors name the column and what was wrong.
    fn decode(&self, column: usize, data: &Bytes, range: Range<usize>) -> Result<Value, Error>;
}

/// Where one field lies in a block's bytes; [`FieldSpan::NULL`] for a NULL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpan {
    start: u32,
    len: u32,
}

impl FieldSpan {
    /// A NULL field.
    pub const NULL: FieldSpan = FieldSpan {
        start: 0,
        len: u32::MAX,
    };

    /// A field of `len` bytes at `start`; `None` when either does not fit in 32 bits (a
    /// block holds less than 4 GiB: a source cuts its blocks long before).
    pub fn new(start: usize, len: usize) -> Option<FieldSpan> {
        let start = u32::try_from(start).ok()?;
        let len = u32::try_from(len).ok().filter(|&l| l != u32::MAX)?;
        Some(FieldSpan { start, len })
    }

    /// [`FieldSpan::new`] for a source that already knows both fit in 32 bits; `None` only
    /// for a length of `u32::MAX` (the NULL marker).
    pub fn from_u32(start: u32, len: u32) -> Option<FieldSpan> {
        (len != u32::MAX).then_some(FieldSpan { start, len })
    }

    /// The field's byte range, `None` for a NULL.
    pub fn range(self) -> Option<Range<usize>> {
        if self.len == u32::MAX {
            return None;
        }
        let start = self.start as usize;
        Some(start..start + self.len as usize)
    }
}

/// Rows of one table as their source read them: the bytes, where each row's fields lie,
/// and the decoder that reads them (see the module doc).
///
/// Every field span lies within the bytes ([`RowBlock::new`] checks), so reading a field
/// never fails for lack of bytes; decoding may fail for bytes the type does not accept.
/// Two blocks are equal when they have the same width and the same fields (bytes, and
/// where NULL), whatever their decoders.
#[derive(Clone)]
pub struct RowBlock {
    data: Bytes,
    /// `width` spans per row, row after row.
    fields: Vec<FieldSpan>,
    width: usize,
    decoder: Arc<dyn FieldDecoder>,
}

impl RowBlock {
    /// A block of rows `width` fields wide: `fields` holds each row's spans in turn.
    /// Fails when `width` is 0, `fields` is not a whole number of rows, or a span lies
    /// outside `data`.
    pub fn new(
        data: Bytes,
        fields: Vec<FieldSpan>,
        width: usize,
        decoder: Arc<dyn FieldDecoder>,
    ) -> Result<RowBlock, Error> {
        if width == 0 || !fields.len().is_multiple_of(width) {
            return Err(Error::protocol(format!(
                "internal: a row block of {} fields is not a whole number of rows {width} wide",
                fields.len()
            )));
        }
        // Without an early exit, so that the check is a few instructions a field.
        let len = data.len() as u64;
        let mut outside = false;
        for span in &fields {
            outside |= span.len != u32::MAX && u64::from(span.start) + u64::from(span.len) > len;
        }
        if outside {
            return Err(Error::protocol(format!(
                "internal: a field of a row block lies outside its {} bytes",
                data.len()
            )));
        }
        Ok(RowBlock {
            data,
            fields,
            width,
            decoder,
        })
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.fields.len() / self.width
    }

    /// Whether the block holds no rows.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Fields per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The layout of column `column`'s fields.
    pub fn layout(&self, column: usize) -> FieldLayout {
        self.decoder.layout(column)
    }

    /// Row `row`'s fields: each `None` for a NULL, else its bytes. `None` past the last
    /// row.
    pub fn row(&self, row: usize) -> Option<impl ExactSizeIterator<Item = Option<&[u8]>>> {
        let spans = self.fields.get(row * self.width..(row + 1) * self.width)?;
        Some(spans.iter().map(|span| {
            span.range()
                .map(|range| self.data.get(range).unwrap_or_default())
        }))
    }

    /// Decodes column `column` of row `row` (a NULL is [`Value::Null`]).
    pub fn decode(&self, row: usize, column: usize) -> Result<Value, Error> {
        let span = self
            .fields
            .get(row * self.width + column)
            .filter(|_| column < self.width)
            .ok_or_else(|| {
                Error::protocol(format!(
                    "internal: no field {column} of row {row} in a row block of {} rows",
                    self.len()
                ))
            })?;
        match span.range() {
            None => Ok(Value::Null),
            Some(range) => self.decoder.decode(column, &self.data, range),
        }
    }

    /// Decodes every field of row `row`.
    pub fn decode_row(&self, row: usize) -> Result<Row, Error> {
        (0..self.width)
            .map(|column| self.decode(row, column))
            .collect()
    }

    /// Drops the first `rows` rows (all of them when there are fewer).
    pub fn skip_rows(&mut self, rows: usize) {
        let fields = rows.saturating_mul(self.width).min(self.fields.len());
        self.fields.drain(..fields);
    }

    /// Approximate memory held, for byte-bounded batching.
    pub fn approx_size(&self) -> usize {
        self.data.len() + self.fields.len() * std::mem::size_of::<FieldSpan>()
    }

    fn field_bytes(&self) -> impl Iterator<Item = Option<&[u8]>> {
        self.fields.iter().map(|span| {
            span.range()
                .map(|range| self.data.get(range).unwrap_or_default())
        })
    }
}

impl PartialEq for RowBlock {
    fn eq(&self, other: &Self) -> bool {
        self.width == other.width
            && self.fields.len() == other.fields.len()
            && self.field_bytes().eq(other.field_bytes())
    }
}

impl Eq for RowBlock {}

impl fmt::Debug for RowBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowBlock")
            .field("rows", &self.len())
            .field("width", &self.width)
            .field("bytes", &self.data.len())
            .finish_non_exhaustive()
    }
}

/// The position of row `row` of a block of `rows` rows whose event is at `last` (the
/// block's last row's position); `None` if the rows would start before ordinal 0.
pub fn block_row_position(last: Position, rows: usize, row: usize) -> Option<Position> {
    let back = rows.checked_sub(1)?.checked_sub(row)?;
    let ordinal = last.ordinal.checked_sub(u64::try_from(back).ok()?)?;
    Some(Position::new(last.commit_lsn, ordinal))
}

/// Replaces every [`EventKind::InsertBlock`] in `events` by one `Insert` per row, decoded
/// by the block's decoder, at the rows' own positions; true if there was one. Fails on
/// the first field that does not decode (as the source would have, decoding the row
/// itself).
pub fn expand_blocks(events: &mut Vec<ChangeEvent>) -> Result<bool, Error> {
    if !events
        .iter()
        .any(|e| matches!(e.kind, EventKind::InsertBlock { .. }))
    {
        return Ok(false);
    }
    let mut expanded = Vec::with_capacity(events.len());
    for event in events.drain(..) {
        let EventKind::InsertBlock { table, rows } = event.kind else {
            expanded.push(event);
            continue;
        };
        let n = rows.len();
        expanded.reserve(n);
        for row in 0..n {
            let position = block_row_position(event.position, n, row).ok_or_else(|| {
                Error::protocol(format!(
                    "internal: a block of {n} rows of {} at {} starts before ordinal 0",
                    table.name, event.position
                ))
            })?;
            expanded.push(ChangeEvent {
                position,
                lsn: event.lsn,
                kind: EventKind::Insert {
                    table: table.clone(),
                    new: rows.decode_row(row)?,
                },
            });
        }
    }
    *events = expanded;
    Ok(true)
}

/// Drops from `events` every event, and every row of a block, at or before `after`: a
/// replay of what a sink already holds. Returns whether anything was dropped.
pub fn drop_replayed(events: &mut Vec<ChangeEvent>, after: Position) -> bool {
    let before: usize = events.iter().map(ChangeEvent::events_held).sum();
    events.retain_mut(|event| {
        if event.position <= after {
            return false;
        }
        if let EventKind::InsertBlock { rows, .. } = &mut event.kind {
            let n = rows.len();
            // Rows at or before `after`: the block's first rows.
            let replayed = (0..n)
                .take_while(|&row| {
                    block_row_position(event.position, n, row).is_none_or(|p| p <= after)
                })
                .count();
            rows.skip_rows(replayed);
        }
        true
    });
    before != events.iter().map(ChangeEvent::events_held).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Lsn, TableName, TableSchema, Text};

    /// Column 0: a big-endian int4; column 1: UTF-8 text.
    struct IntText;

    impl FieldDecoder for IntText {
        fn layout(&self, column: usize) -> FieldLayout {
            match column {
                0 => FieldLayout::Int4,
                1 => FieldLayout::Text,
                _ => FieldLayout::Other,
            }
        }

        fn decode(&self, column: usize, data: &Bytes, range: Range<usize>) -> Result<Value, Error> {
            let bytes = data.slice(range);
            match column {
                0 => <[u8; 4]>::try_from(&bytes[..])
                    .map(|b| Value::Int4(i32::from_be_bytes(b)))
                    .map_err(|_| Error::protocol("int4 of the wrong length")),
                _ => Text::from_utf8(bytes)
                    .map(Value::Text)
                    .map_err(|_| Error::protocol("invalid UTF-8")),
            }
        }
    }

    /// A block of `(id, name)` rows; `None` names are NULL.
    fn block(rows: &[(i32, Option<&[u8]>)]) -> RowBlock {
        let mut data = Vec::new();
        let mut fields = Vec::new();
        for (id, name) in rows {
            fields.push(FieldSpan::new(data.len(), 4).unwrap());
            data.extend_from_slice(&id.to_be_bytes());
            match name {
                Some(name) => {
                    fields.push(FieldSpan::new(data.len(), name.len()).unwrap());
                    data.extend_from_slice(name);
                }
                None => fields.push(FieldSpan::NULL),
            }
        }
        RowBlock::new(Bytes::from(data), fields, 2, Arc::new(IntText)).unwrap()
    }

    fn schema() -> crate::SchemaRef {
        Arc::new(TableSchema {
            name: TableName::new("public", "t"),
            relation_id: 1,
            columns: Vec::new(),
            replica_identity: crate::ReplicaIdentity::Default,
            primary_key: Vec::new(),
        })
    }

    fn at(ordinal: u64) -> Position {
        Position::new(Lsn(0x100), ordinal)
    }

    fn block_event(rows: RowBlock, last: u64) -> ChangeEvent {
        ChangeEvent {
            position: at(last),
            lsn: Lsn::ZERO,
            kind: EventKind::InsertBlock {
                table: schema(),
                rows,
            },
        }
    }

    fn marker(ordinal: u64) -> ChangeEvent {
        ChangeEvent {
            position: at(ordinal),
            lsn: Lsn::ZERO,
            kind: EventKind::Snapshot(crate::SnapshotMarker::Started),
        }
    }

    #[test]
    fn spans_outside_the_bytes_or_rows_cut_short_are_refused() {
        let decoder: Arc<dyn FieldDecoder> = Arc::new(IntText);
        let data = Bytes::from_static(b"abcd");
        let inside = FieldSpan::new(0, 4).unwrap();
        let past = FieldSpan::new(2, 3).unwrap();
        assert!(RowBlock::new(data.clone(), vec![inside, inside], 2, decoder.clone()).is_ok());
        assert!(RowBlock::new(data.clone(), vec![inside, past], 2, decoder.clone()).is_err());
        assert!(RowBlock::new(data.clone(), vec![inside], 2, decoder.clone()).is_err());
        assert!(RowBlock::new(data, vec![], 0, decoder).is_err());
        assert!(
            FieldSpan::new(0, u32::MAX as usize).is_none(),
            "the NULL marker"
        );
    }

    #[test]
    fn expanding_gives_each_row_its_insert_at_its_own_position() {
        let rows = block(&[
            (1, Some(b"a")),
            (-7, None),
            (i32::MAX, Some("é\"".as_bytes())),
        ]);
        let mut events = vec![marker(4), block_event(rows, 7), marker(8)];
        assert!(expand_blocks(&mut events).unwrap());
        let seen: Vec<_> = events
            .iter()
            .map(|e| {
                let values = match &e.kind {
                    EventKind::Insert { new, .. } => Some(new.clone()),
                    _ => None,
                };
                (e.position.ordinal, values)
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (4, None),
                (5, Some(vec![Value::Int4(1), Value::Text(Text::from("a"))])),
                (6, Some(vec![Value::Int4(-7), Value::Null])),
                (
                    7,
                    Some(vec![Value::Int4(i32::MAX), Value::Text(Text::from("é\""))])
                ),
                (8, None),
            ]
        );
        assert!(
            !expand_blocks(&mut events).unwrap(),
            "nothing left to expand"
        );
    }

    #[test]
    fn a_field_that_does_not_decode_fails_the_expansion() {
        let rows = block(&[(1, Some(&[0xff, 0xfe]))]);
        let mut events = vec![block_event(rows, 0)];
        let err = expand_blocks(&mut events).unwrap_err();
        assert!(err.to_string().contains("invalid UTF-8"), "{err}");
    }

    #[test]
    fn a_block_cannot_start_before_ordinal_zero() {
        let rows = block(&[(1, None), (2, None), (3, None)]);
        let mut events = vec![block_event(rows, 1)];
        assert!(expand_blocks(&mut events).is_err());
    }

    #[test]
    fn a_replay_drops_the_rows_it_covers_and_keeps_the_rest() {
        let rows = block(&[(1, None), (2, None), (3, None), (4, None)]);
        // Rows at ordinals 10..=13.
        let mut events = vec![marker(9), block_event(rows.clone(), 13), marker(14)];
        assert!(drop_replayed(&mut events, at(11)));
        let EventKind::InsertBlock { rows: kept, .. } = &events[0].kind else {
            panic!("{events:?}");
        };
        assert_eq!(kept.len(), 2);
        assert_eq!(kept.decode(0, 0).unwrap(), Value::Int4(3));
        assert_eq!(events.len(), 2);
        // The rest expands to the rows' own positions still.
        expand_blocks(&mut events).unwrap();
        let ordinals: Vec<_> = events.iter().map(|e| e.position.ordinal).collect();
        assert_eq!(ordinals, vec![12, 13, 14]);

        let mut whole = vec![block_event(rows.clone(), 13)];
        assert!(drop_replayed(&mut whole, at(13)));
        assert!(whole.is_empty());
        let mut none = vec![block_event(rows, 13)];
        assert!(!drop_replayed(&mut none, at(9)));
        assert_eq!(none[0].events_held(), 4);
    }

    #[test]
    fn blocks_are_equal_by_their_fields_and_read_back_what_they_hold() {
        let a = block(&[(1, Some(b"x")), (2, None)]);
        assert_eq!(a, block(&[(1, Some(b"x")), (2, None)]));
        assert_ne!(
            a,
            block(&[(1, Some(b"x")), (2, Some(b""))]),
            "NULL is not empty"
        );
        assert_ne!(a, block(&[(1, Some(b"x"))]));
        let second: Vec<_> = a.row(1).unwrap().collect();
        assert_eq!(second, vec![Some(&2i32.to_be_bytes()[..]), None]);
        assert!(a.row(2).is_none());
        assert!(a.decode(0, 2).is_err(), "no third column");
        assert_eq!(a.layout(0), FieldLayout::Int4);
    }
}
