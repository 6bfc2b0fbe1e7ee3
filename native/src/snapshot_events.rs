//! The bootstrap's raw events from the bytes a Cassandra scan returns: what pipeline/snapshot_encoder.py
//! (the specification) builds, byte for byte, for one partition's raw rows at a time.
//!
//! A raw row holds the table's columns, then the write time and TTL of each static and regular column,
//! then the scan time; `Row` gives each position's bytes (None for null). The Python side prepares the
//! plans (positions, layouts, the record's head) once per Spark task (pipeline/snapshot_core.py).

use crate::md5;
use crate::raw_event::{bytes as avro_sized, long};

const NULL: [u8; 4] = [0xFF; 4];
/// 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch
const UUID_EPOCH_OFFSET: i128 = 0x01B2_1DD2_1381_4000;
const EXPIRING: i64 = 0x02;
const EMPTY_VALUE: i64 = 0x04;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Single,
    Set,
    List,
    Map,
    Fields,
}

/// How one static or regular column's raw values become cells (snapshot_encoder._Column).
pub struct Column {
    pub name: String,
    pub layout: Layout,
    pub value_at: usize,
    pub time_at: usize,
    pub ttl_at: usize,
    pub fields: usize,
}

/// What stays the same for every event of one table (snapshot_encoder.SnapshotEncoder's fields).
pub struct Plan {
    pub table: String,
    pub static_columns: Vec<Column>,
    pub regular: Vec<Column>,
    pub key_at: Vec<usize>,
    pub clustering_at: Vec<usize>,
    pub head: Vec<u8>,
    pub key_head: Vec<u8>,
    pub digest_head: Vec<u8>,
    pub max_rows: usize,
    pub max_bytes: i64,
    pub no_deletion_time: i64,
    pub list_tail: Vec<u8>,
}

/// One raw row: its values by position (None: null).
pub type Row<'a> = Vec<Option<&'a [u8]>>;

/// A row's clustering values and its cells.
type Built<'a> = (Vec<Option<&'a [u8]>>, Cells);

/// A collection's cell paths and values.
type PathsItems<'a> = (Vec<Vec<u8>>, Vec<&'a [u8]>);

/// One event: the Kafka key, the Avro value, its digest, rows and cells.
pub struct Event {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub md5: [u8; 16],
    pub rows: usize,
    pub cells: i64,
}

/// One row's cells in both forms (snapshot_encoder._Row); `digest` holds (the column's index in its plan
/// list, range of `canonical`), sorted by the columns' names when the row is written.
struct Cells {
    avro: Vec<u8>,
    canonical: Vec<u8>,
    digest: Vec<(usize, usize, usize)>,
    cells: i64,
    oldest: Option<i64>,
    expiring: bool,
    expiry: i64,
    ttl: i64,
    size: i64,
}

impl Cells {
    fn new() -> Cells {
        Cells {
            avro: Vec::new(),
            canonical: Vec::new(),
            digest: Vec::new(),
            cells: 0,
            oldest: None,
            expiring: true,
            expiry: -1,
            ttl: 0,
            size: 0,
        }
    }

    fn saw(&mut self, stamp: i64) {
        if self.oldest.map_or(true, |o| stamp < o) {
            self.oldest = Some(stamp);
        }
    }
}

fn u32_be(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_be_bytes());
}

/// The digest's form of a value: u32 length and the bytes, or 0xFFFFFFFF for null.
fn blob(out: &mut Vec<u8>, data: Option<&[u8]>) {
    match data {
        None => out.extend_from_slice(&NULL),
        Some(d) => {
            u32_be(out, d.len());
            out.extend_from_slice(d);
        }
    }
}

fn not_collection(column: &str) -> String {
    format!("bootstrap: the value of column {} is not a serialized collection", column)
}

