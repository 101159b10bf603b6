//! Checks before streaming, run over SQL: server settings, privileges, the publication and
//! its tables, replica identities, and the replication slot's health.
//!
//! [`preflight`] collects every problem it finds into a [`PreflightReport`] (so `pgcdc
//! check` can print them all at once), each with what is wrong and how to fix it;
//! [`PreflightReport::into_result`] turns the errors among them into one
//! [`cdc_core::Error`]. Slot problems are distinct variants of [`SlotProblem`] with distinct
//! kinds: a missing or invalidated slot is ResyncRequired, a slot held by another
//! connection is Transient, a slot of the wrong plugin, type or database is Config.

use std::fmt;

use cdc_core::{Error, ErrorKind, ReplicaIdentity, Result, TableName, quote_identifier};
use tokio_postgres::Client;

use super::config::{SourceConfig, TableRef};
use super::error::{Activity, from_tokio_postgres};
use super::failover::{FailoverGap, failover_gaps};
use super::slot::{SlotInfo, SlotProblem, inspect_slot, slot_problems};

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Streaming would fail or lose information the user expects: fix before starting.
    Error,
    /// Streaming works, but something is likely not what the user wants (e.g. deletes
    /// without old keys).
    Warning,
}

/// One problem found by [`preflight`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// `wal_level` is not `logical`.
    WalLevel {
        /// The current value.
        actual: String,
    },
    /// The role has neither `REPLICATION` nor superuser.
    NoReplicationPrivilege {
        /// The role.
        role: String,
    },
    /// The publication does not exist.
    PublicationMissing {
        /// Its name.
        publication: String,
    },
    /// A configured table name has no schema.
    UnqualifiedTable {
        /// The bare name.
        name: String,
        /// Tables of that name in the publication.
        candidates: Vec<TableName>,
    },
    /// A configured table does not exist.
    TableMissing {
        /// The table.
        table: TableName,
    },
    /// A configured table exists but is not in the publication.
    TableNotInPublication {
        /// The table.
        table: TableName,
        /// The publication.
        publication: String,
    },
    /// The role cannot read a table (needed for the snapshot).
    NoSelectPrivilege {
        /// The table.
        table: TableName,
        /// The role.
        role: String,
    },
    /// `REPLICA IDENTITY NOTHING`: updates and deletes carry no old row.
    ReplicaIdentityNothing {
        /// The table.
        table: TableName,
    },
    /// `REPLICA IDENTITY DEFAULT` without a primary key: same effect as NOTHING.
    NoReplicaIdentityKey {
        /// The table.
        table: TableName,
    },
    /// `REPLICA IDENTITY USING INDEX` on an index that lacks a primary key column: old
    /// rows carry the index's columns only, so updates and deletes cannot name the row by
    /// its primary key (they would name it by NULLs).
    ReplicaIdentityIndexWithoutPrimaryKey {
        /// The table.
        table: TableName,
        /// The replica identity index.
        index: String,
    },
    /// A table without a primary key, under the online snapshot: it is copied whole under
    /// one snapshot while the stream waits, and from the start again if interrupted.
    ReadWholeOnline {
        /// The table.
        table: TableName,
    },
    /// The publication has no tables and none are configured.
    EmptyPublication {
        /// The publication.
        publication: String,
    },
    /// The server is a standby whose version cannot decode logically in recovery
    /// (PostgreSQL 16 added logical decoding on a standby).
    StandbyTooOld {
        /// `server_version_num`.
        version: u32,
    },
    /// A standby (16+) with `hot_standby_feedback = off`: the primary may remove rows the
    /// slot still needs, which invalidates the slot.
    StandbyWithoutFeedback,
    /// A timeout pgcdc switches off in its sessions is still on in them (a pooler or
    /// proxy that does not pass session settings): it can end the session that exported
    /// the snapshot, or a long COPY.
    SessionTimeout {
        /// The setting.
        name: String,
        /// Its value in pgcdc's session.
        value: String,
    },
    /// The slot.
    Slot(SlotProblem),
    /// A failover slot that may not survive a promotion, or a stream that would stall
    /// waiting for a standby.
    Failover(FailoverGap),
}

