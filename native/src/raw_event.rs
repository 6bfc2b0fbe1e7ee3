//! Raw events and their keys in Avro binary (schemas/raw_mutation.avsc, schemas/raw_key.avsc): the bytes
//! schemas/raw_event.py's encode_raw_event and encode_raw_key write, and the event's write time
//! (raw_event_write_time).

use crate::digest::bytes_of;
use crate::mutation_decoder::{Catalog, Decoded, Deletion, RowRec, Span, UpdateRec};

pub const RAW_FORMAT: i64 = 1;

#[inline]
pub fn long(out: &mut Vec<u8>, value: i64) {
    let mut z = ((value << 1) ^ (value >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[inline]
pub fn bytes(out: &mut Vec<u8>, data: &[u8]) {
    long(out, data.len() as i64);
    out.extend_from_slice(data);
}

fn deletion(out: &mut Vec<u8>, d: Deletion) {
    long(out, d.ts);
    long(out, d.ldt);
}

fn optional_deletion(out: &mut Vec<u8>, d: Option<Deletion>) {
    match d {
        None => out.push(0),
        Some(d) => {
            out.push(2);
            deletion(out, d);
        }
    }
}

fn clustering(out: &mut Vec<u8>, buf: &[u8], values: &[Option<Span>]) {
    if !values.is_empty() {
        long(out, values.len() as i64);
        for value in values {
            match value {
                None => out.push(0),
                Some(span) => {
                    out.push(2);
                    bytes(out, bytes_of(buf, *span));
                }
            }
        }
    }
    out.push(0);
}

/// Where a raw event comes from (its `source` record) and when it was built.
pub struct SourceInfo<'a> {
    pub cluster: &'a str,
    pub node: &'a str,
    pub segment_id: i64,
    pub descriptor_version: i64,
    pub entry_offset: i64,
    pub position: i64,
    pub published_at_ms: i64,
}

fn row(out: &mut Vec<u8>, buf: &[u8], d: &Decoded, catalog: &Catalog, table: usize, r: &RowRec) {
    let columns = &catalog.tables[table].columns;
    clustering(out, buf, &d.clustering[r.clustering.0 as usize..r.clustering.1 as usize]);
    match r.timestamp {
        None => out.push(0),
        Some(ts) => {
            out.push(2);
            long(out, ts);
            long(out, r.ttl);
            match r.expiration {
                None => out.push(0),
                Some(expiration) => {
                    out.push(2);
                    long(out, expiration);
                }
            }
        }
    }
    optional_deletion(out, r.deletion);
    let complex = &d.complex[r.complex.0 as usize..r.complex.1 as usize];
    if !complex.is_empty() {
        long(out, complex.len() as i64);
        for (column, del) in complex {
            bytes(out, columns[*column as usize].name.as_bytes());
            deletion(out, *del);
        }
    }
    out.push(0);
    let cells = &d.cells[r.cells.0 as usize..r.cells.1 as usize];
    if !cells.is_empty() {
        long(out, cells.len() as i64);
        for cell in cells {
            bytes(out, columns[cell.column as usize].name.as_bytes());
            match cell.path {
                None => out.push(0),
                Some(path) => {
                    out.push(2);
                    bytes(out, bytes_of(buf, path));
                }
            }
            long(out, cell.ts);
            long(out, cell.ttl);
            long(out, cell.ldt);
            long(out, (cell.flags & 0x07) as i64);
            bytes(out, bytes_of(buf, cell.value));
        }
    }
    out.push(0);
}

/// Append the Avro encoding of one raw event to `out`; where in `out` its digest went.
pub fn encode_event(
    out: &mut Vec<u8>,
    buf: &[u8],
    d: &Decoded,
    catalog: &Catalog,
    update: &UpdateRec,
    digest: &[u8; 16],
    source: &SourceInfo,
) -> usize {
    let table = update.table as usize;
    let def = &catalog.tables[table];
    long(out, RAW_FORMAT);
    bytes(out, source.cluster.as_bytes());
    bytes(out, source.node.as_bytes());
    long(out, source.segment_id);
    long(out, source.descriptor_version);
    long(out, source.entry_offset);
    long(out, source.position);
    long(out, source.published_at_ms);
    bytes(out, def.keyspace.as_bytes());
    bytes(out, def.table.as_bytes());
    bytes(out, def.id_text.as_bytes());
    bytes(out, bytes_of(buf, update.key));
    let digest_at = out.len();
    out.extend_from_slice(digest);
    out.push(def.is_counter as u8);
    optional_deletion(out, update.partition_deletion);
    match update.static_row {
        None => out.push(0),
        Some(index) => {
            out.push(2);
            row(out, buf, d, catalog, table, &d.rows[index as usize]);
        }
    }
    let rows = &d.rows[update.rows.0 as usize..update.rows.1 as usize];
    if !rows.is_empty() {
        long(out, rows.len() as i64);
        for r in rows {
            row(out, buf, d, catalog, table, r);
        }
    }
    out.push(0);
    let markers = &d.markers[update.markers.0 as usize..update.markers.1 as usize];
    if !markers.is_empty() {
        long(out, markers.len() as i64);
        for marker in markers {
            long(out, marker.kind as i64);
            clustering(out, buf, &d.clustering[marker.clustering.0 as usize..marker.clustering.1 as usize]);
            deletion(out, marker.deletion);
            optional_deletion(out, marker.start_deletion);
        }
    }
    out.push(0);
    digest_at
}

/// Append the Avro encoding of the raw key (keyspace, table, partition key) to `out`.
pub fn encode_key(out: &mut Vec<u8>, buf: &[u8], catalog: &Catalog, update: &UpdateRec) {
    let def = &catalog.tables[update.table as usize];
    bytes(out, def.keyspace.as_bytes());
    bytes(out, def.table.as_bytes());
    bytes(out, bytes_of(buf, update.key));
}

/// The largest write timestamp in the event: cells, livenesses, deletions (raw_event_write_time).
pub fn write_time(d: &Decoded, update: &UpdateRec) -> i64 {
    let mut best = i64::MIN;
    let mut see = |v: i64| {
        if v > best {
            best = v;
        }
    };
    if let Some(del) = update.partition_deletion {
        see(del.ts);
    }
    let mut rows: Vec<&RowRec> = Vec::new();
    if let Some(index) = update.static_row {
        rows.push(&d.rows[index as usize]);
    }
    rows.extend(d.rows[update.rows.0 as usize..update.rows.1 as usize].iter());
    for r in rows {
        if let Some(del) = r.deletion {
            see(del.ts);
        }
        if let Some(ts) = r.timestamp {
            see(ts);
        }
        for cell in &d.cells[r.cells.0 as usize..r.cells.1 as usize] {
            see(cell.ts);
        }
        for (_, del) in &d.complex[r.complex.0 as usize..r.complex.1 as usize] {
            see(del.ts);
        }
    }
    for marker in &d.markers[update.markers.0 as usize..update.markers.1 as usize] {
        see(marker.deletion.ts);
        if let Some(start) = marker.start_deletion {
            see(start.ts);
        }
    }
    best
}

/// Kafka's murmur2 (the Java client's `Utils.murmur2`, also aiokafka's): the default partitioner's hash.
pub fn murmur2(data: &[u8]) -> u32 {
    let length = data.len();
    let seed: u32 = 0x9747_B28C;
    let m: u32 = 0x5BD1_E995;
    let r = 24;
    let mut h: u32 = seed ^ (length as u32);
    let chunks = length / 4;
    for i in 0..chunks {
        let i4 = i * 4;
        let mut k = u32::from_le_bytes([data[i4], data[i4 + 1], data[i4 + 2], data[i4 + 3]]);
        k = k.wrapping_mul(m);
        k ^= k >> r;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    let tail = chunks * 4;
    let rest = length % 4;
    if rest == 3 {
        h ^= (data[tail + 2] as u32) << 16;
    }
    if rest >= 2 {
        h ^= (data[tail + 1] as u32) << 8;
    }
    if rest >= 1 {
        h ^= data[tail] as u32;
        h = h.wrapping_mul(m);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(m);
    h ^= h >> 15;
    h
}

/// The head of an encoded raw event (schemas/raw_event.py's `peek_raw_event`): keyspace, table and
/// digest, read from the fixed field order of raw_mutation.avsc without decoding the rest. None for
/// anything odd (bytes that end early, a negative length, names that are not UTF-8): the caller hands
/// those to the Python reader, which fails on them with the reason, or follows them its own way.
pub fn head(data: &[u8]) -> Option<(&str, &str, &[u8])> {
    let mut pos = skip_long(data, 0)?; // format
    pos = span(data, pos)?.1; // source.cluster
    pos = span(data, pos)?.1; // source.node
    for _ in 0..5 {
        pos = skip_long(data, pos)?; // source.segment_id .. source.published_at_ms
    }
    let (keyspace, after) = span(data, pos)?;
    let (table, after) = span(data, after)?;
    pos = span(data, after)?.1; // table_id
    pos = span(data, pos)?.1; // partition_key
    let digest = data.get(pos..pos + 16)?;
    Some((std::str::from_utf8(keyspace).ok()?, std::str::from_utf8(table).ok()?, digest))
}

/// Reading position in one event's bytes; every read is None past the end or on an odd value.
pub struct Cursor<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn long(&mut self) -> Option<i64> {
        let (value, after) = varint(self.data, self.pos)?;
        self.pos = after;
        Some(((value >> 1) as i64) ^ -((value & 1) as i64))
    }

    /// An Avro int: a long that fits 32 bits.
    pub fn int(&mut self) -> Option<i64> {
        let value = self.long()?;
        i32::try_from(value).ok()?;
        Some(value)
    }

    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let size = usize::try_from(self.long()?).ok()?;
        let end = self.pos.checked_add(size)?;
        let out = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    pub fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    pub fn fixed(&mut self, size: usize) -> Option<&'a [u8]> {
        let out = self.data.get(self.pos..self.pos + size)?;
        self.pos += size;
        Some(out)
    }

    /// The branch of a two-branch union whose first branch is null: whether the value follows.
    pub fn present(&mut self) -> Option<bool> {
        match self.long()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// The item count of the next block of an array, 0 at its end. A negative count (a block followed
    /// by its size in bytes, which Avro allows) is odd here: the Python reader does not take it.
    pub fn block(&mut self) -> Option<usize> {
        usize::try_from(self.long()?).ok()
    }
}

/// The position after the Avro long at `pos`.
fn skip_long(data: &[u8], mut pos: usize) -> Option<usize> {
    while *data.get(pos)? & 0x80 != 0 {
        pos += 1;
    }
    Some(pos + 1)
}

/// The unsigned varint at `pos` (an Avro long before its zigzag is undone), and the position after it;
/// None past the end or beyond 64 bits.
pub fn varint(data: &[u8], pos: usize) -> Option<(u64, usize)> {
    let mut shift = 0u32;
    let mut value = 0u64;
    let mut at = pos;
    loop {
        let byte = *data.get(at)?;
        at += 1;
        if shift > 63 {
            return None;
        }
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some((value, at));
        }
        shift += 7;
    }
}

/// The Avro string or bytes at `pos`, and the position after it. One length byte is read as the Python
/// reader reads it (its low bit ignored); a longer length must not be negative.
fn span(data: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let first = *data.get(pos)?;
    let (start, size) = if first < 0x80 {
        (pos + 1, (first >> 1) as usize)
    } else {
        let (value, at) = varint(data, pos)?;
        if value & 1 != 0 {
            return None; // a negative length
        }
        (at, usize::try_from(value >> 1).ok()?)
    };
    let end = start.checked_add(size)?;
    Some((data.get(start..end)?, end))
}