fn i32_at(data: &[u8], pos: usize) -> Option<i32> {
    data.get(pos..pos + 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn i64_of(data: &[u8], column: &str) -> Result<i64, String> {
    let b: [u8; 8] = data.try_into().map_err(|_| format!("bootstrap: a write time of column {} is not 8 bytes", column))?;
    Ok(i64::from_be_bytes(b))
}

/// The items of a serialized list or set (`per` 2: a map's keys and values, alternating), as
/// snapshot_encoder._elements cuts them (an item the bytes end inside is cut short).
fn elements<'a>(data: &'a [u8], column: &str, per: usize) -> Result<Vec<Option<&'a [u8]>>, String> {
    let count = i32_at(data, 0).ok_or_else(|| not_collection(column))?;
    let total = (count.max(0) as usize) * per;
    let mut out = Vec::with_capacity(total.min(data.len()));
    let mut pos = 4usize;
    for _ in 0..total {
        let size = i32_at(data, pos).ok_or_else(|| not_collection(column))?;
        pos += 4;
        if size < 0 {
            out.push(None);
        } else {
            let end = (pos + size as usize).min(data.len());
            out.push(Some(&data[pos.min(end)..end]));
            pos += size as usize;
        }
    }
    Ok(out)
}

/// The write times of `WRITETIME(<collection or UDT>)` (snapshot_encoder._stamps).
fn stamps<'a>(data: &'a [u8], count: usize, column: &str) -> Result<Vec<Option<&'a [u8]>>, String> {
    if data.len() == 4 + 12 * count {
        return Ok((0..count).map(|i| Some(&data[8 + 12 * i..16 + 12 * i])).collect());
    }
    elements(data, column, 1)
}

/// The fields of a serialized UDT; fields the bytes end before are null.
fn fields<'a>(data: &'a [u8], count: usize, column: &str) -> Result<Vec<Option<&'a [u8]>>, String> {
    let mut out = Vec::with_capacity(count);
    let mut pos = 0usize;
    for _ in 0..count {
        if pos >= data.len() {
            out.push(None);
            continue;
        }
        let size = i32_at(data, pos).ok_or_else(|| not_collection(column))?;
        pos += 4;
        if size < 0 {
            out.push(None);
        } else {
            let end = (pos + size as usize).min(data.len());
            out.push(Some(&data[pos.min(end)..end]));
            pos += size as usize;
        }
    }
    Ok(out)
}

pub struct Encoder {
    pub plan: Plan,
    avro_lasting: [Vec<u8>; 2],
    digest_lasting: Vec<u8>,
}

impl Encoder {
    pub fn new(plan: Plan) -> Encoder {
        let lasting = |flags: i64| {
            let mut out = Vec::new();
            long(&mut out, 0);
            long(&mut out, plan.no_deletion_time);
            long(&mut out, flags);
            out
        };
        let avro_lasting = [lasting(0), lasting(EMPTY_VALUE)];
        let mut digest_lasting = Vec::with_capacity(16);
        digest_lasting.extend_from_slice(&0i64.to_be_bytes());
        digest_lasting.extend_from_slice(&plan.no_deletion_time.to_be_bytes());
        Encoder { plan, avro_lasting, digest_lasting }
    }

    fn fail(&self, column: &Column, why: String) -> String {
        format!("bootstrap of {}, column {}: {}", self.plan.table, column.name, why)
    }

    /// The partition key's bytes from the values of its columns (snapshot_encoder.partition_key).
    pub fn partition_key(&self, parts: &[Option<&[u8]>]) -> Result<Vec<u8>, String> {
        let missing = || format!("bootstrap of {}: a row without its partition key", self.plan.table);
        if parts.len() == 1 {
            return Ok(parts[0].ok_or_else(missing)?.to_vec());
        }
        let mut out = Vec::new();
        for p in parts {
            let p = p.ok_or_else(missing)?;
            out.extend_from_slice(&(p.len() as u16).to_be_bytes());
            out.extend_from_slice(p);
            out.push(0);
        }
        Ok(out)
    }

    fn list_path(&self, out: &mut Vec<u8>, base_us: i64, index: usize) {
        let ticks = base_us as i128 * 10 + UUID_EPOCH_OFFSET + index as i128;
        let time_hi = (((ticks >> 48) & 0x0FFF) | 0x1000) as u16;
        out.extend_from_slice(&((ticks & 0xFFFF_FFFF) as u32).to_be_bytes());
        out.extend_from_slice(&(((ticks >> 32) & 0xFFFF) as u16).to_be_bytes());
        out.extend_from_slice(&time_hi.to_be_bytes());
        out.extend_from_slice(&self.plan.list_tail);
    }

