//! Splitting backend messages off a read buffer: the one framer of both server sessions
//! (the simple-query session in `wire.rs` and the CopyBoth stream in `stream.rs`). Pure:
//! bytes in, frames out, no I/O.
//!
//! A message announces its own length, and a server — broken, hostile, or not PostgreSQL
//! at all — can announce up to 4 GiB in five bytes. So, as libpq does (`pqParseInput3`'s
//! `VALID_LONG_MESSAGE_TYPE`), a length is checked against a cap before anything is
//! reserved for it, and the cap depends on the message type and the session's phase:
//! - before authentication completes ([`Phase::Startup`]) every message is small:
//!   [`SMALL_MESSAGE_LIMIT`] (libpq allows authentication requests 2000 bytes and errors
//!   30000);
//! - afterwards, the types that can carry data (RowDescription, DataRow, CopyData,
//!   FunctionCallResponse, ErrorResponse, NoticeResponse, NotificationResponse) may be
//!   up to [`LONG_MESSAGE_LIMIT`], and everything else is small.
//!
//! Past the cap the session has lost sync (or never had it), and the caller ends it with
//! a protocol error naming the type and the length ([`FrameError`]).
//!
//! Even below the cap nothing is reserved on the strength of an announcement alone: the
//! buffer grows at most by as much as has already arrived ([`make_room`]), so memory
//! follows the bytes actually received.

use std::fmt;

use bytes::{Bytes, BytesMut};

/// Type byte and length word.
pub(super) const HEADER_LEN: usize = 5;

/// The largest length word (which counts itself, not the type byte) of a message that is
/// not one of the long types, or of any message before authentication completes: libpq's
/// 30000.
pub(super) const SMALL_MESSAGE_LIMIT: usize = 30_000;

/// The largest length word of a long message. The server builds every message in one
/// `StringInfo`, which cannot exceed `MaxAllocSize` (1 GiB − 1) bytes; a little slack on
/// top of that keeps every message the server can send.
pub(super) const LONG_MESSAGE_LIMIT: usize = (1 << 30) + 1024;

/// How far a buffer grows at least when a message is incomplete ([`make_room`]).
const MIN_GROWTH: usize = 8192;

/// Where a session is, for the length caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Startup and authentication, until AuthenticationOk: every message is small.
    Startup,
    /// After authentication: the long types may be long.
    Authenticated,
}

/// One backend message, header included, split off the read buffer without copying.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Frame {
    raw: Bytes,
}

impl Frame {
    /// The type byte.
    pub(super) fn tag(&self) -> u8 {
        // A frame always holds at least its header (see `split_frame`).
        self.raw.first().copied().unwrap_or(0)
    }

    /// The message body (after the length word), sharing the frame's memory.
    pub(super) fn body(&self) -> Bytes {
        self.raw.slice(HEADER_LEN.min(self.raw.len())..)
    }

    /// The whole message, header included.
    pub(super) fn raw(&self) -> &Bytes {
        &self.raw
    }
}

/// A message whose length word is impossible or over its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FrameError {
    /// The type byte.
    pub(super) tag: u8,
    /// The length word as sent.
    pub(super) len: u32,
    /// The cap it was checked against.
    pub(super) limit: usize,
    /// The phase the session was in.
    pub(super) phase: Phase,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = message_name(self.tag);
        let tag = char::from(self.tag).escape_default();
        if (self.len as usize) < 4 {
            return write!(
                f,
                "invalid length {} of a {name} message ('{tag}'): lost synchronization with the server",
                self.len
            );
        }
        let when = match self.phase {
            Phase::Startup => "before authentication",
            Phase::Authenticated => "for this message type",
        };
        write!(
            f,
            "a {name} message ('{tag}') of {} bytes exceeds the limit of {} bytes {when}: lost synchronization with the server, or not a PostgreSQL server",
            self.len, self.limit
        )
    }
}

/// The cap on the length word of a message of type `tag` in `phase`.
pub(super) fn limit(phase: Phase, tag: u8) -> usize {
    match phase {
        Phase::Startup => SMALL_MESSAGE_LIMIT,
        Phase::Authenticated if is_long_type(tag) => LONG_MESSAGE_LIMIT,
        Phase::Authenticated => SMALL_MESSAGE_LIMIT,
    }
}

/// The types that may be long (libpq's `VALID_LONG_MESSAGE_TYPE`).
fn is_long_type(tag: u8) -> bool {
    matches!(tag, b'T' | b'D' | b'd' | b'V' | b'E' | b'N' | b'A')
}

/// The type byte and length word at the start of `buf`, checked against the caps; `None`
/// while fewer than five bytes are there.
pub(super) fn header(buf: &[u8], phase: Phase) -> Result<Option<(u8, usize)>, FrameError> {
    let Some(&[tag, a, b, c, d]) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([a, b, c, d]);
    let limit = limit(phase, tag);
    // `u32` always fits `usize` on the platforms we build for (64-bit Unix); saturate
    // anyway so that a 16-bit target would reject rather than wrap.
    let size = usize::try_from(len).unwrap_or(usize::MAX);
    if size < 4 || size > limit {
        return Err(FrameError {
            tag,
            len,
            limit,
            phase,
        });
    }
    Ok(Some((tag, size)))
}

/// Splits the first message off `buf` if it is complete (zero-copy: the frame shares the
/// buffer's memory). `Ok(None)`: more bytes are needed (see [`make_room`]). An error
/// leaves `buf` as it was.
pub(super) fn split_frame(buf: &mut BytesMut, phase: Phase) -> Result<Option<Frame>, FrameError> {
    let Some((_, len)) = header(buf, phase)? else {
        return Ok(None);
    };
    // `len <= LONG_MESSAGE_LIMIT`, so this cannot overflow.
    let total = len + 1;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some(Frame {
        raw: buf.split_to(total).freeze(),
    }))
}

