//! One commit-log entry (a serialized Mutation, MS 10-14) into partition updates:
//! agents/commitlog/mutation_decoder.py, step for step, into flat arenas instead of Python objects.
//!
//! Values stay where they are: every key, clustering value, path and cell value is a range of the entry's
//! bytes. An entry decodes to `Outcome::Updates` only when the Python decoder would return the same
//! updates; every other outcome (an unknown table or column, malformed bytes, a table the caller decodes
//! itself, a timestamp past the 64-bit range) hands the entry back to the Python decoder, which then
//! raises or reports exactly as it always has.

use std::collections::HashMap;
use std::sync::Arc;

pub const TIMESTAMP_EPOCH: i64 = 1_442_880_000_000_000;
pub const DELETION_TIME_EPOCH: i64 = 1_442_880_000;
pub const NO_DELETION_TIME: i64 = (1 << 31) - 1;
const LIVE: i64 = i64::MIN;

const PU_IS_EMPTY: u8 = 0x01;
const PU_HAS_PARTITION_DELETION: u8 = 0x04;
const PU_HAS_STATIC_ROW: u8 = 0x08;
const PU_HAS_ROW_ESTIMATE: u8 = 0x10;
const END_OF_PARTITION: u8 = 0x01;
const IS_MARKER: u8 = 0x02;
const HAS_TIMESTAMP: u8 = 0x04;
const HAS_TTL: u8 = 0x08;
const HAS_DELETION: u8 = 0x10;
const HAS_ALL_COLUMNS: u8 = 0x20;
const HAS_COMPLEX_DELETION: u8 = 0x40;
const EXTENSION_FLAG: u8 = 0x80;
const IS_STATIC: u8 = 0x01;
const HAS_SHADOWABLE_DELETION: u8 = 0x02;
const IS_DELETED: u8 = 0x01;
const IS_EXPIRING: u8 = 0x02;
const HAS_EMPTY_VALUE: u8 = 0x04;
const USE_ROW_TIMESTAMP: u8 = 0x08;
const USE_ROW_TTL: u8 = 0x10;
const HEADER_CACHE_LIMIT: usize = 512;

/// What the caller does with a table's updates.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// encode and publish
    Publish,
    /// decode (the entry must still be valid) but publish nothing: a table that is not captured
    Skip,
    /// the Python decoder handles any entry that touches it (e.g. system_schema: the agent reloads)
    Python,
}

pub struct ColumnDef {
    pub name: String,
    pub complex: bool,
    /// commit-log value length when written without a length prefix, or -1
    pub fixed: i64,
    /// when a column of this name was last dropped (µs): cells at or before it are discarded
    pub dropped: Option<i64>,
}

pub struct TableDef {
    pub id: [u8; 16],
    pub id_text: String,
    pub keyspace: String,
    pub table: String,
    pub is_counter: bool,
    pub mode: Mode,
    pub clustering_fixed: Vec<i64>,
    pub columns: Vec<ColumnDef>,
    pub by_name: HashMap<Vec<u8>, usize>,
}

