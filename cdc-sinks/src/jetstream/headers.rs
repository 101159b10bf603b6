//! The headers pgcdc puts on every JetStream message (see the module docs for their
//! meaning).

/// JetStream's deduplication id: `<source>/<first position>/<part>`.
pub const NATS_MSG_ID: &str = "Nats-Msg-Id";
/// The stream sequence the message expects to follow (the chain that keeps the stream an
/// exact prefix of the change sequence).
pub const NATS_EXPECTED_LAST_SEQUENCE: &str = "Nats-Expected-Last-Sequence";
/// `<system identifier>/<database>/<slot>`.
pub const SOURCE: &str = "Pgcdc-Source";
/// Position (`LSN#ordinal`) of the first event in the message.
pub const POSITION: &str = "Pgcdc-Position";
/// Position of the last event, when the message holds more than one.
pub const LAST_POSITION: &str = "Pgcdc-Last-Position";
/// Index among the messages of one event (a TRUNCATE of several tables; with Debezium
/// records, every record of an event: a key change, transaction metadata), when above 0.
pub const PART: &str = "Pgcdc-Part";
/// The table, `schema.name` (quoted where Postgres would quote it).
pub const TABLE: &str = "Pgcdc-Table";
/// `stream`, `snapshot` (consistent initial snapshot) or `backfill` (online chunk).
pub const ORIGIN: &str = "Pgcdc-Origin";
/// The online snapshot chunk's number within its table.
pub const CHUNK: &str = "Pgcdc-Chunk";
/// The transaction id.
pub const XID: &str = "Pgcdc-Xid";
/// The transaction's commit LSN.
pub const COMMIT_LSN: &str = "Pgcdc-Commit-Lsn";
/// The commit time, microseconds since 1970-01-01 UTC.
pub const COMMIT_TIME_US: &str = "Pgcdc-Commit-Time-Us";
/// `true` on the transaction's last message.
pub const TX_LAST: &str = "Pgcdc-Tx-Last";
/// The resume token (JSON) covering everything up to and including this message; on the
/// last message of every written batch.
pub const TOKEN: &str = "Pgcdc-Token";
/// Stream sequence of the latest earlier message that carries a token (0: none).
pub const TOKEN_SEQ: &str = "Pgcdc-Token-Seq";
/// With the token, the Debezium encoder's state at it (JSON; Debezium records only): what
/// a restart needs to write the records after the token as an uninterrupted run would.
pub const DEBEZIUM_STATE: &str = "Pgcdc-Debezium-State";
