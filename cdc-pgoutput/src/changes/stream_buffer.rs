//! In-progress streamed transactions (pgoutput protocol v2+ `streaming`): their messages
//! are held per transaction up to a memory bound and spilled to the caller's
//! [`super::SpillStorage`] beyond it, until Stream Commit releases them or Stream Abort drops them (also for aborted
//! subtransactions).
//!
//! Entries are raw pgoutput message payloads, exactly as received, so spilling is a plain
//! length-prefixed append and replay decodes them again.
//!
//! Entries are copied into per-transaction blocks rather than kept as slices of the receive
//! buffer: a slice would pin its whole receive chunk (hundreds of KiB, mostly other
//! messages), so the memory bound would count a fraction of what is really held. With the
//! copy, what is held exceeds the count by at most one partly filled block per transaction
//! and under 2% of each full block (entries over 1 KiB get allocations of their own, so a
//! block's unused end is smaller than that). A subtransaction abort that cuts through a
//! block copies the block's kept entries to a fresh one, so dropped entries never stay
//! pinned by kept ones.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};

use bytes::{Bytes, BytesMut};

use super::spill::{SharedSpillStorage, SpillFile};

/// Size of the blocks entries are copied into.
const BLOCK_SIZE: usize = 64 * 1024;
/// Entries larger than this get an allocation of their own instead of a block's tail.
const OWN_ALLOCATION_ABOVE: usize = 1024;

/// Buffers of all in-progress streamed transactions.
#[derive(Debug)]
pub struct StreamBuffers {
    memory_limit: usize,
    memory_used: usize,
    txs: HashMap<u32, TxBuffer>,
    storage: SharedSpillStorage,
}

#[derive(Debug, Default)]
struct TxBuffer {
    /// Entries `spilled_count..` kept in memory, in order.
    memory: Vec<Bytes>,
    memory_bytes: usize,
    /// Unused tail of the block the next small entry is copied into.
    block: BytesMut,
    /// Indexes into `memory` of the first entry of each block its entries use, ascending.
    block_starts: Vec<usize>,
    /// Entries `0..spilled_count`, in the spill store.
    spill: Option<Spill>,
    spilled_count: u64,
    /// Subtransactions in order of their first change.
    subxacts: Vec<SubxactStart>,
}

#[derive(Debug)]
struct Spill {
    writer: BufWriter<Box<dyn SpillFile>>,
    len: u64,
}

#[derive(Debug, Clone, Copy)]
struct SubxactStart {
    subxid: u32,
    /// Index of the subtransaction's first entry.
    index: u64,
    /// Byte offset of that entry in the spill file, once spilled.
    file_offset: Option<u64>,
}

/// The entries of a committed streamed transaction, in order: spilled ones are read back
/// from their file as the iterator advances, so memory stays bounded.
#[derive(Debug)]
pub struct Replay {
    file: Option<BufReader<Box<dyn SpillFile>>>,
    file_remaining: u64,
    memory: std::vec::IntoIter<Bytes>,
}

impl Iterator for Replay {
    type Item = io::Result<Bytes>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.file_remaining > 0
            && let Some(file) = self.file.as_mut()
        {
            self.file_remaining -= 1;
            return Some(read_entry(file));
        }
        self.memory.next().map(Ok)
    }
}

impl TxBuffer {
    /// Appends a compact copy of `payload` to `memory`: small entries share 64 KiB
    /// blocks, so a block is held only by entries of this transaction and the allocation
    /// count stays low.
    fn push_copy(&mut self, payload: &[u8]) {
        self.push_parts(&[], payload);
    }

    /// [`Self::push_copy`] of `prefix` followed by `payload`, as one entry.
    fn push_parts(&mut self, prefix: &[u8], payload: &[u8]) {
        let len = prefix.len() + payload.len();
        let entry = if len > OWN_ALLOCATION_ABOVE {
            let mut own = BytesMut::with_capacity(len);
            own.extend_from_slice(prefix);
            own.extend_from_slice(payload);
            own.freeze()
        } else {
            if self.block.capacity() < len {
                self.block = BytesMut::with_capacity(BLOCK_SIZE);
                self.block_starts.push(self.memory.len());
            }
            self.block.extend_from_slice(prefix);
            self.block.extend_from_slice(payload);
            self.block.split().freeze()
        };
        self.memory.push(entry);
    }

