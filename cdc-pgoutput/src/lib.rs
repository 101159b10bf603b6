//! PostgreSQL logical replication (pgoutput) for pgcdc: sans-IO protocol, type decoding,
//! replication connection, catalog, slots, snapshot and `PgSource`.

pub mod changes;
pub mod conn;
pub mod protocol;
pub mod snapshot;
pub mod source;
pub mod types;
