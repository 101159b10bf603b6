//! The `pgcdc` command-line tool: see `pgcdc --help` and the README.

use std::process::ExitCode;

fn main() -> ExitCode {
    cdc_examples::main_entry()
}
