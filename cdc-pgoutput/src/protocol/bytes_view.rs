//! A borrowed view of part of a shared buffer.
//!
//! Decoding a row reads every column's bytes, but only a few kinds of values (text, JSON,
//! bytea, `Other`) keep them. A `Bytes` slice per column would cost an atomic increment
//! and decrement of the buffer's reference count each; a view costs nothing and becomes a
//! `Bytes` (sharing the buffer, never copying) only when a value keeps its bytes.

use std::cell::RefCell;
use std::ops::{Deref, Range};

use bytes::{Bytes, BytesMut};

/// Size of the blocks [`ByteBlocks`] copies kept bytes into.
const BLOCK_SIZE: usize = 32 * 1024;

/// Copies of kept bytes, packed into shared blocks of 32 KiB.
///
/// Rows decoded on one thread and dropped on another: a copy of each kept value in an
/// allocation of its own costs a `malloc` here and a `free` there, which the allocator's
/// per-thread caches cannot serve (a quarter of a snapshot's client CPU with glibc). A
/// block serves many values with one allocation; each value holds a reference to its
/// block, counted up here and down where it is dropped — by then this side has moved on
/// to another block, so the two threads do not contend for one count. A kept value keeps
/// its whole block alive; values of a quarter block or more get an allocation of their
/// own, so a small value never pins a large one and a large one pins nothing else.
#[derive(Debug, Default)]
pub struct ByteBlocks {
    block: BytesMut,
}

impl ByteBlocks {
    /// Empty; the first kept value allocates the first block.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of `data`, sharing a block with other copies when small.
    pub fn keep(&mut self, data: &[u8]) -> Bytes {
        if data.len() >= BLOCK_SIZE / 4 {
            return Bytes::copy_from_slice(data);
        }
        if self.block.capacity() < data.len() {
            // The old block stays alive through the values that hold it.
            self.block = BytesMut::with_capacity(BLOCK_SIZE);
        }
        self.block.extend_from_slice(data);
        self.block.split().freeze()
    }
}

/// The bytes `owner[range]`: readable as a slice, shareable as a [`Bytes`] without copying.
///
/// The range is checked when the view is made, so reading and sharing never fail. A view
/// made with [`BytesView::copied`] has no owner: a value that keeps its bytes gets a copy.
#[derive(Clone, Copy)]
pub struct BytesView<'a> {
    data: &'a [u8],
    /// The buffer `data` lies in at `start`, when one is shared.
    owner: Option<&'a Bytes>,
    start: usize,
    /// Without an owner: where a kept copy goes (`None`: an allocation of its own).
    blocks: Option<&'a RefCell<ByteBlocks>>,
}

impl<'a> BytesView<'a> {
    /// The whole of `owner`.
    pub fn whole(owner: &'a Bytes) -> Self {
        BytesView {
            data: owner.as_ref(),
            owner: Some(owner),
            start: 0,
            blocks: None,
        }
    }

    /// `owner[range]`, or `None` if the range is reversed or goes past the end.
    pub fn new(owner: &'a Bytes, range: Range<usize>) -> Option<Self> {
        let start = range.start;
        owner.get(range).map(|data| BytesView {
            data,
            owner: Some(owner),
            start,
            blocks: None,
        })
    }

    /// Bytes that no shared buffer holds (or whose buffer should not be shared, e.g. one
    /// that rows decoded on one thread and dropped on another would contend for): a
    /// value that keeps them copies them into an allocation of its own, and the others
    /// cost nothing.
    pub fn copied(data: &'a [u8]) -> Self {
        BytesView {
            data,
            owner: None,
            start: 0,
            blocks: None,
        }
    }

    /// Like [`Self::copied`], but a value that keeps the bytes gets its copy from
    /// `blocks` (see [`ByteBlocks`]). The `RefCell` is borrowed only inside
    /// [`Self::to_bytes`].
    pub fn copied_into(data: &'a [u8], blocks: &'a RefCell<ByteBlocks>) -> Self {
        BytesView {
            data,
            owner: None,
            start: 0,
            blocks: Some(blocks),
        }
    }

