//! A stored row's bytes (state/store/codec.py's `encode_row_value` is the specification): the prefix and
//! the row body of rows whose cells are all simple, the worker's common case. Anything else (complex
//! cells or deletions, a value that does not fit its field) is left to Python, which writes it or names
//! what is wrong.

/// The row body's flags (codec.py `_LIVENESS`...)
pub const LIVENESS: u8 = 1;
pub const LIVENESS_TTL: u8 = 2;
pub const LIVENESS_EXPIRY: u8 = 4;
pub const DELETION: u8 = 8;
/// a cell's head: its flags' bits, then the bit saying TTL and local deletion time follow
pub const CELL_FLAGS: i64 = 0x0F;
pub const CELL_TIMES: u8 = 0x10;
/// Cassandra's "no deletion time" (Integer.MAX_VALUE), the local deletion time of a live cell
pub const NO_DELETION_TIME: i64 = 0x7FFF_FFFF;
pub const VERSION: u8 = 1;

/// One simple cell, as the row holds it.
pub struct SimpleCell<'a> {
    pub name: &'a str,
    pub timestamp: i64,
    pub ttl: i32,
    pub local_deletion_time: i64,
    pub flags: u8,
    pub value: &'a [u8],
}

/// `u8 version | u64 due | u8 clustering count ...`: the start of a row value, up to its flags.
pub fn prefix(out: &mut Vec<u8>, due_s: u64, clustering: &[Option<&[u8]>]) {
    out.push(VERSION);
    out.extend_from_slice(&due_s.to_be_bytes());
    out.push(clustering.len() as u8);
    for value in clustering {
        match value {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }
}

/// The flags byte and the liveness and deletion fields after it.
pub fn head(out: &mut Vec<u8>, liveness: Option<(i64, Option<i32>, Option<i64>)>, deletion: Option<(i64, i64)>) {
    let mut flags = 0u8;
    let at = out.len();
    out.push(0);
    if let Some((timestamp, ttl, expiry)) = liveness {
        flags |= LIVENESS;
        out.extend_from_slice(&timestamp.to_be_bytes());
        if let Some(ttl) = ttl {
            flags |= LIVENESS_TTL;
            out.extend_from_slice(&ttl.to_be_bytes());
            if let Some(expiry) = expiry {
                flags |= LIVENESS_EXPIRY;
                out.extend_from_slice(&expiry.to_be_bytes());
            }
        }
    }
    if let Some((timestamp, ldt)) = deletion {
        flags |= DELETION;
        out.extend_from_slice(&timestamp.to_be_bytes());
        out.extend_from_slice(&ldt.to_be_bytes());
    }
    out[at] = flags;
}

/// The simple cells, in the order of their names (`cells` sorted by the caller).
pub fn cells(out: &mut Vec<u8>, cells: &[SimpleCell<'_>]) {
    out.extend_from_slice(&(cells.len() as u32).to_be_bytes());
    for cell in cells {
        out.extend_from_slice(&(cell.name.len() as u16).to_be_bytes());
        out.extend_from_slice(cell.name.as_bytes());
        if cell.ttl == 0 && cell.local_deletion_time == NO_DELETION_TIME {
            out.push(cell.flags);
            out.extend_from_slice(&cell.timestamp.to_be_bytes());
        } else {
            out.push(cell.flags | CELL_TIMES);
            out.extend_from_slice(&cell.timestamp.to_be_bytes());
            out.extend_from_slice(&cell.ttl.to_be_bytes());
            out.extend_from_slice(&cell.local_deletion_time.to_be_bytes());
        }
        out.extend_from_slice(&(cell.value.len() as u32).to_be_bytes());
        out.extend_from_slice(cell.value);
    }
}

/// The row body's flag saying complex columns or complex deletions follow (codec.py `_COMPLEX`)
pub const COMPLEX: u8 = 16;
/// a cell's head bits saying a path, or an element key, follows (a complex column's element)
pub const CELL_PATH: u8 = 0x20;
pub const CELL_KEY: u8 = 0x40;

/// A stored row of simple cells, its fields borrowed from the value's bytes.
pub struct StoredRow<'a> {
    pub clustering: Vec<Option<&'a [u8]>>,
    /// timestamp, TTL (0: none), local expiration time
    pub liveness: Option<(i64, i32, Option<i64>)>,
    /// timestamp, local deletion time
    pub deletion: Option<(i64, i64)>,
    /// in stored order: sorted by name, each once
    pub cells: Vec<SimpleCell<'a>>,
}

/// Reads the value front to back; every read checks the bounds.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// A stored row value as `decode_row_value` reads it, for rows of simple cells. None where Python must
/// read it: another format version, complex columns or deletions, a cell with a path, or bytes that are
/// truncated, damaged or run on past the row (Python names what is wrong).
pub fn parse(data: &[u8]) -> Option<StoredRow<'_>> {
    let mut r = Reader { data, pos: 0 };
    if r.u8()? != VERSION {
        return None;
    }
    r.take(8)?; // the due second: stored_due reads it
    let count = r.u8()?;
    let mut clustering = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let size = r.i32()?;
        clustering.push(if size < 0 { None } else { Some(r.take(size as usize)?) });
    }
    let flags = r.u8()?;
    if flags & COMPLEX != 0 {
        return None;
    }
    let mut liveness = None;
    if flags & LIVENESS != 0 {
        let timestamp = r.i64()?;
        let mut ttl = 0;
        let mut expiry = None;
        if flags & LIVENESS_TTL != 0 {
            ttl = r.i32()?;
            if flags & LIVENESS_EXPIRY != 0 {
                expiry = Some(r.i64()?);
            }
        }
        liveness = Some((timestamp, ttl, expiry));
    }
    let mut deletion = None;
    if flags & DELETION != 0 {
        deletion = Some((r.i64()?, r.i64()?));
    }
    let count = r.u32()?;
    let mut cells: Vec<SimpleCell<'_>> = Vec::with_capacity((count as usize).min(data.len() / 16));
    for _ in 0..count {
        let size = r.u16()? as usize;
        let name = std::str::from_utf8(r.take(size)?).ok()?;
        let head = r.u8()?;
        if head & (CELL_PATH | CELL_KEY) != 0 {
            return None;
        }
        let timestamp = r.i64()?;
        let (ttl, local_deletion_time) =
            if head & CELL_TIMES != 0 { (r.i32()?, r.i64()?) } else { (0, NO_DELETION_TIME) };
        let size = r.u32()? as usize;
        let value = r.take(size)?;
        let cell = SimpleCell { name, timestamp, ttl, local_deletion_time, flags: head & CELL_FLAGS as u8, value };
        // written in order, each name once; anything else is not a value this code wrote
        if let Some(last) = cells.last() {
            if last.name.as_bytes() >= name.as_bytes() {
                return None;
            }
        }
        cells.push(cell);
    }
    if r.pos != data.len() {
        return None;
    }
    Some(StoredRow { clustering, liveness, deletion, cells })
}
