//! A raw event's Avro bytes (schemas/raw_mutation.avsc) read for the whole-event merge (row_merge.rs)
//! straight from the bytes, without the dict raw_event_dict.rs builds: the worker's common event is
//! merged from its record's value, and only the events the merge cannot take are decoded.
//!
//! Only an event of plain rows is read: no partition deletion, static row, range deletion or counter;
//! rows without a deletion or a deletion of a collection, each with a liveness without TTL (or none)
//! and cells that are neither tombstones nor expiring nor elements of a collection (no path). These are
//! the events `TableMerge.merge` takes from their prepared rows (lib.rs's `event_row`), so both paths
//! merge the same events the same way. Anything else, odd bytes included, is None: the caller decodes
//! the event as before, and the Python reader names what is wrong with it.

use crate::raw_event::{Cursor, RAW_FORMAT};

/// One cell of a plain row: its column, timestamp and value.
pub struct PlainCell<'a> {
    pub column: &'a str,
    pub timestamp: i64,
    pub value: &'a [u8],
}

/// One row of a plain event: its clustering values (None: null), its liveness's timestamp, its cells.
pub struct PlainRow<'a> {
    pub clustering: Vec<Option<&'a [u8]>>,
    pub liveness: Option<i64>,
    pub cells: Vec<PlainCell<'a>>,
}

/// What the merge needs of a plain event.
pub struct PlainEvent<'a> {
    pub node: &'a str,
    pub segment_id: i64,
    pub entry_offset: i64,
    pub table_id: &'a str,
    pub partition_key: &'a [u8],
    pub rows: Vec<PlainRow<'a>>,
}

/// An Avro array that must be empty: its first block count is 0.
fn empty_array(c: &mut Cursor<'_>) -> Option<()> {
    (c.block()? == 0).then_some(())
}

fn row<'a>(c: &mut Cursor<'a>) -> Option<PlainRow<'a>> {
    let mut clustering = Vec::new();
    loop {
        let count = c.block()?;
        if count == 0 {
            break;
        }
        for _ in 0..count {
            clustering.push(if c.present()? { Some(c.bytes()?) } else { None });
        }
    }
    if clustering.len() > 255 || clustering.iter().flatten().any(|v| v.len() > i32::MAX as usize) {
        return None; // a clustering a stored row cannot hold: the Python merge writes or refuses it
    }
    let liveness = if c.present()? {
        let timestamp = c.long()?;
        let ttl = c.int()?;
        if c.present()? {
            c.long()?; // its expiration: none without a TTL, and not part of a row without one
        }
        if ttl != 0 {
            return None;
        }
        Some(timestamp)
    } else {
        None
    };
    if c.present()? {
        return None; // a row deletion
    }
    empty_array(c)?; // deletions of collections
    let mut cells = Vec::new();
    loop {
        let count = c.block()?;
        if count == 0 {
            break;
        }
        for _ in 0..count {
            let column = c.text()?;
            if c.present()? {
                return None; // an element of a collection
            }
            let timestamp = c.long()?;
            c.int()?; // ttl
            c.long()?; // local deletion time
            let flags = c.int()?;
            let value = c.bytes()?;
            if flags & 0x03 != 0 || value.len() > u32::MAX as usize {
                return None; // a tombstone or an expiring cell
            }
            cells.push(PlainCell { column, timestamp, value });
        }
    }
    Some(PlainRow { clustering, liveness, cells })
}

/// The plain event in `data`, or None (see the module).
pub fn read(data: &[u8]) -> Option<PlainEvent<'_>> {
    let mut c = Cursor { data, pos: 0 };
    if c.int()? != RAW_FORMAT {
        return None;
    }
    c.text()?; // source.cluster
    let node = c.text()?;
    let segment_id = c.long()?;
    c.int()?; // source.descriptor_version
    let entry_offset = c.long()?;
    c.long()?; // source.position
    c.long()?; // source.published_at_ms
    c.text()?; // keyspace
    c.text()?; // table
    let table_id = c.text()?;
    let partition_key = c.bytes()?;
    c.fixed(16)?; // digest
    if *c.data.get(c.pos)? != 0 {
        return None; // a counter update (or no boolean)
    }
    c.pos += 1;
    if c.present()? {
        return None; // a partition deletion
    }
    if c.present()? {
        return None; // a static row
    }
    let mut rows = Vec::new();
    loop {
        let count = c.block()?;
        if count == 0 {
            break;
        }
        for _ in 0..count {
            rows.push(row(&mut c)?);
        }
    }
    empty_array(&mut c)?; // range deletions
    if c.pos != data.len() {
        return None;
    }
    Some(PlainEvent { node, segment_id, entry_offset, table_id, partition_key, rows })
}
