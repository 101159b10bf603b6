//! pgoutput decoder: a session of XLogData payloads fed to `PgOutputDecoder::decode` and,
//! in lockstep, to `decode_borrowed` (the zero-copy path), for protocol versions 1–4 with
//! and without parallel streaming.
//!
//! Input: byte 0 picks the options (bits 0–1: version, bit 2: parallel streaming); the rest
//! is a sequence of payloads, each a 2-byte little-endian length and that many bytes (the
//! last one truncated to what is left).
//!
//! Checks, beyond "never panics": both paths accept and reject the same payloads with the
//! same error and leave the decoder in the same stream state; a rejected payload leaves the
//! state unchanged; what decodes re-encodes (`encode`) to bytes that decode to the same
//! message.

#![no_main]

use bytes::{Bytes, BytesMut};
use cdc_pgoutput::protocol::pgoutput::{
    DecoderOptions, Delete, Insert, OldTuple, PgOutputDecoder, PgOutputMessage, ProtocolVersion,
    TupleData, TupleRef, Update, encode,
};
use libfuzzer_sys::fuzz_target;

fn owned_old(old: OldTuple<TupleRef<'_>>) -> OldTuple<TupleData> {
    match old {
        OldTuple::Key(t) => OldTuple::Key(t.to_tuple_data()),
        OldTuple::Full(t) => OldTuple::Full(t.to_tuple_data()),
    }
}

/// The borrowed message as the owned one `decode` returns.
fn to_owned(message: PgOutputMessage<TupleRef<'_>>) -> PgOutputMessage<TupleData> {
    use PgOutputMessage as M;
    match message {
        M::Begin(m) => M::Begin(m),
        M::Commit(m) => M::Commit(m),
        M::Origin(m) => M::Origin(m),
        M::Relation(m) => M::Relation(m),
        M::Type(m) => M::Type(m),
        M::Insert(m) => M::Insert(Insert {
            xid: m.xid,
            relation_id: m.relation_id,
            new: m.new.to_tuple_data(),
        }),
        M::Update(m) => M::Update(Update {
            xid: m.xid,
            relation_id: m.relation_id,
            old: m.old.map(owned_old),
            new: m.new.to_tuple_data(),
        }),
        M::Delete(m) => M::Delete(Delete {
            xid: m.xid,
            relation_id: m.relation_id,
            old: owned_old(m.old),
        }),
        M::Truncate(m) => M::Truncate(m),
        M::Message(m) => M::Message(m),
        M::StreamStart(m) => M::StreamStart(m),
        M::StreamStop => M::StreamStop,
        M::StreamCommit(m) => M::StreamCommit(m),
        M::StreamAbort(m) => M::StreamAbort(m),
        M::BeginPrepare(m) => M::BeginPrepare(m),
        M::Prepare(m) => M::Prepare(m),
        M::CommitPrepared(m) => M::CommitPrepared(m),
        M::RollbackPrepared(m) => M::RollbackPrepared(m),
        M::StreamPrepare(m) => M::StreamPrepare(m),
    }
}

fn payloads(mut data: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    while data.len() >= 2 && out.len() < 64 {
        let len = usize::from(u16::from_le_bytes([data[0], data[1]]));
        data = &data[2..];
        let take = len.min(data.len());
        out.push(Bytes::copy_from_slice(&data[..take]));
        data = &data[take..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let version = match selector & 3 {
        0 => ProtocolVersion::V1,
        1 => ProtocolVersion::V2,
        2 => ProtocolVersion::V3,
        _ => ProtocolVersion::V4,
    };
    let options = DecoderOptions::new(version).with_parallel_streaming(selector & 4 != 0);
    let mut owned = PgOutputDecoder::new(options);
    let mut borrowed = PgOutputDecoder::new(options);

    for payload in payloads(rest) {
        let before = owned.clone();
        let a = owned.decode(payload.clone());
        let b = borrowed.decode_borrowed(&payload);
        assert_eq!(owned.open_stream(), borrowed.open_stream());
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, to_owned(b), "decode and decode_borrowed differ");
                // Re-encode and decode again from the state before this payload.
                let mut out = BytesMut::new();
                if encode(&a, &mut out).is_ok() {
                    let mut again = before.clone();
                    let re = again
                        .decode(out.freeze())
                        .expect("the encoding of a decoded message must decode");
                    assert_eq!(re, a, "re-encoded message decodes differently");
                    assert_eq!(again.open_stream(), owned.open_stream());
                }
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b, "decode and decode_borrowed fail differently");
                assert_eq!(owned.open_stream(), before.open_stream());
                // Error messages must format.
                let _ = a.to_string();
            }
            (a, b) => panic!("decode and decode_borrowed disagree: {a:?} vs {b:?}"),
        }
    }
});