/// Makes room in `buf` for more of an incomplete first message: the rest of it, but never
/// more than the buffer already holds (at least [`MIN_GROWTH`]), so a large message costs
/// a few doublings and an announced-but-unsent one costs nothing. Does nothing when the
/// buffer has no valid header or the message is complete.
pub(super) fn make_room(buf: &mut BytesMut, phase: Phase) {
    let Ok(Some((_, len))) = header(buf, phase) else {
        return;
    };
    let missing = (len + 1).saturating_sub(buf.len());
    let spare = buf.capacity() - buf.len();
    if missing > spare {
        buf.reserve(missing.min(buf.len().max(MIN_GROWTH)));
    }
}

/// The protocol's name of a backend message type, for error messages.
pub(super) fn message_name(tag: u8) -> &'static str {
    match tag {
        b'R' => "Authentication",
        b'K' => "BackendKeyData",
        b'2' => "BindComplete",
        b'3' => "CloseComplete",
        b'C' => "CommandComplete",
        b'd' => "CopyData",
        b'c' => "CopyDone",
        b'G' => "CopyInResponse",
        b'H' => "CopyOutResponse",
        b'W' => "CopyBothResponse",
        b'D' => "DataRow",
        b'I' => "EmptyQueryResponse",
        b'E' => "ErrorResponse",
        b'V' => "FunctionCallResponse",
        b'v' => "NegotiateProtocolVersion",
        b'n' => "NoData",
        b'N' => "NoticeResponse",
        b'A' => "NotificationResponse",
        b't' => "ParameterDescription",
        b'S' => "ParameterStatus",
        b'1' => "ParseComplete",
        b's' => "PortalSuspended",
        b'Z' => "ReadyForQuery",
        b'T' => "RowDescription",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, len: u32, body: &[u8]) -> BytesMut {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[tag]);
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(body);
        buf
    }

    #[test]
    fn complete_frames_are_split_and_the_rest_stays() {
        let mut buf = message(b'Z', 5, b"I");
        buf.extend_from_slice(b"d\0\0");
        let frame = split_frame(&mut buf, Phase::Authenticated)
            .unwrap()
            .unwrap();
        assert_eq!(frame.tag(), b'Z');
        assert_eq!(&frame.body()[..], b"I");
        assert_eq!(&frame.raw()[..], b"Z\0\0\0\x05I");
        assert_eq!(&buf[..], b"d\0\0");
        assert_eq!(split_frame(&mut buf, Phase::Authenticated).unwrap(), None);
    }

    #[test]
    fn lengths_are_capped_by_phase_and_type() {
        // Before authentication, everything is small; a long type too.
        let mut buf = message(b'E', 30_001, b"");
        let err = split_frame(&mut buf, Phase::Startup).unwrap_err();
        assert_eq!(
            (err.tag, err.len, err.limit),
            (b'E', 30_001, SMALL_MESSAGE_LIMIT)
        );
        assert!(err.to_string().contains("ErrorResponse"), "{err}");
        assert!(err.to_string().contains("30001"), "{err}");
        assert!(err.to_string().contains("before authentication"), "{err}");
        assert_eq!(buf.len(), HEADER_LEN, "an error leaves the buffer alone");
        // Afterwards the long types may be long, the others may not.
        assert_eq!(split_frame(&mut buf, Phase::Authenticated).unwrap(), None);
        let mut buf = message(b'Z', 30_001, b"");
        assert!(split_frame(&mut buf, Phase::Authenticated).is_err());
        let mut buf = message(b'd', u32::MAX, b"");
        let err = split_frame(&mut buf, Phase::Authenticated).unwrap_err();
        assert_eq!(err.limit, LONG_MESSAGE_LIMIT);
        assert!(err.to_string().contains("CopyData"), "{err}");
        let at_cap = u32::try_from(LONG_MESSAGE_LIMIT).unwrap();
        let mut buf = message(b'd', at_cap, b"");
        assert_eq!(split_frame(&mut buf, Phase::Authenticated).unwrap(), None);
    }

    #[test]
    fn lengths_below_four_are_rejected() {
        for len in 0..4 {
            let mut buf = message(b'Z', len, b"");
            let err = split_frame(&mut buf, Phase::Authenticated).unwrap_err();
            assert!(err.to_string().contains("invalid length"), "{err}");
        }
    }

    #[test]
    fn room_grows_with_what_arrived_not_with_what_was_announced() {
        let at_cap = u32::try_from(LONG_MESSAGE_LIMIT).unwrap();
        let mut buf = message(b'd', at_cap, b"");
        make_room(&mut buf, Phase::Authenticated);
        assert!(
            buf.capacity() < 64 * 1024,
            "announced 1 GiB, reserved {}",
            buf.capacity()
        );
        // A message that is there in part: at most doubling.
        let mut buf = message(b'd', 1_000_000, &[0; 100_000]);
        let before = buf.len();
        make_room(&mut buf, Phase::Authenticated);
        assert!(buf.capacity() >= before + MIN_GROWTH);
        assert!(buf.capacity() <= 4 * before, "{}", buf.capacity());
        // A small message that is almost there: exactly what is missing is enough.
        let mut buf = message(b'C', 100, &[0; 10]);
        make_room(&mut buf, Phase::Authenticated);
        assert!(buf.capacity() >= 101);
    }
}
