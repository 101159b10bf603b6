//! An experiment, not a library consumer: `e2e consume-raw` is a minimal single-threaded
//! replication client (trust authentication only, plain TCP or Unix socket) that reads
//! the CopyBoth stream with blocking reads into a large buffer and feeds every XLogData
//! payload to the library's `ChangeAssembler` (full decode into `Value`s, events counted
//! and dropped). It shows how the way a client reads changes the walsender's work:
//! `--lowat BYTES` sets `SO_RCVLOWAT`, so a read (and the wakeup the walsender's send
//! triggers) waits until that much is queued, bounded by `--timeout-ms` (`SO_RCVTIMEO`).
//!
//! Options: `--host`, `--port`, `--slot`, `--end LSN`, `--format binary|text`,
//! `--lowat BYTES` (default 0: the kernel default of 1 byte), `--timeout-ms N` (default 2),
//! `--rcvbuf BYTES` (`SO_RCVBUF` after the connection is up; default 0: autotuned).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use benches::measure;
use bytes::{Bytes, BytesMut};
use cdc_core::{EventKind, Lsn, TableName};
use cdc_pgoutput::changes::{
    AssemblerConfig, ChangeAssembler, MessageFilter, SchemaChangePolicy, TableRouting,
};
use cdc_pgoutput::protocol::pgoutput::{DecoderOptions, ProtocolVersion};
use cdc_pgoutput::protocol::replication::{ClientMessage, ServerMessage, StandbyStatusUpdate};
use cdc_postgres::source::TempFileSpill;

use crate::args::Args;

trait Stream: Read + Write + AsRawFd {}
impl<T: Read + Write + AsRawFd> Stream for T {}

