//! Our own frontend/backend protocol session, used for `replication=database`: startup,
//! authentication (trust, cleartext password, md5, SCRAM-SHA-256 and, with channel
//! binding, SCRAM-SHA-256-PLUS via `postgres-protocol`), the simple-query protocol, and
//! the switch into CopyBoth.

use std::ops::Range;

use bytes::{Buf, BytesMut};
use cdc_core::{Error, Result, ServerError};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::ScramSha256;
use postgres_protocol::message::backend::{DataRowBody, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::channel_binding::{self, Negotiation};
use super::config::ConnectionConfig;
use super::error::{Activity, io_error, server_error, server_error_from_fields};
use super::frame::{self, Phase};
use super::framing::{NoticeRun, decode, drain_until_closed};
use super::transport::{Socket, describe_target};

/// Tag of CopyBothResponse, which `postgres-protocol` does not parse.
const COPY_BOTH_RESPONSE_TAG: u8 = b'W';

/// Tag of CopyData.
const COPY_DATA_TAG: u8 = b'd';

/// How much room a read of COPY data makes at least: one `recv` takes what a busy server
/// sent since the last one (its socket buffer holds a few hundred kB).
const COPY_READ_SIZE: usize = 64 * 1024;

/// The result of one statement run with the simple-query protocol, in text format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryResult {
    /// Column names, in order (empty for statements that return no rows).
    pub columns: Vec<String>,
    /// Rows; `None` is SQL NULL.
    pub rows: Vec<Vec<Option<String>>>,
    /// The command tag, e.g. `IDENTIFY_SYSTEM` or `SELECT 1`.
    pub tag: String,
}

impl QueryResult {
    /// The value of column `name` in row `row`; `None` if the row or column does not exist
    /// or the value is NULL.
    pub fn get(&self, row: usize, name: &str) -> Option<&str> {
        let col = self.columns.iter().position(|c| c == name)?;
        self.rows.get(row)?.get(col)?.as_deref()
    }
}

/// What the server sent.
pub(crate) enum Backend {
    Message(Message),
    CopyBothResponse,
}

/// A COPY out under way (see [`Wire::begin_copy_out`]).
#[derive(Debug)]
pub(crate) struct CopyOut {
    command: String,
    context: String,
    activity: Activity,
    /// Which query is the COPY (0, or 1 behind a query whose rows are kept).
    copy_index: usize,
    /// Queries sent, and the ReadyForQuery messages received for them.
    queries: usize,
    ready: usize,
    /// The rows of the query before the COPY, in text form.
    rows: Vec<Vec<Option<String>>>,
    /// Between CopyOutResponse and CopyDone; CopyDone seen.
    copying: bool,
    copied: bool,
    /// The first server error, and the first error of the data's receiver.
    failure: Option<ServerError>,
    rejected: Option<Error>,
}

impl CopyOut {
    /// The rows the query sent before the COPY returned (in text form), once read.
    pub(crate) fn take_rows(&mut self) -> Vec<Vec<Option<String>>> {
        std::mem::take(&mut self.rows)
    }

    /// The outcome once the server is ready after every query.
    fn finish(&mut self) -> Result<()> {
        if let Some(server) = self.failure.take() {
            return Err(server_error(server, self.activity, &self.context));
        }
        if let Some(e) = self.rejected.take() {
            return Err(e);
        }
        if !self.copied {
            return Err(protocol(format!(
                "{}: the server did not send COPY data for {}",
                self.context, self.command
            )));
        }
        Ok(())
    }
}

/// A started session.
pub(crate) struct Wire {
    socket: Socket,
    rbuf: BytesMut,
    wbuf: BytesMut,
    parameters: Vec<(String, String)>,
    backend_pid: i32,
    target: String,
    /// Startup until AuthenticationOk, for the message length caps (see `frame.rs`).
    phase: Phase,
    /// NoticeResponses in a row (logged and dropped by [`Self::read`]).
    notices: NoticeRun,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire")
            .field("target", &self.target)
            .field("socket", &self.socket)
            .field("backend_pid", &self.backend_pid)
            .finish_non_exhaustive()
    }
}