/// A problem with its severity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What it is.
    pub kind: ProblemKind,
    /// How bad.
    pub severity: Severity,
}

impl Problem {
    fn error(kind: ProblemKind) -> Self {
        Problem {
            kind,
            severity: Severity::Error,
        }
    }

    fn warning(kind: ProblemKind) -> Self {
        Problem {
            kind,
            severity: Severity::Warning,
        }
    }

    /// The error kind it maps to: slot problems per [`SlotProblem::kind`], everything else
    /// Config.
    pub fn error_kind(&self) -> ErrorKind {
        match &self.kind {
            ProblemKind::Slot(slot) => slot.kind(),
            _ => ErrorKind::Config,
        }
    }

    /// What is wrong.
    pub fn message(&self) -> String {
        match &self.kind {
            ProblemKind::WalLevel { actual } => {
                format!("wal_level is {actual:?}; logical replication needs wal_level = logical")
            }
            ProblemKind::NoReplicationPrivilege { role } => {
                format!("role {role:?} has neither the REPLICATION attribute nor superuser")
            }
            ProblemKind::PublicationMissing { publication } => {
                format!("publication {publication:?} does not exist")
            }
            ProblemKind::UnqualifiedTable { name, candidates } if candidates.is_empty() => format!(
                "table name {name:?} is not schema-qualified, and the publication has no table of that name"
            ),
            ProblemKind::UnqualifiedTable { name, candidates } => format!(
                "table name {name:?} is not schema-qualified; the publication has: {}",
                join(candidates)
            ),
            ProblemKind::TableMissing { table } => format!("table {table} does not exist"),
            ProblemKind::TableNotInPublication { table, publication } => {
                format!("table {table} is not in publication {publication:?}")
            }
            ProblemKind::NoSelectPrivilege { table, role } => {
                format!(
                    "role {role:?} may not SELECT from {table} (needed for the initial snapshot)"
                )
            }
            ProblemKind::ReplicaIdentityNothing { table } => format!(
                "table {table} has REPLICA IDENTITY NOTHING: updates and deletes carry no old row (and Postgres rejects them on a table published for updates and deletes)"
            ),
            ProblemKind::NoReplicaIdentityKey { table } => format!(
                "table {table} has no primary key and REPLICA IDENTITY DEFAULT: updates and deletes carry no old key (and Postgres rejects them on a table published for updates and deletes)"
            ),
            ProblemKind::ReplicaIdentityIndexWithoutPrimaryKey { table, index } => format!(
                "table {table} has REPLICA IDENTITY USING INDEX {index}, which lacks a primary key column: \
                 updates and deletes carry only the index's columns of the old row, so they cannot name the \
                 row by its primary key"
            ),
            ProblemKind::ReadWholeOnline { table } => format!(
                "table {table} has no primary key: the online snapshot copies it whole under one \
                 snapshot while the stream waits (changes to every table queue on the server \
                 until the copy is done), and from the start again if interrupted"
            ),
            ProblemKind::EmptyPublication { publication } => {
                format!("publication {publication:?} contains no tables")
            }
            ProblemKind::StandbyTooOld { version } => format!(
                "the server is a standby (in recovery) running PostgreSQL {}: logical decoding on a standby needs PostgreSQL 16 or later",
                super::replication::version_text(*version)
            ),
            ProblemKind::StandbyWithoutFeedback => {
                "the server is a standby with hot_standby_feedback = off: \
                 the primary may remove rows the slot still needs, which invalidates the slot"
                    .to_owned()
            }
            ProblemKind::SessionTimeout { name, value } => format!(
                "{name} is {value} in pgcdc's sessions although pgcdc sets it to 0 when it connects \
                 (a connection pooler or proxy that does not pass session settings?): it can end the \
                 session that holds the snapshot open, or a long COPY"
            ),
            ProblemKind::Slot(slot) => slot.message(),
            ProblemKind::Failover(gap) => gap.message(),
        }
    }