/// Tables by their 16 id bytes: the current definition of every id the Python catalog knows.
pub struct Catalog {
    pub tables: Vec<TableDef>,
    pub by_id: HashMap<[u8; 16], usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deletion {
    pub ts: i64,
    pub ldt: i64,
}

pub type Span = (u32, u32);

pub struct CellRec {
    pub column: u32,
    pub flags: u8,
    pub ts: i64,
    pub ttl: i64,
    pub ldt: i64,
    pub path: Option<Span>,
    pub value: Span,
}

pub struct RowRec {
    pub clustering: Span,
    pub timestamp: Option<i64>,
    pub ttl: i64,
    pub expiration: Option<i64>,
    pub deletion: Option<Deletion>,
    pub cells: Span,
    pub complex: Span,
    pub is_static: bool,
    pub shadowable: bool,
}

pub struct MarkerRec {
    pub kind: u8,
    pub clustering: Span,
    pub deletion: Deletion,
    pub start_deletion: Option<Deletion>,
}

pub struct UpdateRec {
    pub table: u32,
    pub key: Span,
    pub partition_deletion: Option<Deletion>,
    pub static_row: Option<u32>,
    pub rows: Span,
    pub markers: Span,
}

/// The decoded updates of one entry; spans index the entry's bytes or these vectors.
#[derive(Default)]
pub struct Decoded {
    pub updates: Vec<UpdateRec>,
    pub rows: Vec<RowRec>,
    pub cells: Vec<CellRec>,
    pub clustering: Vec<Option<Span>>,
    pub complex: Vec<(u32, Deletion)>,
    pub markers: Vec<MarkerRec>,
}

impl Decoded {
    fn clear(&mut self) {
        self.updates.clear();
        self.rows.clear();
        self.cells.clear();
        self.clustering.clear();
        self.complex.clear();
        self.markers.clear();
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// every update decoded, none of a `Mode::Python` table
    Updates,
    UnknownTable([u8; 16]),
    UnknownColumn { table: u32, column: String },
    /// the Python decoder raises MutationDecodeError for these bytes
    Malformed,
    /// decoded, but a `Mode::Python` table is among the updates
    PythonTable,
    /// a value the Python decoder keeps as an unbounded integer (a timestamp past 2^63)
    OutOfRange,
}

enum Fail {
    Malformed,
    OutOfRange,
    UnknownTable([u8; 16]),
    UnknownColumn { table: u32, column: String },
}

type R<T> = Result<T, Fail>;

/// A resolved column of a header: (column index, complex, fixed length or -1, dropped time)
#[derive(Clone, Copy)]
struct HeaderColumn {
    column: u32,
    complex: bool,
    fixed: i64,
    dropped: Option<i64>,
}

struct Header {
    columns: Vec<HeaderColumn>,
    subsets: HashMap<u64, Arc<Vec<HeaderColumn>>>,
    all: Arc<Vec<HeaderColumn>>,
}

/// Per-reader caches of resolved column headers (the Python decoder keeps them per TableSchema).
#[derive(Default)]
pub struct Decoder {
    headers: HashMap<(u32, bool, Vec<u8>), usize>,
    arena: Vec<Header>,
    /// per table and header kind (index 2 * table + static): the raw bytes of the last header seen
    last: Vec<Option<(Vec<u8>, usize)>>,
    /// the last table id looked up, and its index
    last_table: Option<([u8; 16], usize)>,
    pub out: Decoded,
}

#[inline]
fn uvint(buf: &[u8], pos: usize) -> R<(u64, usize)> {
    let first = *buf.get(pos).ok_or(Fail::Malformed)?;
    if first < 0x80 {
        return Ok((first as u64, pos + 1));
    }
    let extra = (!first).leading_zeros() as usize;
    let end = pos + 1 + extra;
    if end > buf.len() {
        return Err(Fail::Malformed);
    }
    let mut value: u64 = if extra < 8 { (first & (0xFFu8 >> extra)) as u64 } else { 0 };
    for b in &buf[pos + 1..end] {
        value = (value << 8) | *b as u64;
    }
    Ok((value, end))
}

#[inline]
fn byte(buf: &[u8], pos: usize) -> R<u8> {
    buf.get(pos).copied().ok_or(Fail::Malformed)
}

/// A length-prefixed or fixed-length value: one byte covers most lengths.
#[inline]
fn span(buf: &[u8], pos: usize, length: u64) -> R<(Span, usize)> {
    let end = (pos as u64).checked_add(length).ok_or(Fail::Malformed)?;
    if end > buf.len() as u64 {
        return Err(Fail::Malformed);
    }
    Ok(((pos as u32, end as u32), end as usize))
}

#[inline]
fn s32(v: u64) -> i64 {
    v as u32 as i32 as i64
}

#[inline]
fn ldt(min_ldt: i64, v: u64) -> i64 {
    let mut value = min_ldt + s32(v);
    if !(0..=0xFFFF_FFFF).contains(&value) {
        value &= 0xFFFF_FFFF;
    }
    value
}

#[inline]
fn ttl(min_ttl: i64, v: u64) -> i64 {
    (min_ttl + s32(v)) as i32 as i64
}

struct Stats {
    min_ts: i64,
    min_ldt: i64,
    min_ttl: i64,
}

#[inline]
fn read_deletion(buf: &[u8], pos: usize, st: &Stats) -> R<(Deletion, usize)> {
    let (v, pos) = uvint(buf, pos)?;
    let ts = st.min_ts.wrapping_add(v as i64);
    let (v, pos) = uvint(buf, pos)?;
    Ok((Deletion { ts, ldt: ldt(st.min_ldt, v) }, pos))
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Forget cached headers (the catalog they were resolved against changed).
    pub fn reset(&mut self) {
        self.headers.clear();
        self.arena.clear();
        self.last.clear();
        self.last_table = None;
    }

    /// Decode one entry into `self.out` (cleared first).
    pub fn decode(&mut self, buf: &[u8], catalog: &Catalog, version: i64) -> Outcome {
        self.out.clear();
        if !(10..=14).contains(&version) || buf.len() >= u32::MAX as usize {
            return Outcome::Malformed;
        }
        match self.decode_updates(buf, catalog, version) {
            Ok(python) => {
                if python {
                    Outcome::PythonTable
                } else {
                    Outcome::Updates
                }
            }
            Err(Fail::Malformed) => Outcome::Malformed,
            Err(Fail::OutOfRange) => Outcome::OutOfRange,
            Err(Fail::UnknownTable(id)) => Outcome::UnknownTable(id),
            Err(Fail::UnknownColumn { table, column }) => Outcome::UnknownColumn { table, column },
        }
    }

    fn decode_updates(&mut self, buf: &[u8], catalog: &Catalog, version: i64) -> R<bool> {
        let (count, mut pos) = uvint(buf, 0)?;
        if count == 0 {
            return Err(Fail::Malformed);
        }
        let mut python = false;
        let mut index = 0u64;
        while index < count {
            let (next, is_python) = self.decode_update(buf, pos, catalog, version)?;
            pos = next;
            python |= is_python;
            index += 1;
        }
        if pos != buf.len() {
            return Err(Fail::Malformed);
        }
        Ok(python)
    }

    fn decode_update(&mut self, buf: &[u8], mut pos: usize, catalog: &Catalog, version: i64) -> R<(usize, bool)> {
        if pos + 16 > buf.len() {
            return Err(Fail::Malformed);
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&buf[pos..pos + 16]);
        pos += 16;
        let table_index = match self.last_table {
            Some((last, index)) if last == id => index,
            _ => {
                let index = *catalog.by_id.get(&id).ok_or(Fail::UnknownTable(id))?;
                self.last_table = Some((id, index));
                index
            }
        };
        let table = &catalog.tables[table_index];
        let table_index = table_index as u32;
        if version >= 14 {
            pos = uvint(buf, pos)?.1;
        }
        let b = byte(buf, pos)?;
        let size = if b < 0x80 {
            pos += 1;
            b as u64
        } else {
            let (v, next) = uvint(buf, pos)?;
            pos = next;
            v
        };
        let (key, next) = span(buf, pos, size)?;
        pos = next;
        let flags = byte(buf, pos)?;
        pos += 1;
        let is_python = table.mode == Mode::Python;
        let rows_start = self.out.rows.len() as u32;
        let markers_start = self.out.markers.len() as u32;
        if flags & PU_IS_EMPTY != 0 {
            self.out.updates.push(UpdateRec {
                table: table_index,
                key,
                partition_deletion: None,
                static_row: None,
                rows: (rows_start, rows_start),
                markers: (markers_start, markers_start),
            });
            return Ok((pos, is_python));
        }
        let (v, next) = uvint(buf, pos)?;
        pos = next;
        let min_ts = TIMESTAMP_EPOCH.wrapping_add(v as i64);
        let b = byte(buf, pos)?;
        let min_ldt = if b < 0x80 {
            pos += 1;
            DELETION_TIME_EPOCH + b as i64
        } else {
            let (v, next) = uvint(buf, pos)?;
            pos = next;
            DELETION_TIME_EPOCH + s32(v)
        };
        let b = byte(buf, pos)?;
        let min_ttl = if b < 0x80 {
            pos += 1;
            b as i64
        } else {
            let (v, next) = uvint(buf, pos)?;
            pos = next;
            s32(v)
        };
        let st = Stats { min_ts, min_ldt, min_ttl };
        let mut statics: Option<usize> = None;
        if flags & PU_HAS_STATIC_ROW != 0 {
            let (header, next) = self.read_header(buf, pos, table, table_index, true)?;
            statics = Some(header);
            pos = next;
        }
        let (regulars, next) = self.read_header(buf, pos, table, table_index, false)?;
        pos = next;
        let mut partition_deletion = None;
        if flags & PU_HAS_PARTITION_DELETION != 0 {
            let (deletion, next) = read_deletion(buf, pos, &st)?;
            pos = next;
            if deletion.ts != LIVE {
                partition_deletion = Some(deletion);
            }
        }
        let mut static_row = None;
        if flags & PU_HAS_STATIC_ROW != 0 {
            let row_flags = byte(buf, pos)?;
            let ext = if row_flags & EXTENSION_FLAG != 0 { byte(buf, pos + 1)? } else { 0 };
            if ext & IS_STATIC == 0 {
                return Err(Fail::Malformed);
            }
            pos += 2;
            let header = statics.unwrap_or(usize::MAX);
            let clustering = (self.out.clustering.len() as u32, self.out.clustering.len() as u32);
            let (row, next) = self.read_row(buf, pos, row_flags, ext, header, &st, clustering)?;
            pos = next;
            if let Some(row) = row {
                static_row = Some(self.out.rows.len() as u32);
                self.out.rows.push(row);
            }
        }
        if flags & PU_HAS_ROW_ESTIMATE != 0 {
            if byte(buf, pos)? < 0x80 {
                pos += 1;
            } else {
                pos = uvint(buf, pos)?.1;
            }
        }
        let rows_start = self.out.rows.len() as u32;
        let n_clustering = table.clustering_fixed.len();
        loop {
            let row_flags = byte(buf, pos)?;
            pos += 1;
            if row_flags & END_OF_PARTITION != 0 {
                break;
            }
            let mut ext = 0;
            if row_flags & EXTENSION_FLAG != 0 {
                ext = byte(buf, pos)?;
                pos += 1;
            }
            if row_flags & IS_MARKER != 0 {
                pos = self.read_marker(buf, pos, &table.clustering_fixed, &st)?;
                continue;
            }
            if ext & IS_STATIC != 0 {
                return Err(Fail::Malformed);
            }
            let clus_start = self.out.clustering.len() as u32;
            if n_clustering > 0 {
                pos = self.read_clustering(buf, pos, &table.clustering_fixed, n_clustering)?;
            }
            let clustering = (clus_start, self.out.clustering.len() as u32);
            let (row, next) = self.read_row(buf, pos, row_flags, ext, regulars, &st, clustering)?;
            pos = next;
            if let Some(row) = row {
                self.out.rows.push(row);
            }
        }
        self.out.updates.push(UpdateRec {
            table: table_index,
            key,
            partition_deletion,
            static_row,
            rows: (rows_start, self.out.rows.len() as u32),
            markers: (markers_start, self.out.markers.len() as u32),
        });
        Ok((pos, is_python))
    }

    fn read_header(&mut self, buf: &[u8], pos: usize, table: &TableDef, table_index: u32, is_static: bool) -> R<(usize, usize)> {
        let slot = 2 * table_index as usize + is_static as usize;
        if self.last.len() <= slot {
            self.last.resize(slot + 1, None);
        }
        if let Some((raw, header)) = &self.last[slot] {
            if buf.len() >= pos + raw.len() && &buf[pos..pos + raw.len()] == raw.as_slice() {
                return Ok((*header, pos + raw.len()));
            }
        }
        let start = pos;
        let (count, mut p) = uvint(buf, pos)?;
        let mut i = 0u64;
        while i < count {
            let b = byte(buf, p)?;
            if b < 0x80 {
                p += 1 + b as usize;
            } else {
                let (size, next) = uvint(buf, p)?;
                p = next.checked_add(usize::try_from(size).map_err(|_| Fail::Malformed)?).ok_or(Fail::Malformed)?;
            }
            if p > buf.len() {
                return Err(Fail::Malformed);
            }
            i += 1;
        }
        if p > buf.len() {
            return Err(Fail::Malformed);
        }
        let raw = buf[start..p].to_vec();
        let key = (table_index, is_static, raw);
        let header = match self.headers.get(&key) {
            Some(found) => *found,
            None => {
                let columns = resolve_header(buf, start, count, table, table_index)?;
                if self.headers.len() >= HEADER_CACHE_LIMIT {
                    self.headers.clear();
                    self.arena.clear();
                    self.last.iter_mut().for_each(|l| *l = None);
                }
                let all = Arc::new(columns.clone());
                self.arena.push(Header { columns, subsets: HashMap::new(), all });
                let index = self.arena.len() - 1;
                self.headers.insert(key.clone(), index);
                index
            }
        };
        self.last[slot] = Some((key.2, header));
        Ok((header, p))
    }

    fn read_subset(&mut self, buf: &[u8], mut pos: usize, header: usize) -> R<(Arc<Vec<HeaderColumn>>, usize)> {
        let b = byte(buf, pos)?;
        let encoded = if b < 0x80 {
            pos += 1;
            b as u64
        } else {
            let (v, next) = uvint(buf, pos)?;
            pos = next;
            v
        };
        let h = &mut self.arena[header];
        if encoded == 0 {
            return Ok((h.all.clone(), pos));
        }
        let total = h.columns.len();
        if total < 64 {
            if let Some(found) = h.subsets.get(&encoded) {
                return Ok((found.clone(), pos));
            }
            let subset: Vec<HeaderColumn> = h
                .columns
                .iter()
                .enumerate()
                .filter(|(i, _)| (encoded >> i) & 1 == 0)
                .map(|(_, c)| *c)
                .collect();
            let subset = Arc::new(subset);
            h.subsets.insert(encoded, subset.clone());
            return Ok((subset, pos));
        }
        let missing = encoded;
        if missing > total as u64 {
            return Err(Fail::Malformed);
        }
        let present = total as u64 - missing;
        let mut chosen = Vec::new();
        if present < (total / 2) as u64 {
            for _ in 0..present {
                let (index, next) = uvint(buf, pos)?;
                pos = next;
                if index >= total as u64 {
                    return Err(Fail::Malformed);
                }
                chosen.push(h.columns[index as usize]);
            }
        } else {
            let mut index = 0u64;
            for _ in 0..missing {
                let (next_missing, next) = uvint(buf, pos)?;
                pos = next;
                if next_missing < index || next_missing >= total as u64 {
                    return Err(Fail::Malformed);
                }
                chosen.extend_from_slice(&h.columns[index as usize..next_missing as usize]);
                index = next_missing + 1;
            }
            chosen.extend_from_slice(&h.columns[index as usize..]);
        }
        Ok((Arc::new(chosen), pos))
    }

    fn read_clustering(&mut self, buf: &[u8], mut pos: usize, fixed: &[i64], size: usize) -> R<usize> {
        let mut index = 0usize;
        while index < size {
            let b = byte(buf, pos)?;
            let header = if b < 0x80 {
                pos += 1;
                b as u64
            } else {
                let (v, next) = uvint(buf, pos)?;
                pos = next;
                v
            };
            let limit = size.min(index + 32);
            let mut shift = 0u32;
            while index < limit {
                if (header >> shift) & 2 != 0 {
                    self.out.clustering.push(None);
                } else if (header >> shift) & 1 != 0 {
                    self.out.clustering.push(Some((pos as u32, pos as u32)));
                } else {
                    let mut length = fixed[index];
                    if length < 0 {
                        let b = byte(buf, pos)?;
                        if b < 0x80 {
                            length = b as i64;
                            pos += 1;
                        } else {
                            let (v, next) = uvint(buf, pos)?;
                            pos = next;
                            length = i64::try_from(v).map_err(|_| Fail::Malformed)?;
                        }
                    }
                    let (value, next) = span(buf, pos, length as u64)?;
                    pos = next;
                    self.out.clustering.push(Some(value));
                }
                index += 1;
                shift += 2;
            }
        }
        Ok(pos)
    }

    fn read_marker(&mut self, buf: &[u8], mut pos: usize, fixed: &[i64], st: &Stats) -> R<usize> {
        let kind = byte(buf, pos)?;
        if kind > 7 || kind == 3 || kind == 4 {
            return Err(Fail::Malformed);
        }
        if pos + 3 > buf.len() {
            return Err(Fail::Malformed);
        }
        let size = u16::from_be_bytes([buf[pos + 1], buf[pos + 2]]) as usize;
        pos += 3;
        if size > fixed.len() {
            return Err(Fail::Malformed);
        }
        let clus_start = self.out.clustering.len() as u32;
        if size > 0 {
            pos = self.read_clustering(buf, pos, fixed, size)?;
        }
        let clustering = (clus_start, self.out.clustering.len() as u32);
        let (deletion, next) = read_deletion(buf, pos, st)?;
        pos = next;
        let mut start_deletion = None;
        if kind == 2 || kind == 5 {
            let (second, next) = read_deletion(buf, pos, st)?;
            pos = next;
            start_deletion = Some(second);
        }
        self.out.markers.push(MarkerRec { kind, clustering, deletion, start_deletion });
        Ok(pos)
    }

    #[allow(clippy::too_many_arguments)]
    fn read_row(
        &mut self,
        buf: &[u8],
        mut pos: usize,
        flags: u8,
        ext: u8,
        header: usize,
        st: &Stats,
        clustering: Span,
    ) -> R<(Option<RowRec>, usize)> {
        let mut timestamp = None;
        let mut row_ts = LIVE;
        let mut row_ttl = 0i64;
        let mut row_ldt = NO_DELETION_TIME;
        let mut expiration = None;
        if flags & HAS_TIMESTAMP != 0 {
            let b = byte(buf, pos)?;
            if b < 0x80 {
                row_ts = st.min_ts.checked_add(b as i64).ok_or(Fail::OutOfRange)?;
                pos += 1;
            } else {
                let (v, next) = uvint(buf, pos)?;
                pos = next;
                row_ts = st.min_ts.wrapping_add(v as i64);
            }
            timestamp = Some(row_ts);
            if flags & HAS_TTL != 0 {
                let (v, next) = uvint(buf, pos)?;
                pos = next;
                row_ttl = ttl(st.min_ttl, v);
                let (v, next) = uvint(buf, pos)?;
                pos = next;
                row_ldt = ldt(st.min_ldt, v);
                expiration = Some(row_ldt);
            }
        }
        let mut deletion = None;
        if flags & HAS_DELETION != 0 {
            let (d, next) = read_deletion(buf, pos, st)?;
            pos = next;
            deletion = Some(d);
        }
        let columns = if header == usize::MAX {
            Arc::new(Vec::new())
        } else if flags & HAS_ALL_COLUMNS != 0 {
            self.arena[header].all.clone()
        } else {
            let (columns, next) = self.read_subset(buf, pos, header)?;
            pos = next;
            columns
        };
        let cells_start = self.out.cells.len() as u32;
        let complex_start = self.out.complex.len() as u32;
        for column in columns.iter() {
            if column.complex {
                pos = self.read_complex(buf, pos, column, flags, st, row_ts, row_ttl, row_ldt)?;
                continue;
            }
            let cell_flags = byte(buf, pos)?;
            pos += 1;
            let ts = if cell_flags & USE_ROW_TIMESTAMP != 0 {
                row_ts
            } else {
                let b = byte(buf, pos)?;
                if b < 0x80 {
                    pos += 1;
                    st.min_ts.checked_add(b as i64).ok_or(Fail::OutOfRange)?
                } else {
                    let (v, next) = uvint(buf, pos)?;
                    pos = next;
                    st.min_ts.wrapping_add(v as i64)
                }
            };
            let (cell_ldt, cell_ttl) = if cell_flags & USE_ROW_TTL != 0 {
                (row_ldt, row_ttl)
            } else if cell_flags & (IS_DELETED | IS_EXPIRING) != 0 {
                let (v, next) = uvint(buf, pos)?;
                pos = next;
                let l = ldt(st.min_ldt, v);
                if cell_flags & IS_EXPIRING != 0 {
                    let (v, next) = uvint(buf, pos)?;
                    pos = next;
                    (l, ttl(st.min_ttl, v))
                } else {
                    (l, 0)
                }
            } else {
                (NO_DELETION_TIME, 0)
            };
            let value = if cell_flags & HAS_EMPTY_VALUE != 0 {
                (pos as u32, pos as u32)
            } else {
                let mut length = column.fixed;
                if length < 0 {
                    let b = byte(buf, pos)?;
                    if b < 0x80 {
                        length = b as i64;
                        pos += 1;
                    } else {
                        let (v, next) = uvint(buf, pos)?;
                        pos = next;
                        length = i64::try_from(v).map_err(|_| Fail::Malformed)?;
                    }
                }
                let (value, next) = span(buf, pos, length as u64)?;
                pos = next;
                value
            };
            if let Some(dropped) = column.dropped {
                if ts <= dropped {
                    continue;
                }
            }
            self.out.cells.push(CellRec {
                column: column.column,
                flags: cell_flags,
                ts,
                ttl: cell_ttl,
                ldt: cell_ldt,
                path: None,
                value,
            });
        }
        let cells = (cells_start, self.out.cells.len() as u32);
        let complex = (complex_start, self.out.complex.len() as u32);
        if timestamp.is_none() && deletion.is_none() && cells.0 == cells.1 && complex.0 == complex.1 {
            // the row's clustering values are dropped with it
            self.out.clustering.truncate(clustering.0 as usize);
            return Ok((None, pos));
        }
        Ok((
            Some(RowRec {
                clustering,
                timestamp,
                ttl: row_ttl,
                expiration,
                deletion,
                cells,
                complex,
                is_static: ext & IS_STATIC != 0,
                shadowable: ext & HAS_SHADOWABLE_DELETION != 0,
            }),
            pos,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn read_complex(
        &mut self,
        buf: &[u8],
        mut pos: usize,
        column: &HeaderColumn,
        flags: u8,
        st: &Stats,
        row_ts: i64,
        row_ttl: i64,
        row_ldt: i64,
    ) -> R<usize> {
        if flags & HAS_COMPLEX_DELETION != 0 {
            let (d, next) = read_deletion(buf, pos, st)?;
            pos = next;
            if d.ts != LIVE && column.dropped.map_or(true, |dropped| d.ts > dropped) {
                self.out.complex.push((column.column, d));
            }
        }
        let (count, next) = uvint(buf, pos)?;
        pos = next;
        let mut i = 0u64;
        while i < count {
            i += 1;
            let cell_flags = byte(buf, pos)?;
            pos += 1;
            let ts = if cell_flags & USE_ROW_TIMESTAMP != 0 {
                row_ts
            } else {
                let (v, next) = uvint(buf, pos)?;
                pos = next;
                st.min_ts.wrapping_add(v as i64)
            };
            let (cell_ldt, cell_ttl) = if cell_flags & USE_ROW_TTL != 0 {
                (row_ldt, row_ttl)
            } else if cell_flags & (IS_DELETED | IS_EXPIRING) != 0 {
                let (v, next) = uvint(buf, pos)?;
                pos = next;
                let l = ldt(st.min_ldt, v);
                if cell_flags & IS_EXPIRING != 0 {
                    let (v, next) = uvint(buf, pos)?;
                    pos = next;
                    (l, ttl(st.min_ttl, v))
                } else {
                    (l, 0)
                }
            } else {
                (NO_DELETION_TIME, 0)
            };
            let (size, next) = uvint(buf, pos)?;
            let (path, next) = span(buf, next, size)?;
            pos = next;
            let value = if cell_flags & HAS_EMPTY_VALUE != 0 {
                (pos as u32, pos as u32)
            } else {
                let (size, next) = uvint(buf, pos)?;
                let (value, next) = span(buf, next, size)?;
                pos = next;
                value
            };
            if let Some(dropped) = column.dropped {
                if ts <= dropped {
                    continue;
                }
            }
            self.out.cells.push(CellRec {
                column: column.column,
                flags: cell_flags,
                ts,
                ttl: cell_ttl,
                ldt: cell_ldt,
                path: Some(path),
                value,
            });
        }
        Ok(pos)
    }
}

fn resolve_header(buf: &[u8], pos: usize, count: u64, table: &TableDef, table_index: u32) -> R<Vec<HeaderColumn>> {
    let (_, mut pos) = uvint(buf, pos)?;
    let mut columns = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        let (size, next) = uvint(buf, pos)?;
        let (name, next) = span(buf, next, size)?;
        pos = next;
        let raw = &buf[name.0 as usize..name.1 as usize];
        if std::str::from_utf8(raw).is_err() {
            return Err(Fail::Malformed);
        }
        match table.by_name.get(raw) {
            Some(index) => {
                let def = &table.columns[*index];
                columns.push(HeaderColumn {
                    column: *index as u32,
                    complex: def.complex,
                    fixed: if def.complex { -1 } else { def.fixed },
                    dropped: def.dropped,
                });
            }
            None => {
                return Err(Fail::UnknownColumn {
                    table: table_index,
                    column: String::from_utf8_lossy(raw).into_owned(),
                })
            }
        }
    }
    Ok(columns)
}