fn protocol(message: impl Into<String>) -> Error {
    Error::protocol(message)
}

impl Wire {
    /// Runs startup and authentication on `socket`. With `replication`, the session is a
    /// logical replication session (`replication=database`).
    ///
    /// Errors: a server rejection (ErrorResponse) keeps its SQLSTATE and is classified for
    /// [`Activity::Connect`]; unsupported authentication methods and a missing password
    /// are Config errors; a server that fails SCRAM's mutual authentication is a Config
    /// error (it does not know the password: possibly not the server you meant). So is
    /// every login that `channel_binding` does not allow (see [`Negotiation`]) and a
    /// server that refuses the channel binding; `channel_binding=require` without TLS
    /// fails before anything is sent.
    pub(crate) async fn startup(
        socket: Socket,
        config: &ConnectionConfig,
        replication: bool,
    ) -> Result<Wire> {
        let binding = Negotiation::start(config, &socket)?;
        let mut wire = Wire {
            socket,
            rbuf: BytesMut::with_capacity(8192),
            wbuf: BytesMut::with_capacity(512),
            parameters: Vec::new(),
            backend_pid: 0,
            target: describe_target(config),
            phase: Phase::Startup,
            notices: NoticeRun::default(),
        };
        let mut params: Vec<(&str, &str)> = vec![
            ("user", config.user.as_str()),
            ("database", config.dbname.as_str()),
            ("client_encoding", "UTF8"),
        ];
        if replication {
            params.push(("replication", "database"));
        }
        if let Some(app) = &config.application_name {
            params.push(("application_name", app.as_str()));
        }
        if let Some(options) = &config.options {
            params.push(("options", options.as_str()));
        }
        // pgoutput's text format is each type's output function in this session; startup
        // parameters win over `options`, the role's and the database's defaults.
        for (name, value) in super::session::pinned_settings() {
            params.push((name, value));
        }
        frontend::startup_message(params.iter().copied(), &mut wire.wbuf)
            .map_err(|e| Error::config(format!("invalid startup parameter: {e}")))?;
        wire.flush().await?;
        wire.authenticate(config, binding).await?;
        wire.await_ready().await?;
        Ok(wire)
    }

    fn connect_context(&self, config: &ConnectionConfig) -> String {
        format!(
            "the server at {} rejected the connection of user {:?} to database {:?}",
            self.target, config.user, config.dbname
        )
    }

