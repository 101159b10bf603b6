//! `pgcdc demo`: a throwaway local PostgreSQL (or `--uri`), a small schema with varied
//! types, a live workload, and its changes as Feldera JSON on stdout.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cdc_core::PipelineConfig;
use cdc_postgres::conn::{ConnectionConfig, ReplicationConnection, SourceConfig, connect_sql};
use cdc_postgres::source::{PgSource, PgSourceOptions, SlotPolicy};
use cdc_sinks::{EncoderOptions, FelderaStreamSink, Framing};
use tokio_postgres::Client;

use super::{RunOptions, is_connection_loss, run_pipeline, sql_error};
use crate::cli::{CliError, DemoArgs, GlobalArgs, SummaryArg};
use crate::local_cluster::LocalCluster;
use crate::observed_source::ObservedSource;

/// Schema, publication and slot name of the demo.
const DEMO: &str = "pgcdc_demo";

const CUSTOMERS: u32 = 200;

/// Runs `pgcdc demo`.
pub async fn run(args: DemoArgs, global: &GlobalArgs) -> Result<ExitCode, CliError> {
    let quiet = global.quiet;
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        return Err(CliError::usage("--rate must be a positive number"));
    }
    let given =
        args.conn.uri.is_some() || args.conn.uri_file.is_some() || args.conn.uri_env.is_some();
    let (cluster, connection) = if given {
        (None, super::connection(&args.conn)?)
    } else {
        if !quiet {
            eprintln!("pgcdc demo: starting a throwaway PostgreSQL cluster...");
        }
        let cluster = LocalCluster::start().map_err(|e| {
            CliError::other(format!("could not start a local PostgreSQL cluster: {e}"))
        })?;
        // The local cluster's own connection string says everything: the `PG*`
        // variables (meant for some other server) must not change it.
        let connection = ConnectionConfig::parse(&cluster.conninfo())?;
        (Some(cluster), super::with_connect_timeout(connection))
    };
    let result = demo(&args, &connection, quiet).await;
    match cluster {
        // Stops the server and removes its directory.
        Some(cluster) => drop(cluster),
        None => {
            if let Err(e) = clean_up(&connection).await {
                eprintln!("pgcdc demo: warning: cleaning up failed: {}", e.message);
            }
        }
    }
    result
}

