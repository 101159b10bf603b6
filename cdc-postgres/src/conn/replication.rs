//! The logical replication session (`replication=database`) and its commands.
//!
//! Identifiers in commands are always double-quoted (slot names are `[a-z0-9_]`, but words
//! such as `wait` or `logical` are keywords of the replication grammar), and string
//! arguments are single-quoted with `''` escapes.

use std::time::Duration;

use cdc_core::{Error, Lsn, Result, SourceIdentity};

pub use super::config::Streaming;
use super::config::validate_slot_name;
use super::config::{ConnectionConfig, TargetSessionAttrs};
use super::error::Activity;
use super::servers::ServerRole;
use super::stream::{ReplicationStream, StreamOptions};
use super::transport;
use super::wire::Wire;
use cdc_pgoutput::protocol::receive_deadline::effective_receive_timeout;
use cdc_pgoutput::protocol::status_schedule::effective_status_interval;

pub use super::wire::QueryResult;

/// What `IDENTIFY_SYSTEM` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemInfo {
    /// The cluster's unique system identifier (decimal, as the server prints it).
    pub system_identifier: String,
    /// The current timeline.
    pub timeline: u32,
    /// The current WAL flush position.
    pub xlogpos: Lsn,
    /// The database the session is connected to.
    pub dbname: Option<String>,
}

impl SystemInfo {
    /// The [`SourceIdentity`] of a stream from `slot` on this server: system identifier,
    /// timeline, database and slot — what a resume token must match
    /// ([`super::identity::check_resume`]).
    pub fn identity(&self, database: &str, slot: &str) -> SourceIdentity {
        SourceIdentity {
            system_identifier: self.system_identifier.clone(),
            timeline: self.timeline,
            database: self.dbname.clone().unwrap_or_else(|| database.to_owned()),
            slot: slot.to_owned(),
        }
    }
}

/// Whether `CREATE_REPLICATION_SLOT` exports a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotAction {
    /// Export a snapshot for an initial copy (`SET TRANSACTION SNAPSHOT` in another
    /// session). It stays valid only until the next command on this connection or its
    /// close: import it before doing anything else here.
    #[default]
    Export,
    /// No snapshot.
    NoExport,
}

/// Options of `CREATE_REPLICATION_SLOT`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateSlotOptions {
    /// A temporary slot disappears when the session ends.
    pub temporary: bool,
    /// Export a snapshot or not.
    pub snapshot: SnapshotAction,
    /// Enable decoding of prepared transactions (PostgreSQL 15+).
    pub two_phase: bool,
    /// A failover slot (PostgreSQL 17+): synced to standbys that have
    /// `sync_replication_slots` on, so it survives a promotion.
    pub failover: bool,
}

/// What `CREATE_REPLICATION_SLOT` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedSlot {
    /// The slot's name.
    pub slot_name: String,
    /// Streaming from this slot starts with the first transaction that commits after this
    /// point; the exported snapshot shows exactly the data before it.
    pub consistent_point: Lsn,
    /// The exported snapshot, with [`SnapshotAction::Export`].
    pub snapshot_name: Option<String>,
    /// The output plugin (`pgoutput`).
    pub output_plugin: Option<String>,
}

/// What `READ_REPLICATION_SLOT` reports about an existing slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadSlot {
    /// `physical` or `logical`.
    pub slot_type: String,
    /// Oldest WAL the slot retains (physical slots only; `None` for logical slots, which
    /// the command does not describe).
    pub restart_lsn: Option<Lsn>,
    /// Timeline of `restart_lsn` (physical slots only).
    pub restart_tli: Option<u32>,
}

/// The pgoutput plugin options of `START_REPLICATION`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgOutputOptions {
    /// Publications to stream (exact names). At least one.
    pub publication_names: Vec<String>,
    /// Binary tuple format (PostgreSQL 14+).
    pub binary: bool,
    /// Logical decoding messages (`pg_logical_emit_message`) (PostgreSQL 14+).
    pub messages: bool,
    /// Streaming of large in-progress transactions.
    pub streaming: Streaming,
    /// Decoding of prepared transactions (PostgreSQL 15+, protocol 3; the slot must have
    /// been created with two-phase enabled).
    pub two_phase: bool,
}

