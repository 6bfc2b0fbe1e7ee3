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