    /// How to fix it.
    pub fn fix(&self) -> String {
        match &self.kind {
            ProblemKind::WalLevel { .. } => {
                "run ALTER SYSTEM SET wal_level = logical; and restart the server".to_owned()
            }
            ProblemKind::NoReplicationPrivilege { role } => {
                format!("ALTER ROLE {} WITH REPLICATION;", quote_identifier(role))
            }
            ProblemKind::PublicationMissing { publication } => format!(
                "CREATE PUBLICATION {} FOR TABLE schema.table, ...;",
                quote_identifier(publication)
            ),
            ProblemKind::UnqualifiedTable { name, candidates } if candidates.is_empty() => {
                format!("write the table as schema.table, e.g. public.{name}")
            }
            ProblemKind::UnqualifiedTable { candidates, .. } => {
                format!("write the table schema-qualified: one of {}", join(candidates))
            }
            ProblemKind::TableMissing { .. } => {
                "check the spelling (unquoted names fold to lower case; quote mixed-case names as \"Name\")".to_owned()
            }
            ProblemKind::TableNotInPublication { table, publication } => format!(
                "ALTER PUBLICATION {} ADD TABLE {table};",
                quote_identifier(publication)
            ),
            ProblemKind::NoSelectPrivilege { table, role } => {
                format!("GRANT SELECT ON {table} TO {};", quote_identifier(role))
            }
            ProblemKind::ReplicaIdentityNothing { table } | ProblemKind::NoReplicaIdentityKey { table } => format!(
                "add a primary key, or ALTER TABLE {table} REPLICA IDENTITY FULL;"
            ),
            ProblemKind::ReplicaIdentityIndexWithoutPrimaryKey { table, .. } => format!(
                "ALTER TABLE {table} REPLICA IDENTITY DEFAULT; (the primary key), or ALTER TABLE {table} REPLICA IDENTITY FULL;"
            ),
            ProblemKind::ReadWholeOnline { .. } => {
                "add a primary key to copy it in chunks alongside the stream, or accept the \
                 wait (it is sound either way)"
                    .to_owned()
            }
            ProblemKind::EmptyPublication { publication } => format!(
                "ALTER PUBLICATION {} ADD TABLE schema.table;",
                quote_identifier(publication)
            ),
            ProblemKind::StandbyTooOld { .. } => {
                "connect pgcdc to the primary, or upgrade the standby to PostgreSQL 16+".to_owned()
            }
            ProblemKind::StandbyWithoutFeedback => {
                "on the standby: ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); \
                 and give it a physical slot on the primary (primary_slot_name)"
                    .to_owned()
            }
            ProblemKind::SessionTimeout { name, .. } => format!(
                "connect pgcdc to the server directly, or switch the timeout off for its role: \
                 ALTER ROLE <role> SET {name} = 0"
            ),
            ProblemKind::Slot(slot) => slot.fix(),
            ProblemKind::Failover(gap) => gap.fix(),
        }
    }

    /// The problem as an error of [`Problem::error_kind`].
    pub fn to_error(&self) -> Error {
        Error::new(self.error_kind(), self.to_string())
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; fix: {}", self.message(), self.fix())
    }
}

fn join(tables: &[TableName]) -> String {
    tables
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A table that will be streamed, with what the catalog says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedTable {
    /// The table.
    pub name: TableName,
    /// `pg_class.oid` (the relation id in pgoutput Relation messages).
    pub oid: u32,
    /// Its replica identity.
    pub replica_identity: Option<ReplicaIdentity>,
    /// Whether it has a primary key.
    pub has_primary_key: bool,
    /// Whether the role may SELECT from it.
    pub can_select: bool,
}

/// Everything [`preflight`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreflightReport {
    /// `server_version_num`.
    pub server_version_num: u32,
    /// The role we are logged in as.
    pub role: String,
    /// `wal_level`.
    pub wal_level: String,
    /// The tables that will be streamed: the configured ones that are in the publication,
    /// or every table of the publication when none are configured.
    pub tables: Vec<PublishedTable>,
    /// Whether the server is a standby (`pg_is_in_recovery()`).
    pub in_recovery: bool,
    /// The slot's state; `None` if it does not exist.
    pub slot: Option<SlotInfo>,
    /// Every problem, errors first.
    pub problems: Vec<Problem>,
}

impl PreflightReport {
    /// Whether there is no problem of [`Severity::Error`].
    pub fn is_ok(&self) -> bool {
        !self.problems.iter().any(|p| p.severity == Severity::Error)
    }

