//! Connection strings, client configurations and the kit's admin connections.

use std::fmt::Write as _;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio_postgres::{Client, NoTls};

use crate::error::{Error, Result};

use super::{ADMIN_USER, Cluster, HOST, quote_ident, quote_literal};

/// Characters left as-is in URI components (RFC 3986 unreserved); everything else is
/// percent-encoded.
const URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

impl Cluster {
    /// libpq key=value connection string for `user` over TCP (`host=127.0.0.1 port=...
    /// dbname=... user=... [password=...]`). Values are single-quoted with `\` and `'`
    /// backslash-escaped, so any characters are safe. Append e.g. `sslmode=...` as needed.
    pub fn connection_string(&self, db: &str, user: &str, password: Option<&str>) -> String {
        self.kv_string(HOST, db, user, password)
    }

    /// Like [`Cluster::connection_string`], over the Unix socket (`host=<socket dir>`).
    pub fn socket_connection_string(&self, db: &str, user: &str, password: Option<&str>) -> String {
        let host = self.socket_dir.to_string_lossy().into_owned();
        self.kv_string(&host, db, user, password)
    }

    /// key=value connection string for the admin over the Unix socket; works under every
    /// [`AuthMethod`](crate::AuthMethod) (the admin is trusted on the socket).
    pub fn admin_connection_string(&self, db: &str) -> String {
        self.socket_connection_string(db, ADMIN_USER, None)
    }

    fn kv_string(&self, host: &str, db: &str, user: &str, password: Option<&str>) -> String {
        let mut s = format!(
            "host={} port={} dbname={} user={}",
            kv_quote(host),
            self.port(),
            kv_quote(db),
            kv_quote(user)
        );
        if let Some(p) = password {
            let _ = write!(s, " password={}", kv_quote(p));
        }
        s
    }

    /// libpq URI for `user` over TCP: `postgresql://user[:password]@127.0.0.1:port/db`, with
    /// user, password and database percent-encoded (everything but RFC 3986 unreserved
    /// characters). Append `?sslmode=...` as needed.
    pub fn uri(&self, db: &str, user: &str, password: Option<&str>) -> String {
        let mut s = format!("postgresql://{}", utf8_percent_encode(user, URI_COMPONENT));
        if let Some(p) = password {
            let _ = write!(s, ":{}", utf8_percent_encode(p, URI_COMPONENT));
        }
        let _ = write!(
            s,
            "@{HOST}:{}/{}",
            self.port(),
            utf8_percent_encode(db, URI_COMPONENT)
        );
        s
    }

    /// A [`tokio_postgres::Config`] for `user` over TCP to `127.0.0.1` (no TLS settings).
    pub fn tcp_config(
        &self,
        db: &str,
        user: &str,
        password: Option<&str>,
    ) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(HOST)
            .port(self.port())
            .dbname(db)
            .user(user)
            .application_name("cdc-testkit");
        if let Some(p) = password {
            config.password(p);
        }
        config
    }

    /// Connect to `db` as the admin superuser over the Unix socket (works under every
    /// [`AuthMethod`](crate::AuthMethod)). The connection task is spawned on the current
    /// tokio runtime; it ends when the client is dropped or the server goes away.
    pub async fn connect(&self, db: &str) -> Result<Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.socket_dir)
            .port(self.port())
            .dbname(db)
            .user(ADMIN_USER)
            .application_name("cdc-testkit");
        connect_spawned(&config).await
    }

    /// Connect to `db` as `user` over TCP without TLS, authenticating with the cluster's
    /// method. A rejected login is an [`Error::Postgres`] whose [`Error::code`] is the
    /// SQLSTATE (`28P01` for a wrong password).
    pub async fn connect_as(&self, db: &str, user: &str, password: Option<&str>) -> Result<Client> {
        connect_spawned(&self.tcp_config(db, user, password)).await
    }

    /// Run `sql` in database `postgres` as the admin, over a fresh connection. Several
    /// `;`-separated statements run in one implicit transaction (simple query protocol, as
    /// `psql -c` does) unless `sql` contains its own `BEGIN`/`COMMIT`; so e.g.
    /// `pg_create_logical_replication_slot` must not share a call with writes.
    pub async fn execute(&self, sql: &str) -> Result<()> {
        self.execute_in("postgres", sql).await
    }

    /// [`Cluster::execute`] in database `db`.
    pub async fn execute_in(&self, db: &str, sql: &str) -> Result<()> {
        let client = self.connect(db).await?;
        client.batch_execute(sql).await?;
        Ok(())
    }

    /// `CREATE DATABASE` with the given name (quoted as an identifier, so used verbatim).
    pub async fn create_database(&self, name: &str) -> Result<()> {
        self.execute(&format!("CREATE DATABASE {}", quote_ident(name)))
            .await
    }

    /// Create a role with `LOGIN REPLICATION` and `password`, hashed with the cluster's
    /// `password_encryption` (see [`AuthMethod`](crate::AuthMethod)).
    pub async fn create_user(&self, name: &str, password: &str) -> Result<()> {
        self.execute(&format!(
            "SET password_encryption = {}; CREATE ROLE {} LOGIN REPLICATION PASSWORD {};",
            quote_literal(self.auth.password_encryption()),
            quote_ident(name),
            quote_literal(password)
        ))
        .await
    }

    /// `server_version_num` of the running server (e.g. `150004`).
    pub async fn server_version_num(&self) -> Result<u32> {
        let client = self.connect("postgres").await?;
        let row = client.query_one("SHOW server_version_num", &[]).await?;
        let text: String = row.try_get(0)?;
        text.trim()
            .parse()
            .map_err(|_| Error::Config(format!("unexpected server_version_num {text:?}")))
    }

    /// The cluster's system identifier (`pg_control_system()`); unique per cluster.
    pub async fn system_identifier(&self) -> Result<u64> {
        let client = self.connect("postgres").await?;
        let row = client
            .query_one("SELECT system_identifier FROM pg_control_system()", &[])
            .await?;
        let id: i64 = row.try_get(0)?;
        Ok(id as u64)
    }

    /// The server's current WAL write position (`pg_current_wal_lsn()`) as text, e.g.
    /// `0/1A2B3C8` (on a standby: an error, as Postgres gives one).
    pub async fn current_wal_lsn(&self) -> Result<String> {
        let client = self.connect("postgres").await?;
        Ok(client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await?
            .try_get(0)?)
    }

    /// The `confirmed_flush_lsn` of replication slot `slot` as text; `None` if the slot
    /// does not exist (or is physical, which has none).
    pub async fn slot_confirmed_flush_lsn(&self, slot: &str) -> Result<Option<String>> {
        let client = self.connect("postgres").await?;
        let row = client
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?;
        Ok(match row {
            Some(row) => row.try_get(0)?,
            None => None,
        })
    }
}

pub(super) async fn connect_spawned(config: &tokio_postgres::Config) -> Result<Client> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "cdc-testkit connection ended");
        }
    });
    Ok(client)
}

/// `value` as a single-quoted libpq key=value value.
pub(super) fn kv_quote(value: &str) -> String {
    let mut s = String::with_capacity(value.len() + 2);
    s.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('\'');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(kv_quote(r"a'b\c d"), r"'a\'b\\c d'");
    }
}
