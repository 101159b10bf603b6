//! Rows in blocks are written exactly as the same rows one insert at a time: the
//! expansion the pipeline does for sinks that do not take blocks (the source's decoder
//! and the `Value` path) is the oracle for the encoder's direct path.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use cdc_core::row_block::expand_blocks;
use cdc_core::{
    ChangeEvent, Error, EventKind, FieldDecoder, FieldLayout, FieldSpan, Lsn, ReplicaIdentity,
    RowBlock, SchemaRef, Text, Value,
};
use proptest::prelude::*;

use super::*;
use crate::testing::{self, pos};

/// int2, int4, int8, text, float8 (big-endian bits, read only by `decode`), bool (one
/// byte, likewise): the layouts a PostgreSQL source reports and one it does not.
struct Decoder;

const LAYOUTS: [FieldLayout; 6] = [
    FieldLayout::Int2,
    FieldLayout::Int4,
    FieldLayout::Int8,
    FieldLayout::Text,
    FieldLayout::Other,
    FieldLayout::Other,
];

impl FieldDecoder for Decoder {
    fn layout(&self, column: usize) -> FieldLayout {
        LAYOUTS.get(column).copied().unwrap_or(FieldLayout::Other)
    }

    fn decode(&self, column: usize, data: &Bytes, range: Range<usize>) -> Result<Value, Error> {
        let bytes = data.slice(range);
        let wrong = || Error::protocol(format!("column {column}: {} bytes", bytes.len()));
        Ok(match column {
            0 => Value::Int2(i16::from_be_bytes(
                (&bytes[..]).try_into().map_err(|_| wrong())?,
            )),
            1 => Value::Int4(i32::from_be_bytes(
                (&bytes[..]).try_into().map_err(|_| wrong())?,
            )),
            2 => Value::Int8(i64::from_be_bytes(
                (&bytes[..]).try_into().map_err(|_| wrong())?,
            )),
            3 => Value::Text(
                Text::from_utf8(bytes.clone()).map_err(|_| Error::protocol("invalid UTF-8"))?,
            ),
            4 => Value::Float8(f64::from_be_bytes(
                (&bytes[..]).try_into().map_err(|_| wrong())?,
            )),
            _ => match &bytes[..] {
                [b] => Value::Bool(*b != 0),
                _ => return Err(wrong()),
            },
        })
    }
}

fn schema() -> SchemaRef {
    testing::table(
        "blocks",
        &[
            ("a", 21),
            ("b", 23),
            ("c", 20),
            ("d\"q", 25),
            ("e", 701),
            ("f", 16),
        ],
        &["b"],
        ReplicaIdentity::Default,
    )
}

/// One field as a source would send it: `None` for NULL.
type Field = Option<Vec<u8>>;

fn field(column: usize) -> BoxedStrategy<Field> {
    let well_formed: BoxedStrategy<Vec<u8>> = match column {
        0 => any::<i16>().prop_map(|v| v.to_be_bytes().to_vec()).boxed(),
        1 => any::<i32>().prop_map(|v| v.to_be_bytes().to_vec()).boxed(),
        2 => any::<i64>().prop_map(|v| v.to_be_bytes().to_vec()).boxed(),
        3 => "\\PC*|[\\x00-\\x7f]{0,40}"
            .prop_map(String::into_bytes)
            .boxed(),
        4 => any::<f64>().prop_map(|v| v.to_be_bytes().to_vec()).boxed(),
        _ => any::<bool>().prop_map(|b| vec![u8::from(b)]).boxed(),
    };
    prop_oneof![
        20 => well_formed.prop_map(Some),
        2 => Just(None),
        // Bytes that do not fit the column: a wrong length, invalid UTF-8.
        1 => proptest::collection::vec(any::<u8>(), 0..10).prop_map(Some),
    ]
    .boxed()
}

fn row() -> impl Strategy<Value = Vec<Field>> {
    (0..LAYOUTS.len()).map(field).collect::<Vec<_>>()
}

fn block(rows: &[Vec<Field>]) -> RowBlock {
    let mut data = Vec::new();
    let mut spans = Vec::new();
    for row in rows {
        for field in row {
            match field {
                Some(bytes) => {
                    spans.push(FieldSpan::new(data.len(), bytes.len()).unwrap());
                    data.extend_from_slice(bytes);
                }
                None => spans.push(FieldSpan::NULL),
            }
        }
    }
    RowBlock::new(Bytes::from(data), spans, LAYOUTS.len(), Arc::new(Decoder)).unwrap()
}

/// What the encoder writes for `events`, or that it failed.
fn encode(options: EncoderOptions, events: &[ChangeEvent]) -> Result<Vec<u8>, Error> {
    let mut encoder = FelderaEncoder::new(options);
    let mut frame = Frame::new(Framing::Lines);
    for event in events {
        encoder.encode_event(event, &mut frame)?;
    }
    Ok(frame.bytes().to_vec())
}

proptest! {
    #[test]
    fn a_block_is_written_as_its_rows_inserted_one_by_one(
        rows in proptest::collection::vec(row(), 1..20),
        table_key in any::<bool>(),
        non_finite_error in any::<bool>(),
    ) {
        let mut policies = Policies::default();
        if non_finite_error {
            policies.non_finite = super::policy::NonFinitePolicy::Error;
        }
        let options = EncoderOptions::new(policies, table_key);
        let last = pos(0x40, 100 + rows.len() as u64);
        let blocks = vec![ChangeEvent {
            position: last,
            lsn: Lsn::ZERO,
            kind: EventKind::InsertBlock { table: schema(), rows: block(&rows) },
        }];
        let direct = encode(options, &blocks);
        let mut inserts = blocks.clone();
        match expand_blocks(&mut inserts) {
            Err(_) => prop_assert!(direct.is_err(), "the block was written though a row does not decode"),
            Ok(_) => {
                let oracle = encode(options, &inserts);
                match (direct, oracle) {
                    (Ok(direct), Ok(oracle)) => prop_assert_eq!(
                        String::from_utf8_lossy(&direct),
                        String::from_utf8_lossy(&oracle)
                    ),
                    (Err(_), Err(_)) => {}
                    (direct, oracle) => prop_assert!(false, "block {direct:?}, rows {oracle:?}"),
                }
            }
        }
    }
}

#[test]
fn a_block_narrower_than_its_table_is_refused_and_nothing_is_written() {
    let narrow = RowBlock::new(
        Bytes::from_static(&[0, 1]),
        vec![FieldSpan::new(0, 2).unwrap()],
        1,
        Arc::new(Decoder),
    )
    .unwrap();
    let event = ChangeEvent {
        position: pos(0x40, 1),
        lsn: Lsn::ZERO,
        kind: EventKind::InsertBlock {
            table: schema(),
            rows: narrow,
        },
    };
    let mut encoder = FelderaEncoder::new(EncoderOptions::default());
    let mut frame = Frame::new(Framing::Lines);
    let err = encoder.encode_event(&event, &mut frame).unwrap_err();
    assert!(
        err.to_string().contains("1 values but the table has 6"),
        "{err}"
    );
    assert!(frame.bytes().is_empty());
}
