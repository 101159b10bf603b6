//! Change assembler: `ChangeAssembler::process` on an arbitrary sequence of XLogData
//! payloads (routing every table, in-memory spill with a small limit so streamed
//! transactions spill), releasing committed streamed transactions with `continue_replay`
//! as `PgSource` does. After an error the session is reset (`reset_session`, as on a
//! reconnect) and the remaining payloads continue. Must never panic.
//!
//! Input: byte 0 picks the decoder options (bits 0–1: version, bit 2: parallel streaming),
//! byte 1 the assembler settings (bit 0: schema policy, bits 1–2: message filter, bits 3–4:
//! stream memory limit); the rest is payloads framed as in `pgoutput_decode` (2-byte
//! little-endian length, then the bytes).

#![no_main]

use bytes::Bytes;
use cdc_pgoutput::changes::{
    AssemblerConfig, ChangeAssembler, MemorySpill, MessageFilter, SchemaChangePolicy, TableRouting,
};
use cdc_pgoutput::protocol::pgoutput::{DecoderOptions, ProtocolVersion};
use libfuzzer_sys::fuzz_target;

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
    if data.len() < 2 {
        return;
    }
    let version = match data[0] & 3 {
        0 => ProtocolVersion::V1,
        1 => ProtocolVersion::V2,
        2 => ProtocolVersion::V3,
        _ => ProtocolVersion::V4,
    };
    let settings = data[1];
    let config = AssemblerConfig {
        decoder: DecoderOptions::new(version).with_parallel_streaming(data[0] & 4 != 0),
        routing: TableRouting::all(),
        schema_policy: if settings & 1 == 0 {
            SchemaChangePolicy::Fail
        } else {
            SchemaChangePolicy::Evolve
        },
        messages: match (settings >> 1) & 3 {
            0 => MessageFilter::Off,
            1 => MessageFilter::All,
            _ => MessageFilter::Prefixes(vec!["p".to_owned(), String::new()]),
        },
        stream_memory_limit: match (settings >> 3) & 3 {
            0 => 0,
            1 => 64,
            2 => 4096,
            _ => usize::MAX,
        },
        spill: MemorySpill::shared(),
    };
    let mut assembler = ChangeAssembler::new(config);
    let mut out = Vec::new();
    for payload in payloads(&data[2..]) {
        let mut result = assembler.process(payload, &mut out).map(|_| ());
        let mut rounds = 0;
        while result.is_ok() && assembler.replaying() {
            rounds += 1;
            assert!(rounds < 100_000, "continue_replay does not finish");
            result = assembler.continue_replay(&mut out, 7).map(|_| ());
        }
        if let Err(e) = result {
            let _ = e.to_string();
            assembler.reset_session();
        }
        out.clear();
    }
});
