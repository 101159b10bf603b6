//! Shared by the criterion benchmarks: a measurement of the benchmark thread's CPU time.
//!
//! The benchmarks run on a shared 2-core machine where other processes come and go; wall
//! time then measures them too. `ThreadCpuTime` counts only the time the benchmark thread
//! spent on a CPU (`CLOCK_THREAD_CPUTIME_ID`), which is what "rows per second on one core"
//! means. Set `PGCDC_BENCH_WALL=1` to measure wall time instead.

use std::time::Duration;

use criterion::Criterion;
use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time of the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadCpuTime;

fn thread_cpu_now() -> Duration {
    // SAFETY: timespec is plain old data, written by clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }

    fn end(&self, start: Duration) -> Duration {
        thread_cpu_now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

/// Formats nanoseconds like criterion's wall-time formatter, with throughputs per second
/// of CPU time.
struct CpuFormatter;

fn per_second(
    amount: f64,
    typical_ns: f64,
    values: &mut [f64],
    units: [&'static str; 4],
    base: f64,
) -> &'static str {
    let rate = amount * 1e9 / typical_ns;
    let (denominator, unit) = if rate < base {
        (1.0, units[0])
    } else if rate < base * base {
        (base, units[1])
    } else if rate < base * base * base {
        (base * base, units[2])
    } else {
        (base * base * base, units[3])
    };
    for value in values {
        *value = amount * 1e9 / *value / denominator;
    }
    unit
}

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if ns < 1e3 {
            (1.0, "ns")
        } else if ns < 1e6 {
            (1e-3, "µs")
        } else if ns < 1e9 {
            (1e-6, "ms")
        } else {
            (1e-9, "s")
        };
        for value in values {
            *value *= factor;
        }
        unit
    }

    fn scale_throughputs(
        &self,
        typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        match *throughput {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => per_second(
                b as f64,
                typical,
                values,
                ["  B/s", "KB/s", "MB/s", "GB/s"],
                1000.0,
            ),
            Throughput::Bits(b) => per_second(
                b as f64,
                typical,
                values,
                ["  b/s", "Kb/s", "Mb/s", "Gb/s"],
                1000.0,
            ),
            Throughput::Elements(e) | Throughput::ElementsAndBytes { elements: e, .. } => {
                per_second(
                    e as f64,
                    typical,
                    values,
                    [" elem/s", "Kelem/s", "Melem/s", "Gelem/s"],
                    1000.0,
                )
            }
        }
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// Whether `PGCDC_BENCH_WALL` asks for wall time.
pub fn wall_time_requested() -> bool {
    std::env::var_os("PGCDC_BENCH_WALL").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Criterion measuring thread CPU time, configured from the command line.
pub fn cpu_criterion() -> Criterion<ThreadCpuTime> {
    Criterion::default()
        .with_measurement(ThreadCpuTime)
        .configure_from_args()
}

/// Criterion measuring wall time, configured from the command line.
pub fn wall_criterion() -> Criterion<WallTime> {
    Criterion::default().configure_from_args()
}