    /// One cell of a single-cell column, with or without TTL (snapshot_encoder._row and _single).
    fn single(&self, out: &mut Cells, index: usize, column: &Column, value: &[u8], time: &[u8], ttl: Option<&[u8]>, scan_time: i64) -> Result<(), String> {
        let stamp = i64_of(time, &column.name)?;
        out.saw(stamp);
        out.cells += 1;
        out.size += value.len() as i64;
        let remaining = match ttl {
            None => 0,
            Some(t) => i32_at(t, 0).filter(|_| t.len() == 4).ok_or_else(|| format!("bootstrap: a TTL of column {} is not 4 bytes", column.name))? as i64,
        };
        let start = out.canonical.len();
        let name = column.name.as_bytes();
        avro_sized(&mut out.avro, name);
        out.avro.push(0);
        long(&mut out.avro, stamp);
        blob(&mut out.canonical, Some(name));
        out.canonical.extend_from_slice(&NULL);
        if remaining == 0 {
            out.expiring = false;
            out.avro.extend_from_slice(&self.avro_lasting[value.is_empty() as usize]);
            out.canonical.push(0);
            out.canonical.extend_from_slice(time);
            out.canonical.extend_from_slice(&self.digest_lasting);
        } else {
            let remaining = remaining.max(1);
            let deletion = scan_time + remaining;
            let flags = if value.is_empty() { EXPIRING | EMPTY_VALUE } else { EXPIRING };
            if deletion > out.expiry {
                out.expiry = deletion;
                out.ttl = remaining;
            }
            long(&mut out.avro, remaining);
            long(&mut out.avro, deletion);
            long(&mut out.avro, flags);
            out.canonical.push(2);
            for v in [stamp, remaining, deletion] {
                out.canonical.extend_from_slice(&v.to_be_bytes());
            }
        }
        avro_sized(&mut out.avro, value);
        blob(&mut out.canonical, Some(value));
        out.digest.push((index, start, out.canonical.len()));
        Ok(())
    }

