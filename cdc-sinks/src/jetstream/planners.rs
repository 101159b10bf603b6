//! The planner of the sink's format: Feldera JSON or Debezium records, and what each
//! takes from recovery at open and gives to a checkpoint.

use cdc_core::{ChangeEvent, Error, ResumeToken};

use super::plan::{OutMessage, Planner};
use super::plan_debezium::{Applied, DebeziumPlanState, DebeziumPlanner};
use super::recovery::Recovered;

/// The sink's planner.
#[derive(Debug)]
pub(crate) enum Planners {
    Feldera(Box<Planner>),
    Debezium(Box<DebeziumPlanner>),
}

impl Planners {
    /// The messages for a batch (see each planner).
    pub(crate) fn plan(
        &mut self,
        events: &[ChangeEvent],
        token: &ResumeToken,
    ) -> Result<Vec<OutMessage>, Error> {
        match self {
            Planners::Feldera(p) => p.plan(events, token),
            Planners::Debezium(p) => p.plan(events, token),
        }
    }

    /// Replayed events skipped so far.
    pub(crate) fn skipped(&self) -> u64 {
        match self {
            Planners::Feldera(p) => p.skipped,
            Planners::Debezium(p) => p.skipped,
        }
    }

    /// Sets the largest message (the server's `max_payload`).
    pub(crate) fn set_max_message_bytes(&mut self, bytes: usize) {
        match self {
            Planners::Feldera(p) => p.set_max_message_bytes(bytes),
            Planners::Debezium(p) => p.set_max_message_bytes(bytes),
        }
    }

    /// Continues where the stream ends. One stream holds one format: a stream whose
    /// resume point says it holds the other is refused.
    pub(crate) fn resume(&mut self, stream: &str, recovered: &Recovered) -> Result<(), Error> {
        let other_format = |holds: &str, asked: &str| {
            Error::config(format!(
                "JetStream stream {stream:?} holds {holds} written by pgcdc, and {asked} were asked for: a stream holds one format; publish {asked} to a new stream (or go on with {holds})"
            ))
        };
        match self {
            Planners::Feldera(p) => {
                if recovered.debezium.is_some() {
                    return Err(other_format("Debezium records", "Feldera JSON records"));
                }
                p.applied_through = recovered.applied_through;
            }
            Planners::Debezium(p) => {
                match (&recovered.token, &recovered.debezium) {
                    (Some(_), None) => {
                        return Err(other_format("Feldera JSON records", "Debezium records"));
                    }
                    (_, Some(state)) => p.restore(state.clone()),
                    (None, None) => {}
                }
                p.applied = recovered.applied_through.map(|position| Applied {
                    position,
                    part: recovered.applied_part,
                });
            }
        }
        Ok(())
    }

    /// What a checkpoint stores beside the token (the state after the last batch).
    pub(crate) fn state(&self) -> Option<DebeziumPlanState> {
        match self {
            Planners::Feldera(_) => None,
            Planners::Debezium(p) => Some(p.state()),
        }
    }
}
