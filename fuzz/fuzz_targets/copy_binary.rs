//! Binary COPY reader: `CopyBinaryDecoder` fed the same bytes in arbitrary chunkings.
//!
//! Input: byte 0 picks `expected_fields` (0 → `None`, n → `Some(n - 1)`), bytes 1–4 are the
//! chunk sizes used in turn (each `b % 64 + 1`, so every chunking from single bytes up is
//! reachable), the rest is the COPY data.
//!
//! Checks, beyond "never panics": the rows, the error (with its offset), `is_done` and
//! `has_pending_bytes` are the same as when the data arrives in one piece, whether the
//! rows are drained one by one after each chunk (`feed` + `next_row_with`) or parsed in
//! place (`decode`); a failing call fails the same way when repeated; after `is_done`
//! nothing more is returned; `has_pending_bytes` is false when every fed byte was
//! consumed.

#![no_main]

use bytes::Bytes;
use cdc_postgres::snapshot::copy_binary::{FieldSpan, field};
use cdc_postgres::snapshot::{CopyBinaryDecoder, CopyFormatError};
use libfuzzer_sys::fuzz_target;

type Row = Vec<Option<Bytes>>;

#[derive(Debug, PartialEq)]
struct Outcome {
    rows: Vec<Row>,
    error: Option<CopyFormatError>,
    done: bool,
    pending: bool,
}

/// A row's fields, copied out.
fn copied(row: &[u8], spans: &[Option<FieldSpan>]) -> Row {
    spans
        .iter()
        .map(|span| span.map(|s| Bytes::copy_from_slice(field(row, s))))
        .collect()
}

/// Drains complete rows; `Err` stops the run.
fn drain(decoder: &mut CopyBinaryDecoder, rows: &mut Vec<Row>) -> Result<(), CopyFormatError> {
    loop {
        let was_done = decoder.is_done();
        match decoder.next_row_with(copied) {
            Ok(Some(row)) => {
                assert!(!was_done, "a row after the end-of-data trailer");
                rows.push(row);
            }
            Ok(None) => return Ok(()),
            Err(e) => {
                assert!(!was_done, "an error after the end-of-data trailer");
                let again = decoder.next_row_with(copied);
                assert_eq!(again.as_ref().err(), Some(&e), "a repeated error differs");
                return Err(e);
            }
        }
    }
}

fn run(expected: Option<usize>, data: &[u8], chunks: &[usize], in_place: bool) -> Outcome {
    let mut decoder = CopyBinaryDecoder::new(expected);
    let mut rows = Vec::new();
    let mut error = None;
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        let n = chunks[i % chunks.len()].min(rest.len());
        i += 1;
        let chunk = &rest[..n];
        rest = &rest[n..];
        let result = if in_place {
            decoder.decode(
                chunk,
                |row, spans| {
                    rows.push(copied(row, spans));
                    Ok(())
                },
                |e| e,
            )
        } else {
            decoder.feed(chunk);
            drain(&mut decoder, &mut rows)
        };
        if let Err(e) = result {
            error = Some(e);
            break;
        }
    }
    if error.is_none() {
        // Every byte was fed and drained.
        if !decoder.has_pending_bytes() {
            // Every byte consumed: the total of the rows' fields fits in the input.
            let field_bytes: usize = rows.iter().flatten().flatten().map(Bytes::len).sum();
            assert!(field_bytes <= data.len());
        }
    }
    Outcome {
        rows,
        error,
        done: decoder.is_done(),
        pending: decoder.has_pending_bytes(),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let expected = match data[0] {
        0 => None,
        n => Some(usize::from(n - 1)),
    };
    let chunks: Vec<usize> = data[1..5]
        .iter()
        .map(|&b| usize::from(b % 64) + 1)
        .collect();
    let copy = &data[5..];

    let whole = run(expected, copy, &[copy.len().max(1)], false);
    let chunked = run(expected, copy, &chunks, false);
    assert_eq!(chunked, whole, "the chunking changed the outcome");
    let in_place = run(expected, copy, &chunks, true);
    assert_eq!(in_place, whole, "decoding in place changed the outcome");
    let whole_in_place = run(expected, copy, &[copy.len().max(1)], true);
    assert_eq!(
        whole_in_place, whole,
        "decoding in place changed the outcome"
    );
    if whole.done {
        assert!(whole.error.is_none());
    }
});
