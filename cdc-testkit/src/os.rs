//! Thin, Linux-specific OS helpers: users, signals, `/proc`, System V shared memory.

use std::ffi::CString;
use std::mem::MaybeUninit;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};

/// The system user the server processes run as, when that differs from the test process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerUser {
    pub uid: u32,
    pub gid: u32,
}

/// `None` when the server can run as the current user; the `postgres` user when running as
/// root (PostgreSQL refuses to run as root).
pub(crate) fn server_user() -> Result<Option<ServerUser>> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Ok(None);
    }
    lookup_user("postgres").map(Some).ok_or(Error::NoServerUser)
}

fn lookup_user(name: &str) -> Option<ServerUser> {
    let cname = CString::new(name).ok()?;
    let mut pwd = MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the duration of the call and `buf.len()` is the
    // size of `buf`; getpwnam_r writes only into `pwd` and `buf`.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            pwd.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: getpwnam_r returned success with a non-null result, so `pwd` is initialised.
    let pwd = unsafe { pwd.assume_init() };
    Some(ServerUser {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// Give `path` to the server user (no-op when the server runs as the current user).
pub(crate) fn chown(path: &Path, user: Option<ServerUser>) -> Result<()> {
    if let Some(u) = user {
        std::os::unix::fs::chown(path, Some(u.uid), Some(u.gid))
            .ctx(|| format!("chown {} to uid {}", path.display(), u.uid))?;
    }
    Ok(())
}

/// Set the permission bits of `path`.
pub(crate) fn chmod(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .ctx(|| format!("chmod {mode:o} {}", path.display()))
}

/// Send `signal` to `pid`. `Ok(false)` if the process does not exist.
pub(crate) fn signal(pid: u32, signal: libc::c_int) -> Result<bool> {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return Ok(false);
    };
    if raw <= 0 {
        return Ok(false);
    }
    // SAFETY: kill has no memory-safety preconditions; `raw` is a positive pid.
    let rc = unsafe { libc::kill(raw, signal) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(Error::io(format!("kill({pid}, {signal})"), err))
    }
}

/// `(ppid, state)` of a process from `/proc/<pid>/stat`, `None` if it does not exist.
fn stat(pid: u32) -> Option<(u32, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesised and may itself contain spaces or ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// Whether `pid` names a live process (zombies — exited but not yet reaped — count as dead).
pub(crate) fn is_alive(pid: u32) -> bool {
    matches!(stat(pid), Some((_, state)) if state != 'Z' && state != 'X')
}

/// Direct children of `pid`.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&p| matches!(stat(p), Some((ppid, _)) if ppid == pid))
        .collect()
}

/// Wait until none of `pids` is alive, or `timeout` passes. Returns whether all are gone.
pub(crate) fn wait_all_dead(pids: &[u32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pids.iter().all(|&p| !is_alive(p)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Remove a System V shared memory segment left behind by a postmaster that was killed
/// with SIGKILL, but only if it is unattached and was created by that postmaster.
pub(crate) fn remove_stale_shm(shmid: i32, creator_pid: u32) {
    let mut ds = MaybeUninit::<libc::shmid_ds>::zeroed();
    // SAFETY: IPC_STAT writes a shmid_ds into the valid, properly sized buffer.
    let rc = unsafe { libc::shmctl(shmid, libc::IPC_STAT, ds.as_mut_ptr()) };
    if rc != 0 {
        return; // already gone (or not ours to look at)
    }
    // SAFETY: IPC_STAT succeeded, so the struct is initialised (it was zeroed anyway).
    let ds = unsafe { ds.assume_init() };
    let creator_matches = u32::try_from(ds.shm_cpid).is_ok_and(|cpid| cpid == creator_pid);
    if ds.shm_nattch == 0 && creator_matches {
        // SAFETY: IPC_RMID takes no buffer.
        unsafe { libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}
