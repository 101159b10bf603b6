//! A borrowed view of part of a shared buffer.
//!
//! Decoding a row reads every column's bytes, but only a few kinds of values (text, JSON,
//! bytea, `Other`) keep them. A `Bytes` slice per column would cost an atomic increment
//! and decrement of the buffer's reference count each; a view costs nothing and becomes a
//! `Bytes` (sharing the buffer, never copying) only when a value keeps its bytes.

use std::ops::{Deref, Range};

use bytes::Bytes;

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
}

impl<'a> BytesView<'a> {
    /// The whole of `owner`.
    pub fn whole(owner: &'a Bytes) -> Self {
        BytesView {
            data: owner.as_ref(),
            owner: Some(owner),
            start: 0,
        }
    }

    /// `owner[range]`, or `None` if the range is reversed or goes past the end.
    pub fn new(owner: &'a Bytes, range: Range<usize>) -> Option<Self> {
        let start = range.start;
        owner.get(range).map(|data| BytesView {
            data,
            owner: Some(owner),
            start,
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
        }
    }

    /// The viewed bytes, borrowed for as long as the owner is.
    pub fn as_slice(&self) -> &'a [u8] {
        self.data
    }

    /// The viewed bytes as a `Bytes`: sharing the owner's storage (one reference count
    /// increment, no copy), or a copy for a view without an owner.
    pub fn to_bytes(&self) -> Bytes {
        match self.owner {
            Some(owner) if self.start == 0 && self.data.len() == owner.len() => owner.clone(),
            Some(owner) => owner.slice(self.start..self.start + self.data.len()),
            None => Bytes::copy_from_slice(self.data),
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
    fn a_view_without_owner_copies_when_kept() {
        let buffer = b"hello world".to_vec();
        let view = BytesView::copied(&buffer[6..]);
        assert_eq!(view.as_slice(), b"world");
        let kept = view.to_bytes();
        assert_eq!(&kept[..], b"world");
        assert_ne!(kept.as_ptr(), buffer[6..].as_ptr());
    }
}