    /// The problems of `severity`.
    pub fn problems_of(&self, severity: Severity) -> impl Iterator<Item = &Problem> {
        self.problems.iter().filter(move |p| p.severity == severity)
    }

    /// The names of [`PreflightReport::tables`].
    pub fn table_names(&self) -> Vec<TableName> {
        self.tables.iter().map(|t| t.name.clone()).collect()
    }

    /// The same report for a run that resumes from a token: the slot must exist (as if
    /// checked with [`PreflightOptions::slot_must_exist`]).
    pub fn requiring_the_slot(mut self, slot: &str) -> Self {
        if self.slot.is_none() {
            self.problems.insert(
                0,
                Problem::error(ProblemKind::Slot(SlotProblem::Missing {
                    slot: slot.to_owned(),
                })),
            );
        }
        self
    }

    /// Whether its errors can wait for [`crate::source::PgSource`]'s start, which retries
    /// transient ones (a slot still held by a previous connection): none is of another
    /// kind.
    pub fn only_transient_errors(&self) -> bool {
        self.problems_of(Severity::Error)
            .all(|p| p.error_kind() == ErrorKind::Transient)
    }

    /// Ok(self) if there is no error; otherwise one error of the first error's kind whose
    /// message lists every error (with its fix).
    pub fn into_result(self) -> Result<Self> {
        let errors: Vec<&Problem> = self.problems_of(Severity::Error).collect();
        match errors.first() {
            None => Ok(self),
            Some(first) if errors.len() == 1 => Err(first.to_error()),
            Some(first) => {
                let list = errors
                    .iter()
                    .map(|p| format!("- {p}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                Err(Error::new(
                    first.error_kind(),
                    format!(
                        "{} problems must be fixed before streaming:\n{list}",
                        errors.len()
                    ),
                ))
            }
        }
    }
}

/// What the caller expects of the slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreflightOptions {
    /// The slot must exist (resuming from a token): a missing slot is an error. Otherwise a
    /// missing slot is fine (it will be created).
    pub slot_must_exist: bool,
    /// Our own walsender's pid, if we are already streaming (checking the slot again after
    /// `START_REPLICATION`): the slot being active for it is not a problem.
    pub own_pid: Option<i32>,
}

/// Whether `table` is a partitioned table whose partitions the publication publishes
/// (`publish_via_partition_root = false` lists the partitions, not the root).
async fn is_partition_root_of_published(
    client: &Client,
    table: &TableName,
    publication: &str,
) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_publication_tables pt \
               JOIN pg_namespace pn ON pn.nspname = pt.schemaname \
               JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = pt.tablename \
               CROSS JOIN LATERAL pg_partition_ancestors(pc.oid) AS a(relid) \
               JOIN pg_class c ON c.oid = a.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
               WHERE pt.pubname::text = $1::text AND n.nspname::text = $2::text \
                 AND c.relname::text = $3::text)",
            &[&publication, &table.schema, &table.name],
        )
        .await
        .map_err(sql_error)?;
    row.try_get(0).map_err(sql_error)
}

fn sql_error(e: tokio_postgres::Error) -> Error {
    from_tokio_postgres(e, Activity::Command, "a preflight catalog query failed")
}

