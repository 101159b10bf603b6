//! Comparing primary keys on the server, for tables whose key order pgcdc cannot
//! reproduce (text under a linguistic collation, enums, `inet`, `interval`, domains, …):
//! the online snapshot's merge asks how streamed keys compare with its boundaries (see
//! `cdc_pgoutput::backfill::merge::Backfill::comparisons_needed`), and the server answers
//! with the same operators and collations its chunk queries order by — each key column's
//! type's default btree operator class under the column's own collation, compared as a
//! row, as `ORDER BY` the key columns does.

use std::cmp::Ordering;

use cdc_core::Error;

use super::chunk::typed_key_values;
use crate::catalog::CatalogTable;
use crate::conn::sql_session::SqlSession;

/// The most keys one query compares (the rest go in further queries), so that a burst
/// of changes does not make one huge statement.
const KEYS_PER_QUERY: usize = 1000;

/// The query comparing every key of `keys` with every key of `boundaries` (each the text
/// form of the primary key columns, in key order): rows `(i, j, sign)` with `sign` -1, 0 or
/// 1 as `keys[i]` sorts before, with or after `boundaries[j]`.
pub fn comparison_query(
    table: &CatalogTable,
    keys: &[Vec<String>],
    boundaries: &[Vec<String>],
) -> Result<String, Error> {
    let width = table.schema.primary_key.len();
    let columns: Vec<String> = (1..=width).map(|n| format!("c{n}")).collect();
    let values = |rows: &[Vec<String>]| -> Result<String, Error> {
        let mut out = Vec::with_capacity(rows.len());
        for (n, key) in rows.iter().enumerate() {
            if key.len() != width {
                return Err(Error::protocol(format!(
                    "a key of {} to compare has {} values, the primary key has {width} columns",
                    table.schema.name,
                    key.len()
                )));
            }
            let mut typed = typed_key_values(table, key)?;
            // Literals have the database's default collation; the key columns' own is
            // named, as every row of the VALUES list names it.
            for (value, collation) in typed.iter_mut().zip(&table.key_collation_names) {
                if let Some(collation) = collation {
                    value.push_str(" COLLATE ");
                    value.push_str(collation);
                }
            }
            out.push(format!("({n}, {})", typed.join(", ")));
        }
        Ok(out.join(", "))
    };
    let row = |alias: &str| {
        let fields: Vec<String> = columns.iter().map(|c| format!("{alias}.{c}")).collect();
        format!("({})", fields.join(", "))
    };
    let (k, b) = (row("k"), row("b"));
    Ok(format!(
        "SELECT k.i, b.j, CASE WHEN {k} < {b} THEN -1 WHEN {k} = {b} THEN 0 ELSE 1 END \
         FROM (VALUES {}) AS k(i, {cols}) CROSS JOIN (VALUES {}) AS b(j, {cols})",
        values(keys)?,
        values(boundaries)?,
        cols = columns.join(", "),
    ))
}

/// How each of `keys` compares with each of `boundaries` on the server (`result[i][j]`:
/// `keys[i]` against `boundaries[j]`), on `session` (autocommit).
pub(crate) async fn compare_keys(
    session: &mut SqlSession,
    table: &CatalogTable,
    keys: &[Vec<String>],
    boundaries: &[Vec<String>],
) -> Result<Vec<Vec<Ordering>>, Error> {
    let context = format!(
        "comparing primary keys of {} on the server",
        table.schema.name
    );
    let mut result = Vec::with_capacity(keys.len());
    if boundaries.is_empty() {
        result.resize(keys.len(), Vec::new());
        return Ok(result);
    }
    for group in keys.chunks(KEYS_PER_QUERY) {
        let query = comparison_query(table, group, boundaries)?;
        let rows = session
            .simple_query_in(&query, &context)
            .await?
            .into_iter()
            .flat_map(|r| r.rows);
        let mut answers: Vec<Vec<Option<Ordering>>> =
            vec![vec![None; boundaries.len()]; group.len()];
        for row in rows {
            let number = |at: usize| -> Option<i64> { row.get(at)?.as_deref()?.parse().ok() };
            let (Some(i), Some(j), Some(sign)) = (number(0), number(1), number(2)) else {
                return Err(Error::protocol(format!(
                    "{context}: a malformed answer row"
                )));
            };
            let slot = usize::try_from(i)
                .ok()
                .and_then(|i| answers.get_mut(i))
                .and_then(|row| usize::try_from(j).ok().and_then(|j| row.get_mut(j)));
            let Some(slot) = slot else {
                return Err(Error::protocol(format!(
                    "{context}: an answer for no key asked"
                )));
            };
            *slot = Some(sign.cmp(&0));
        }
        for answer in answers {
            let complete: Option<Vec<Ordering>> = answer.into_iter().collect();
            result.push(complete.ok_or_else(|| {
                Error::protocol(format!("{context}: the server left a comparison out"))
            })?);
        }
    }
    Ok(result)
}
