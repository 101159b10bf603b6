//! End-to-end benchmarks of pgcdc against its peers, on throwaway clusters. Prints tables.
//!
//! ```text
//! cargo run --release -p benches --bin e2e -- drain    [--rows 1000000] [--rounds 2] [--txn-rows 1000]
//!                                                      [--consumers recvlogical,lib-count,lib-feldera]
//! cargo run --release -p benches --bin e2e -- snapshot [--rows 1000000] [--rounds 2] [--workers 1,4]
//!                                                      [--chunk-pages N]
//! cargo run --release -p benches --bin e2e -- snapshot-cli [--scale 20] [--rounds 3] [--readers 1,2,4]
//!                                                      [--modes consistent,online] [--outputs stdout,out-dir]
//!                                                      [--write-tps N] [--shared-buffers 256MB]
//! cargo run --release -p benches --bin e2e -- chunk-reads [--scale 20] [--rounds 3] [--chunk-rows 10000,50000]
//!                                                      [--shared-buffers 256MB]
//! cargo run --release -p benches --bin e2e -- bigtx    [--rows 1000000]
//! cargo run --release -p benches --bin e2e -- latency  [--rates 10,1000,50000,max] [--seconds 5]
//!                                                      [--consumers stdout,out-dir,lib] [--plot PATH]
//! cargo run --release -p benches --bin e2e -- all      [--rows N]
//! ```
//!
//! Every consumer runs as a child process (this binary re-executed as `consume`, or
//! `pg_recvlogical` / `psql`), so wall time, CPU time (`wait4`) and peak RSS are measured
//! the same way for all of them, and peaks of different modes never mix. See
//! `benches/README.md` for what each scenario does and the numbers measured.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod args;
mod bigtx;
mod chunk_reads;
mod consume;
mod drain;
mod latency;
mod rawread;
mod runner;
mod snapshot;
mod snapshot_cli;

use std::process::ExitCode;

use args::Args;

const USAGE: &str = "usage: e2e <drain|snapshot|snapshot-cli|chunk-reads|bigtx|latency|all> [--rows N] [options]; see benches/README.md";

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.command == "consume" {
        // The child side: one consumer run, results on stdout.
        return consume::main(&args);
    }
    if args.command == "consume-raw" {
        return rawread::main(&args);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match args.command.as_str() {
            "drain" => drain::run(&args).await,
            "snapshot" => snapshot::run(&args).await,
            "snapshot-cli" => snapshot_cli::run(&args).await,
            "chunk-reads" => chunk_reads::run(&args).await,
            "bigtx" => bigtx::run(&args).await,
            "latency" => latency::run(&args).await,
            "all" => {
                drain::run(&args).await?;
                snapshot::run(&args).await?;
                bigtx::run(&args).await
            }
            other => Err(format!("unknown command {other:?}\n{USAGE}")),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