async fn demo(
    args: &DemoArgs,
    connection: &ConnectionConfig,
    quiet: bool,
) -> Result<ExitCode, CliError> {
    let client = connect_sql(connection).await?;
    client
        .batch_execute(&setup_sql(args.seed_rows))
        .await
        .map_err(|e| sql_error("creating the demo schema failed", e))?;
    let tables = [format!("{DEMO}.customers"), format!("{DEMO}.orders")];
    let config = SourceConfig::from_connection(connection.clone(), DEMO)?
        .with_tables(&tables)?
        .with_slot(DEMO)?;
    if !quiet {
        eprintln!(
            "pgcdc demo: streaming {} from {}:{} as Feldera JSON on stdout; Ctrl-C stops",
            tables.join(" and "),
            config.connection.host,
            config.connection.port,
        );
    }
    let mut options = PgSourceOptions::new(config);
    // The demo's own slot, replaced at every run.
    options.slot_policy = SlotPolicy::new(true, true);
    let source = ObservedSource::new(PgSource::new(options), DEMO.to_owned());
    let sink = FelderaStreamSink::new(
        std::io::BufWriter::new(std::io::stdout()),
        EncoderOptions::new(Default::default(), true),
        Framing::Lines,
    );
    let workload = tokio::spawn(workload(client, args.rate, args.seed_rows));
    let options = RunOptions {
        command: "demo",
        quiet,
        status_interval: args.status_interval,
        summary: SummaryArg::Text,
        stop_after: args.duration,
        metrics: args.metrics.clone(),
        policy_log: None,
    };
    let outcome = run_pipeline(source, sink, PipelineConfig::default(), &options).await;
    workload.abort();
    let outcome = outcome?;
    match outcome.result {
        Ok(_) => Ok(ExitCode::SUCCESS),
        // A terminal's Ctrl-C also reaches the local server (same process group), which
        // then shuts down while the stream drains: nothing to report.
        Err(e) if outcome.interrupted && is_connection_loss(&e) => {
            if !quiet {
                eprintln!("pgcdc demo: the server stopped while the stream was draining ({e})");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e.into()),
    }
}

fn setup_sql(seed_rows: u32) -> String {
    format!(
        "DROP PUBLICATION IF EXISTS {DEMO};
         DROP SCHEMA IF EXISTS {DEMO} CASCADE;
         CREATE SCHEMA {DEMO};
         CREATE TABLE {DEMO}.customers (
             id integer PRIMARY KEY,
             name text NOT NULL,
             email text,
             vip boolean NOT NULL DEFAULT false,
             signed_up timestamptz NOT NULL DEFAULT now()
         );
         CREATE TABLE {DEMO}.orders (
             id bigint PRIMARY KEY,
             customer_id integer NOT NULL,
             amount numeric(12,2) NOT NULL,
             status text NOT NULL,
             tags text[] NOT NULL DEFAULT '{{}}',
             details jsonb,
             placed_at timestamptz NOT NULL DEFAULT now(),
             ref uuid NOT NULL DEFAULT gen_random_uuid(),
             quantity smallint NOT NULL DEFAULT 1
         );
         INSERT INTO {DEMO}.customers
             SELECT g, 'customer ' || g, 'c' || g || '@example.com', g % 10 = 0,
                    now() - g * interval '1 day'
             FROM generate_series(1, {CUSTOMERS}) g;
         INSERT INTO {DEMO}.orders (id, customer_id, amount, status, tags, details, placed_at, quantity)
             SELECT g, 1 + g % {CUSTOMERS}, round((random() * 500)::numeric, 2), 'placed',
                    ARRAY['seed', CASE WHEN g % 3 = 0 THEN 'gift' ELSE 'self' END],
                    jsonb_build_object('channel', CASE WHEN g % 2 = 0 THEN 'web' ELSE 'store' END,
                                       'items', 1 + g % 5),
                    now() - g * interval '1 minute', 1 + g % 4
             FROM generate_series(1, {seed_rows}) g;
         ANALYZE {DEMO}.customers, {DEMO}.orders;
         CREATE PUBLICATION {DEMO} FOR TABLE {DEMO}.customers, {DEMO}.orders;"
    )
}

/// Inserts, updates and deletes orders (and now and then updates a customer), `rate`
/// transactions per second, until aborted.
async fn workload(client: Client, rate: f64, seed_rows: u32) {
    let mut rng = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0x9E37_79B9_7F4A_7C15, |d| d.as_nanos() as u64)
        | 1;
    let mut next = move |below: u64| {
        // xorshift64: plenty for picking rows.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below.max(1)
    };
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut next_id = u64::from(seed_rows) + 1;
    loop {
        ticker.tick().await;
        let order = 1 + next(next_id);
        let customer = 1 + next(u64::from(CUSTOMERS));
        let sql = match next(10) {
            0..=3 => {
                next_id += 1;
                format!(
                    "INSERT INTO {DEMO}.orders (id, customer_id, amount, status, tags, details, quantity)
                     VALUES ({next_id}, {customer}, {}.{:02}, 'placed', ARRAY['live'],
                             '{{\"channel\": \"app\", \"items\": {}}}', {})",
                    next(900),
                    next(100),
                    1 + next(6),
                    1 + next(9)
                )
            }
            4..=6 => format!(
                "BEGIN;
                 UPDATE {DEMO}.orders SET status = (ARRAY['paid','shipped','delivered'])[1 + {}],
                        amount = amount + 1, tags = tags || ARRAY['updated'] WHERE id = {order};
                 UPDATE {DEMO}.customers SET vip = NOT vip WHERE id = {customer};
                 COMMIT;",
                next(3)
            ),
            7 => format!("DELETE FROM {DEMO}.orders WHERE id = {order}"),
            _ => format!(
                "UPDATE {DEMO}.customers SET email = 'c{customer}+{}@example.com' WHERE id = {customer}",
                next(1000)
            ),
        };
        if let Err(e) = client.batch_execute(&sql).await {
            tracing::debug!(error = %e, "demo workload stopped");
            return;
        }
    }
}

/// Drops what the demo created in a database given with `--uri` (or `--uri-file`,
/// `--uri-env`).
async fn clean_up(connection: &ConnectionConfig) -> Result<(), CliError> {
    let mut replication = ReplicationConnection::connect(connection).await?;
    if let Err(e) = replication.drop_slot(DEMO, true).await
        && e.server_error().is_none_or(|s| s.code != "42704")
    {
        return Err(e.into());
    }
    replication.close().await;
    let client = connect_sql(connection).await?;
    client
        .batch_execute(&format!(
            "DROP PUBLICATION IF EXISTS {DEMO}; DROP SCHEMA IF EXISTS {DEMO} CASCADE;"
        ))
        .await
        .map_err(|e| sql_error("dropping the demo schema failed", e))?;
    Ok(())
}
