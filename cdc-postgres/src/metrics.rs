//! Prometheus metrics of a running stream (feature `prometheus`): a
//! [`prometheus_client`] [`Collector`] that reads the pipeline's and the source's
//! statistics at each scrape, so the hot path only bumps atomics. Register it in your own
//! registry ([`prometheus_client::registry::Registry::register_collector`]) or call
//! [`StreamMetrics::encode_text`]. Every family is listed, with its unit and labels, in the
//! metrics table in docs/metrics.md.
//!
//! Why `prometheus-client`: it is the Prometheus project's own Rust client, encodes the
//! OpenMetrics text format every Prometheus server scrapes, lets an embedding engine put
//! our families into its registry, and has no runtime or global state (the `metrics`
//! facade would need an exporter and a global recorder that an engine may own already).

use std::sync::Arc;
use std::time::Duration;

use cdc_core::{ErrorKind, Lsn, PipelineStats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::source::{SourceState, SourceStats};

/// The metrics of one stream: its pipeline's and its source's statistics, and the sink's
/// policy applications if the sink reports them.
#[derive(Clone)]
pub struct StreamMetrics {
    pipeline: PipelineStats,
    source: SourceStats,
    policies: Option<PolicySource>,
}

/// Reads the sink's policy applications at scrape time.
type PolicySource = Arc<dyn Fn() -> Vec<PolicyApplications> + Send + Sync>;

/// How often a sink applied one output policy to one column, for
/// `pgcdc_policy_applications_total`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyApplications {
    /// The table.
    pub table: String,
    /// The column (empty for a table-level case such as TRUNCATE).
    pub column: String,
    /// The situation (`non_finite`, `out_of_range`, `array_bounds`, `truncate`).
    pub case: String,
    /// What the policy did (`null`, `string`, `drop bounds`, `skip`, `marker`).
    pub action: String,
    /// How many times.
    pub count: u64,
}

impl std::fmt::Debug for StreamMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMetrics")
            .field("pipeline", &self.pipeline)
            .field("source", &self.source)
            .field("policies", &self.policies.is_some())
            .finish()
    }
}

/// Whether the stream is healthy, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// Streaming, backfilling, copying the snapshot or starting (and not stuck reconnecting).
    pub healthy: bool,
    /// What the stream is doing, or what is wrong.
    pub reason: String,
}

impl StreamMetrics {
    /// Metrics over `pipeline` ([`cdc_core::Pipeline::stats`]) and `source`
    /// ([`crate::source::PgSource::stats`]).
    pub fn new(pipeline: PipelineStats, source: SourceStats) -> Self {
        StreamMetrics {
            pipeline,
            source,
            policies: None,
        }
    }

    /// Adds the sink's policy applications, read by `policies` at each scrape.
    pub fn with_policies(
        mut self,
        policies: impl Fn() -> Vec<PolicyApplications> + Send + Sync + 'static,
    ) -> Self {
        self.policies = Some(Arc::new(policies));
        self
    }

    /// The metrics in the OpenMetrics text format (what `/metrics` serves).
    pub fn encode_text(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    /// Health: unhealthy once the source has been reconnecting for longer than `grace`,
    /// or has stopped with an error.
    pub fn health(&self, grace: Duration) -> Health {
        let source = self.source.snapshot();
        let reason = |what: &str| match &source.last_error {
            Some(error) => format!("{what}: {error}"),
            None => what.to_owned(),
        };
        match source.state {
            SourceState::Reconnecting if source.state_age > grace => Health {
                healthy: false,
                reason: reason(&format!(
                    "reconnecting for {:.0} s",
                    source.state_age.as_secs_f64()
                )),
            },
            SourceState::Stopped if source.last_error.is_some() => Health {
                healthy: false,
                reason: reason("stopped"),
            },
            state => Health {
                healthy: true,
                reason: state.as_str().to_owned(),
            },
        }
    }

    /// Seconds between now and the commit time of the last transaction delivered; 0 when
    /// the stream has caught up (everything the server sent is acknowledged and the source
    /// waits for more).
    fn lag_seconds(&self) -> f64 {
        let pipeline = self.pipeline.snapshot();
        let source = self.source.snapshot();
        if source.caught_up && pipeline.batches_in_flight == 0 {
            return 0.0;
        }
        pipeline.lag_seconds().unwrap_or(0.0)
    }
}

fn error_kind_label(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Config => "config",
        ErrorKind::Transient => "transient",
        ErrorKind::Protocol => "protocol",
        ErrorKind::ResyncRequired => "resync_required",
        ErrorKind::Sink => "sink",
        ErrorKind::Rejected => "rejected",
        _ => "other",
    }
}

