//! Reading existing rows: the consistent snapshot (tables copied under the slot's exported
//! snapshot, [`copy`]) and the online snapshot's chunks (the next rows of a table in key
//! order, each in a short transaction of its own, [`chunk`]).

pub mod chunk;
pub mod copy;
pub mod copy_binary;

pub use chunk::{ChunkRead, chunk_boundaries, read_chunk};
pub use copy::{CopyMessage, WorkItem};
pub use copy_binary::{CopyBinaryDecoder, CopyFormatError};