    /// Drops the in-memory entries `keep..`, returning their counted size. Kept entries
    /// that share a block with dropped ones are copied to a fresh block (at most one
    /// block's worth), so the dropped bytes are freed rather than pinned.
    fn truncate_memory(&mut self, keep: usize) -> usize {
        let keep = keep.min(self.memory.len());
        let dropped: usize = self
            .memory
            .drain(keep..)
            .map(|e| e.len() + std::mem::size_of::<Bytes>())
            .sum();
        self.block = BytesMut::new();
        self.block_starts.retain(|&start| start < keep);
        if let Some(shared) = self.block_starts.pop() {
            let kept_in_shared: Vec<Bytes> = self.memory.drain(shared..).collect();
            for entry in &kept_in_shared {
                self.push_copy(entry);
            }
        }
        dropped
    }
}

fn read_entry(file: &mut BufReader<Box<dyn SpillFile>>) -> io::Result<Bytes> {
    let mut len = [0u8; 4];
    file.read_exact(&mut len)?;
    let mut data = vec![0u8; u32::from_le_bytes(len) as usize];
    file.read_exact(&mut data)?;
    Ok(Bytes::from(data))
}

impl StreamBuffers {
    /// Buffers that keep at most about `memory_limit` bytes in memory across all
    /// transactions, spilling the largest transaction to `storage` beyond it.
    pub fn new(memory_limit: usize, storage: SharedSpillStorage) -> Self {
        StreamBuffers {
            memory_limit,
            memory_used: 0,
            txs: HashMap::new(),
            storage,
        }
    }

    /// Where transactions spill (kept across sessions).
    pub fn storage(&self) -> &SharedSpillStorage {
        &self.storage
    }

    /// The memory limit given at construction.
    pub fn limit(&self) -> usize {
        self.memory_limit
    }

    /// Bytes currently held in memory.
    pub fn memory_used(&self) -> usize {
        self.memory_used
    }

    /// Bytes written to spill files by the transactions still held.
    pub fn spilled_bytes(&self) -> u64 {
        self.txs
            .values()
            .filter_map(|tx| tx.spill.as_ref())
            .map(|s| s.len)
            .sum()
    }

    /// Number of in-progress transactions.
    pub fn len(&self) -> usize {
        self.txs.len()
    }

    /// Whether no transaction is in progress.
    pub fn is_empty(&self) -> bool {
        self.txs.is_empty()
    }

    /// Appends (a copy of) one message of transaction `xid`; `sub_xid` is the
    /// (sub)transaction id the message carried.
    pub fn push(&mut self, xid: u32, sub_xid: u32, payload: &[u8]) -> io::Result<()> {
        self.push_parts(xid, sub_xid, &[], payload)
    }

    /// [`Self::push`] of an entry made of `prefix` then `payload` (the assembler keeps
    /// each message's WAL position in front of it).
    pub fn push_parts(
        &mut self,
        xid: u32,
        sub_xid: u32,
        prefix: &[u8],
        payload: &[u8],
    ) -> io::Result<()> {
        let tx = self.txs.entry(xid).or_default();
        let index = tx.spilled_count + tx.memory.len() as u64;
        if sub_xid != xid && !tx.subxacts.iter().any(|s| s.subxid == sub_xid) {
            tx.subxacts.push(SubxactStart {
                subxid: sub_xid,
                index,
                file_offset: None,
            });
        }
        let size = prefix.len() + payload.len() + std::mem::size_of::<Bytes>();
        tx.memory_bytes += size;
        tx.push_parts(prefix, payload);
        self.memory_used += size;
        while self.memory_used > self.memory_limit {
            let Some((&largest, _)) = self
                .txs
                .iter()
                .filter(|(_, t)| t.memory_bytes > 0)
                .max_by_key(|(_, t)| t.memory_bytes)
            else {
                break;
            };
            self.spill(largest)?;
        }
        Ok(())
    }