    /// The viewed bytes, borrowed for as long as the owner is.
    pub fn as_slice(&self) -> &'a [u8] {
        self.data
    }

    /// The viewed bytes as a `Bytes`: sharing the owner's storage (one reference count
    /// increment, no copy), or a copy for a view without an owner (in a shared block for
    /// a view made with [`Self::copied_into`]).
    pub fn to_bytes(&self) -> Bytes {
        match (self.owner, self.blocks) {
            (Some(owner), _) if self.start == 0 && self.data.len() == owner.len() => owner.clone(),
            (Some(owner), _) => owner.slice(self.start..self.start + self.data.len()),
            (None, Some(blocks)) => match blocks.try_borrow_mut() {
                Ok(mut blocks) => blocks.keep(self.data),
                // Not reachable (no borrow outlives `keep`); a copy of its own is as good.
                Err(_) => Bytes::copy_from_slice(self.data),
            },
            (None, None) => Bytes::copy_from_slice(self.data),
        }
    }
}

/// Views are equal when their bytes are, wherever they are.
impl PartialEq for BytesView<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for BytesView<'_> {}

impl Deref for BytesView<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for BytesView<'_> {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for BytesView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BytesView(b\"{}\")", self.as_slice().escape_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_read_and_share_without_copying() {
        let owner = Bytes::from(b"hello world".to_vec());
        let view = BytesView::new(&owner, 6..11).unwrap();
        assert_eq!(view.as_slice(), b"world");
        let shared = view.to_bytes();
        assert_eq!(&shared[..], b"world");
        // Same storage: the shared slice points into the owner.
        assert_eq!(shared.as_ptr(), owner[6..].as_ptr());
        assert_eq!(BytesView::whole(&owner).to_bytes(), owner);
    }

    #[test]
    fn out_of_range_views_are_refused() {
        let owner = Bytes::from_static(b"abc");
        assert!(BytesView::new(&owner, 2..4).is_none());
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 2..1;
        assert!(BytesView::new(&owner, reversed).is_none());
        assert_eq!(BytesView::new(&owner, 3..3).unwrap().as_slice(), b"");
    }

    #[test]
    fn small_kept_copies_share_a_block_and_outlive_it() {
        let blocks = RefCell::new(ByteBlocks::new());
        let source = b"first second".to_vec();
        let first = BytesView::copied_into(&source[..5], &blocks).to_bytes();
        let second = BytesView::copied_into(&source[6..], &blocks).to_bytes();
        assert_eq!((&first[..], &second[..]), (&b"first"[..], &b"second"[..]));
        // Side by side in one block, not in the source.
        assert_eq!(first.as_ptr().wrapping_add(5), second.as_ptr());
        assert_ne!(first.as_ptr(), source.as_ptr());
        // Filling the block moves on to a new one; earlier copies stay intact.
        let filler = vec![b'x'; BLOCK_SIZE / 4 - 1];
        let kept: Vec<Bytes> = (0..8)
            .map(|_| BytesView::copied_into(&filler, &blocks).to_bytes())
            .collect();
        drop(blocks);
        assert_eq!(&first[..], b"first");
        assert_eq!(&second[..], b"second");
        assert!(kept.iter().all(|k| k[..] == filler[..]));
    }

    #[test]
    fn large_kept_copies_get_an_allocation_of_their_own() {
        let blocks = RefCell::new(ByteBlocks::new());
        let small = BytesView::copied_into(b"small", &blocks).to_bytes();
        let large_source = vec![7u8; BLOCK_SIZE / 4];
        let large = BytesView::copied_into(&large_source, &blocks).to_bytes();
        let next = BytesView::copied_into(b"next", &blocks).to_bytes();
        assert_eq!(&large[..], &large_source[..]);
        // The next small copy still follows the first in the same block.
        assert_eq!(small.as_ptr().wrapping_add(5), next.as_ptr());
    }

    #[test]
    fn a_view_without_owner_copies_when_kept() {
        let buffer = b"hello world".to_vec();
        let view = BytesView::copied(&buffer[6..]);
        assert_eq!(view.as_slice(), b"world");
        let kept = view.to_bytes();
        assert_eq!(&kept[..], b"world");
        assert_ne!(kept.as_ptr(), buffer[6..].as_ptr());
    }
}
