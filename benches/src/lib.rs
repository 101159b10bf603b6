//! Shared helpers for pgcdc benchmarks. Nothing depends on this crate; it may use any
//! pgcdc crate and the test kit, and measures, never asserts, timings.
//!
//! - [`row`]: the realistic mixed-type row every benchmark uses (same columns in the
//!   micro-benchmarks and in the tables of the end-to-end runs), as pgoutput messages in
//!   text and binary format.
//! - [`measure`]: CPU time and peak memory of this process and of children.
//! - [`sinks`]: a sink that only counts what it receives.
//! - [`report`]: a plain-text table.

pub mod measure;
pub mod report;
pub mod row;
pub mod sinks;
