//! Free TCP ports for clusters, never handed out twice within one process.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use crate::error::{Error, IoContext, Result};

/// Address the server listens on (TCP). IPv6 is not enabled.
pub const HOST: &str = "127.0.0.1";

/// Ports handed out to clusters of this process and not yet released.
static RESERVED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

pub(crate) fn reserve_port() -> Result<u16> {
    for _ in 0..100 {
        let listener = std::net::TcpListener::bind((HOST, 0))
            .ctx(|| "bind 127.0.0.1:0 to find a free port".to_string())?;
        let port = listener
            .local_addr()
            .ctx(|| "read the bound address".to_string())?
            .port();
        drop(listener);
        let mut reserved = RESERVED_PORTS
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if reserved.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::Config("could not find a free TCP port".into()))
}

pub(crate) fn release_port(port: u16) {
    RESERVED_PORTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&port);
}