/// Runs every check for `config` over `client` (a session as the configured role, from
/// [`super::connect_sql`]) and reports what it found.
///
/// Ok holds the report whatever problems were found; Err means the checks themselves could
/// not run (connection lost, catalog query failed).
pub async fn preflight(
    client: &Client,
    config: &SourceConfig,
    options: &PreflightOptions,
) -> Result<PreflightReport> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int4, current_setting('wal_level'), \
             current_user::text, r.rolreplication, r.rolsuper, pg_is_in_recovery(), \
             current_setting('hot_standby_feedback') = 'on' \
             FROM pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await
        .map_err(sql_error)?;
    let version: i32 = row.try_get(0).map_err(sql_error)?;
    let wal_level: String = row.try_get(1).map_err(sql_error)?;
    let role: String = row.try_get(2).map_err(sql_error)?;
    let replication: bool = row.try_get(3).map_err(sql_error)?;
    let superuser: bool = row.try_get(4).map_err(sql_error)?;
    let in_recovery: bool = row.try_get(5).map_err(sql_error)?;
    let feedback: bool = row.try_get(6).map_err(sql_error)?;
    let version_num = u32::try_from(version).unwrap_or_default();

    let mut problems = Vec::new();
    if in_recovery && version_num < 160000 {
        problems.push(Problem::error(ProblemKind::StandbyTooOld {
            version: version_num,
        }));
    } else if in_recovery && !feedback {
        problems.push(Problem::warning(ProblemKind::StandbyWithoutFeedback));
    }
    let timeouts: Vec<&str> = super::session::disabled_timeouts().collect();
    for row in client
        .query(
            "SELECT name::text, setting::text FROM pg_settings \
             WHERE name = ANY($1::text[]) AND setting <> '0'",
            &[&timeouts],
        )
        .await
        .map_err(sql_error)?
    {
        problems.push(Problem::warning(ProblemKind::SessionTimeout {
            name: row.try_get(0).map_err(sql_error)?,
            value: row.try_get(1).map_err(sql_error)?,
        }));
    }
    if wal_level != "logical" {
        problems.push(Problem::error(ProblemKind::WalLevel {
            actual: wal_level.clone(),
        }));
    }
    if !replication && !superuser {
        problems.push(Problem::error(ProblemKind::NoReplicationPrivilege {
            role: role.clone(),
        }));
    }

    let publication = config.publication.as_str();
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname::text = $1::text",
            &[&publication],
        )
        .await
        .map_err(sql_error)?
        .is_some();
    let published: Vec<TableName> = if exists {
        client
            .query(
                "SELECT schemaname::text, tablename::text FROM pg_publication_tables \
                 WHERE pubname::text = $1::text ORDER BY 1, 2",
                &[&publication],
            )
            .await
            .map_err(sql_error)?
            .iter()
            .map(|r| {
                Ok(TableName::new(
                    r.try_get::<_, String>(0)?,
                    r.try_get::<_, String>(1)?,
                ))
            })
            .collect::<std::result::Result<_, tokio_postgres::Error>>()
            .map_err(sql_error)?
    } else {
        problems.push(Problem::error(ProblemKind::PublicationMissing {
            publication: publication.to_owned(),
        }));
        Vec::new()
    };

    // Which tables to stream.
    let mut wanted: Vec<TableName> = Vec::new();
    if config.tables.is_empty() {
        if exists && published.is_empty() {
            problems.push(Problem::error(ProblemKind::EmptyPublication {
                publication: publication.to_owned(),
            }));
        }
        wanted.extend(published.iter().cloned());
    }
    for table in &config.tables {
        match table {
            TableRef::Unqualified(name) => {
                problems.push(Problem::error(ProblemKind::UnqualifiedTable {
                    name: name.clone(),
                    candidates: published
                        .iter()
                        .filter(|t| &t.name == name)
                        .cloned()
                        .collect(),
                }))
            }
            TableRef::Qualified(name) => wanted.push(name.clone()),
        }
    }

    let mut tables = Vec::new();
    for name in wanted {
        let row = client
            .query_opt(
                "SELECT c.oid::int8, c.relreplident::text, \
                 EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), \
                 has_table_privilege(c.oid, 'SELECT'), \
                 (SELECT ri.indexrelid::regclass::text FROM pg_index pk \
                  JOIN pg_index ri ON ri.indrelid = pk.indrelid AND ri.indisreplident \
                  WHERE pk.indrelid = c.oid AND pk.indisprimary \
                  AND NOT (pk.indkey::int2[] <@ ri.indkey::int2[])) \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname::text = $1::text AND c.relname::text = $2::text \
                 AND c.relkind IN ('r', 'p')",
                &[&name.schema, &name.name],
            )
            .await
            .map_err(sql_error)?;
        let Some(row) = row else {
            problems.push(Problem::error(ProblemKind::TableMissing { table: name }));
            continue;
        };
        if exists
            && !published.contains(&name)
            && !is_partition_root_of_published(client, &name, publication).await?
        {
            problems.push(Problem::error(ProblemKind::TableNotInPublication {
                table: name,
                publication: publication.to_owned(),
            }));
            continue;
        }
        let oid: i64 = row.try_get(0).map_err(sql_error)?;
        let identity: String = row.try_get(1).map_err(sql_error)?;
        let replica_identity = identity.bytes().next().and_then(ReplicaIdentity::from_char);
        let has_primary_key: bool = row.try_get(2).map_err(sql_error)?;
        let can_select: bool = row.try_get(3).map_err(sql_error)?;
        let index_without_key: Option<String> = row.try_get(4).map_err(sql_error)?;
        if !can_select {
            problems.push(Problem::error(ProblemKind::NoSelectPrivilege {
                table: name.clone(),
                role: role.clone(),
            }));
        }
        match replica_identity {
            Some(ReplicaIdentity::Nothing) => {
                problems.push(Problem::warning(ProblemKind::ReplicaIdentityNothing {
                    table: name.clone(),
                }));
            }
            Some(ReplicaIdentity::Default) if !has_primary_key => {
                problems.push(Problem::warning(ProblemKind::NoReplicaIdentityKey {
                    table: name.clone(),
                }));
            }
            Some(ReplicaIdentity::Index) => {
                if let Some(index) = index_without_key {
                    problems.push(Problem::error(
                        ProblemKind::ReplicaIdentityIndexWithoutPrimaryKey {
                            table: name.clone(),
                            index,
                        },
                    ));
                }
            }
            _ => {}
        }
        if !has_primary_key && config.snapshot == super::SnapshotMode::Online {
            problems.push(Problem::warning(ProblemKind::ReadWholeOnline {
                table: name.clone(),
            }));
        }
        if exists {
            tables.push(PublishedTable {
                name,
                oid: u32::try_from(oid).unwrap_or_default(),
                replica_identity,
                has_primary_key,
                can_select,
            });
        }
    }

    let slot_name = config.slot_name();
    let slot = inspect_slot(client, &slot_name).await?;
    for problem in slot_problems(
        &slot_name,
        slot.as_ref(),
        &config.connection.dbname,
        options.slot_must_exist,
        options.own_pid,
    ) {
        problems.push(Problem::error(ProblemKind::Slot(problem)));
    }
    // A failover slot asked for, or found (on the primary, or as a synced copy on a
    // standby): what keeps it through a promotion, as far as this server can tell.
    let failover_slot = config.failover
        || slot
            .as_ref()
            .is_some_and(|s| s.failover == Some(true) || s.synced == Some(true));
    if failover_slot {
        for gap in
            failover_gaps(client, version_num, in_recovery, &slot_name, slot.as_ref()).await?
        {
            // hot_standby_feedback off on a standby is reported once, above.
            if gap == FailoverGap::StandbyWithoutFeedback {
                continue;
            }
            problems.push(if gap.is_error() {
                Problem::error(ProblemKind::Failover(gap))
            } else {
                Problem::warning(ProblemKind::Failover(gap))
            });
        }
    }
    problems.sort_by_key(|p| p.severity);

    Ok(PreflightReport {
        server_version_num: version_num,
        in_recovery,
        role,
        wal_level,
        tables,
        slot,
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unqualified_table_message_names_candidates() {
        let problem = Problem::error(ProblemKind::UnqualifiedTable {
            name: "orders".into(),
            candidates: vec![
                TableName::new("audit", "orders"),
                TableName::new("public", "orders"),
            ],
        });
        let text = problem.to_string();
        assert!(text.contains("audit.orders, public.orders"), "{text}");
        assert_eq!(problem.error_kind(), ErrorKind::Config);
    }

    #[test]
    fn report_result_lists_every_error() {
        let report = PreflightReport {
            server_version_num: 150000,
            role: "u".into(),
            wal_level: "replica".into(),
            tables: Vec::new(),
            in_recovery: false,
            slot: None,
            problems: vec![
                Problem::error(ProblemKind::WalLevel {
                    actual: "replica".into(),
                }),
                Problem::error(ProblemKind::PublicationMissing {
                    publication: "p".into(),
                }),
                Problem::warning(ProblemKind::NoReplicaIdentityKey {
                    table: TableName::new("public", "t"),
                }),
            ],
        };
        assert!(!report.is_ok());
        let err = report.into_result().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.message().contains("2 problems") && err.message().contains("CREATE PUBLICATION"),
            "{err}"
        );
    }
}
