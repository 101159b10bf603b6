//! Replication sub-protocol: `ServerMessage::decode` and `ClientMessage::decode` on an
//! arbitrary CopyData body. What decodes re-encodes to exactly the input bytes (the
//! formats are fixed-width, so the encoding is canonical) and decodes to the same value.

#![no_main]

use bytes::{Bytes, BytesMut};
use cdc_pgoutput::protocol::replication::{ClientMessage, ServerMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);

    match ServerMessage::decode(body.clone()) {
        Ok(message) => {
            let mut out = BytesMut::new();
            message.encode(&mut out);
            assert_eq!(
                &out[..],
                data,
                "server message does not re-encode to its input"
            );
            let again = ServerMessage::decode(out.freeze()).expect("re-encoded server message");
            assert_eq!(again, message);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }

    match ClientMessage::decode(body) {
        Ok(message) => {
            let mut out = BytesMut::new();
            message.encode(&mut out);
            assert_eq!(
                &out[..],
                data,
                "client message does not re-encode to its input"
            );
            let again = ClientMessage::decode(out.freeze()).expect("re-encoded client message");
            assert_eq!(again, message);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
