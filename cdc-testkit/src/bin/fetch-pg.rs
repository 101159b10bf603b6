//! `cargo run -p cdc-testkit --bin fetch-pg -- 14 16 17 18`: makes sure the test kit has
//! the server binaries of each PostgreSQL major version given, exactly as
//! [`PgBinaries::for_major`] finds or downloads them on first use, so a CI run fails early
//! and clearly when one cannot be had (instead of inside a test).

use std::process::ExitCode;
use std::time::Instant;

use cdc_testkit::PgBinaries;

fn main() -> ExitCode {
    let mut failed = false;
    for arg in std::env::args().skip(1) {
        let Ok(major) = arg.parse::<u32>() else {
            eprintln!("fetch-pg: {arg:?} is not a major version (write e.g. 14 15 16)");
            return ExitCode::from(2);
        };
        let started = Instant::now();
        match PgBinaries::for_major(major) {
            Ok(bins) => println!(
                "PostgreSQL {major}: {} ({:.1} s)",
                bins.dir().display(),
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!("fetch-pg: PostgreSQL {major}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
