//! The initial snapshot: tables copied under the slot's exported snapshot.

pub mod copy;
pub mod copy_binary;

pub use copy::{CopyMessage, WorkItem};
pub use copy_binary::{CopyBinaryDecoder, CopyFormatError};
