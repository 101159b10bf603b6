//! Reading existing rows: the consistent snapshot (tables copied under the slot's exported
//! snapshot, [`copy`]; a large table's single COPY decoded on several tasks,
//! `parallel_decode`) and the online snapshot's chunks (the next rows of a table in key
//! order, each in a short transaction of its own, [`chunk`]; a table without a primary
//! key whole under one snapshot, in pieces, [`whole_table`]).

pub mod chunk;
pub mod copy;
pub mod copy_binary;
mod copy_rows;
pub mod key_compare;
mod parallel_decode;
mod row_blocks;
mod row_group;
pub mod whole_table;

pub use chunk::ChunkRead;
pub(crate) use chunk::{chunk_boundaries, read_chunk};
pub use copy::{CopyMessage, PlanOptions, WorkItem};
pub use copy_binary::{CopyBinaryDecoder, CopyFormatError};
pub(crate) use key_compare::compare_keys;
pub use whole_table::{WholeTableRead, WholeTableStart};
