//! The `pgcdc` command-line tool.
//!
//! A placeholder until the binary issue lands: it states what the tool will do and exits
//! with a non-zero status when given arguments it does not understand yet.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(arg) = args.first() {
        eprintln!(
            "pgcdc: {arg:?} is not available yet; this build only has the library. \
             `pgcdc demo` and `pgcdc stream` are being built."
        );
        return ExitCode::from(2);
    }
    println!(
        "pgcdc {}: change data capture from PostgreSQL (logical replication, pgoutput).\n\
         The command-line tool is not built yet; the library crates are. Run the tests with \
         `cargo test --workspace`.",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::SUCCESS
}