    async fn authenticate(
        &mut self,
        config: &ConnectionConfig,
        mut binding: Negotiation,
    ) -> Result<()> {
        let mut scram: Option<ScramSha256> = None;
        loop {
            let message = match self.read().await? {
                Backend::Message(m) => m,
                Backend::CopyBothResponse => {
                    return Err(protocol("CopyBothResponse during authentication"));
                }
            };
            match message {
                Message::AuthenticationOk => {
                    // From here on the long message types may be long.
                    self.phase = Phase::Authenticated;
                    return binding.authenticated();
                }
                Message::AuthenticationCleartextPassword => {
                    binding.password_requested("password")?;
                    let password = required_password(config, "password")?;
                    frontend::password_message(password.as_bytes(), &mut self.wbuf)
                        .map_err(|e| Error::config(format!("invalid password: {e}")))?;
                    self.flush().await?;
                }
                Message::AuthenticationMd5Password(body) => {
                    binding.password_requested("md5")?;
                    let password = required_password(config, "md5")?;
                    let hash = md5_hash(config.user.as_bytes(), password.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut self.wbuf)
                        .map_err(|e| Error::config(format!("invalid password: {e}")))?;
                    self.flush().await?;
                }
                Message::AuthenticationSasl(body) => {
                    let mechanisms: Vec<String> = body
                        .mechanisms()
                        .map(|m| Ok(m.to_owned()))
                        .collect()
                        .map_err(|e| protocol(format!("malformed SASL mechanism list: {e}")))?;
                    let (mechanism, channel) = binding.choose(&mechanisms)?;
                    let password = required_password(config, "scram-sha-256")?;
                    let state = ScramSha256::new(password.as_bytes(), channel);
                    frontend::sasl_initial_response(mechanism, state.message(), &mut self.wbuf)
                        .map_err(|e| protocol(format!("cannot encode the SASL response: {e}")))?;
                    self.flush().await?;
                    scram = Some(state);
                }
                Message::AuthenticationSaslContinue(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| protocol("SASL continuation without a SASL exchange"))?;
                    state
                        .update(body.data())
                        .map_err(|e| protocol(format!("SCRAM exchange failed: {e}")))?;
                    frontend::sasl_response(state.message(), &mut self.wbuf)
                        .map_err(|e| protocol(format!("cannot encode the SASL response: {e}")))?;
                    self.flush().await?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| protocol("SASL final message without a SASL exchange"))?;
                    state.finish(body.data()).map_err(|e| {
                        Error::config(format!(
                            "the server at {} failed SCRAM mutual authentication ({e}): it does not know the password; it may not be the server you meant",
                            self.target
                        ))
                    })?;
                    binding.finished();
                }
                Message::ErrorResponse(body) => {
                    let server = server_error_from_fields(body.fields());
                    if binding.refused(&server) {
                        return Err(channel_binding::refused(&self.target, server));
                    }
                    return Err(server_error(
                        server,
                        Activity::Connect,
                        &self.connect_context(config),
                    ));
                }
                Message::AuthenticationGss
                | Message::AuthenticationGssContinue(_)
                | Message::AuthenticationSspi
                | Message::AuthenticationKerberosV5
                | Message::AuthenticationScmCredential => {
                    return Err(Error::config(format!(
                        "the server at {} requests GSSAPI/SSPI/Kerberos/SCM authentication; pgcdc supports trust, password, md5 and scram-sha-256: change pg_hba.conf for this user",
                        self.target
                    )));
                }
                _ => return Err(protocol("unexpected message during authentication")),
            }
        }
    }

    /// After AuthenticationOk: parameters, key data, then ReadyForQuery.
    async fn await_ready(&mut self) -> Result<()> {
        loop {
            match self.read().await? {
                Backend::Message(Message::ReadyForQuery(_)) => return Ok(()),
                Backend::Message(Message::ParameterStatus(body)) => self.record_parameter(&body)?,
                Backend::Message(Message::BackendKeyData(body)) => {
                    self.backend_pid = body.process_id()
                }
                Backend::Message(Message::ErrorResponse(body)) => {
                    let server = server_error_from_fields(body.fields());
                    return Err(server_error(
                        server,
                        Activity::Connect,
                        &format!("the server at {} failed to start the session", self.target),
                    ));
                }
                _ => return Err(protocol("unexpected message while starting the session")),
            }
        }
    }

    fn record_parameter(
        &mut self,
        body: &postgres_protocol::message::backend::ParameterStatusBody,
    ) -> Result<()> {
        let name = body
            .name()
            .map_err(|e| protocol(format!("malformed ParameterStatus: {e}")))?;
        let value = body
            .value()
            .map_err(|e| protocol(format!("malformed ParameterStatus: {e}")))?;
        match self.parameters.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = value.to_owned(),
            None => self.parameters.push((name.to_owned(), value.to_owned())),
        }
        Ok(())
    }

    /// A server parameter reported at startup (or later), e.g. `server_version`.
    pub(crate) fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The server process id (`pg_stat_activity.pid`).
    pub(crate) fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// Whether the session is encrypted.
    pub(crate) fn is_tls(&self) -> bool {
        self.socket.is_tls()
    }

    async fn flush(&mut self) -> Result<()> {
        self.socket
            .write_all(&self.wbuf)
            .await
            .map_err(|e| io_error(e, &format!("writing to {}", self.target)))?;
        self.socket
            .flush()
            .await
            .map_err(|e| io_error(e, &format!("writing to {}", self.target)))?;
        self.wbuf.clear();
        Ok(())
    }

    /// Reads one backend message. NoticeResponses are logged here and never returned
    /// (more than `MAX_CONSECUTIVE_NOTICES` in a row end the session with a protocol
    /// error).
    ///
    /// Errors: a length over the cap for the message type and phase (see `frame.rs`) or a
    /// malformed message is a Protocol error naming the type; the server closing the
    /// connection is Transient.
    pub(crate) async fn read(&mut self) -> Result<Backend> {
        loop {
            let split = frame::split_frame(&mut self.rbuf, self.phase)
                .map_err(|e| protocol(format!("the server at {} sent {e}", self.target)))?;
            let Some(frame) = split else {
                self.fill(8192).await?;
                continue;
            };
            if frame.tag() == COPY_BOTH_RESPONSE_TAG {
                self.notices.reset();
                return Ok(Backend::CopyBothResponse);
            }
            let message = decode(&frame)
                .map_err(|e| protocol(format!("{} (from {})", e.message(), self.target)))?;
            if let Message::NoticeResponse(body) = &message {
                self.notices.on_notice(body.fields(), &self.target)?;
                continue;
            }
            self.notices.reset();
            return Ok(Backend::Message(message));
        }
    }

    /// Reads more bytes from the server into the read buffer, with room for at least
    /// `at_least` more (and for the incomplete message at its start, within its cap).
    async fn fill(&mut self, at_least: usize) -> Result<()> {
        frame::make_room(&mut self.rbuf, self.phase);
        self.rbuf.reserve(at_least);
        let n = self
            .socket
            .read_buf(&mut self.rbuf)
            .await
            .map_err(|e| io_error(e, &format!("reading from {}", self.target)))?;
        if n == 0 {
            return Err(Error::transient(format!(
                "the server at {} closed the connection unexpectedly",
                self.target
            )));
        }
        Ok(())
    }

    /// Sends `sql`, a `COPY … TO STDOUT`, with the simple-query protocol: `before`, when
    /// given, in front of it as a query of its own (its rows are kept, see
    /// [`CopyOut::take_rows`]), and `then` right behind it (e.g. the `COMMIT` of the
    /// COPY's transaction) — all in one write, so the server runs them back to back
    /// without waiting for this side. The response is read with [`Self::copy_data`]
    /// until it returns `false`.
    pub(crate) async fn begin_copy_out(
        &mut self,
        before: Option<&str>,
        sql: &str,
        then: Option<&str>,
        activity: Activity,
        context: &str,
    ) -> Result<CopyOut> {
        for query in before.into_iter().chain([sql]).chain(then) {
            frontend::query(query, &mut self.wbuf)
                .map_err(|e| Error::config(format!("invalid command: {e}")))?;
        }
        self.flush().await?;
        let copy_index = usize::from(before.is_some());
        Ok(CopyOut {
            command: command_name(sql).to_owned(),
            context: context.to_owned(),
            activity,
            copy_index,
            queries: copy_index + 1 + usize::from(then.is_some()),
            ready: 0,
            rows: Vec::new(),
            copying: false,
            copied: false,
            failure: None,
            rejected: None,
        })
    }

    /// Reads the response of [`Self::begin_copy_out`] on, handing each CopyData
    /// message's payload to `data` straight off the read buffer (no allocation per
    /// message: a binary COPY sends one message per row). Returns after the messages one
    /// read from the socket brought (`true`: more follow), so the caller can pass on
    /// what `data` built; `false` once the server is ready again after every query.
    ///
    /// Errors: a server error in either query (the first one, classified for the
    /// activity, with the context given) or from `data` (the first one; `data` is not
    /// called again) is returned once the server is ready again, so the session stays
    /// usable; an unexpected message or a COPY that never started is a Protocol error.
    pub(crate) async fn copy_data(
        &mut self,
        copy: &mut CopyOut,
        mut data: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<bool> {
        let mut read = false;
        loop {
            // The rows: CopyData handed on where it lies in the buffer.
            let header = frame::header(&self.rbuf, self.phase)
                .map_err(|e| protocol(format!("the server at {} sent {e}", self.target)))?;
            if let Some((COPY_DATA_TAG, len)) = header
                && copy.copying
                && let Some(payload) = self.rbuf.get(frame::HEADER_LEN..len + 1)
            {
                if copy.rejected.is_none()
                    && let Err(e) = data(payload)
                {
                    copy.rejected = Some(e);
                }
                self.rbuf.advance(len + 1);
                continue;
            }
            // A message not yet complete: more bytes, unless this call read already.
            if header.is_none_or(|(_, len)| self.rbuf.len() <= len) {
                if read {
                    return Ok(true);
                }
                self.fill(COPY_READ_SIZE).await?;
                read = true;
                continue;
            }
            let message = match self.read().await? {
                Backend::Message(m) => m,
                Backend::CopyBothResponse => {
                    return Err(protocol(format!(
                        "{} unexpectedly started a CopyBoth stream",
                        copy.command
                    )));
                }
            };
            match message {
                Message::RowDescription(_) if copy.ready < copy.copy_index => {}
                Message::DataRow(body) if copy.ready < copy.copy_index => {
                    copy.rows.push(text_row(&body)?);
                }
                Message::CopyOutResponse(_) if copy.ready == copy.copy_index => {
                    copy.copying = true;
                }
                Message::CopyDone if copy.copying => {
                    copy.copying = false;
                    copy.copied = true;
                }
                Message::CommandComplete(_) | Message::EmptyQueryResponse => {}
                Message::ErrorResponse(body) => {
                    copy.copying = false;
                    copy.failure
                        .get_or_insert(server_error_from_fields(body.fields()));
                }
                Message::ParameterStatus(body) => self.record_parameter(&body)?,
                Message::ReadyForQuery(_) => {
                    copy.ready += 1;
                    if copy.ready == copy.queries {
                        return copy.finish().map(|()| false);
                    }
                }
                _ => {
                    return Err(protocol(format!(
                        "unexpected message in the response to {}",
                        copy.command
                    )));
                }
            }
        }
    }

    /// Runs `sql` with the simple-query protocol and collects every result in text form.
    ///
    /// A server error is returned after the server is ready again (the session stays
    /// usable), classified for `activity`.
    pub(crate) async fn simple_query(
        &mut self,
        sql: &str,
        activity: Activity,
    ) -> Result<Vec<QueryResult>> {
        let context = format!("{} failed", command_name(sql));
        self.simple_query_in(sql, activity, &context).await
    }

    /// [`Self::simple_query`], with a server error saying `context`.
    pub(crate) async fn simple_query_in(
        &mut self,
        sql: &str,
        activity: Activity,
        context: &str,
    ) -> Result<Vec<QueryResult>> {
        frontend::query(sql, &mut self.wbuf)
            .map_err(|e| Error::config(format!("invalid command: {e}")))?;
        self.flush().await?;
        let mut results = Vec::new();
        let mut current: Option<QueryResult> = None;
        let mut failure = None;
        loop {
            let message = match self.read().await? {
                Backend::Message(m) => m,
                Backend::CopyBothResponse => {
                    return Err(protocol(format!(
                        "{} unexpectedly started a CopyBoth stream",
                        command_name(sql)
                    )));
                }
            };
            match message {
                Message::RowDescription(body) => {
                    let columns = body
                        .fields()
                        .map(|f| Ok(f.name().to_owned()))
                        .collect()
                        .map_err(|e| protocol(format!("malformed RowDescription: {e}")))?;
                    current = Some(QueryResult {
                        columns,
                        ..QueryResult::default()
                    });
                }
                Message::DataRow(body) => {
                    let result = current
                        .as_mut()
                        .ok_or_else(|| protocol("DataRow without RowDescription"))?;
                    result.rows.push(text_row(&body)?);
                }
                Message::CommandComplete(body) => {
                    let mut result = current.take().unwrap_or_default();
                    result.tag = body
                        .tag()
                        .map_err(|e| protocol(format!("malformed CommandComplete: {e}")))?
                        .to_owned();
                    results.push(result);
                }
                Message::EmptyQueryResponse => {}
                Message::ErrorResponse(body) => {
                    failure = Some(server_error_from_fields(body.fields()))
                }
                Message::ParameterStatus(body) => self.record_parameter(&body)?,
                Message::ReadyForQuery(_) => break,
                _ => {
                    return Err(protocol(format!(
                        "unexpected message in the response to {}",
                        command_name(sql)
                    )));
                }
            }
        }
        match failure {
            Some(server) => Err(server_error(server, activity, context)),
            None => Ok(results),
        }
    }

    /// Sends `sql` (`START_REPLICATION ...`) and waits for CopyBothResponse.
    pub(crate) async fn start_copy_both(&mut self, sql: &str, activity: Activity) -> Result<()> {
        frontend::query(sql, &mut self.wbuf)
            .map_err(|e| Error::config(format!("invalid command: {e}")))?;
        self.flush().await?;
        let mut failure = None;
        loop {
            match self.read().await? {
                Backend::CopyBothResponse => return Ok(()),
                Backend::Message(Message::ErrorResponse(body)) => {
                    failure = Some(server_error_from_fields(body.fields()));
                }
                Backend::Message(Message::ParameterStatus(body)) => self.record_parameter(&body)?,
                Backend::Message(Message::ReadyForQuery(_)) => {
                    return Err(match failure {
                        Some(server) => {
                            server_error(server, activity, &format!("{} failed", command_name(sql)))
                        }
                        None => protocol(format!(
                            "{} did not start a CopyBoth stream",
                            command_name(sql)
                        )),
                    });
                }
                Backend::Message(_) => {}
            }
        }
    }

    /// Sends Terminate and waits (a bounded time) until the server hangs up, so that a
    /// temporary slot is gone when this returns; errors are ignored (the session ends
    /// anyway).
    pub(crate) async fn terminate(mut self) {
        frontend::terminate(&mut self.wbuf);
        let _ = self.flush().await;
        drain_until_closed(&mut self.socket, &mut self.rbuf).await;
    }

    /// The socket and any bytes already read but not yet parsed (CopyData that arrived
    /// together with CopyBothResponse).
    pub(crate) fn into_parts(self) -> (Socket, BytesMut, String) {
        (self.socket, self.rbuf, self.target)
    }
}

fn required_password<'a>(config: &'a ConnectionConfig, method: &str) -> Result<&'a str> {
    config.password.as_deref().ok_or_else(|| {
        Error::config(format!(
            "the server requires {method} authentication for user {:?}, but no password is configured: add password=... to the connection string",
            config.user
        ))
    })
}

/// The first word of a command, for messages (never the whole text: it may be long).
fn command_name(sql: &str) -> &str {
    sql.split_whitespace().next().unwrap_or("command")
}

fn text_row(body: &DataRowBody) -> Result<Vec<Option<String>>> {
    let buffer = body.buffer();
    body.ranges()
        .map(|range: Option<Range<usize>>| {
            Ok(range
                .and_then(|r| buffer.get(r))
                .map(|b| String::from_utf8_lossy(b).into_owned()))
        })
        .collect()
        .map_err(|e| protocol(format!("malformed DataRow: {e}")))
}
