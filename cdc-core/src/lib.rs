//! Database-agnostic change data capture model for pgcdc.

pub mod lsn;

pub use lsn::{Lsn, ParseLsnError, Position};