fn lsn(lsn: Lsn) -> i64 {
    i64::try_from(lsn.0).unwrap_or(i64::MAX)
}

/// One family without labels.
fn single<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: M,
) -> Result<(), std::fmt::Error> {
    let family = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(family)
}

/// One family with one or more labelled samples.
fn family<M: EncodeMetric, const N: usize>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl IntoIterator<Item = ([(&'static str, String); N], M)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for StreamMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let pipeline = self.pipeline.snapshot();
        let source = self.source.snapshot();
        let e = &mut encoder;

        family(
            e,
            "pgcdc_changes",
            "Changes written to the sink, by table and operation (snapshot = rows copied by the initial snapshot).",
            MetricType::Counter,
            self.pipeline
                .changes_by_table()
                .into_iter()
                .map(|(table, op, n)| {
                    (
                        [("table", table.to_string()), ("op", op.as_str().to_owned())],
                        ConstCounter::new(n),
                    )
                }),
        )?;
        single(
            e,
            "pgcdc_received_bytes",
            "Bytes of replication messages received from the server.",
            ConstCounter::new(source.received_bytes),
        )?;
        single(
            e,
            "pgcdc_received_messages",
            "Replication messages received from the server.",
            ConstCounter::new(source.received_messages),
        )?;
        single(
            e,
            "pgcdc_events_written",
            "Events written to the sink.",
            ConstCounter::new(pipeline.events),
        )?;
        single(
            e,
            "pgcdc_batches_written",
            "Batches written to the sink.",
            ConstCounter::new(pipeline.batches),
        )?;

        single(
            e,
            "pgcdc_received_lsn",
            "Highest WAL position received from the server.",
            ConstGauge::new(lsn(source.received_lsn)),
        )?;
        single(
            e,
            "pgcdc_written_lsn",
            "Commit LSN of the last event written to the sink.",
            ConstGauge::new(lsn(pipeline.received_lsn)),
        )?;
        single(
            e,
            "pgcdc_durable_lsn",
            "End of what the sink's last durable checkpoint covers.",
            ConstGauge::new(lsn(pipeline.durable_lsn)),
        )?;
        single(
            e,
            "pgcdc_confirmed_lsn",
            "Position confirmed to the replication slot.",
            ConstGauge::new(lsn(source.confirmed_lsn.max(pipeline.confirmed_lsn))),
        )?;
        single(
            e,
            "pgcdc_server_wal_end_lsn",
            "The server's WAL end as its last replication message said.",
            ConstGauge::new(lsn(source.server_wal_end)),
        )?;
        single(
            e,
            "pgcdc_lag_bytes",
            "WAL bytes between the server's WAL end and the confirmed position.",
            ConstGauge::new(source.lag_bytes()),
        )?;
        single(
            e,
            "pgcdc_lag_seconds",
            "Seconds since the commit of the last transaction delivered; 0 when caught up.",
            ConstGauge::new(self.lag_seconds()),
        )?;

        family(
            e,
            "pgcdc_slot_retained_wal_bytes",
            "WAL the replication slot holds on the server (polled), by wal_status.",
            MetricType::Gauge,
            source.slot.iter().map(|slot| {
                (
                    [("wal_status", slot.wal_status.clone())],
                    ConstGauge::new(slot.retained_bytes),
                )
            }),
        )?;

        let checkpoints = self.pipeline.checkpoints();
        single(
            e,
            "pgcdc_checkpoints",
            "Durable sink checkpoints.",
            ConstCounter::new(checkpoints.count),
        )?;
        single(
            e,
            "pgcdc_checkpoint_duration_seconds",
            "Seconds from checkpoint requests to their durable acknowledgement, summed.",
            ConstCounter::new(checkpoints.seconds_sum),
        )?;
        single(
            e,
            "pgcdc_last_checkpoint_duration_seconds",
            "Seconds the last checkpoint took.",
            ConstGauge::new(checkpoints.last_seconds),
        )?;
        single(
            e,
            "pgcdc_last_checkpoint_age_seconds",
            "Seconds since the last checkpoint became durable (-1 before the first).",
            ConstGauge::new(
                checkpoints
                    .last_durable_age
                    .map_or(-1.0, |a| a.as_secs_f64()),
            ),
        )?;
        single(
            e,
            "pgcdc_batches_in_flight",
            "Batches written and not yet acknowledged.",
            ConstGauge::new(pipeline.batches_in_flight),
        )?;
        family(
            e,
            "pgcdc_buffered_bytes",
            "Bytes of in-progress (streamed) and prepared transactions held, in memory or spilled to temporary files.",
            MetricType::Gauge,
            [
                (
                    [("where", "memory".to_owned())],
                    ConstGauge::new(source.buffered_bytes),
                ),
                (
                    [("where", "spilled".to_owned())],
                    ConstGauge::new(source.spilled_bytes),
                ),
            ],
        )?;
        single(
            e,
            "pgcdc_prepared_transactions_waiting",
            "Prepared transactions waiting for COMMIT PREPARED (two-phase decoding).",
            ConstGauge::new(source.prepared_waiting),
        )?;

        family(
            e,
            "pgcdc_reconnects",
            "Reconnects of the replication connection, by cause.",
            MetricType::Counter,
            source
                .reconnects
                .iter()
                .map(|(cause, n)| ([("cause", (*cause).to_owned())], ConstCounter::new(*n))),
        )?;
        family(
            e,
            "pgcdc_errors",
            "Errors that stopped a run, by kind.",
            MetricType::Counter,
            self.pipeline.errors().into_iter().map(|(kind, n)| {
                (
                    [("kind", error_kind_label(kind).to_owned())],
                    ConstCounter::new(n),
                )
            }),
        )?;
        family(
            e,
            "pgcdc_state",
            "What the source is doing: 1 for the current state.",
            MetricType::Gauge,
            SourceState::ALL.iter().map(|state| {
                (
                    [("state", state.as_str().to_owned())],
                    ConstGauge::new(i64::from(*state == source.state)),
                )
            }),
        )?;

        let snapshot = self.pipeline.snapshot_by_table();
        family(
            e,
            "pgcdc_snapshot_rows",
            "Rows copied by the initial snapshot, by table.",
            MetricType::Counter,
            snapshot
                .iter()
                .map(|(table, p)| ([("table", table.to_string())], ConstCounter::new(p.rows))),
        )?;
        family(
            e,
            "pgcdc_snapshot_chunks",
            "Online snapshot chunks completed, by table.",
            MetricType::Counter,
            snapshot
                .iter()
                .map(|(table, p)| ([("table", table.to_string())], ConstCounter::new(p.chunks))),
        )?;
        family(
            e,
            "pgcdc_snapshot_table_done",
            "1 once a table's initial copy is complete.",
            MetricType::Gauge,
            snapshot.iter().map(|(table, p)| {
                (
                    [("table", table.to_string())],
                    ConstGauge::new(i64::from(p.done)),
                )
            }),
        )?;
        single(
            e,
            "pgcdc_snapshot_chunk_rereads",
            "Online snapshot chunk reads taken again (with the stream paused) because their snapshot did not show a transaction the stream had already passed into their key range.",
            ConstCounter::new(source.chunk_rereads),
        )?;
        family(
            e,
            "pgcdc_snapshot_table_read_whole",
            "1 for a table the online snapshot reads whole under one snapshot while the stream waits, with the reason (e.g. no primary key).",
            MetricType::Gauge,
            source.tables_read_whole.iter().map(|t| {
                (
                    [("table", t.table.clone()), ("reason", t.reason.clone())],
                    ConstGauge::new(1),
                )
            }),
        )?;
        family(
            e,
            "pgcdc_policy_applications",
            "Values (or TRUNCATEs) an output policy handled, by table, column, case and action.",
            MetricType::Counter,
            self.policies
                .as_ref()
                .map(|read| read())
                .unwrap_or_default()
                .into_iter()
                .map(|p| {
                    (
                        [
                            ("table", p.table),
                            ("column", p.column),
                            ("case", p.case),
                            ("action", p.action),
                        ],
                        ConstCounter::new(p.count),
                    )
                }),
        )?;
        single(
            e,
            "pgcdc_snapshot_complete",
            "1 once the sink holds every table: the snapshot (consistent or online) is complete, or this run had none to take; 0 while one runs (again while tables are backfilled on a live stream).",
            ConstGauge::new(i64::from(
                pipeline.snapshot_complete || source.nothing_to_copy(),
            )),
        )?;
        Ok(())
    }
}