impl PgOutputOptions {
    /// Options for `publications` with every feature off.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(publications: I) -> Self {
        PgOutputOptions {
            publication_names: publications.into_iter().map(Into::into).collect(),
            ..PgOutputOptions::default()
        }
    }

    /// The lowest protocol version that carries the requested features: 1, or 2 for
    /// streaming, 3 for two-phase, 4 for parallel streaming. A Config error if the server
    /// (`server_version_num`) is too old for a requested feature.
    pub fn protocol_version(&self, server_version_num: u32) -> Result<u32> {
        let need = |feature: &str, min: u32| -> Result<()> {
            if server_version_num < min {
                Err(Error::config(format!(
                    "{feature} needs PostgreSQL {}+, but the server is version {}",
                    min / 10000,
                    version_text(server_version_num)
                )))
            } else {
                Ok(())
            }
        };
        if self.binary {
            need("binary tuple format", 140000)?;
        }
        if self.messages {
            need("logical decoding messages", 140000)?;
        }
        let mut version = 1;
        match self.streaming.resolve(server_version_num) {
            Streaming::Off | Streaming::Auto => {}
            Streaming::On => {
                need("streaming of in-progress transactions", 140000)?;
                version = version.max(2);
            }
            Streaming::Parallel => {
                need("parallel streaming", 160000)?;
                version = version.max(4);
            }
        }
        if self.two_phase {
            need("two-phase decoding", 150000)?;
            version = version.max(3);
        }
        Ok(version)
    }

    /// The parenthesized option list of `START_REPLICATION ... LOGICAL`, e.g.
    /// `("proto_version" '1', "publication_names" '"orders_pub"')`.
    pub fn to_options_clause(&self, server_version_num: u32) -> Result<String> {
        if self.publication_names.is_empty() {
            return Err(Error::config("at least one publication is needed"));
        }
        let version = self.protocol_version(server_version_num)?;
        let names = self
            .publication_names
            .iter()
            .map(|p| quote_ident(p))
            .collect::<Vec<_>>()
            .join(",");
        let mut options = vec![
            format!("\"proto_version\" '{version}'"),
            format!("\"publication_names\" {}", quote_literal(&names)),
        ];
        if self.binary {
            options.push("\"binary\" 'true'".to_owned());
        }
        if self.messages {
            options.push("\"messages\" 'true'".to_owned());
        }
        match self.streaming.resolve(server_version_num) {
            Streaming::Off | Streaming::Auto => {}
            Streaming::On => options.push("\"streaming\" 'on'".to_owned()),
            Streaming::Parallel => options.push("\"streaming\" 'parallel'".to_owned()),
        }
        if self.two_phase {
            options.push("\"two_phase\" 'true'".to_owned());
        }
        Ok(format!("({})", options.join(", ")))
    }
}

/// `ident` double-quoted with `""` escapes.
pub fn quote_ident(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// `value` single-quoted with `''` escapes (the replication grammar has no `E''` strings).
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// A `server_version_num` as people write it: `150004` → `15.4`, `90624` → `9.6.24`.
pub(crate) fn version_text(num: u32) -> String {
    if num >= 100000 {
        format!("{}.{}", num / 10000, num % 10000)
    } else {
        format!("{}.{}.{}", num / 10000, num / 100 % 100, num % 100)
    }
}

/// Parses `server_version` (`15.4 (Debian 15.4-1)`, `16beta1`, `9.6.24`) into the
/// `server_version_num` form (`150004`, `160000`, `90624`).
pub fn parse_server_version(text: &str) -> Option<u32> {
    let numeric: String = text
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = numeric
        .split('.')
        .filter(|p| !p.is_empty())
        .map(str::parse::<u32>);
    let major = parts.next()?.ok()?;
    let second = parts.next().transpose().ok()?.unwrap_or(0);
    if major >= 10 {
        major.checked_mul(10000)?.checked_add(second)
    } else {
        let third = parts.next().transpose().ok()?.unwrap_or(0);
        Some(major * 10000 + second * 100 + third)
    }
}

fn required<'a>(result: &'a QueryResult, column: &str, command: &str) -> Result<&'a str> {
    result
        .get(0, column)
        .ok_or_else(|| Error::protocol(format!("{command} returned no {column}")))
}

fn parse_lsn(text: &str, what: &str) -> Result<Lsn> {
    text.parse()
        .map_err(|_| Error::protocol(format!("{what} is not an LSN: {text:?}")))
}

