//! Ordinary SQL (catalog queries, COPY) through `tokio-postgres`, over the same transport
//! and TLS negotiation as the replication session.
//!
//! The socket (TCP or Unix, TLS per `sslmode` including `allow`'s and `prefer`'s second
//! attempt) is established by our transport code and handed to
//! [`tokio_postgres::Config::connect_raw`], so both connections always agree on every
//! setting; `tokio-postgres` then only runs startup and authentication on it.

use cdc_core::{Error, Result};
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::{Client, NoTls};

use super::config::ConnectionConfig;
use super::error::{Activity, from_tokio_postgres};
use super::transport::{self, describe_target};

/// The `tokio_postgres::Config` for `config`'s user, password, database,
/// `application_name`, `options` (followed by the pinned session settings, see
/// [`super::session`]) and `connect_timeout`, for use with a socket from our
/// transport (so `ssl_mode` is `Disable`: TLS, when used, is already set up below it).
pub fn tokio_postgres_config(config: &ConnectionConfig) -> tokio_postgres::Config {
    let mut pg = tokio_postgres::Config::new();
    pg.user(&config.user)
        .dbname(&config.dbname)
        .port(config.port)
        .ssl_mode(PgSslMode::Disable);
    if let Some(password) = &config.password {
        pg.password(password);
    }
    if let Some(app) = &config.application_name {
        pg.application_name(app);
    }
    // The settings every session pins (text output, timeouts) follow the user's options.
    pg.options(super::session::startup_options(config.options.as_deref()));
    if let Some(timeout) = config.connect_timeout {
        pg.connect_timeout(timeout);
    }
    pg
}

/// Connects an ordinary SQL session with exactly the settings of `config` (the same
/// `sslmode` semantics, certificates and timeouts as
/// [`super::ReplicationConnection::connect`]) and spawns its connection task on the
/// current tokio runtime. The task ends when the client is dropped or the server goes
/// away (logged at debug level).
///
/// Errors are classified like the replication session's: authentication failures are
/// Config, an unreachable server is Transient, and so on.
pub async fn connect_sql(config: &ConnectionConfig) -> Result<Client> {
    let pg = tokio_postgres_config(config);
    let target = describe_target(config);
    transport::connect(config, |socket| {
        let pg = &pg;
        let target = &target;
        async move {
            let (client, connection) = pg.connect_raw(socket, NoTls).await.map_err(|e| {
                from_tokio_postgres(
                    e,
                    Activity::Connect,
                    &format!(
                        "the server at {target} rejected the connection of user {:?} to database {:?}",
                        config.user, config.dbname
                    ),
                )
            })?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "SQL connection ended");
                }
            });
            client
                .batch_execute(&super::session::late_settings_query())
                .await
                .map_err(|e| {
                    from_tokio_postgres(e, Activity::Command, "cannot pin the session's timeouts")
                })?;
            Ok::<_, Error>(client)
        }
    })
    .await
}
