//! An ordinary SQL session on our own protocol code, for the snapshot's bulk reads: the
//! same connection settings, authentication and pinned session settings as every other
//! session, but a COPY's rows go from the socket's read buffer to the decoder with no
//! allocation, task hop or channel per row (tokio-postgres hands each CopyData message
//! from its connection task to the reader as its own `Bytes`, which cost about a sixth
//! of the snapshot's client CPU).

use cdc_core::Result;

use super::config::{ConnectionConfig, TargetSessionAttrs};
use super::error::Activity;
use super::servers::{self, ServerRole};
use super::transport;
pub(crate) use super::wire::CopyOut;
use super::wire::{QueryResult, Wire};

/// A connected SQL session (not a replication session).
#[derive(Debug)]
pub struct SqlSession {
    wire: Wire,
}

impl SqlSession {
    /// Connects with every setting of `config`, as [`super::connect_sql`] does (several
    /// servers tried in order under `target_session_attrs`; errors classified alike).
    pub async fn connect(config: &ConnectionConfig) -> Result<Self> {
        servers::connect_first(config, |one| async move {
            let wire =
                transport::connect(&one, |socket| Wire::startup(socket, &one, false)).await?;
            let mut session = SqlSession { wire };
            session
                .simple_query(&super::session::late_settings_query())
                .await?;
            if one.target_session_attrs != TargetSessionAttrs::Any {
                let role = session.role().await?;
                servers::require(&one, role)?;
            }
            Ok(session)
        })
        .await
    }

    /// Whether the server is a standby and read-only by default: from what it reported
    /// at startup (PostgreSQL 14+), else asked.
    async fn role(&mut self) -> Result<ServerRole> {
        let reported = |name| self.wire.parameter(name).map(|v| v.trim() == "on");
        if let (Some(in_recovery), Some(read_only)) = (
            reported("in_hot_standby"),
            reported("default_transaction_read_only"),
        ) {
            return Ok(ServerRole {
                in_recovery,
                read_only,
            });
        }
        let results = self
            .simple_query(
                "SELECT pg_is_in_recovery()::text, current_setting('default_transaction_read_only')",
            )
            .await?;
        let row = results.first().and_then(|r| r.rows.first());
        let value = |i: usize| row.and_then(|r| r.get(i)).and_then(|v| v.as_deref());
        Ok(ServerRole {
            in_recovery: value(0) == Some("true"),
            read_only: value(1) == Some("on"),
        })
    }

    /// Runs `sql` (one or more statements) with the simple-query protocol; every result
    /// in text form. A server error is returned once the session is ready again.
    pub async fn simple_query(&mut self, sql: &str) -> Result<Vec<QueryResult>> {
        self.wire.simple_query(sql, Activity::Command).await
    }

    /// [`Self::simple_query`], with a server error saying `context`.
    pub async fn simple_query_in(&mut self, sql: &str, context: &str) -> Result<Vec<QueryResult>> {
        self.wire
            .simple_query_in(sql, Activity::Command, context)
            .await
    }

    /// Runs `sql`, a `COPY … TO STDOUT`, with `before` (whose rows are kept) sent in
    /// front of it and `then` (e.g. `COMMIT`) right behind it, in one write; read its data
    /// with [`Self::copy_data`]. Errors name `context`.
    pub async fn begin_copy_out(
        &mut self,
        before: Option<&str>,
        sql: &str,
        then: Option<&str>,
        context: &str,
    ) -> Result<CopyOut> {
        self.wire
            .begin_copy_out(before, sql, then, Activity::Command, context)
            .await
    }

    /// Hands the COPY data that one read from the server brought to `data`; `false` once
    /// the COPY (and the queries sent with it) ended — with an error if any failed (see
    /// `Wire::copy_data`).
    pub async fn copy_data(
        &mut self,
        copy: &mut CopyOut,
        data: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<bool> {
        self.wire.copy_data(copy, data).await
    }

    /// Runs `sql`, a `COPY … TO STDOUT`, to its end with `before` and `then` sent with
    /// it (see [`Self::begin_copy_out`]), handing all of its data to `data`. Returns the
    /// rows of `before`, in text form.
    pub async fn copy_out(
        &mut self,
        before: Option<&str>,
        sql: &str,
        then: Option<&str>,
        context: &str,
        mut data: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<Vec<Vec<Option<String>>>> {
        let mut copy = self.begin_copy_out(before, sql, then, context).await?;
        while self.copy_data(&mut copy, &mut data).await? {}
        Ok(copy.take_rows())
    }
}
