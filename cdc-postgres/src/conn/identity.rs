//! Stable identity of a stream: the derived source id and slot name, and the check that a
//! resume token belongs to the server it is resumed against.
//!
//! The source id depends on host, port, database and publication only (and, when several
//! servers are named, on each one's host and port, in order). Credentials, the
//! user, `sslmode`, `application_name` and timeouts are how we reach the source, not which
//! source it is: rotating a password must not orphan a slot (which would keep holding WAL)
//! nor start a second one.
//!
//! The hash is 64-bit FNV-1a over a length-prefixed encoding of those four values. It is
//! part of the on-disk contract (slot names live in the server): never change it.

use cdc_core::{Error, Result, SourceIdentity};

use super::config::{ConnectionConfig, Host, SourceConfig};

/// Prefix of derived slot names.
pub const SLOT_PREFIX: &str = "pgcdc_";

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(state: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(state, |h, b| (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

/// The host as it identifies the server: DNS names are case-insensitive, and a socket
/// directory is the same with or without a trailing slash.
fn host_key(host: &Host) -> String {
    match host {
        Host::Tcp(name) => format!("tcp:{}", name.to_ascii_lowercase()),
        Host::Unix(dir) => {
            let text = dir.to_string_lossy();
            let trimmed = text.trim_end_matches('/');
            format!("unix:{}", if trimmed.is_empty() { "/" } else { trimmed })
        }
    }
}

/// A stable id (16 lower-case hex digits) of the stream's source: host, port, database and
/// publication. The same inputs give the same id in every process and build.
pub fn stable_source_id(connection: &ConnectionConfig, publication: &str) -> String {
    let port = connection.port.to_string();
    let host = host_key(&connection.host);
    let mut hash = fnv1a(FNV_OFFSET, b"pgcdc-source-v1");
    for part in [
        host.as_str(),
        port.as_str(),
        connection.dbname.as_str(),
        publication,
    ] {
        hash = fnv1a(hash, &(part.len() as u64).to_be_bytes());
        hash = fnv1a(hash, part.as_bytes());
    }
    // Further servers (`host=a,b`) follow, in order; with one server the id is as it
    // always was.
    for endpoint in &connection.fallback_hosts {
        for part in [host_key(&endpoint.host), endpoint.port.to_string()] {
            hash = fnv1a(hash, &(part.len() as u64).to_be_bytes());
            hash = fnv1a(hash, part.as_bytes());
        }
    }
    format!("{hash:016x}")
}

/// The slot name used when none is configured: `pgcdc_` plus [`stable_source_id`]
/// (22 characters, `[a-z0-9_]`).
pub fn default_slot_name(connection: &ConnectionConfig, publication: &str) -> String {
    format!("{SLOT_PREFIX}{}", stable_source_id(connection, publication))
}

/// Checks that a stream identified by `token` (from a resume token) may continue on the
/// server now identified as `current`.
///
/// Ok means the system identifier, timeline, database and slot are all the same. A
/// different system identifier (another cluster, or one restored from a base backup of
/// another) or timeline (a promotion or point-in-time recovery happened) is
/// [`cdc_core::ErrorKind::ResyncRequired`]; so is another database or slot. The message
/// names both values.
pub fn check_resume(token: &SourceIdentity, current: &SourceIdentity) -> Result<()> {
    if token.system_identifier != current.system_identifier {
        return Err(Error::resync_required(format!(
            "the resume token belongs to the cluster with system identifier {}, but the server is cluster {}: it is another server (or a copy of one); the saved position means nothing here",
            token.system_identifier, current.system_identifier
        )));
    }
    if token.timeline != current.timeline {
        return Err(Error::resync_required(format!(
            "the resume token was taken on timeline {}, but the server is on timeline {}: the server was promoted or restored since, and changes after the switch may differ from what was streamed",
            token.timeline, current.timeline
        )));
    }
    if token.database != current.database {
        return Err(Error::resync_required(format!(
            "the resume token is for database {:?}, but the connection is to database {:?}",
            token.database, current.database
        )));
    }
    if token.slot != current.slot {
        return Err(Error::resync_required(format!(
            "the resume token is for replication slot {:?}, but the configured slot is {:?} \
             (the default slot name depends on host and port: to reach the same stream at another address, \
             e.g. a promoted standby, name the slot explicitly)",
            token.slot, current.slot
        )));
    }
    Ok(())
}

impl SourceConfig {
    /// The replication slot's name: the configured one, or `pgcdc_` plus a stable hash of
    /// host, port, database and publication ([`default_slot_name`]). Rotating the
    /// password or changing the user, `sslmode`, `application_name` or timeouts does not
    /// change it.
    pub fn slot_name(&self) -> String {
        match &self.slot {
            Some(slot) => slot.clone(),
            None => default_slot_name(&self.connection, &self.publication),
        }
    }

    /// A stable id of the stream's source (hex), from host, port, database and publication
    /// only ([`stable_source_id`]).
    pub fn source_id(&self) -> String {
        stable_source_id(&self.connection, &self.publication)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::config::SslMode;
    use crate::conn::config::validate_slot_name;
    use std::time::Duration;

    fn base() -> ConnectionConfig {
        ConnectionConfig::parse("postgres://alice:secret@db.example:5432/shop").unwrap()
    }

    #[test]
    fn slot_name_is_fixed_for_fixed_inputs() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        // Golden value: changing the hash orphans every existing slot.
        assert_eq!(
            default_slot_name(&base(), "orders_pub"),
            "pgcdc_fbdc52db1cd16eec"
        );
        let name = default_slot_name(&base(), "orders_pub");
        assert_eq!(name.len(), 22);
        validate_slot_name(&name).unwrap();
    }

    #[test]
    fn credentials_tls_and_names_do_not_change_identity() {
        let a = base();
        let mut b = base();
        b.password = Some("rotated".into());
        b.user = "bob".into();
        b.tls.mode = SslMode::VerifyFull;
        b.application_name = Some("reporting".into());
        b.connect_timeout = Some(Duration::from_secs(3));
        b.options = Some("-c statement_timeout=0".into());
        b.host = Host::Tcp("DB.Example".into());
        assert_eq!(default_slot_name(&a, "p"), default_slot_name(&b, "p"));
        assert_eq!(stable_source_id(&a, "p"), stable_source_id(&b, "p"));
    }

    #[test]
    fn host_port_database_and_publication_change_identity() {
        let a = base();
        let id = stable_source_id(&a, "p");
        let mut other = base();
        other.host = Host::Tcp("db2.example".into());
        assert_ne!(stable_source_id(&other, "p"), id);
        let mut other = base();
        other.port = 5433;
        assert_ne!(stable_source_id(&other, "p"), id);
        let mut other = base();
        other.dbname = "shop2".into();
        assert_ne!(stable_source_id(&other, "p"), id);
        assert_ne!(stable_source_id(&a, "q"), id);
        // Length prefixes keep field boundaries apart.
        let mut x = base();
        x.dbname = "ab".into();
        let mut y = base();
        y.dbname = "a".into();
        assert_ne!(stable_source_id(&x, "c"), stable_source_id(&y, "bc"));
    }

    #[test]
    fn further_servers_change_identity_and_their_order_matters() {
        let id =
            |conninfo: &str| stable_source_id(&ConnectionConfig::parse(conninfo).unwrap(), "p");
        let one = id("host=a port=5432 user=u dbname=d");
        let two = id("host=a,b port=5432 user=u dbname=d");
        assert_ne!(one, two);
        assert_eq!(
            two,
            id("postgres://u@a:5432,B:5432/d?target_session_attrs=read-write")
        );
        assert_ne!(two, id("host=b,a port=5432 user=u dbname=d"));
        assert_ne!(two, id("host=a,b port=5432,5433 user=u dbname=d"));
    }

    #[test]
    fn socket_directory_trailing_slash_does_not_matter() {
        let a = ConnectionConfig::parse("host=/run/pg user=u").unwrap();
        let b = ConnectionConfig::parse("host=/run/pg/ user=u").unwrap();
        assert_eq!(stable_source_id(&a, "p"), stable_source_id(&b, "p"));
    }

    #[test]
    fn slot_name_rules() {
        for ok in ["a", "pgcdc_0123", &"x".repeat(63)] {
            validate_slot_name(ok).unwrap();
        }
        for bad in ["", "A", "a-b", "a b", "é", &"x".repeat(64), "a\"b"] {
            assert!(validate_slot_name(bad).is_err(), "{bad:?}");
        }
    }

    fn identity() -> SourceIdentity {
        SourceIdentity {
            system_identifier: "7291234567890123456".into(),
            timeline: 1,
            database: "shop".into(),
            slot: "pgcdc_abc".into(),
        }
    }

    #[test]
    fn resume_check_names_both_values() {
        check_resume(&identity(), &identity()).unwrap();
        let mut other = identity();
        other.system_identifier = "7000000000000000001".into();
        let err = check_resume(&identity(), &other).unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::ResyncRequired);
        assert!(
            err.message().contains("7291234567890123456")
                && err.message().contains("7000000000000000001"),
            "{err}"
        );
        let mut other = identity();
        other.timeline = 2;
        let err = check_resume(&identity(), &other).unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::ResyncRequired);
        assert!(
            err.message().contains("timeline 1") && err.message().contains("timeline 2"),
            "{err}"
        );
        let mut other = identity();
        other.slot = "pgcdc_def".into();
        assert!(check_resume(&identity(), &other).is_err());
    }
}
