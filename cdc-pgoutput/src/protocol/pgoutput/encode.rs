//! Encoding pgoutput messages exactly as a walsender writes them, so tests and test doubles
//! can produce the byte streams the decoder will see.

use bytes::{BufMut, BytesMut};
use cdc_core::Lsn;

use super::messages::{OldTuple, PgOutputMessage, Prepare, tag};
use super::tuple::encode_tuple;
use crate::protocol::error::EncodeError;
use crate::protocol::writer::{atomically, put_cstr, put_len_i16, put_len_i32};

/// Appends the wire form of `message` to `out`: the payload of one XLogData.
///
/// The bytes are exactly what the value says: an `xid` of `Some` is written after the tag
/// (as pgoutput does inside a stream), `StreamAbort::abort` is written when present. The
/// encoder does not know the session, so producing a sequence a decoder accepts is the
/// caller's job. On Err (a string with a NUL, a count too large for its field) `out` is left
/// as it was.
pub fn encode(message: &PgOutputMessage, out: &mut BytesMut) -> Result<(), EncodeError> {
    atomically(out, |out| encode_unchecked(message, out))
}

impl PgOutputMessage {
    /// Appends the wire form of this message to `out`; see [`encode`].
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        encode(self, out)
    }
}

fn put_lsn(out: &mut BytesMut, lsn: Lsn) {
    out.put_u64(lsn.0);
}

fn put_xid(out: &mut BytesMut, xid: Option<u32>) {
    if let Some(xid) = xid {
        out.put_u32(xid);
    }
}

fn put_old(out: &mut BytesMut, old: &OldTuple) -> Result<(), EncodeError> {
    let (marker, tuple) = match old {
        OldTuple::Key(t) => (tag::OLD_KEY, t),
        OldTuple::Full(t) => (tag::OLD_FULL, t),
    };
    out.put_u8(marker);
    encode_tuple(tuple, out)
}

fn put_prepare(out: &mut BytesMut, tag: u8, m: &Prepare) -> Result<(), EncodeError> {
    out.put_u8(tag);
    out.put_u8(m.flags);
    put_lsn(out, m.prepare_lsn);
    put_lsn(out, m.end_lsn);
    out.put_i64(m.prepare_timestamp);
    out.put_u32(m.xid);
    put_cstr(out, &m.gid, "gid")
}