    fn spill(&mut self, xid: u32) -> io::Result<()> {
        let Some(tx) = self.txs.get_mut(&xid) else {
            return Ok(());
        };
        if tx.spill.is_none() {
            tx.spill = Some(Spill {
                writer: BufWriter::with_capacity(256 << 10, self.storage.create()?),
                len: 0,
            });
        }
        let Some(spill) = tx.spill.as_mut() else {
            return Ok(());
        };
        let mut written = 0u64;
        // Taking the Vec (not draining it) also frees its capacity, which is not counted.
        for entry in std::mem::take(&mut tx.memory) {
            let index = tx.spilled_count + written;
            for s in tx.subxacts.iter_mut().filter(|s| s.index == index) {
                s.file_offset = Some(spill.len);
            }
            let len = u32::try_from(entry.len())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "message over 4 GiB"))?;
            spill.writer.write_all(&len.to_le_bytes())?;
            spill.writer.write_all(&entry)?;
            spill.len += 4 + entry.len() as u64;
            written += 1;
        }
        tx.spilled_count += written;
        self.memory_used -= tx.memory_bytes;
        tx.memory_bytes = 0;
        // The spilled entries are gone; dropping the block tail frees their last block.
        tx.block = BytesMut::new();
        tx.block_starts.clear();
        Ok(())
    }

    /// Drops the whole transaction `xid` (Stream Abort of the top-level transaction).
    pub fn abort(&mut self, xid: u32) {
        if let Some(tx) = self.txs.remove(&xid) {
            self.memory_used -= tx.memory_bytes;
        }
    }

    /// Drops subtransaction `sub_xid` of `xid`: its changes and everything after its first
    /// change, as Postgres's own apply worker does.
    pub fn abort_subtransaction(&mut self, xid: u32, sub_xid: u32) -> io::Result<()> {
        let Some(tx) = self.txs.get_mut(&xid) else {
            return Ok(());
        };
        let Some(pos) = tx.subxacts.iter().position(|s| s.subxid == sub_xid) else {
            // A subtransaction without changes: nothing to drop.
            return Ok(());
        };
        let start = tx.subxacts[pos];
        tx.subxacts.truncate(pos);
        if start.index >= tx.spilled_count {
            let keep = (start.index - tx.spilled_count) as usize;
            let dropped = tx.truncate_memory(keep);
            tx.memory_bytes -= dropped;
            self.memory_used -= dropped;
        } else {
            // The cut is inside the file: drop the in-memory tail and truncate the file.
            self.memory_used -= tx.memory_bytes;
            tx.memory.clear();
            tx.memory_bytes = 0;
            tx.block = BytesMut::new();
            tx.block_starts.clear();
            if let (Some(spill), Some(offset)) = (tx.spill.as_mut(), start.file_offset) {
                spill.writer.flush()?;
                spill.writer.get_mut().truncate(offset)?;
                spill.writer.seek(SeekFrom::Start(offset))?;
                spill.len = offset;
            }
            tx.spilled_count = start.index;
        }
        Ok(())
    }

    /// Removes transaction `xid` and returns its entries in order (empty if unknown).
    pub fn take(&mut self, xid: u32) -> io::Result<Replay> {
        // A transaction that spilled is replayed from its file first; entries still in
        // memory would sit idle through that whole replay, next to the batches it feeds
        // the sink. One more sequential write lets the release hold only the file reader.
        if self
            .txs
            .get(&xid)
            .is_some_and(|tx| tx.spill.is_some() && !tx.memory.is_empty())
        {
            self.spill(xid)?;
        }
        let Some(tx) = self.txs.remove(&xid) else {
            return Ok(Replay {
                file: None,
                file_remaining: 0,
                memory: Vec::new().into_iter(),
            });
        };
        self.memory_used -= tx.memory_bytes;
        let file = match tx.spill {
            Some(spill) => {
                let mut file = spill.writer.into_inner().map_err(|e| e.into_error())?;
                file.seek(SeekFrom::Start(0))?;
                Some(BufReader::with_capacity(256 << 10, file))
            }
            None => None,
        };
        Ok(Replay {
            file,
            file_remaining: tx.spilled_count,
            memory: tx.memory.into_iter(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::spill::MemorySpill;

    fn entry(n: u32) -> Bytes {
        Bytes::from(n.to_le_bytes().repeat(8))
    }

    fn collect(replay: Replay) -> Vec<u32> {
        replay
            .map(|e| {
                let e = e.unwrap();
                u32::from_le_bytes([e[0], e[1], e[2], e[3]])
            })
            .collect()
    }

    #[test]
    fn keeps_order_across_spills_and_stays_under_the_limit() {
        let mut buffers = StreamBuffers::new(500, MemorySpill::shared());
        for n in 0..1000 {
            buffers.push(1, 1, &entry(n)).unwrap();
            buffers.push(2, 2, &entry(n + 5000)).unwrap();
            assert!(buffers.memory_used() <= 500 + 32 + 8 * 4);
        }
        assert_eq!(
            collect(buffers.take(1).unwrap()),
            (0..1000).collect::<Vec<_>>()
        );
        assert_eq!(
            collect(buffers.take(2).unwrap()),
            (5000..6000).collect::<Vec<_>>()
        );
        assert_eq!(buffers.memory_used(), 0);
        assert!(buffers.is_empty());
    }

    #[test]
    fn subtransaction_abort_drops_it_and_what_follows_in_memory_and_on_disk() {
        for limit in [usize::MAX, 200] {
            let mut buffers = StreamBuffers::new(limit, MemorySpill::shared());
            for n in 0..10 {
                buffers.push(1, 1, &entry(n)).unwrap();
            }
            for n in 10..20 {
                buffers.push(1, 7, &entry(n)).unwrap();
            }
            for n in 20..25 {
                buffers.push(1, 8, &entry(n)).unwrap();
            }
            buffers.abort_subtransaction(1, 8).unwrap();
            buffers.abort_subtransaction(1, 99).unwrap();
            buffers.push(1, 1, &entry(30)).unwrap();
            buffers.abort_subtransaction(1, 7).unwrap();
            buffers.push(1, 1, &entry(31)).unwrap();
            let mut expected: Vec<u32> = (0..10).collect();
            expected.push(31);
            assert_eq!(collect(buffers.take(1).unwrap()), expected, "limit {limit}");
        }
    }

    #[test]
    fn abort_drops_everything() {
        let mut buffers = StreamBuffers::new(100, MemorySpill::shared());
        for n in 0..50 {
            buffers.push(3, 3, &entry(n)).unwrap();
        }
        buffers.abort(3);
        assert_eq!(buffers.memory_used(), 0);
        assert!(collect(buffers.take(3).unwrap()).is_empty());
    }

    #[test]
    fn entries_are_copies_that_do_not_hold_the_receive_buffer() {
        // A receive chunk with one small message in it, as the stream hands them over.
        let chunk = Bytes::from(vec![7u8; 256 * 1024]);
        let message = chunk.slice(1000..1100);
        let large = chunk.slice(0..(OWN_ALLOCATION_ABOVE + 1));
        let mut buffers = StreamBuffers::new(usize::MAX, MemorySpill::shared());
        buffers.push(1, 1, &message).unwrap();
        buffers.push(1, 1, &large).unwrap();
        let chunk_range = chunk.as_ptr_range();
        let replayed: Vec<Bytes> = buffers.take(1).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(replayed, vec![message, large]);
        for entry in &replayed {
            assert!(
                !chunk_range.contains(&entry.as_ptr()),
                "entry still points into the chunk"
            );
        }
    }

    #[test]
    fn a_spilled_transaction_is_released_entirely_from_its_file() {
        let mut buffers = StreamBuffers::new(500, MemorySpill::shared());
        for n in 0..100 {
            buffers.push(1, 1, &entry(n)).unwrap();
        }
        assert!(
            buffers.memory_used() > 0,
            "the last entries are still in memory"
        );
        let replay = buffers.take(1).unwrap();
        assert_eq!(replay.memory.len(), 0);
        assert_eq!(replay.file_remaining, 100);
        assert_eq!(collect(replay), (0..100).collect::<Vec<_>>());

        // A transaction that never spilled is released from memory, with no file.
        buffers.push(2, 2, &entry(7)).unwrap();
        let replay = buffers.take(2).unwrap();
        assert!(replay.file.is_none());
        assert_eq!(collect(replay), vec![7]);
    }

    #[test]
    fn a_subtransaction_abort_does_not_leave_its_bytes_pinned_by_kept_entries() {
        let mut buffers = StreamBuffers::new(usize::MAX, MemorySpill::shared());
        for cycle in 0..3u32 {
            // A kept top-level change, then a subtransaction in the same block, rolled back.
            buffers.push(1, 1, &entry(cycle)).unwrap();
            for n in 0..100 {
                buffers.push(1, 100 + cycle, &entry(1000 + n)).unwrap();
            }
            let tx = &buffers.txs[&1];
            let dropped = tx.memory[tx.memory.len() - 1].clone();
            buffers.abort_subtransaction(1, 100 + cycle).unwrap();
            assert!(
                dropped.is_unique(),
                "cycle {cycle}: a kept entry still shares the aborted entries' block"
            );
        }
        assert_eq!(
            buffers.memory_used(),
            3 * (32 + std::mem::size_of::<Bytes>())
        );
        assert_eq!(collect(buffers.take(1).unwrap()), vec![0, 1, 2]);
    }
}
