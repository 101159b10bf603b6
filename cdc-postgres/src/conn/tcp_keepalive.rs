//! TCP keepalive and `TCP_USER_TIMEOUT` on the TCP sockets of both connections (replication
//! and SQL), so that a peer host that vanished (network partition, host power loss) ends
//! the connection in about a minute instead of after the kernel's default of two hours of
//! idleness (keepalive) or about 15 minutes of retransmissions (unacknowledged data).
//!
//! This covers only a peer whose kernel is gone; a server process that is stuck while its
//! kernel still acknowledges is the replication stream's receive timeout's business
//! (`StreamOptions::receive_timeout`).

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use tokio::net::TcpStream;

/// Idle time before the first keepalive probe.
pub(super) const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between unanswered probes.
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes before the kernel drops the connection.
pub(super) const KEEPALIVE_COUNT: u32 = 3;
/// How long sent data may stay unacknowledged before the kernel drops the connection
/// (Linux only): the same minute as idle + count × interval.
pub(super) const USER_TIMEOUT: Duration = Duration::from_secs(60);

/// Turns on keepalive with the settings above and, on Linux, sets `TCP_USER_TIMEOUT`.
/// A failure is returned for the caller to log: the connection works without them.
pub(super) fn configure(stream: &TcpStream) -> io::Result<()> {
    let fd = stream.as_raw_fd();
    set(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    #[cfg(target_os = "linux")]
    {
        set(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_KEEPIDLE,
            secs(KEEPALIVE_IDLE),
        )?;
        set(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_KEEPINTVL,
            secs(KEEPALIVE_INTERVAL),
        )?;
        let count = libc::c_int::try_from(KEEPALIVE_COUNT).unwrap_or(libc::c_int::MAX);
        set(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, count)?;
        let millis = libc::c_int::try_from(USER_TIMEOUT.as_millis()).unwrap_or(libc::c_int::MAX);
        set(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, millis)?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn secs(duration: Duration) -> libc::c_int {
    libc::c_int::try_from(duration.as_secs()).unwrap_or(libc::c_int::MAX)
}

fn set(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller's `TcpStream` for the duration of
    // the call; the option value is a c_int on the stack and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(stream: &TcpStream, level: libc::c_int, name: libc::c_int) -> libc::c_int {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: as in `set`; `value` and `len` are valid for writes of their size.
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                level,
                name,
                (&raw mut value).cast(),
                &raw mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        value
    }

    #[tokio::test]
    async fn keepalive_and_user_timeout_are_set() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        configure(&stream).unwrap();
        assert_eq!(get(&stream, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        #[cfg(target_os = "linux")]
        {
            assert_eq!(get(&stream, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 30);
            assert_eq!(get(&stream, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 10);
            assert_eq!(get(&stream, libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 3);
            assert_eq!(
                get(&stream, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
                60_000
            );
        }
    }
}