fn encode_unchecked(message: &PgOutputMessage, out: &mut BytesMut) -> Result<(), EncodeError> {
    match message {
        PgOutputMessage::Begin(m) => {
            out.put_u8(tag::BEGIN);
            put_lsn(out, m.final_lsn);
            out.put_i64(m.commit_timestamp);
            out.put_u32(m.xid);
        }
        PgOutputMessage::Commit(m) => {
            out.put_u8(tag::COMMIT);
            out.put_u8(m.flags);
            put_lsn(out, m.commit_lsn);
            put_lsn(out, m.end_lsn);
            out.put_i64(m.commit_timestamp);
        }
        PgOutputMessage::Origin(m) => {
            out.put_u8(tag::ORIGIN);
            put_lsn(out, m.commit_lsn);
            put_cstr(out, &m.name, "origin name")?;
        }
        PgOutputMessage::Relation(m) => {
            out.put_u8(tag::RELATION);
            put_xid(out, m.xid);
            out.put_u32(m.relation_id);
            put_cstr(out, &m.namespace, "relation namespace")?;
            put_cstr(out, &m.name, "relation name")?;
            out.put_u8(m.replica_identity.as_char());
            put_len_i16(out, m.columns.len(), "relation column count")?;
            for column in &m.columns {
                out.put_u8(column.flags);
                put_cstr(out, &column.name, "column name")?;
                out.put_u32(column.type_oid);
                out.put_i32(column.type_modifier);
            }
        }
        PgOutputMessage::Type(m) => {
            out.put_u8(tag::TYPE);
            put_xid(out, m.xid);
            out.put_u32(m.type_oid);
            put_cstr(out, &m.namespace, "type namespace")?;
            put_cstr(out, &m.name, "type name")?;
        }
        PgOutputMessage::Insert(m) => {
            out.put_u8(tag::INSERT);
            put_xid(out, m.xid);
            out.put_u32(m.relation_id);
            out.put_u8(tag::NEW_TUPLE);
            encode_tuple(&m.new, out)?;
        }
        PgOutputMessage::Update(m) => {
            out.put_u8(tag::UPDATE);
            put_xid(out, m.xid);
            out.put_u32(m.relation_id);
            if let Some(old) = &m.old {
                put_old(out, old)?;
            }
            out.put_u8(tag::NEW_TUPLE);
            encode_tuple(&m.new, out)?;
        }
        PgOutputMessage::Delete(m) => {
            out.put_u8(tag::DELETE);
            put_xid(out, m.xid);
            out.put_u32(m.relation_id);
            put_old(out, &m.old)?;
        }
        PgOutputMessage::Truncate(m) => {
            out.put_u8(tag::TRUNCATE);
            put_xid(out, m.xid);
            put_len_i32(out, m.relation_ids.len(), "truncated relation count")?;
            out.put_u8(m.options);
            for id in &m.relation_ids {
                out.put_u32(*id);
            }
        }
        PgOutputMessage::Message(m) => {
            out.put_u8(tag::MESSAGE);
            put_xid(out, m.xid);
            out.put_u8(m.flags);
            put_lsn(out, m.lsn);
            put_cstr(out, &m.prefix, "message prefix")?;
            put_len_i32(out, m.content.len(), "message content length")?;
            out.put_slice(&m.content);
        }
        PgOutputMessage::StreamStart(m) => {
            out.put_u8(tag::STREAM_START);
            out.put_u32(m.xid);
            out.put_u8(u8::from(m.first_segment));
        }
        PgOutputMessage::StreamStop => out.put_u8(tag::STREAM_STOP),
        PgOutputMessage::StreamCommit(m) => {
            out.put_u8(tag::STREAM_COMMIT);
            out.put_u32(m.xid);
            out.put_u8(m.flags);
            put_lsn(out, m.commit_lsn);
            put_lsn(out, m.end_lsn);
            out.put_i64(m.commit_timestamp);
        }
        PgOutputMessage::StreamAbort(m) => {
            out.put_u8(tag::STREAM_ABORT);
            out.put_u32(m.xid);
            out.put_u32(m.subxid);
            if let Some(info) = &m.abort {
                put_lsn(out, info.abort_lsn);
                out.put_i64(info.abort_timestamp);
            }
        }
        PgOutputMessage::BeginPrepare(m) => {
            out.put_u8(tag::BEGIN_PREPARE);
            put_lsn(out, m.prepare_lsn);
            put_lsn(out, m.end_lsn);
            out.put_i64(m.prepare_timestamp);
            out.put_u32(m.xid);
            put_cstr(out, &m.gid, "gid")?;
        }
        PgOutputMessage::Prepare(m) => put_prepare(out, tag::PREPARE, m)?,
        PgOutputMessage::StreamPrepare(m) => put_prepare(out, tag::STREAM_PREPARE, m)?,
        PgOutputMessage::CommitPrepared(m) => {
            out.put_u8(tag::COMMIT_PREPARED);
            out.put_u8(m.flags);
            put_lsn(out, m.commit_lsn);
            put_lsn(out, m.end_lsn);
            out.put_i64(m.commit_timestamp);
            out.put_u32(m.xid);
            put_cstr(out, &m.gid, "gid")?;
        }
        PgOutputMessage::RollbackPrepared(m) => {
            out.put_u8(tag::ROLLBACK_PREPARED);
            out.put_u8(m.flags);
            put_lsn(out, m.prepare_end_lsn);
            put_lsn(out, m.rollback_end_lsn);
            out.put_i64(m.prepare_timestamp);
            out.put_i64(m.rollback_timestamp);
            out.put_u32(m.xid);
            put_cstr(out, &m.gid, "gid")?;
        }
    }
    Ok(())
}