    /// The cells of a non-frozen collection or UDT (snapshot_encoder._multi and _one_write, which make
    /// the same bytes).
    #[allow(clippy::too_many_arguments)]
    fn multi(&self, out: &mut Cells, index: usize, column: &Column, value: &[u8], times: Option<&[u8]>, ttls: Option<&[u8]>, scan_time: i64) -> Result<(), String> {
        let times = times.ok_or_else(|| {
            self.fail(column, "WRITETIME gave null, not one write time per element (needs Cassandra 5.0)".into())
        })?;
        let count = i32_at(times, 0).ok_or_else(|| not_collection(&column.name))?;
        let count = count.max(0) as usize;
        let mut ttls = ttls;
        if let Some(t) = ttls {
            if t.len() == 4 + 4 * count && t[..4] == times[..4] && t[4..].iter().all(|&b| b == 0xFF) {
                ttls = None; // Cassandra lists a null TTL for each element that has none
            }
        }
        let layout = column.layout;
        let one_write = ttls.is_none()
            && count > 0
            && layout != Layout::Fields
            && times.len() == 4 + 12 * count
            && (1..count).all(|i| times[4 + 12 * i..16 + 12 * i] == times[4..16]);
        let name = &column.name;
        let paths: Vec<Vec<u8>>;
        let items: Vec<&[u8]>;
        let mut stamp_list: Vec<Option<&[u8]>>;
        let mut remaining: Option<Vec<Option<&[u8]>>>;
        if one_write {
            let per = if layout == Layout::Map { 2 } else { 1 };
            let found = elements(value, name, per)?;
            if found.len() != per * count {
                return Err(self.fail(column, format!("WRITETIME gave {} entries for {} items", count, found.len())));
            }
            stamp_list = vec![Some(&times[8..16]); count];
            remaining = None;
            let (p, i) = self.paths_items(column, layout, found, &stamp_list)?;
            paths = p;
            items = i;
        } else {
            stamp_list = stamps(times, count, name)?;
            remaining = match ttls {
                Some(t) => Some(elements(t, name, 1)?),
                None => None,
            };
            if let Some(r) = &remaining {
                if r.len() != count {
                    return Err(self.fail(column, format!("TTL gave {} entries for {} write times", r.len(), count)));
                }
            }
            match layout {
                Layout::Fields => {
                    let found = fields(value, column.fields, name)?;
                    if count != found.len() {
                        return Err(self.fail(column, format!("WRITETIME gave {} entries for the {} fields", count, found.len())));
                    }
                    let keep: Vec<usize> = (0..count).filter(|&i| stamp_list[i].is_some() && found[i].is_some()).collect();
                    if keep.is_empty() {
                        return Ok(());
                    }
                    paths = keep.iter().map(|&i| (i as u16).to_be_bytes().to_vec()).collect();
                    items = keep.iter().map(|&i| found[i].unwrap_or(&[])).collect();
                    stamp_list = keep.iter().map(|&i| stamp_list[i]).collect();
                    remaining = remaining.map(|r| keep.iter().map(|&i| r[i]).collect());
                }
                Layout::Map => {
                    let found = elements(value, name, 2)?;
                    if found.len() != 2 * count {
                        return Err(self.fail(column, format!("WRITETIME gave {} entries for {} elements", count, found.len() / 2)));
                    }
                    let (p, i) = self.paths_items(column, layout, found, &stamp_list)?;
                    paths = p;
                    items = i;
                }
                _ => {
                    let found = elements(value, name, 1)?;
                    if found.len() != count {
                        return Err(self.fail(column, format!("WRITETIME gave {} entries for {} elements", count, found.len())));
                    }
                    if stamp_list.iter().any(|s| s.is_none()) {
                        return Err(self.fail(column, format!("WRITETIME gave a null for one of {} elements", count)));
                    }
                    let (p, i) = self.paths_items(column, layout, found, &stamp_list)?;
                    paths = p;
                    items = i;
                }
            }
        }
        if count == 0 {
            return Ok(());
        }
        let mut cells: Vec<(usize, usize)> = Vec::with_capacity(paths.len());
        let mut canonical: Vec<u8> = Vec::new();
        let mut size = 0i64;
        for (n, path) in paths.iter().enumerate() {
            let time = stamp_list[n].ok_or_else(|| self.fail(column, format!("WRITETIME gave a null for one of {} elements", count)))?;
            let item = items[n];
            let stamp = i64_of(time, name)?;
            out.saw(stamp);
            size += (item.len() + path.len()) as i64;
            let left = match remaining.as_ref().and_then(|r| r[n]) {
                None => 0,
                Some(t) => i32_at(t, 0).filter(|_| t.len() == 4).ok_or_else(|| format!("bootstrap: a TTL of column {} is not 4 bytes", name))? as i64,
            };
            avro_sized(&mut out.avro, name.as_bytes());
            out.avro.push(2);
            avro_sized(&mut out.avro, path);
            long(&mut out.avro, stamp);
            let start = canonical.len();
            blob(&mut canonical, Some(path));
            if left == 0 {
                out.avro.extend_from_slice(&self.avro_lasting[item.is_empty() as usize]);
                canonical.push(0);
                canonical.extend_from_slice(time);
                canonical.extend_from_slice(&self.digest_lasting);
                out.expiring = false;
            } else {
                let left = left.max(1);
                let deletion = scan_time + left;
                let flags = if item.is_empty() { EXPIRING | EMPTY_VALUE } else { EXPIRING };
                if deletion > out.expiry {
                    out.expiry = deletion;
                    out.ttl = left;
                }
                long(&mut out.avro, left);
                long(&mut out.avro, deletion);
                long(&mut out.avro, flags);
                canonical.push(2);
                for v in [stamp, left, deletion] {
                    canonical.extend_from_slice(&v.to_be_bytes());
                }
            }
            avro_sized(&mut out.avro, item);
            blob(&mut canonical, Some(item));
            cells.push((start, canonical.len()));
        }
        out.size += size;
        out.cells += paths.len() as i64;
        let mut order: Vec<usize> = (0..paths.len()).collect();
        order.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
        let start = out.canonical.len();
        for i in order {
            blob(&mut out.canonical, Some(name.as_bytes()));
            out.canonical.extend_from_slice(&canonical[cells[i].0..cells[i].1]);
        }
        out.digest.push((index, start, out.canonical.len()));
        Ok(())
    }

