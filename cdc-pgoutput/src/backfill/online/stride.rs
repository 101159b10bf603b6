//! Splitting the next key range of a table with a single-column integer key by the key
//! density its last chunks showed, instead of split queries: a split query scans as many
//! index entries as a chunk holds, a sixth of the server's work in the online snapshot.
//!
//! Any key splits a range soundly (see `rounds`), so an estimate only decides how many
//! rows a range holds: a range denser than its estimate is cut at its cap (twice
//! `chunk_rows`) and read on from there, a sparser one is a small chunk, and the round's
//! last chunk is always the next `chunk_rows` rows after the last estimated end, so the
//! table's end is found as without estimates.

use cdc_core::{TableSchema, Value};

/// The values a single-column integer primary key can take (`smallint`, `integer`,
/// `bigint`), or `None` for any other key.
pub fn integer_key_range(schema: &TableSchema) -> Option<(i128, i128)> {
    let [key] = schema.primary_key.as_slice() else {
        return None;
    };
    let column = schema.columns.iter().find(|c| &c.name == key)?;
    match column.column_type.oid {
        21 => Some((i16::MIN.into(), i16::MAX.into())),
        23 => Some((i32::MIN.into(), i32::MAX.into())),
        20 => Some((i64::MIN.into(), i64::MAX.into())),
        _ => None,
    }
}

/// An integer key value.
pub(super) fn integer_key(value: &Value) -> Option<i128> {
    match value {
        Value::Int2(v) => Some((*v).into()),
        Value::Int4(v) => Some((*v).into()),
        Value::Int8(v) => Some((*v).into()),
        _ => None,
    }
}

/// The key distance that holds about `limit` rows, from chunks that held `rows` rows over
/// `span` keys; `None` without rows or span to go by.
pub(super) fn stride_for(limit: usize, rows: u64, span: i128) -> Option<i128> {
    if rows == 0 || span <= 0 {
        return None;
    }
    let limit = i128::try_from(limit.max(1)).ok()?;
    let rows = i128::from(rows);
    // Rounded up (both are positive).
    let stride = limit.checked_mul(span)?.checked_add(rows - 1)? / rows;
    Some(stride.max(1))
}

/// Up to `count` range ends after `after`, `stride` apart, none past `max` (text form,
/// one key column each); fewer near the end of the key's values.
pub(super) fn estimated_ends(
    after: i128,
    stride: i128,
    count: usize,
    max: i128,
) -> Vec<Vec<String>> {
    let mut ends = Vec::with_capacity(count);
    let mut end = after;
    for _ in 0..count {
        match end.checked_add(stride) {
            Some(next) if next <= max && next > end => end = next,
            _ => break,
        }
        ends.push(vec![end.to_string()]);
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stride_holds_a_chunk_at_the_density_seen() {
        // Dense serial keys: 10,000 rows over 10,000 keys.
        assert_eq!(stride_for(10_000, 10_000, 10_000), Some(10_000));
        // One row in three keys.
        assert_eq!(stride_for(100, 50, 150), Some(300));
        // Rounded up; at least one key.
        assert_eq!(stride_for(10, 3, 10), Some(34));
        assert_eq!(stride_for(10, 1_000, 1), Some(1));
        // Nothing to go by.
        assert_eq!(stride_for(10, 0, 100), None);
        assert_eq!(stride_for(10, 5, 0), None);
        assert_eq!(stride_for(10, 5, -3), None);
        // Huge spans do not overflow.
        assert_eq!(stride_for(10, 1, i128::MAX), None);
    }

    #[test]
    fn ends_stop_at_the_largest_key_value() {
        assert_eq!(
            estimated_ends(100, 50, 3, i128::from(i32::MAX)),
            vec![
                vec!["150".to_owned()],
                vec!["200".to_owned()],
                vec!["250".to_owned()]
            ]
        );
        assert_eq!(
            estimated_ends(-120, 100, 3, i128::from(i16::MAX)),
            vec![
                vec!["-20".to_owned()],
                vec!["80".to_owned()],
                vec!["180".to_owned()]
            ]
        );
        let max = i128::from(i16::MAX);
        assert_eq!(
            estimated_ends(max - 150, 100, 3, max),
            vec![vec![(max - 50).to_string()]]
        );
        assert!(estimated_ends(max, 1, 3, max).is_empty());
        assert!(estimated_ends(0, 0, 3, max).is_empty());
    }

    #[test]
    fn only_integer_values_are_integer_keys() {
        assert_eq!(integer_key(&Value::Int2(-3)), Some(-3));
        assert_eq!(integer_key(&Value::Int8(i64::MAX)), Some(i64::MAX.into()));
        assert_eq!(integer_key(&Value::Null), None);
        assert_eq!(integer_key(&Value::Bool(true)), None);
    }
}
