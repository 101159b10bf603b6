//! A tiny engine that keeps tables in memory and checkpoints them, with the resume token
//! covering them, to one file (written atomically) whenever pgcdc asks: the embedding
//! path of pgcdc's docs (docs/library.md), from outside its workspace.

mod sink;
mod table;

pub use sink::{EngineCheckpoint, EngineSink};
pub use table::Tables;