    /// The cells' paths and values of a set, list or map (a list: generated timeuuid paths after its
    /// oldest element's write time).
    fn paths_items<'a>(&self, column: &Column, layout: Layout, found: Vec<Option<&'a [u8]>>, stamp_list: &[Option<&[u8]>]) -> Result<PathsItems<'a>, String> {
        let null_key = || self.fail(column, "a null element or key".into());
        Ok(match layout {
            Layout::Map => {
                let mut paths = Vec::with_capacity(found.len() / 2);
                let mut items = Vec::with_capacity(found.len() / 2);
                for pair in found.chunks(2) {
                    paths.push(pair[0].ok_or_else(null_key)?.to_vec());
                    items.push(pair[1].unwrap_or(&[]));
                }
                (paths, items)
            }
            Layout::Set => {
                let paths = found.iter().map(|e| e.map(|e| e.to_vec()).ok_or_else(null_key)).collect::<Result<Vec<_>, _>>()?;
                let items = vec![&[][..]; paths.len()];
                (paths, items)
            }
            _ => {
                let mut base = i64::MAX;
                for s in stamp_list {
                    base = base.min(i64_of(s.ok_or_else(null_key)?, &column.name)?);
                }
                let paths = (0..found.len())
                    .map(|i| {
                        let mut p = Vec::with_capacity(16);
                        self.list_path(&mut p, base, i);
                        p
                    })
                    .collect();
                (paths, found.iter().map(|e| e.unwrap_or(&[])).collect())
            }
        })
    }

    /// The live cells of the given columns of a raw row.
    fn row(&self, columns: &[Column], row: &Row<'_>, scan_time: i64) -> Result<Cells, String> {
        let mut out = Cells::new();
        for (index, column) in columns.iter().enumerate() {
            let value = match row[column.value_at] {
                None => continue,
                Some(v) => v,
            };
            let time = row[column.time_at];
            let ttl = row[column.ttl_at];
            if column.layout != Layout::Single {
                self.multi(&mut out, index, column, value, time, ttl, scan_time)?;
            } else {
                let time = time.ok_or_else(|| self.fail(column, "WRITETIME gave null for a value".into()))?;
                self.single(&mut out, index, column, value, time, ttl, scan_time)?;
            }
        }
        Ok(out)
    }

    /// The events of one partition (its rows as the scan gives them; snapshot_encoder.partition_events).
    pub fn partition_events(&self, key: &[u8], rows: &[Row<'_>], scan_time: i64, events: &mut Vec<Event>) -> Result<(), String> {
        let plan = &self.plan;
        let static_cells = if plan.static_columns.is_empty() { None } else { Some(self.row(&plan.static_columns, &rows[0], scan_time)?) };
        let mut built: Vec<Built<'_>> = Vec::with_capacity(rows.len());
        for row in rows {
            let clustering: Vec<Option<&[u8]>> = plan.clustering_at.iter().map(|&i| row[i]).collect();
            if !clustering.is_empty() && clustering.iter().all(|c| c.is_none()) {
                continue; // a partition with static cells and no row reads as one row of null clusterings
            }
            let cells = self.row(&plan.regular, row, scan_time)?;
            built.push((clustering, cells));
        }
        let mut fallback: Option<i64> = static_cells.as_ref().and_then(|s| s.oldest);
        for (_, cells) in &built {
            if let Some(o) = cells.oldest {
                fallback = Some(fallback.map_or(o, |f| f.min(o)));
            }
        }
        let fallback = fallback.unwrap_or(0);
        let mut size = static_cells.as_ref().map_or(0, |s| s.size);
        let mut static_part = static_cells.filter(|s| s.cells > 0);
        let mut pending: Vec<&Built<'_>> = Vec::new();
        for entry in &built {
            if !pending.is_empty() && (pending.len() >= plan.max_rows || size + entry.1.size > plan.max_bytes) {
                events.push(self.event(key, static_part.take(), &pending, fallback));
                pending.clear();
                size = 0;
            }
            pending.push(entry);
            size += entry.1.size;
        }
        if !pending.is_empty() || static_part.is_some() {
            events.push(self.event(key, static_part.take(), &pending, fallback));
        }
        Ok(())
    }

    fn event(&self, key: &[u8], static_cells: Option<Cells>, rows: &[&Built<'_>], fallback: i64) -> Event {
        let plan = &self.plan;
        let mut canonical = Vec::with_capacity(1024);
        canonical.extend_from_slice(&plan.digest_head);
        blob(&mut canonical, Some(key));
        canonical.push(b'-');
        let mut value = Vec::with_capacity(1024);
        value.extend_from_slice(&plan.head);
        avro_sized(&mut value, key);
        let digest_at = value.len();
        value.extend_from_slice(&[0u8; 16]);
        value.extend_from_slice(&[0, 0]);
        let mut cells = 0i64;
        match &static_cells {
            None => {
                canonical.push(b'-');
                value.push(0);
            }
            Some(s) => {
                canonical.push(b'S');
                value.push(2);
                self.encode_row(&mut canonical, &mut value, &plan.static_columns, &[], s, None);
                cells += s.cells;
            }
        }
        u32_be(&mut canonical, rows.len());
        if !rows.is_empty() {
            long(&mut value, rows.len() as i64);
            for (clustering, row) in rows.iter().map(|r| (&r.0, &r.1)) {
                self.encode_row(&mut canonical, &mut value, &plan.regular, clustering, row, Some(fallback));
                cells += row.cells;
            }
        }
        value.push(0); // end of the rows (or no rows)
        canonical.extend_from_slice(&[0, 0, 0, 0]); // no range tombstones
        let digest = md5::md5(&canonical);
        value[digest_at..digest_at + 16].copy_from_slice(&digest);
        value.push(0);
        let mut kafka_key = plan.key_head.clone();
        avro_sized(&mut kafka_key, key);
        Event { key: kafka_key, value, md5: digest, rows: rows.len(), cells }
    }

    fn encode_row(&self, canonical: &mut Vec<u8>, avro: &mut Vec<u8>, columns: &[Column], clustering: &[Option<&[u8]>], row: &Cells, fallback: Option<i64>) {
        u32_be(canonical, clustering.len());
        if !clustering.is_empty() {
            long(avro, clustering.len() as i64);
            for value in clustering {
                blob(canonical, *value);
                match value {
                    None => avro.push(0),
                    Some(v) => {
                        avro.push(2);
                        avro_sized(avro, v);
                    }
                }
            }
        }
        avro.push(0);
        match fallback {
            None => {
                canonical.push(b'-');
                avro.push(0);
            }
            Some(fallback) => {
                let (timestamp, ttl, expiry) = match row.oldest {
                    None => (fallback, 0, None),
                    Some(oldest) if row.expiring => (oldest, row.ttl, Some(row.expiry)),
                    Some(oldest) => (oldest, 0, None),
                };
                canonical.push(b'L');
                for v in [timestamp, ttl, expiry.unwrap_or(-1)] {
                    canonical.extend_from_slice(&v.to_be_bytes());
                }
                avro.push(2);
                long(avro, timestamp);
                long(avro, ttl);
                match expiry {
                    None => avro.push(0),
                    Some(e) => {
                        avro.push(2);
                        long(avro, e);
                    }
                }
            }
        }
        canonical.extend_from_slice(b"-\x00\x00\x00\x00"); // no row deletion, no complex deletions
        avro.extend_from_slice(&[0, 0]);
        u32_be(canonical, row.cells as usize);
        if row.cells > 0 {
            let mut order: Vec<&(usize, usize, usize)> = row.digest.iter().collect();
            if order.len() > 1 {
                order.sort_by(|a, b| columns[a.0].name.as_bytes().cmp(columns[b.0].name.as_bytes()));
            }
            for (_, start, end) in order {
                canonical.extend_from_slice(&row.canonical[*start..*end]);
            }
            long(avro, row.cells);
            avro.extend_from_slice(&row.avro);
        }
        avro.push(0);
    }
}
