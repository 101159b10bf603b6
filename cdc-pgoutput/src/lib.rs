//! PostgreSQL logical replication (pgoutput) for pgcdc: sans-IO protocol, type decoding,
//! replication connection, catalog, slots, snapshot and `PgSource`.

pub mod protocol;
