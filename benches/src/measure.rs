//! CPU time and peak memory: of this process (`getrusage`, `/proc/self/status`), of a
//! child process once it exits (`wait4`), and of any process while it runs
//! (`/proc/<pid>/stat`, e.g. a walsender).

use std::io;
use std::process::Child;
use std::time::Duration;

/// CPU time and peak resident memory of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub system: Duration,
    /// Peak resident set size in KiB (`ru_maxrss`), 0 when unknown.
    pub max_rss_kib: u64,
}

impl Usage {
    /// User plus system time.
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }

    /// The CPU time spent between `earlier` and `self` (peak memory is `self`'s).
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            max_rss_kib: self.max_rss_kib,
        }
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
}

fn from_rusage(ru: &libc::rusage) -> Usage {
    Usage {
        user: timeval(ru.ru_utime),
        system: timeval(ru.ru_stime),
        max_rss_kib: u64::try_from(ru.ru_maxrss).unwrap_or(0),
    }
}

fn getrusage(who: libc::c_int) -> io::Result<Usage> {
    // SAFETY: rusage is plain old data; getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(from_rusage(&ru))
}

/// This process so far (every thread).
pub fn self_usage() -> io::Result<Usage> {
    getrusage(libc::RUSAGE_SELF)
}

/// The calling thread so far.
pub fn thread_usage() -> io::Result<Usage> {
    getrusage(libc::RUSAGE_THREAD)
}

/// How a waited-for child ended, with its resource usage.
#[derive(Clone, Copy, Debug)]
pub struct ChildExit {
    /// Exit code, or `None` when it was killed by a signal.
    pub code: Option<i32>,
    /// What the child used (its own `rusage`, as `wait4` reports it).
    pub usage: Usage,
}

/// Waits for `child` with `wait4`, which reports that one child's CPU time and peak RSS
/// (`RUSAGE_CHILDREN` would mix in every other child reaped meanwhile). Blocks the thread.
pub fn wait_child(child: Child) -> io::Result<ChildExit> {
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| io::Error::other("child pid out of range"))?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to a status word and an rusage; `pid` is our child, which
        // nobody else waits for (we own its `Child` and never call its `wait`).
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if rc == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    // The child is reaped; `Child` has no destructor that waits, so dropping it is fine.
    drop(child);
    let code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    Ok(ChildExit {
        code,
        usage: from_rusage(&ru),
    })
}

/// A field of `/proc/self/status` in KiB (e.g. `VmHWM`, the peak resident set size).
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// User and system CPU time of any process so far, from `/proc/<pid>/stat`; `None` once it
/// is gone.
pub fn process_cpu(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after its ')' are plain.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the full line (utime, stime) are 11 and 12 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|t| *t > 0)?;
    let to_duration = |t: u64| Duration::from_micros(t * 1_000_000 / ticks);
    Some(Usage {
        user: to_duration(utime),
        system: to_duration(stime),
        max_rss_kib: 0,
    })
}

/// CPU time of the whole machine from `/proc/stat`: busy (user, nice, system, irq,
/// softirq, steal) and idle (idle, iowait), summed over all CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineCpu {
    /// Busy time over all CPUs.
    pub busy: Duration,
    /// Idle time over all CPUs.
    pub idle: Duration,
}

impl MachineCpu {
    /// The time spent between `earlier` and `self`.
    pub fn since(&self, earlier: &MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: self.busy.saturating_sub(earlier.busy),
            idle: self.idle.saturating_sub(earlier.idle),
        }
    }
}

/// The machine's CPU time so far; zero when `/proc/stat` cannot be read.
pub fn machine_cpu() -> MachineCpu {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return MachineCpu::default();
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return MachineCpu::default();
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|t| *t > 0)
        .unwrap_or(100);
    let to_duration = |t: u64| Duration::from_micros(t * 1_000_000 / ticks);
    MachineCpu {
        busy: to_duration(at(0) + at(1) + at(2) + at(5) + at(6) + at(7)),
        idle: to_duration(at(3) + at(4)),
    }
}

/// Peak of the heap bytes the program holds (`mallinfo2`: in use in arenas plus mmapped
/// blocks), sampled by a thread at a fixed interval while it runs. Comparing it with
/// `VmHWM` separates what the program keeps from what the allocator keeps around.
///
/// Each sample locks every malloc arena and walks its free lists, which stalls allocating
/// threads: at a 20 ms interval it added about 0.5 s of CPU to a 4 s run. Use it for memory
/// runs only, never while measuring time.
#[derive(Debug)]
pub struct HeapSampler {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<u64>,
}

impl HeapSampler {
    /// Starts sampling every `interval`.
    pub fn start(interval: Duration) -> HeapSampler {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut peak = heap_in_use();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(interval)
            {
                peak = peak.max(heap_in_use());
            }
            peak.max(heap_in_use())
        });
        HeapSampler { stop, thread }
    }

    /// Stops sampling; the peak in bytes.
    pub fn finish(self) -> u64 {
        // A send error means the thread is gone already; join reports what it saw.
        let _ = self.stop.send(());
        self.thread.join().unwrap_or(0)
    }
}

/// Heap bytes in use right now, per glibc's `mallinfo2`.
pub fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct by value.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}