/// Parses a duration as `SHOW` prints it (`60s`, `500ms`, `1min`, `0`).
fn parse_show_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let value: u64 = text[..split].parse().ok()?;
    let millis = match &text[split..] {
        "" | "ms" => value,
        "s" => value.checked_mul(1000)?,
        "min" => value.checked_mul(60_000)?,
        "h" => value.checked_mul(3_600_000)?,
        "d" => value.checked_mul(86_400_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

/// A logical replication session.
///
/// Established over the same transport and TLS settings as the SQL connection. Commands run
/// one at a time; a server error leaves the session usable. [`Self::start_replication`]
/// consumes the session and turns it into a [`ReplicationStream`].
#[derive(Debug)]
pub struct ReplicationConnection {
    wire: Wire,
    server_version_num: u32,
}

impl ReplicationConnection {
    /// Connects and authenticates with `replication=database`, honouring every setting of
    /// `config` (`sslmode` and its fallbacks, certificates, `connect_timeout`).
    ///
    /// Errors: authentication failures (`28P01`, `28000`) and a role without the
    /// `REPLICATION` attribute are Config errors; an unreachable or restarting server is
    /// Transient; TLS verification failures are Config errors.
    ///
    /// With several servers (`host=a,b`), each is tried in order and the first that
    /// `target_session_attrs` accepts is used ([`crate::conn::TargetSessionAttrs`]).
    pub async fn connect(config: &ConnectionConfig) -> Result<Self> {
        super::servers::connect_first(config, |one| async move {
            let mut conn = Self::connect_one_server(&one).await?;
            if one.target_session_attrs != TargetSessionAttrs::Any {
                let role = conn.role().await?;
                super::servers::require(&one, role)?;
            }
            Ok(conn)
        })
        .await
    }

    /// Whether the server is a standby and read-only by default, from what it reported
    /// at startup (`in_hot_standby` and `default_transaction_read_only` are reported
    /// from PostgreSQL 14), else asked.
    async fn role(&mut self) -> Result<ServerRole> {
        Ok(ServerRole {
            in_recovery: self.setting_is_on("in_hot_standby").await?,
            read_only: self.setting_is_on("default_transaction_read_only").await?,
        })
    }

    /// Whether boolean setting `name`, as reported at startup or else shown, is on.
    async fn setting_is_on(&mut self, name: &str) -> Result<bool> {
        let value = match self.wire.parameter(name) {
            Some(value) => value.to_owned(),
            None => self.show(name).await?,
        };
        Ok(value.trim() == "on")
    }

    /// [`Self::connect`] to the one server `config` names first.
    async fn connect_one_server(config: &ConnectionConfig) -> Result<Self> {
        let wire = transport::connect(config, |socket| Wire::startup(socket, config, true)).await?;
        let mut conn = ReplicationConnection {
            wire,
            server_version_num: 0,
        };
        conn.server_version_num = match conn
            .wire
            .parameter("server_version")
            .and_then(parse_server_version)
        {
            Some(num) => num,
            None => {
                let shown = conn.show("server_version_num").await?;
                shown.trim().parse().map_err(|_| {
                    Error::protocol(format!("unexpected server_version_num {shown:?}"))
                })?
            }
        };
        conn.simple_query(&super::session::late_settings_query())
            .await?;
        Ok(conn)
    }

    /// The server version in `server_version_num` form (e.g. `150004`).
    pub fn server_version_num(&self) -> u32 {
        self.server_version_num
    }

    /// The walsender's process id (as in `pg_stat_replication.pid`).
    pub fn backend_pid(&self) -> i32 {
        self.wire.backend_pid()
    }

    /// Whether the session is encrypted with TLS.
    pub fn is_tls(&self) -> bool {
        self.wire.is_tls()
    }

    /// A server parameter reported at startup (`server_version`, `server_encoding`, ...).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.wire.parameter(name)
    }

    /// Runs a command with the simple-query protocol and returns its results in text form.
    /// Server errors are classified as for an ordinary command.
    pub async fn simple_query(&mut self, command: &str) -> Result<Vec<QueryResult>> {
        self.wire.simple_query(command, Activity::Command).await
    }

    /// `SHOW name` (allowed in replication sessions).
    pub async fn show(&mut self, name: &str) -> Result<String> {
        let results = self
            .wire
            .simple_query(&format!("SHOW {}", quote_ident(name)), Activity::Command)
            .await?;
        results
            .first()
            .and_then(|r| r.rows.first())
            .and_then(|row| row.first())
            .and_then(|v| v.clone())
            .ok_or_else(|| Error::protocol(format!("SHOW {name} returned no value")))
    }

    /// `TIMELINE_HISTORY tli`: the history file of timeline `tli` (its ancestors and where
    /// each ended), as text.
    pub async fn timeline_history(&mut self, timeline: u32) -> Result<String> {
        let results = self
            .wire
            .simple_query(&format!("TIMELINE_HISTORY {timeline}"), Activity::Command)
            .await?;
        results
            .first()
            .and_then(|r| r.get(0, "content"))
            .map(str::to_owned)
            .ok_or_else(|| Error::protocol("TIMELINE_HISTORY returned no content"))
    }

    /// `IDENTIFY_SYSTEM`: system identifier, timeline, WAL position and database.
    pub async fn identify_system(&mut self) -> Result<SystemInfo> {
        let results = self
            .wire
            .simple_query("IDENTIFY_SYSTEM", Activity::Command)
            .await?;
        let result = results
            .first()
            .ok_or_else(|| Error::protocol("IDENTIFY_SYSTEM returned no result"))?;
        let system_identifier = required(result, "systemid", "IDENTIFY_SYSTEM")?.to_owned();
        if system_identifier.parse::<u64>().is_err() {
            return Err(Error::protocol(format!(
                "IDENTIFY_SYSTEM returned a malformed system identifier {system_identifier:?}"
            )));
        }
        let timeline = required(result, "timeline", "IDENTIFY_SYSTEM")?
            .parse()
            .map_err(|_| Error::protocol("IDENTIFY_SYSTEM returned a malformed timeline"))?;
        let xlogpos = parse_lsn(
            required(result, "xlogpos", "IDENTIFY_SYSTEM")?,
            "IDENTIFY_SYSTEM xlogpos",
        )?;
        Ok(SystemInfo {
            system_identifier,
            timeline,
            xlogpos,
            dbname: result.get(0, "dbname").map(str::to_owned),
        })
    }

    /// `CREATE_REPLICATION_SLOT slot [TEMPORARY] LOGICAL pgoutput ...`, in the syntax of
    /// the server's version (PostgreSQL 15+: `(SNAPSHOT 'export')`; older:
    /// `EXPORT_SNAPSHOT`).
    ///
    /// Errors: an invalid slot name is Config; a slot that already exists (`42710`) is a
    /// Config error; all slots in use (`53400`) is Config.
    pub async fn create_slot(
        &mut self,
        slot: &str,
        options: CreateSlotOptions,
    ) -> Result<CreatedSlot> {
        validate_slot_name(slot)?;
        let mut command = format!("CREATE_REPLICATION_SLOT {}", quote_ident(slot));
        if options.temporary {
            command.push_str(" TEMPORARY");
        }
        command.push_str(" LOGICAL \"pgoutput\"");
        if self.server_version_num >= 150000 {
            let snapshot = match options.snapshot {
                SnapshotAction::Export => "export",
                SnapshotAction::NoExport => "nothing",
            };
            command.push_str(&format!(" (SNAPSHOT '{snapshot}'"));
            if options.two_phase {
                command.push_str(", TWO_PHASE true");
            }
            if options.failover {
                if self.server_version_num < 170000 {
                    return Err(Error::config(format!(
                        "failover slots need PostgreSQL 17+, but the server is version {}",
                        version_text(self.server_version_num)
                    )));
                }
                command.push_str(", FAILOVER true");
            }
            command.push(')');
        } else {
            if options.two_phase || options.failover {
                return Err(Error::config(format!(
                    "{} slots need PostgreSQL {}+, but the server is version {}",
                    if options.failover {
                        "failover"
                    } else {
                        "two-phase"
                    },
                    if options.failover { 17 } else { 15 },
                    version_text(self.server_version_num)
                )));
            }
            command.push_str(match options.snapshot {
                SnapshotAction::Export => " EXPORT_SNAPSHOT",
                SnapshotAction::NoExport => " NOEXPORT_SNAPSHOT",
            });
        }
        let results = self.wire.simple_query(&command, Activity::Command).await?;
        let result = results
            .first()
            .ok_or_else(|| Error::protocol("CREATE_REPLICATION_SLOT returned no result"))?;
        Ok(CreatedSlot {
            slot_name: required(result, "slot_name", "CREATE_REPLICATION_SLOT")?.to_owned(),
            consistent_point: parse_lsn(
                required(result, "consistent_point", "CREATE_REPLICATION_SLOT")?,
                "consistent_point",
            )?,
            snapshot_name: result.get(0, "snapshot_name").map(str::to_owned),
            output_plugin: result.get(0, "output_plugin").map(str::to_owned),
        })
    }

    /// `READ_REPLICATION_SLOT slot` (PostgreSQL 15+): `None` if the slot does not exist.
    ///
    /// The server describes only physical slots; for a logical slot this returns
    /// `slot_type = "logical"` without positions (use
    /// [`super::slot::inspect_slot`] for a logical slot's details).
    pub async fn read_slot(&mut self, slot: &str) -> Result<Option<ReadSlot>> {
        validate_slot_name(slot)?;
        if self.server_version_num < 150000 {
            return Err(Error::config(format!(
                "READ_REPLICATION_SLOT needs PostgreSQL 15+, but the server is version {}",
                version_text(self.server_version_num)
            )));
        }
        let command = format!("READ_REPLICATION_SLOT {}", quote_ident(slot));
        match self
            .wire
            .simple_query(&command, Activity::SlotCommand)
            .await
        {
            Ok(results) => {
                let Some(result) = results.first() else {
                    return Err(Error::protocol("READ_REPLICATION_SLOT returned no result"));
                };
                let Some(slot_type) = result.get(0, "slot_type") else {
                    return Ok(None);
                };
                Ok(Some(ReadSlot {
                    slot_type: slot_type.to_owned(),
                    restart_lsn: result
                        .get(0, "restart_lsn")
                        .map(|t| parse_lsn(t, "restart_lsn"))
                        .transpose()?,
                    restart_tli: result.get(0, "restart_tli").and_then(|t| t.parse().ok()),
                }))
            }
            // "cannot use READ_REPLICATION_SLOT with a logical replication slot": it exists.
            Err(e) if e.server_error().is_some_and(|s| s.code == "0A000") => Ok(Some(ReadSlot {
                slot_type: "logical".to_owned(),
                restart_lsn: None,
                restart_tli: None,
            })),
            Err(e) => Err(e),
        }
    }

    /// `DROP_REPLICATION_SLOT slot [WAIT]`. With `wait`, waits for a session that still
    /// uses the slot to release it instead of failing.
    ///
    /// Errors: a missing slot is ResyncRequired with SQLSTATE `42704` in its cause (callers
    /// that only want it gone can check [`cdc_core::Error::server_error`]).
    pub async fn drop_slot(&mut self, slot: &str, wait: bool) -> Result<()> {
        validate_slot_name(slot)?;
        let mut command = format!("DROP_REPLICATION_SLOT {}", quote_ident(slot));
        if wait {
            command.push_str(" WAIT");
        }
        self.wire
            .simple_query(&command, Activity::SlotCommand)
            .await?;
        Ok(())
    }

    /// `START_REPLICATION SLOT slot LOGICAL start (options)`, then streams in the
    /// background (see [`ReplicationStream`]).
    ///
    /// The status-update interval is at most a third of the server's `wal_sender_timeout`
    /// (read with `SHOW` first, unless [`StreamOptions::follow_wal_sender_timeout`] is
    /// off), so a consumer that stops reading is never disconnected; the receive timeout
    /// ([`StreamOptions::receive_timeout`]) is at least twice the server's timeout.
    /// `start` is where the server resumes; it never sends data before the slot's
    /// `confirmed_flush_lsn`.
    ///
    /// Errors: a missing slot (`42704`) or an invalidated one is ResyncRequired; a slot in
    /// use by another connection (`55006`) is Transient with a message naming the cause;
    /// features the server is too old for are Config.
    pub async fn start_replication(
        mut self,
        slot: &str,
        start: Lsn,
        options: &PgOutputOptions,
        mut stream_options: StreamOptions,
    ) -> Result<ReplicationStream> {
        validate_slot_name(slot)?;
        let clause = options.to_options_clause(self.server_version_num)?;
        if stream_options.follow_wal_sender_timeout
            && let Some(timeout) = parse_show_duration(&self.show("wal_sender_timeout").await?)
        {
            stream_options.status_interval =
                effective_status_interval(stream_options.status_interval, Some(timeout));
            stream_options.receive_timeout =
                effective_receive_timeout(stream_options.receive_timeout, Some(timeout));
        }
        let command = format!(
            "START_REPLICATION SLOT {} LOGICAL {start} {clause}",
            quote_ident(slot)
        );
        self.wire
            .start_copy_both(&command, Activity::SlotCommand)
            .await?;
        let (socket, leftover, target) = self.wire.into_parts();
        Ok(ReplicationStream::spawn(
            socket,
            leftover,
            target,
            stream_options,
        ))
    }

    /// Ends the session (Terminate) and waits up to 10 s for the server to hang up; by
    /// then the server has dropped a temporary slot of this session.
    pub async fn close(self) {
        self.wire.terminate().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("wait"), "\"wait\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    #[test]
    fn publication_names_are_quoted_identifiers_inside_a_literal() {
        let mut options = PgOutputOptions::new(["orders_pub", "Mixed Case", "it's \"q\""]);
        options.streaming = Streaming::Off;
        let clause = options.to_options_clause(150000).unwrap();
        assert_eq!(
            clause,
            r#"("proto_version" '1', "publication_names" '"orders_pub","Mixed Case","it''s ""q"""')"#
        );
    }

    #[test]
    fn protocol_version_is_the_lowest_that_carries_the_features() {
        let mut options = PgOutputOptions::new(["p"]);
        // Default (auto): the best streaming the server has.
        assert_eq!(options.protocol_version(100000).unwrap(), 1);
        assert_eq!(options.protocol_version(140000).unwrap(), 2);
        assert_eq!(options.protocol_version(150000).unwrap(), 2);
        assert_eq!(options.protocol_version(160000).unwrap(), 4);
        assert_eq!(options.protocol_version(180000).unwrap(), 4);
        assert!(
            options
                .to_options_clause(160000)
                .unwrap()
                .contains("\"streaming\" 'parallel'")
        );
        assert!(
            options
                .to_options_clause(150000)
                .unwrap()
                .contains("\"streaming\" 'on'")
        );
        assert!(
            !options
                .to_options_clause(130000)
                .unwrap()
                .contains("streaming")
        );
        options.streaming = Streaming::Off;
        assert_eq!(options.protocol_version(100000).unwrap(), 1);
        assert_eq!(options.protocol_version(170000).unwrap(), 1);
        options.streaming = Streaming::On;
        assert_eq!(options.protocol_version(140000).unwrap(), 2);
        assert!(options.protocol_version(130000).is_err());
        options.two_phase = true;
        assert_eq!(options.protocol_version(150000).unwrap(), 3);
        let err = options.protocol_version(140005).unwrap_err();
        assert!(
            err.message().contains("PostgreSQL 15+") && err.message().contains("14.5"),
            "{err}"
        );
        options.streaming = Streaming::Parallel;
        assert_eq!(options.protocol_version(160000).unwrap(), 4);
        assert!(options.protocol_version(150000).is_err());
        let mut binary = PgOutputOptions::new(["p"]);
        binary.binary = true;
        binary.messages = true;
        binary.streaming = Streaming::Off;
        assert_eq!(binary.protocol_version(140000).unwrap(), 1);
        assert!(binary.protocol_version(130000).is_err());
        let clause = binary.to_options_clause(160000).unwrap();
        assert!(
            clause.contains("\"binary\" 'true'") && clause.contains("\"messages\" 'true'"),
            "{clause}"
        );
        assert!(
            PgOutputOptions::default()
                .to_options_clause(160000)
                .is_err()
        );
    }

    #[test]
    fn server_versions() {
        assert_eq!(
            parse_server_version("15.4 (Debian 15.4-1.pgdg120+1)"),
            Some(150004)
        );
        assert_eq!(parse_server_version("16beta1"), Some(160000));
        assert_eq!(parse_server_version("17devel"), Some(170000));
        assert_eq!(parse_server_version("9.6.24"), Some(90624));
        assert_eq!(parse_server_version("10.1"), Some(100001));
        assert_eq!(parse_server_version("weird"), None);
        assert_eq!(version_text(150004), "15.4");
        assert_eq!(version_text(90624), "9.6.24");
    }

    #[test]
    fn show_durations() {
        assert_eq!(parse_show_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_show_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_show_duration("500ms"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_show_duration("1min"), Some(Duration::from_secs(60)));
        assert_eq!(parse_show_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_show_duration("soon"), None);
    }

    #[test]
    fn identity_from_system_info() {
        let info = SystemInfo {
            system_identifier: "7291234567890123456".into(),
            timeline: 3,
            xlogpos: Lsn(1),
            dbname: Some("shop".into()),
        };
        let id = info.identity("ignored", "pgcdc_x");
        assert_eq!(
            (id.timeline, id.database.as_str(), id.slot.as_str()),
            (3, "shop", "pgcdc_x")
        );
    }
}
