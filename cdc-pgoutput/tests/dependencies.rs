//! The protocol crate stays pure: its normal dependency tree, as cargo resolves it, holds
//! no async runtime, TLS, Postgres client or filesystem helper. A change that pulls one in
//! (directly or through cdc-core's `runtime` feature) fails here, not in review.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// Crates that mean I/O; none may appear in `cargo tree -p cdc-pgoutput -e normal`.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "tokio-postgres",
    "tokio-rustls",
    "rustls",
    "postgres-protocol",
    "tempfile",
    "async-trait",
    "futures",
    "libc",
];

#[test]
fn protocol_crate_has_no_io_dependencies() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--package",
            "cdc-pgoutput",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).unwrap();
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"cdc-core") && names.contains(&"bytes"),
        "cargo tree output not understood:\n{tree}"
    );
    let found: Vec<&&str> = FORBIDDEN.iter().filter(|f| names.contains(f)).collect();
    assert!(
        found.is_empty(),
        "cdc-pgoutput must stay sans-IO, but its normal dependencies include {found:?}:\n{tree}"
    );
}
