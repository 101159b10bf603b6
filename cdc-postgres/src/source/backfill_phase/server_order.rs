//! Keys only the server can compare (text under a linguistic collation, enums, `inet`,
//! …): the merge needs their comparisons with its boundaries before it passes their
//! events (`Backfill::comparisons_needed`). Such an event, and everything the stream
//! produces after it — events, transaction ends, idle progress — is held in stream order;
//! once what has arrived is taken in (or enough is held), one query per table has the
//! server compare every held key with every boundary, and the held items go on in order.
//! Nothing is placed while items are held (`may_place`), so the boundaries cannot move
//! under them; nothing held reaches a batch, so no token covers it, and a lost connection
//! streams it again.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

use cdc_core::{Error, Lsn, Result};
use cdc_pgoutput::backfill::merge::Comparison;

use super::parts::Held;
use super::{BackfillPhase, RETRY_DELAY};
use crate::conn::sql_session::SqlSession;
use crate::snapshot::compare_keys;
use crate::source::pending::EventQueue;
use cdc_pgoutput::backfill::token_progress::key_text;

impl BackfillPhase {
    /// How many items are held.
    pub(crate) fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Holds the end of a transaction behind the held events; false when nothing is held
    /// (the caller queues it).
    pub(crate) fn hold_end(&mut self, end: Lsn) -> bool {
        if self.held.is_empty() {
            return false;
        }
        self.held.push_back(Held::End(end));
        true
    }

    /// Whether [`Self::resolve_held`] should run now (items are held, and no failed
    /// attempt asks to wait).
    pub(crate) fn wants_resolving(&self) -> bool {
        !self.held.is_empty() && self.compare_not_before.is_none_or(|t| Instant::now() >= t)
    }

    /// Has the server compare the held events' keys, then passes every held item on in
    /// order. A lost connection leaves them held, to be tried again shortly.
    pub(crate) async fn resolve_held(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        let mut needed: Vec<Comparison> = Vec::new();
        let mut seen = HashSet::new();
        for held in &self.held {
            if let Held::Event(event) = held {
                for comparison in self.merge.comparisons_needed(event)? {
                    let id = (
                        comparison.table,
                        key_text(&comparison.key)?,
                        key_text(&comparison.boundary)?,
                    );
                    if seen.insert(id) {
                        needed.push(comparison);
                    }
                }
            }
        }
        match self.ask_server(&needed).await {
            Ok(answers) => {
                for (comparison, ordering) in needed.iter().zip(answers) {
                    self.merge.learn_comparison(comparison, ordering)?;
                }
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "cannot compare primary keys on the server; retrying");
                self.comparer = None;
                self.compare_not_before = Some(Instant::now() + RETRY_DELAY * 20);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.compare_not_before = None;
        while let Some(held) = self.held.pop_front() {
            match held {
                Held::Event(event) => {
                    if let Some(event) = self.pass(event)? {
                        out.push_back(event);
                    }
                }
                Held::End(end) => out.push_end(end),
                Held::Idle(lsn) => self.merge.progress(lsn),
            }
        }
        self.merge.forget_comparisons();
        Ok(())
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
                .catalog
                .get(table)
                .and_then(|&index| self.tables.get(index))
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
