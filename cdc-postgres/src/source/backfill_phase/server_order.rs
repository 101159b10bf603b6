//! Keys only the server can compare: the driver's part. `OnlineSnapshot` holds the
//! streamed items that wait for comparisons and names the comparisons it needs; this
//! asks the server (one query per table, every key against every boundary) and hands the
//! answers back.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::Instant;

use cdc_core::{Error, Result};
use cdc_pgoutput::backfill::merge::Comparison;

use super::BackfillPhase;
use crate::conn::sql_session::SqlSession;
use crate::snapshot::compare_keys;
use crate::source::pending::EventQueue;
use cdc_pgoutput::backfill::token_progress::key_text;

impl BackfillPhase {
    /// Has the server compare the held events' keys, then passes every held item on in
    /// order. A lost connection leaves them held, to be tried again shortly.
    pub(crate) async fn resolve_held(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        let needed = self.state.comparisons_needed()?;
        match self.ask_server(&needed).await {
            Ok(answers) => self.state.comparisons_answered(&needed, answers, out),
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "cannot compare primary keys on the server; retrying");
                self.comparer = None;
                self.state.comparisons_failed(Instant::now());
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The server's answer to each of `needed`, in order: one query per table, every key
    /// against every boundary.
    async fn ask_server(&mut self, needed: &[Comparison]) -> Result<Vec<Ordering>> {
        if needed.is_empty() {
            return Ok(Vec::new());
        }
        let session = match self.comparer.as_mut() {
            Some(session) => session,
            None => self
                .comparer
                .insert(SqlSession::connect(&self.options.connection).await?),
        };
        let mut answers = vec![Ordering::Equal; needed.len()];
        let mut tables: Vec<usize> = needed.iter().map(|c| c.table).collect();
        tables.sort_unstable();
        tables.dedup();
        for table in tables {
            let Some(catalog) = self
                .state
                .catalog_index(table)
                .and_then(|index| self.tables.get(index))
            else {
                return Err(Error::protocol(
                    "internal: a comparison for an unknown table",
                ));
            };
            // Each distinct key and boundary once, by text form; `asked`: for each of
            // `needed` of this table, (its place in `answers`, key, boundary).
            let mut keys = Distinct::default();
            let mut boundaries = Distinct::default();
            let mut asked = Vec::new();
            for (at, comparison) in needed.iter().enumerate() {
                if comparison.table == table {
                    let key = keys.index_of(key_text(&comparison.key)?);
                    let boundary = boundaries.index_of(key_text(&comparison.boundary)?);
                    asked.push((at, key, boundary));
                }
            }
            let matrix = compare_keys(session, catalog, &keys.texts, &boundaries.texts).await?;
            for (at, key, boundary) in asked {
                let ordering = matrix.get(key).and_then(|row| row.get(boundary));
                match (answers.get_mut(at), ordering) {
                    (Some(answer), Some(ordering)) => *answer = *ordering,
                    _ => return Err(Error::protocol("internal: a comparison left unanswered")),
                }
            }
        }
        Ok(answers)
    }
}

/// Distinct keys in text form, each with its index.
#[derive(Default)]
struct Distinct {
    texts: Vec<Vec<String>>,
    index: HashMap<Vec<String>, usize>,
}

impl Distinct {
    fn index_of(&mut self, text: Vec<String>) -> usize {
        if let Some(&at) = self.index.get(&text) {
            return at;
        }
        let at = self.texts.len();
        self.index.insert(text.clone(), at);
        self.texts.push(text);
        at
    }
}