/// The `consume-raw` command: one run of the experimental reader; `key=value` results on
/// stdout.
pub fn main(args: &Args) -> ExitCode {
    match run(args) {
        Ok(lines) => {
            println!("{lines}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("consume-raw failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn frame(tag: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
}

/// Reads one backend message (tag, body) from `buf`, refilling from `stream`.
fn next_message(stream: &mut dyn Stream, buf: &mut BytesMut) -> Result<(u8, Bytes), String> {
    loop {
        if buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() > len {
                let frame = buf.split_to(len + 1).freeze();
                return Ok((frame[0], frame.slice(5..)));
            }
        }
        read_more(stream, buf)?;
    }
}

/// Scratch space of one read (zeroed once; `read` needs initialized memory).
const READ_SIZE: usize = 256 * 1024;

fn read_more(stream: &mut dyn Stream, buf: &mut BytesMut) -> Result<usize, String> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_SIZE]);
    }
    SCRATCH.with_borrow_mut(|scratch| {
        loop {
            match stream.read(scratch) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => {
                    buf.extend_from_slice(&scratch[..n]);
                    return Ok(n);
                }
                // SO_RCVTIMEO expired with nothing queued.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    })
}

fn set_sockopt(fd: i32, level: i32, name: i32, value: &[u8]) -> Result<(), String> {
    // SAFETY: `value` is a valid buffer of the given length for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("setsockopt: {}", std::io::Error::last_os_error()))
    }
}

fn run(args: &Args) -> Result<String, String> {
    let host = args.get("host").unwrap_or("127.0.0.1");
    let port: u16 = args.value("port", 5432)?;
    let slot = args.required("slot")?;
    let end: Lsn = args
        .required("end")?
        .parse()
        .map_err(|e| format!("--end: {e}"))?;
    let binary = args.get("format").unwrap_or("binary") == "binary";
    let lowat: i32 = args.value("lowat", 0)?;
    let rcvbuf: i32 = args.value("rcvbuf", 0)?;
    let timeout_ms: u64 = args.value("timeout-ms", 2)?;

    let mut stream: Box<dyn Stream> = if host.starts_with('/') {
        Box::new(
            std::os::unix::net::UnixStream::connect(format!("{host}/.s.PGSQL.{port}"))
                .map_err(|e| e.to_string())?,
        )
    } else {
        let tcp = std::net::TcpStream::connect((host, port)).map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        Box::new(tcp)
    };
    let mut out = Vec::new();
    let mut startup = Vec::new();
    startup.extend_from_slice(&196_608u32.to_be_bytes());
    for (k, v) in [
        ("user", "postgres"),
        ("database", "postgres"),
        ("replication", "database"),
    ] {
        startup.extend_from_slice(k.as_bytes());
        startup.push(0);
        startup.extend_from_slice(v.as_bytes());
        startup.push(0);
    }
    startup.push(0);
    out.extend_from_slice(&(startup.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(&startup);
    stream.write_all(&out).map_err(|e| e.to_string())?;
    let mut buf = BytesMut::with_capacity(1 << 20);
    loop {
        match next_message(stream.as_mut(), &mut buf)? {
            (b'Z', _) => break,
            (b'E', body) => return Err(format!("login: {}", String::from_utf8_lossy(&body))),
            (b'R', body) if body.get(..4) != Some(&[0, 0, 0, 0][..]) => {
                return Err("only trust authentication is supported".into());
            }
            _ => {}
        }
    }
    let mut options = String::from("\"proto_version\" '1', \"publication_names\" '\"pub\"'");
    if binary {
        options.push_str(", \"binary\" 'true'");
    }
    let query = format!("START_REPLICATION SLOT \"{slot}\" LOGICAL 0/0 ({options})\0");
    out.clear();
    frame(b'Q', query.as_bytes(), &mut out);
    stream.write_all(&out).map_err(|e| e.to_string())?;
    loop {
        match next_message(stream.as_mut(), &mut buf)? {
            (b'W', _) => break,
            (b'E', body) => {
                return Err(format!(
                    "START_REPLICATION: {}",
                    String::from_utf8_lossy(&body)
                ));
            }
            _ => {}
        }
    }
    let fd = stream.as_raw_fd();
    if rcvbuf > 0 {
        set_sockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf.to_ne_bytes())?;
    }
    if lowat > 0 {
        set_sockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            &lowat.to_ne_bytes(),
        )?;
    }
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: libc::suseconds_t::try_from(timeout_ms.max(1) * 1000).unwrap_or(2000),
    };
    // SAFETY: timeval is plain old data; we pass its bytes as the option value.
    let timeout_bytes = unsafe {
        std::slice::from_raw_parts(
            (&timeout as *const libc::timeval).cast::<u8>(),
            std::mem::size_of::<libc::timeval>(),
        )
    };
    set_sockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, timeout_bytes)?;

    let mut assembler = ChangeAssembler::new(AssemblerConfig {
        decoder: DecoderOptions::new(ProtocolVersion::V1),
        routing: TableRouting::tables([TableName::new("public", "bench")]),
        schema_policy: SchemaChangePolicy::Fail,
        messages: MessageFilter::Off,
        stream_memory_limit: 64 << 20,
        spill: TempFileSpill::shared(),
    });
    let started = Instant::now();
    let mut events = Vec::new();
    let (mut changes, mut reads, mut messages) = (0u64, 0u64, 0u64);
    let mut flushed = Lsn::ZERO;
    let mut last_status = Instant::now();
    'stream: loop {
        // Parse every complete frame in the buffer, then read more.
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() <= len {
                break;
            }
            let frame_bytes = buf.split_to(len + 1).freeze();
            match frame_bytes[0] {
                b'd' => {}
                b'c' => break 'stream,
                b'E' => {
                    return Err(format!(
                        "stream: {}",
                        String::from_utf8_lossy(&frame_bytes[5..])
                    ));
                }
                _ => continue,
            }
            messages += 1;
            let mut reply = false;
            match ServerMessage::decode(frame_bytes.slice(5..)).map_err(|e| e.to_string())? {
                ServerMessage::XLogData(data) => {
                    let ended = assembler
                        .process(data.data, &mut events)
                        .map_err(|e| e.to_string())?;
                    changes += events
                        .iter()
                        .filter(|e| {
                            matches!(
                                e.kind,
                                EventKind::Insert { .. }
                                    | EventKind::Update { .. }
                                    | EventKind::Delete { .. }
                            )
                        })
                        .count() as u64;
                    events.clear();
                    if let Some(end_lsn) = ended {
                        flushed = end_lsn;
                        if end_lsn >= end {
                            break 'stream;
                        }
                    }
                }
                ServerMessage::PrimaryKeepalive(k) => {
                    reply = k.reply_requested;
                    if !assembler.in_transaction() && k.wal_end >= end {
                        break 'stream;
                    }
                }
            }
            if reply || last_status.elapsed() > Duration::from_secs(10) {
                let mut body = BytesMut::new();
                ClientMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                    write: flushed,
                    flush: flushed,
                    apply: flushed,
                    client_clock: 0,
                    reply_requested: false,
                })
                .encode(&mut body);
                out.clear();
                frame(b'd', &body, &mut out);
                stream.write_all(&out).map_err(|e| e.to_string())?;
                last_status = Instant::now();
            }
        }
        read_more(stream.as_mut(), &mut buf)?;
        reads += 1;
    }
    let elapsed = started.elapsed();
    let usage = measure::self_usage().map_err(|e| e.to_string())?;
    Ok(format!(
        "changes={changes}\nreads={reads}\nmessages={messages}\nelapsed_us={}\ncpu_us={}\nvmhwm_kib={}",
        elapsed.as_micros(),
        usage.cpu().as_micros(),
        measure::proc_status_kib("VmHWM").unwrap_or(0),
    ))
}
