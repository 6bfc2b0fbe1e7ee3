//! `cdc_native`: the native core of the node agent's per-event path.
//!
//! Its modules mirror the Python modules they accelerate (agents/commitlog/segment_reader.py,
//! agents/commitlog/mutation_decoder.py, cassandra_model/digest.py, schemas/raw_event.py); the Python
//! modules stay the specification and the fallback, and differential tests hold both to identical
//! output. The agent's Python side is agents/commitlog/native_core.py.
//!
//! The batch API: `SegmentBatchReader.next_batch` reads a segment range and returns ready-to-send raw
//! events (key and value bytes, Kafka partition, entry end) for thousands of entries per call. An entry it
//! cannot publish by itself (a table it does not know, system_schema, bytes that do not decode) is handed
//! back whole to the Python decoder, which handles it as it always did.
//!
//! The worker's batch loop uses `raw_event_heads` (schemas/raw_event.py's `peek_raw_event` for a whole
//! batch): the table and digest of each raw record, so that replica copies are dropped without a
//! decode (app/worker_core.py chooses it), and `decode_raw_event` (raw_event_dict.rs) for the others.
//! Its `TableMerge` (row_merge.rs) merges the common event whole, from the stored rows' bytes to the
//! change records that `ChangeJson` writes.
//!
//! The bootstrap's `SnapshotEncoder` (snapshot_events.rs) builds the raw events of raw scan rows, a whole
//! result page per call (pipeline/snapshot_core.py chooses it; pipeline/snapshot_encoder.py
//! is its specification).

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::intern;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};

mod change_json;
mod digest;
mod md5;
mod mutation_decoder;
mod protocol_rows;
mod raw_event;
mod raw_event_dict;
mod raw_event_plain;
mod row_codec;
mod row_merge;
mod segment_reader;
mod snapshot_events;

use digest::{bytes_of, DigestWriter};
use mutation_decoder::{ColumnDef, Decoded, Decoder, Mode, Outcome, RowRec, TableDef};
use raw_event::SourceInfo;
use segment_reader::{Damage, Scan, ScanError, SegmentLayout, Source};

type ColumnSpec = (String, bool, i64, Option<i64>);
type TableSpec = (Vec<u8>, String, String, String, bool, u8, Vec<i64>, Vec<ColumnSpec>);

/// The tables the native decoder knows, built from the Python SchemaCatalog (native_core.py).
#[pyclass(module = "cdc_native", frozen)]
struct Catalog {
    inner: Arc<mutation_decoder::Catalog>,
}

#[pymethods]
impl Catalog {
    /// `tables`: (id bytes, id text, keyspace, table, is_counter, mode 0 publish / 1 skip / 2 python,
    /// clustering fixed lengths, columns as (name, complex, fixed length or -1, dropped time or None)).
    #[new]
    fn new(tables: Vec<TableSpec>) -> PyResult<Catalog> {
        let mut catalog = mutation_decoder::Catalog { tables: Vec::new(), by_id: Default::default() };
        for (id, id_text, keyspace, table, is_counter, mode, clustering_fixed, columns) in tables {
            let id: [u8; 16] = id.as_slice().try_into().map_err(|_| PyValueError::new_err("table id is not 16 bytes"))?;
            let mode = match mode {
                0 => Mode::Publish,
                1 => Mode::Skip,
                2 => Mode::Python,
                other => return Err(PyValueError::new_err(format!("unknown table mode {}", other))),
            };
            let mut def = TableDef {
                id,
                id_text,
                keyspace,
                table,
                is_counter,
                mode,
                clustering_fixed,
                columns: Vec::new(),
                by_name: Default::default(),
            };
            for (name, complex, fixed, dropped) in columns {
                def.by_name.insert(name.as_bytes().to_vec(), def.columns.len());
                def.columns.push(ColumnDef { name, complex, fixed, dropped });
            }
            catalog.by_id.insert(id, catalog.tables.len());
            catalog.tables.push(def);
        }
        Ok(Catalog { inner: Arc::new(catalog) })
    }

    fn __len__(&self) -> usize {
        self.inner.tables.len()
    }
}

fn damage_tuple(py: Python<'_>, damage: &Damage) -> PyObject {
    (damage.offset, damage.position, damage.scope.name(), damage.entry_error, damage.message.as_str()).into_py(py)
}

fn open_source(path: Option<String>, data: Option<&[u8]>) -> PyResult<Source> {
    match (path, data) {
        (Some(path), None) => {
            let file = File::open(&path)?;
            let size = file.metadata()?.len() as i64;
            Ok(Source::File { file, size })
        }
        (None, Some(data)) => Ok(Source::Memory(data.to_vec())),
        _ => Err(PyValueError::new_err("give the segment's path or its bytes")),
    }
}

/// `header_end` None: a live segment whose header is not written yet.
#[allow(clippy::too_many_arguments)]
fn new_scan(
    segment: String,
    path: Option<String>,
    data: Option<&[u8]>,
    start: i64,
    limit: Option<i64>,
    completed: bool,
    strict: bool,
    header_end: Option<i64>,
    segment_id: i64,
    compressed: bool,
    decompress: Option<PyObject>,
    corrupt_section_type: Option<PyObject>,
) -> PyResult<Scan> {
    let layout = header_end.map(|header_end| SegmentLayout { header_end, segment_id, compressed });
    let source = open_source(path, data)?;
    let _ = segment; // the Python side names the segment in every error it raises
    Ok(Scan::new(source, start, limit, completed, strict, layout, decompress, corrupt_section_type))
}

/// Frame a segment range: (entries as (position, end, bytes), damage, resume position, stop reason,
/// the damage that ended a strict read or None). The framing half of the differential tests.
#[pyfunction]
#[pyo3(signature = (segment, path, data, start, limit, completed, strict, header_end, segment_id, compressed, decompress=None, corrupt_section_type=None))]
#[allow(clippy::too_many_arguments)]
fn scan_segment(
    py: Python<'_>,
    segment: String,
    path: Option<String>,
    data: Option<&[u8]>,
    start: i64,
    limit: Option<i64>,
    completed: bool,
    strict: bool,
    header_end: Option<i64>,
    segment_id: i64,
    compressed: bool,
    decompress: Option<PyObject>,
    corrupt_section_type: Option<PyObject>,
) -> PyResult<PyObject> {
    let mut scan = new_scan(
        segment, path, data, start, limit, completed, strict, header_end, segment_id, compressed, decompress,
        corrupt_section_type,
    )?;
    let entries = PyList::empty_bound(py);
    let mut failure = py.None();
    loop {
        match scan.next_entry(py) {
            Ok(Some(entry)) => {
                let body = PyBytes::new_bound(py, scan.entry_data(&entry));
                entries.append((entry.position, entry.end, body))?;
            }
            Ok(None) => break,
            Err(ScanError::Strict(damage)) => {
                failure = damage_tuple(py, &damage);
                break;
            }
            Err(ScanError::Py(err)) => return Err(err),
        }
    }
    let damage: Vec<PyObject> = scan.damage.iter().map(|d| damage_tuple(py, d)).collect();
    let stop = scan.stop.map(|s| s.name());
    Ok((entries, damage, scan.resume_position, stop, failure).into_py(py))
}

fn opt_bytes(py: Python<'_>, buf: &[u8], span: Option<(u32, u32)>) -> PyObject {
    match span {
        None => py.None(),
        Some(s) => PyBytes::new_bound(py, bytes_of(buf, s)).into_any().unbind(),
    }
}

fn row_tuple(py: Python<'_>, buf: &[u8], d: &Decoded, catalog: &mutation_decoder::Catalog, table: usize, r: &RowRec) -> PyObject {
    let columns = &catalog.tables[table].columns;
    let clustering: Vec<PyObject> =
        d.clustering[r.clustering.0 as usize..r.clustering.1 as usize].iter().map(|v| opt_bytes(py, buf, *v)).collect();
    let cells: Vec<PyObject> = d.cells[r.cells.0 as usize..r.cells.1 as usize]
        .iter()
        .map(|c| {
            (
                columns[c.column as usize].name.as_str(),
                c.flags,
                c.ts,
                c.ttl,
                c.ldt,
                opt_bytes(py, buf, c.path),
                PyBytes::new_bound(py, bytes_of(buf, c.value)),
            )
                .into_py(py)
        })
        .collect();
    let complex: Vec<PyObject> = d.complex[r.complex.0 as usize..r.complex.1 as usize]
        .iter()
        .map(|(c, del)| (columns[*c as usize].name.as_str(), (del.ts, del.ldt)).into_py(py))
        .collect();
    (
        PyTuple::new_bound(py, clustering),
        r.timestamp,
        r.ttl,
        r.expiration,
        r.deletion.map(|x| (x.ts, x.ldt)),
        cells,
        complex,
        r.is_static,
        r.shadowable,
    )
        .into_py(py)
}

fn outcome_tuple(py: Python<'_>, outcome: &Outcome, catalog: &mutation_decoder::Catalog) -> (String, PyObject) {
    match outcome {
        Outcome::Updates => ("updates".into(), py.None()),
        Outcome::UnknownTable(id) => ("unknown_table".into(), PyBytes::new_bound(py, id).into_any().unbind()),
        Outcome::UnknownColumn { table, column } => {
            let def = &catalog.tables[*table as usize];
            ("unknown_column".into(), format!("{}.{}.{}", def.keyspace, def.table, column).into_py(py))
        }
        Outcome::Malformed => ("malformed".into(), py.None()),
        Outcome::PythonTable => ("python_table".into(), py.None()),
        Outcome::OutOfRange => ("out_of_range".into(), py.None()),
    }
}

/// Decode one entry: (outcome, detail, updates as nested tuples, digests, (key, value) raw events).
/// `source` is (cluster, node, segment_id, descriptor_version, entry_offset, position, published_at_ms).
/// The decoding half of the differential tests.
#[pyfunction]
fn decode_entry(
    py: Python<'_>,
    data: &[u8],
    catalog: &Catalog,
    messaging_version: i64,
    source: (String, String, i64, i64, i64, i64, i64),
) -> PyResult<PyObject> {
    let cat = &*catalog.inner;
    let mut decoder = Decoder::new();
    let outcome = decoder.decode(data, cat, messaging_version);
    let (kind, detail) = outcome_tuple(py, &outcome, cat);
    let updates = PyList::empty_bound(py);
    let digests = PyList::empty_bound(py);
    let records = PyList::empty_bound(py);
    if matches!(outcome, Outcome::Updates | Outcome::PythonTable) {
        let d = &decoder.out;
        let mut writer = DigestWriter::default();
        let info = SourceInfo {
            cluster: &source.0,
            node: &source.1,
            segment_id: source.2,
            descriptor_version: source.3,
            entry_offset: source.4,
            position: source.5,
            published_at_ms: source.6,
        };
        for u in &d.updates {
            let table = u.table as usize;
            let def = &cat.tables[table];
            let rows: Vec<PyObject> =
                d.rows[u.rows.0 as usize..u.rows.1 as usize].iter().map(|r| row_tuple(py, data, d, cat, table, r)).collect();
            let markers: Vec<PyObject> = d.markers[u.markers.0 as usize..u.markers.1 as usize]
                .iter()
                .map(|m| {
                    let clustering: Vec<PyObject> = d.clustering[m.clustering.0 as usize..m.clustering.1 as usize]
                        .iter()
                        .map(|v| opt_bytes(py, data, *v))
                        .collect();
                    (
                        m.kind,
                        PyTuple::new_bound(py, clustering),
                        (m.deletion.ts, m.deletion.ldt),
                        m.start_deletion.map(|x| (x.ts, x.ldt)),
                    )
                        .into_py(py)
                })
                .collect();
            let static_row = match u.static_row {
                None => py.None(),
                Some(i) => row_tuple(py, data, d, cat, table, &d.rows[i as usize]),
            };
            updates.append((
                PyBytes::new_bound(py, &def.id),
                PyBytes::new_bound(py, bytes_of(data, u.key)),
                u.partition_deletion.map(|x| (x.ts, x.ldt)),
                static_row,
                rows,
                markers,
            ))?;
            let digest = writer.digest(data, d, cat, u);
            digests.append(PyBytes::new_bound(py, &digest))?;
            let mut key = Vec::new();
            raw_event::encode_key(&mut key, data, cat, u);
            let mut value = Vec::new();
            raw_event::encode_event(&mut value, data, d, cat, u, &digest, &info);
            records.append((
                PyBytes::new_bound(py, &key),
                PyBytes::new_bound(py, &value),
                raw_event::write_time(d, u),
                raw_event::murmur2(&key),
            ))?;
        }
    }
    Ok((kind, detail, updates, digests, records).into_py(py))
}

/// Frame, decode and digest a whole segment range in one call: (updates, their digests concatenated,
/// entries handed back because the native decoder does not publish them). What the decoder benchmark
/// times against Cassandra's own reader: no Python object per mutation.
#[pyfunction]
#[pyo3(signature = (segment, path, data, completed, header_end, segment_id, compressed, messaging_version, catalog, decompress=None, corrupt_section_type=None))]
#[allow(clippy::too_many_arguments)]
fn digest_segment(
    py: Python<'_>,
    segment: String,
    path: Option<String>,
    data: Option<&[u8]>,
    completed: bool,
    header_end: Option<i64>,
    segment_id: i64,
    compressed: bool,
    messaging_version: i64,
    catalog: &Catalog,
    decompress: Option<PyObject>,
    corrupt_section_type: Option<PyObject>,
) -> PyResult<PyObject> {
    let mut scan = new_scan(
        segment, path, data, 0, None, completed, false, header_end, segment_id, compressed, decompress,
        corrupt_section_type,
    )?;
    let cat = &*catalog.inner;
    let mut decoder = Decoder::new();
    let mut writer = DigestWriter::default();
    let mut digests: Vec<u8> = Vec::new();
    let mut canon: Vec<Vec<u8>> = vec![Vec::new(); GROUP];
    let mut filled = 0usize;
    let mut group = [[0u8; 16]; GROUP];
    let (mut updates, mut handed_back) = (0i64, 0i64);
    loop {
        let entry = match scan.next_entry(py) {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(ScanError::Strict(_)) => unreachable!("not strict"),
            Err(ScanError::Py(err)) => return Err(err),
        };
        let data = scan.entry_data(&entry);
        if decoder.decode(data, cat, messaging_version) != Outcome::Updates {
            handed_back += 1;
            continue;
        }
        for u in &decoder.out.updates {
            writer.canonical(&mut canon[filled], data, &decoder.out, cat, u);
            filled += 1;
            if filled == GROUP {
                let inputs: Vec<&[u8]> = canon.iter().map(|c| c.as_slice()).collect();
                md5::md5_many(&inputs, &mut group);
                group.iter().for_each(|d| digests.extend_from_slice(d));
                filled = 0;
            }
            updates += 1;
        }
    }
    let inputs: Vec<&[u8]> = canon[..filled].iter().map(|c| c.as_slice()).collect();
    md5::md5_many(&inputs, &mut group);
    group[..filled].iter().for_each(|d| digests.extend_from_slice(d));
    Ok((updates, PyBytes::new_bound(py, &digests), handed_back).into_py(py))
}

/// Kafka's murmur2 of `data` (the default partitioner's hash), for tests against the client's own.
#[pyfunction]
fn murmur2(data: &[u8]) -> u32 {
    raw_event::murmur2(data)
}

/// The heads of encoded raw events (raw_event::head), for a worker's batch: per value, a tuple of its
/// table ("keyspace.table") and its digest, or None where the Python reader must read it (odd bytes).
/// The table's name is one string object per table and call.
#[pyfunction]
fn raw_event_heads(py: Python<'_>, values: &Bound<'_, PyList>) -> PyResult<Py<PyList>> {
    let out = PyList::empty_bound(py);
    let mut names: Vec<(String, PyObject)> = Vec::new();
    let mut name = String::new();
    for value in values.iter() {
        let head = match value.downcast::<PyBytes>() {
            Ok(data) => raw_event::head(data.as_bytes()),
            Err(_) => None,
        };
        let (keyspace, table, digest) = match head {
            Some(found) => found,
            None => {
                out.append(py.None())?;
                continue;
            }
        };
        name.clear();
        name.push_str(keyspace);
        name.push('.');
        name.push_str(table);
        let text = match names.iter().find(|(known, _)| *known == name) {
            Some((_, text)) => text.clone_ref(py),
            None => {
                let text: PyObject = name.clone().into_py(py);
                names.push((name.clone(), text.clone_ref(py)));
                text
            }
        };
        out.append(PyTuple::new_bound(py, [text, PyBytes::new_bound(py, digest).into_py(py)]))?;
    }
    Ok(out.unbind())
}

/// One raw event's dict, as schemas/raw_event.py's `decode_raw_event` returns it (raw_event_dict.rs), or
/// None where the Python reader must read it: odd bytes, which it names, or a value that is not bytes.
#[pyfunction]
fn decode_raw_event(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<PyObject> {
    match value.downcast::<PyBytes>() {
        Ok(data) => raw_event_dict::decode(py, data.as_bytes()).unwrap_or_else(|| Ok(py.None())),
        Err(_) => Ok(py.None()),
    }
}

/// A clustering as a stored row holds it: a tuple of at most 255 values, each None or bytes that fit
/// an i32 length (None: anything else, which Python writes or refuses).
fn stored_clustering<'py>(clustering: &Bound<'py, PyAny>) -> Option<Vec<Option<Bound<'py, PyBytes>>>> {
    let tuple = clustering.downcast::<PyTuple>().ok()?;
    if tuple.len() > 255 {
        return None;
    }
    let mut values = Vec::with_capacity(tuple.len());
    for value in tuple.iter() {
        if value.is_none() {
            values.push(None);
        } else {
            match value.downcast_into::<PyBytes>() {
                Ok(b) if b.as_bytes().len() <= i32::MAX as usize => values.push(Some(b)),
                _ => return None,
            }
        }
    }
    Some(values)
}

/// A stored row value (row_codec.rs; state/store/codec.py's `encode_row_value` is the specification):
/// `row` a RowState, `due_s` its entry in the due index (0: none). None where Python must write it: a
/// row with complex cells or deletions, or a field that does not fit the format (Python names it).
#[pyfunction]
fn encode_row_value(py: Python<'_>, row: &Bound<'_, PyAny>, due_s: u64) -> PyResult<PyObject> {
    let none = || Ok(py.None());
    let complex_cells = row.getattr(intern!(py, "complex_cells"))?;
    let complex_deletions = row.getattr(intern!(py, "complex_deletions"))?;
    if complex_cells.is_truthy()? || complex_deletions.is_truthy()? {
        return none();
    }
    let clustering_values = match stored_clustering(&row.getattr(intern!(py, "clustering"))?) {
        Some(values) => values,
        None => return none(),
    };
    let clustering: Vec<Option<&[u8]>> = clustering_values.iter().map(|v| v.as_ref().map(|b| b.as_bytes())).collect();
    let liveness_obj = row.getattr(intern!(py, "liveness"))?;
    let liveness = if liveness_obj.is_none() {
        None
    } else {
        let timestamp = match int_attr(&liveness_obj, intern!(py, "timestamp"))? {
            Int::Value(v) => v,
            _ => return none(),
        };
        let ttl = match int_attr(&liveness_obj, intern!(py, "ttl"))? {
            Int::Value(v) if v >= i32::MIN as i64 && v <= i32::MAX as i64 => v as i32,
            _ => return none(),
        };
        let expiry = match int_attr(&liveness_obj, intern!(py, "local_expiration_time"))? {
            Int::Null => None,
            Int::Value(v) => Some(v),
            Int::TooBig => return none(),
        };
        if ttl != 0 || expiry.is_some() {
            Some((timestamp, Some(ttl), expiry))
        } else {
            Some((timestamp, None, None))
        }
    };
    let deletion_obj = row.getattr(intern!(py, "deletion"))?;
    let deletion = if deletion_obj.is_none() {
        None
    } else {
        match (
            int_attr(&deletion_obj, intern!(py, "timestamp"))?,
            int_attr(&deletion_obj, intern!(py, "local_deletion_time"))?,
        ) {
            (Int::Value(t), Int::Value(l)) => Some((t, l)),
            _ => return none(),
        }
    };
    let cells_obj = row.getattr(intern!(py, "cells"))?;
    let cells_dict = match cells_obj.downcast::<PyDict>() {
        Ok(d) => d,
        Err(_) => return none(),
    };
    // the names and values borrowed from the dict's objects, which it keeps alive while this runs
    let mut names: Vec<Bound<'_, PyString>> = Vec::with_capacity(cells_dict.len());
    let mut values: Vec<Bound<'_, PyAny>> = Vec::with_capacity(cells_dict.len());
    for (name, cell) in cells_dict.iter() {
        match name.downcast_into::<PyString>() {
            Ok(n) => names.push(n),
            Err(_) => return none(),
        }
        values.push(cell);
    }
    // per cell: its value object (kept here while its bytes are borrowed), timestamp, TTL, local
    // deletion time, flags
    let mut fields: Vec<(Bound<'_, PyBytes>, i64, i32, i64, u8)> = Vec::with_capacity(names.len());
    for (name, cell) in names.iter().zip(values.iter()) {
        match name.to_str() {
            Ok(n) if n.len() <= 0xFFFF => {}
            _ => return none(),
        };
        if !cell.getattr(intern!(py, "path"))?.is_none() {
            return none();
        }
        let timestamp = match int_attr(cell, intern!(py, "timestamp"))? {
            Int::Value(v) => v,
            _ => return none(),
        };
        let ttl = match int_attr(cell, intern!(py, "ttl"))? {
            Int::Value(v) if v >= i32::MIN as i64 && v <= i32::MAX as i64 => v as i32,
            _ => return none(),
        };
        let local_deletion_time = match int_attr(cell, intern!(py, "local_deletion_time"))? {
            Int::Value(v) => v,
            _ => return none(),
        };
        let flags = match int_attr(cell, intern!(py, "flags"))? {
            Int::Value(v) if v & !row_codec::CELL_FLAGS == 0 => v as u8,
            _ => return none(),
        };
        let value = match cell.getattr(intern!(py, "value"))?.downcast_into::<PyBytes>() {
            Ok(b) if b.as_bytes().len() <= u32::MAX as usize => b,
            _ => return none(),
        };
        fields.push((value, timestamp, ttl, local_deletion_time, flags));
    }
    let mut cells: Vec<row_codec::SimpleCell<'_>> = Vec::with_capacity(names.len());
    for (name, (value, timestamp, ttl, local_deletion_time, flags)) in names.iter().zip(fields.iter()) {
        cells.push(row_codec::SimpleCell {
            name: name.to_str()?,
            timestamp: *timestamp,
            ttl: *ttl,
            local_deletion_time: *local_deletion_time,
            flags: *flags,
            value: value.as_bytes(),
        });
    }
    // Python sorts the names as str (code points): the same order as their UTF-8 bytes
    cells.sort_unstable_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut out: Vec<u8> = Vec::with_capacity(64 + cells.iter().map(|c| c.name.len() + c.value.len() + 20).sum::<usize>());
    row_codec::prefix(&mut out, due_s, &clustering);
    row_codec::head(&mut out, liveness, deletion);
    row_codec::cells(&mut out, &cells);
    Ok(PyBytes::new_bound(py, &out).into_py(py))
}

/// Stored rows' reader (row_codec.rs `parse`; state/store/codec.py's `decode_row_value` is the
/// specification). Built once with the state model's classes, so that it returns the objects Python
/// builds: `RowState`, `Cell`, `Liveness` and `Deletion`, each called with its fields in order.
#[pyclass(module = "cdc_native", frozen)]
struct RowReader {
    row: PyObject,
    cell: PyObject,
    liveness: PyObject,
    deletion: PyObject,
}

#[pymethods]
impl RowReader {
    #[new]
    fn new(row: PyObject, cell: PyObject, liveness: PyObject, deletion: PyObject) -> RowReader {
        RowReader { row, cell, liveness, deletion }
    }

    /// The row of a stored row value, or None where Python must read it: a row with complex columns
    /// or deletions, a value that is not bytes, or bytes this reader does not take whole (Python
    /// names what is wrong with them).
    fn decode(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let bytes = match data.downcast::<PyBytes>() {
            Ok(b) => b,
            Err(_) => return Ok(py.None()),
        };
        let parsed = match row_codec::parse(bytes.as_bytes()) {
            Some(p) => p,
            None => return Ok(py.None()),
        };
        let clustering = PyTuple::new_bound(
            py,
            parsed.clustering.iter().map(|value| match value {
                None => py.None(),
                Some(v) => PyBytes::new_bound(py, v).into_py(py),
            }),
        );
        let liveness = match parsed.liveness {
            None => py.None(),
            Some((timestamp, ttl, expiry)) => self.liveness.call1(py, (timestamp, ttl, expiry))?,
        };
        let deletion = match parsed.deletion {
            None => py.None(),
            Some((timestamp, local_deletion_time)) => self.deletion.call1(py, (timestamp, local_deletion_time))?,
        };
        let cells = PyDict::new_bound(py);
        for c in &parsed.cells {
            let cell = self.cell.call1(
                py,
                (c.timestamp, c.ttl, c.local_deletion_time, c.flags, PyBytes::new_bound(py, c.value)),
            )?;
            cells.set_item(PyString::intern_bound(py, c.name), cell)?;
        }
        self.row.call1(py, (clustering, liveness, deletion, cells))
    }
}

/// A table's change events as JSON (change_json.rs; schemas/change_json.py's `encode_change` is the
/// specification): built once per table version from its columns, called per change.
#[pyclass(module = "cdc_native", frozen)]
struct ChangeJson {
    /// `source.version`, as JSON
    version: String,
    partition_key: Vec<(String, change_json::Kind)>,
    clustering: Vec<(String, change_json::Kind)>,
    /// every other column: its name (for the image's dicts), as JSON, static or not, kind
    columns: Vec<(Py<PyString>, String, bool, change_json::Kind)>,
    /// the key's columns (partition key, then clustering) in the order of their names
    key_order: Vec<usize>,
}

fn json_name(name: &str) -> String {
    let mut out = String::new();
    change_json::string(&mut out, name);
    out
}

fn kind_of(code: u8) -> PyResult<change_json::Kind> {
    change_json::Kind::from_code(code).ok_or_else(|| PyValueError::new_err(format!("unknown JSON kind {}", code)))
}

/// Whether a Python int that must fit an i64 did (None: it is None).
enum Int {
    Null,
    Value(i64),
    TooBig,
}

impl Int {
    fn of(value: &Bound<'_, PyAny>) -> Int {
        if value.is_none() {
            return Int::Null;
        }
        match value.extract::<i64>() {
            Ok(v) => Int::Value(v),
            Err(_) => Int::TooBig,
        }
    }

    /// An optional i64, or None when it does not fit one.
    fn fitted(self) -> Option<Option<i64>> {
        match self {
            Int::Null => Some(None),
            Int::Value(v) => Some(Some(v)),
            Int::TooBig => None,
        }
    }
}

fn int_attr(source: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<Int> {
    Ok(Int::of(&source.getattr(name)?))
}

/// One image's parts, borrowed: its partition key, its clustering (None: the static-only row) and each
/// column's value in `ChangeJson::columns` order (None: null).
struct ImageParts<'a> {
    partition_key: &'a [u8],
    clustering: Option<Vec<Option<&'a [u8]>>>,
    values: Vec<Option<&'a [u8]>>,
}

/// The envelope's source fields (a ChangeSource's).
#[derive(Clone)]
struct SourceParts {
    name: String,
    keyspace: String,
    table: String,
    cluster: String,
    node: Option<String>,
    write_time_us: Option<i64>,
    segment_id: Option<i64>,
    offset: Option<i64>,
    snapshot: bool,
    expired: bool,
}

/// The Python objects an image's parts are borrowed from.
struct ImageObjects<'py> {
    partition_key: Bound<'py, PyBytes>,
    clustering: Option<Vec<Option<Bound<'py, PyBytes>>>>,
    values: Vec<Option<Bound<'py, PyBytes>>>,
}

impl<'py> ImageObjects<'py> {
    fn parts(&self) -> ImageParts<'_> {
        ImageParts {
            partition_key: self.partition_key.as_bytes(),
            clustering: self
                .clustering
                .as_ref()
                .map(|values| values.iter().map(|v| v.as_ref().map(|b| b.as_bytes())).collect()),
            values: self.values.iter().map(|v| v.as_ref().map(|b| b.as_bytes())).collect(),
        }
    }
}

impl SourceParts {
    /// A ChangeSource's fields; None where an int does not fit or a name is missing (Python decides).
    fn of(source: &Bound<'_, PyAny>) -> PyResult<Option<SourceParts>> {
        let py = source.py();
        let text = |name: &Bound<'_, PyString>| -> PyResult<Option<String>> {
            let v = source.getattr(name)?;
            if v.is_none() {
                return Ok(None);
            }
            Ok(Some(v.extract::<String>()?))
        };
        let (write_time_us, segment_id, offset) = match (
            int_attr(source, intern!(py, "write_time_us"))?.fitted(),
            int_attr(source, intern!(py, "segment_id"))?.fitted(),
            int_attr(source, intern!(py, "offset"))?.fitted(),
        ) {
            (Some(w), Some(s), Some(o)) => (w, s, o),
            _ => return Ok(None),
        };
        let (name, keyspace, table, cluster, node) = match (
            text(intern!(py, "name"))?,
            text(intern!(py, "keyspace"))?,
            text(intern!(py, "table"))?,
            text(intern!(py, "cluster"))?,
        ) {
            (Some(n), Some(k), Some(t), Some(c)) => (n, k, t, c, text(intern!(py, "node"))?),
            _ => return Ok(None),
        };
        Ok(Some(SourceParts {
            name,
            keyspace,
            table,
            cluster,
            node,
            write_time_us,
            segment_id,
            offset,
            snapshot: source.getattr(intern!(py, "snapshot"))?.is_truthy()?,
            expired: source.getattr(intern!(py, "expired"))?.is_truthy()?,
        }))
    }
}

impl ChangeJson {
    /// A RowImage's parts; None where Python decides (a field that is not bytes where bytes belong).
    fn image_objects<'py>(&self, image: &Bound<'py, PyAny>) -> PyResult<Option<ImageObjects<'py>>> {
        let py = image.py();
        let partition_key = match image.getattr(intern!(py, "partition_key"))?.downcast_into::<PyBytes>() {
            Ok(b) => b,
            Err(_) => return Ok(None),
        };
        let clustering = image.getattr(intern!(py, "clustering"))?;
        let clustering = if clustering.is_none() {
            None
        } else {
            let tuple = match clustering.downcast::<PyTuple>() {
                Ok(t) if t.len() >= self.clustering.len() => t,
                _ => return Ok(None),
            };
            let mut values = Vec::with_capacity(self.clustering.len());
            for i in 0..self.clustering.len() {
                let raw = tuple.get_item(i)?;
                if raw.is_none() {
                    values.push(None);
                } else {
                    match raw.downcast_into::<PyBytes>() {
                        Ok(b) => values.push(Some(b)),
                        Err(_) => return Ok(None),
                    }
                }
            }
            Some(values)
        };
        let statics = image.getattr(intern!(py, "static"))?;
        let regular = image.getattr(intern!(py, "regular"))?;
        let (statics, regular) = match (statics.downcast::<PyDict>(), regular.downcast::<PyDict>()) {
            (Ok(s), Ok(r)) => (s.clone(), r.clone()),
            _ => return Ok(None),
        };
        let value_name = intern!(py, "value");
        let mut values = Vec::with_capacity(self.columns.len());
        for (key, _, is_static, _) in &self.columns {
            let cell = if *is_static { statics.get_item(key.bind(py))? } else { regular.get_item(key.bind(py))? };
            match cell {
                None => values.push(None),
                Some(cell) => match cell.getattr(value_name)?.downcast_into::<PyBytes>() {
                    Ok(b) => values.push(Some(b)),
                    Err(_) => return Ok(None), // a collection's elements, a counter: Python
                },
            }
        }
        Ok(Some(ImageObjects { partition_key, clustering, values }))
    }

    /// One image as its JSON object, the key columns' JSON forms into `keys`; false: Python decides.
    fn write_row(
        &self,
        out: &mut String,
        image: &ImageParts<'_>,
        keys: &mut Vec<String>,
        repr: &dyn Fn(f64) -> Option<String>,
    ) -> bool {
        keys.clear();
        let partition_key = image.partition_key;
        out.push('{');
        let mut first = true;
        let mut pos = 0usize;
        for (i, (name, kind)) in self.partition_key.iter().enumerate() {
            let raw = if self.partition_key.len() == 1 {
                partition_key
            } else {
                // composite: per column u16 length, bytes, end-of-component byte
                if pos + 2 > partition_key.len() {
                    return false;
                }
                let size = usize::from(u16::from_be_bytes([partition_key[pos], partition_key[pos + 1]]));
                let end = pos + 2 + size;
                if end + 1 > partition_key.len() {
                    return false;
                }
                let part = &partition_key[pos + 2..end];
                pos = end + 1;
                if i + 1 == self.partition_key.len() && pos < partition_key.len() {
                    return false; // more components than columns
                }
                part
            };
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(name);
            out.push(':');
            let at = out.len();
            if !change_json::value(out, *kind, raw, repr) {
                return false;
            }
            keys.push(out[at..].to_string());
        }
        for (i, (name, kind)) in self.clustering.iter().enumerate() {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(name);
            out.push(':');
            let at = out.len();
            match image.clustering.as_ref().and_then(|c| c.get(i).copied().flatten()) {
                Some(raw) => {
                    if !change_json::value(out, *kind, raw, repr) {
                        return false;
                    }
                }
                None => out.push_str("null"),
            }
            keys.push(out[at..].to_string());
        }
        for ((_, name, _, kind), value) in self.columns.iter().zip(image.values.iter()) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(name);
            out.push(':');
            match value {
                None => out.push_str("null"),
                Some(raw) => {
                    if !change_json::value(out, *kind, raw, repr) {
                        return false;
                    }
                }
            }
        }
        out.push('}');
        true
    }

    /// A change's Kafka key and value; None where Python must write them. The key is the last image's
    /// (after, else before), as encode_change takes it.
    fn write_change(
        &self,
        py: Python<'_>,
        before: Option<&ImageParts<'_>>,
        after: Option<&ImageParts<'_>>,
        op: &str,
        source: &SourceParts,
        ts_ms: i64,
    ) -> Option<(String, String)> {
        if before.is_none() && after.is_none() {
            return None;
        }
        let repr = |v: f64| -> Option<String> { PyFloat::new_bound(py, v).repr().ok().map(|r| r.to_string()) };
        let mut value = String::with_capacity(1024);
        let mut keys: Vec<String> = Vec::new();
        let mut key_values: Vec<String> = Vec::new();
        for (field, image) in [("{\"before\":", before), (",\"after\":", after)] {
            value.push_str(field);
            match image {
                None => value.push_str("null"),
                Some(image) => {
                    if !self.write_row(&mut value, image, &mut keys, &repr) {
                        return None;
                    }
                    key_values = keys.clone();
                }
            }
        }
        value.push_str(",\"op\":");
        change_json::string(&mut value, op);
        // the source record, as ChangeSource.as_dict writes it
        let int_json = |out: &mut String, v: Option<i64>| match v {
            Some(v) => {
                let _ = std::fmt::Write::write_fmt(out, format_args!("{}", v));
            }
            None => out.push_str("null"),
        };
        value.push_str(",\"source\":{\"version\":");
        value.push_str(&self.version);
        value.push_str(",\"connector\":\"cassandra\",\"name\":");
        change_json::string(&mut value, &source.name);
        value.push_str(",\"ts_ms\":");
        let source_ms = match source.write_time_us {
            Some(us) => us.div_euclid(1000),
            None => ts_ms,
        };
        int_json(&mut value, Some(source_ms));
        value.push_str(if source.snapshot { ",\"snapshot\":\"true\",\"db\":" } else { ",\"snapshot\":\"false\",\"db\":" });
        change_json::string(&mut value, &source.keyspace);
        value.push_str(",\"table\":");
        change_json::string(&mut value, &source.table);
        value.push_str(",\"cluster\":");
        change_json::string(&mut value, &source.cluster);
        value.push_str(",\"keyspace\":");
        change_json::string(&mut value, &source.keyspace);
        value.push_str(",\"write_time_us\":");
        int_json(&mut value, source.write_time_us);
        value.push_str(",\"node\":");
        match &source.node {
            None => value.push_str("null"),
            Some(node) => change_json::string(&mut value, node),
        }
        value.push_str(",\"segment_id\":");
        int_json(&mut value, source.segment_id);
        value.push_str(",\"offset\":");
        int_json(&mut value, source.offset);
        value.push_str(if source.expired { ",\"expired\":true}" } else { ",\"expired\":false}" });
        value.push_str(",\"ts_ms\":");
        int_json(&mut value, Some(ts_ms));
        value.push('}');
        // the key: the key columns by name, sorted
        let mut key = String::with_capacity(128);
        key.push('{');
        let names: Vec<&String> = self.partition_key.iter().chain(self.clustering.iter()).map(|(n, _)| n).collect();
        for (n, i) in self.key_order.iter().enumerate() {
            if n > 0 {
                key.push(',');
            }
            key.push_str(names[*i]);
            key.push(':');
            key.push_str(&key_values[*i]);
        }
        key.push('}');
        Some((key, value))
    }
}

#[pymethods]
impl ChangeJson {
    /// `version`: source.version; the columns as (name, kind code) and, for the others, (name,
    /// static, kind code), each list in the order of the row's JSON object.
    #[new]
    fn new(
        py: Python<'_>,
        version: &str,
        partition_key: Vec<(String, u8)>,
        clustering: Vec<(String, u8)>,
        columns: Vec<(String, bool, u8)>,
    ) -> PyResult<ChangeJson> {
        let mut names: Vec<(String, usize)> = Vec::new();
        let mut key_columns = Vec::new();
        for (name, code) in partition_key.iter() {
            names.push((name.clone(), names.len()));
            key_columns.push((json_name(name), kind_of(*code)?));
        }
        let mut clustering_columns = Vec::new();
        for (name, code) in clustering.iter() {
            names.push((name.clone(), names.len()));
            clustering_columns.push((json_name(name), kind_of(*code)?));
        }
        names.sort();
        let mut others = Vec::new();
        for (name, is_static, code) in columns {
            let key: Py<PyString> = PyString::new_bound(py, &name).unbind();
            others.push((key, json_name(&name), is_static, kind_of(code)?));
        }
        Ok(ChangeJson {
            version: json_name(version),
            partition_key: key_columns,
            clustering: clustering_columns,
            columns: others,
            key_order: names.into_iter().map(|(_, i)| i).collect(),
        })
    }

    /// The change's Kafka key and value (`encode_change`), or None where Python must encode it. `op` is
    /// the envelope's, `source` a ChangeSource.
    #[pyo3(signature = (before, after, op, source, ts_ms))]
    fn encode(
        &self,
        py: Python<'_>,
        before: Option<Bound<'_, PyAny>>,
        after: Option<Bound<'_, PyAny>>,
        op: &str,
        source: Bound<'_, PyAny>,
        ts_ms: i64,
    ) -> PyResult<Option<(Py<PyBytes>, Py<PyBytes>)>> {
        let mut objects = Vec::with_capacity(2);
        for image in [&before, &after] {
            objects.push(match image {
                None => None,
                Some(image) => match self.image_objects(image)? {
                    None => return Ok(None),
                    found => found,
                },
            });
        }
        let source = match SourceParts::of(&source)? {
            None => return Ok(None),
            Some(s) => s,
        };
        let parts: Vec<Option<ImageParts<'_>>> = objects.iter().map(|o| o.as_ref().map(|o| o.parts())).collect();
        Ok(self.write_change(py, parts[0].as_ref(), parts[1].as_ref(), op, &source, ts_ms).map(|(key, value)| {
            (PyBytes::new_bound(py, key.as_bytes()).unbind(), PyBytes::new_bound(py, value.as_bytes()).unbind())
        }))
    }
}

/// The whole merge of a table's common raw event (row_merge.rs; the Python merge is the
/// specification): built once per table version with the table's `ChangeJson`, called per event with
/// the rows the event names and their stored values. It returns what the event wrote and emitted, or
/// None for anything but rows of plain live cells over stored rows of the same kind, which the Python
/// merge then takes from the start (nothing was written).
#[pyclass(module = "cdc_native", frozen)]
struct TableMerge {
    json: Py<ChangeJson>,
    /// the changes' source, but for each event's node, segment and offset and each change's write time
    source: SourceParts,
    /// the columns' names by rank (sorted by their bytes, a stored row's order)
    names: Vec<String>,
    ranks: HashMap<String, usize>,
    /// per column of the ChangeJson, in its order: the column's rank
    slots: Vec<usize>,
    /// the table's id as raw events name it (None: `read_plain` and `merge_raw` take no event)
    table_id: Option<String>,
    /// the node and segment of a bootstrap read's source (such events are the Python merge's)
    snapshot_source: Option<(String, i64)>,
}

/// A merged row's image parts: its values in the ChangeJson's column order (`slots`: each one's rank).
fn image_parts<'a>(
    partition_key: &'a [u8],
    clustering: &[Option<&'a [u8]>],
    row: &row_merge::PlainRow<'a>,
    slots: &[usize],
) -> ImageParts<'a> {
    ImageParts {
        partition_key,
        clustering: Some(clustering.to_vec()),
        values: slots.iter().map(|rank| row.cells[*rank].map(|(_, v)| v)).collect(),
    }
}

/// One named row of an event, its Python objects: key, canonical clustering, the record's liveness
/// timestamp and cells (rank, timestamp, value), and its stored value.
struct EventRow<'py> {
    key: Bound<'py, PyBytes>,
    clustering: Vec<Option<Bound<'py, PyBytes>>>,
    liveness: Option<i64>,
    cells: Vec<(usize, i64, Bound<'py, PyBytes>)>,
    stored: Option<Bound<'py, PyBytes>>,
}

impl<'py> EventRow<'py> {
    fn parts(&self) -> MergeRow<'_> {
        MergeRow {
            key: self.key.as_bytes(),
            clustering: self.clustering.iter().map(|v| v.as_ref().map(|b| b.as_bytes())).collect(),
            liveness: self.liveness,
            cells: self.cells.iter().map(|(r, t, v)| (*r, *t, v.as_bytes())).collect(),
            stored: self.stored.as_ref().map(|b| b.as_bytes()),
        }
    }
}

/// One row of an event as the merge takes it: its key, canonical clustering, liveness timestamp,
/// cells (rank, timestamp, value) and stored value (None: no stored row).
struct MergeRow<'a> {
    key: &'a [u8],
    clustering: Vec<Option<&'a [u8]>>,
    liveness: Option<i64>,
    cells: Vec<(usize, i64, &'a [u8])>,
    stored: Option<&'a [u8]>,
}

impl TableMerge {
    /// A prepared row (key, canonical clustering, record) and its stored value; None unless the record
    /// is one of plain live cells of known columns, with no deletion.
    fn event_row<'py>(
        &self,
        row: &Bound<'py, PyAny>,
        stored: Bound<'py, PyAny>,
    ) -> PyResult<Option<EventRow<'py>>> {
        let py = row.py();
        let tuple = match row.downcast::<PyTuple>() {
            Ok(t) if t.len() == 3 => t,
            _ => return Ok(None),
        };
        let key = match tuple.get_item(0)?.downcast_into::<PyBytes>() {
            Ok(k) => k,
            Err(_) => return Ok(None),
        };
        let clustering = match stored_clustering(&tuple.get_item(1)?) {
            Some(values) => values,
            None => return Ok(None),
        };
        let record = tuple.get_item(2)?;
        let record = match record.downcast::<PyDict>() {
            Ok(d) => d,
            Err(_) => return Ok(None),
        };
        let field = |name: &Bound<'_, PyString>| -> PyResult<Option<Bound<'py, PyAny>>> { record.get_item(name) };
        match field(intern!(py, "deletion"))? {
            Some(d) if d.is_none() => {}
            _ => return Ok(None),
        }
        match field(intern!(py, "complex_deletions"))? {
            Some(d) if d.len()? == 0 => {}
            _ => return Ok(None),
        }
        let liveness = match field(intern!(py, "liveness"))? {
            None => return Ok(None),
            Some(l) if l.is_none() => None,
            Some(l) => {
                let l = match l.downcast::<PyDict>() {
                    Ok(d) => d.clone(),
                    Err(_) => return Ok(None),
                };
                match l.get_item(intern!(py, "ttl"))? {
                    Some(ttl) if ttl.is_none() || ttl.extract::<i64>().map_or(false, |t| t == 0) => {}
                    _ => return Ok(None),
                }
                match l.get_item(intern!(py, "timestamp"))?.map(|t| t.extract::<i64>()) {
                    Some(Ok(t)) => Some(t),
                    _ => return Ok(None),
                }
            }
        };
        let items = match field(intern!(py, "cells"))? {
            Some(c) => match c.downcast_into::<PyList>() {
                Ok(l) => l,
                Err(_) => return Ok(None),
            },
            None => return Ok(None),
        };
        let mut cells = Vec::with_capacity(items.len());
        for item in items.iter() {
            let item = match item.downcast_into::<PyDict>() {
                Ok(d) => d,
                Err(_) => return Ok(None),
            };
            match item.get_item(intern!(py, "path"))? {
                Some(p) if p.is_none() => {}
                _ => return Ok(None),
            }
            match item.get_item(intern!(py, "flags"))?.map(|f| f.extract::<i64>()) {
                Some(Ok(f)) if f & 0x03 == 0 => {} // neither a tombstone nor expiring
                _ => return Ok(None),
            }
            let rank = match item.get_item(intern!(py, "column"))? {
                Some(c) => match c.downcast::<PyString>() {
                    Ok(name) => match self.ranks.get(name.to_str()?) {
                        Some(rank) => *rank,
                        None => return Ok(None),
                    },
                    Err(_) => return Ok(None),
                },
                None => return Ok(None),
            };
            let timestamp = match item.get_item(intern!(py, "timestamp"))?.map(|t| t.extract::<i64>()) {
                Some(Ok(t)) => t,
                _ => return Ok(None),
            };
            let value = match item.get_item(intern!(py, "value"))?.map(|v| v.downcast_into::<PyBytes>()) {
                Some(Ok(v)) if v.as_bytes().len() <= u32::MAX as usize => v,
                _ => return Ok(None),
            };
            cells.push((rank, timestamp, value));
        }
        let stored = if stored.is_none() {
            None
        } else {
            match stored.downcast_into::<PyBytes>() {
                Ok(b) => Some(b),
                Err(_) => return Ok(None),
            }
        };
        Ok(Some(EventRow { key, clustering, liveness, cells, stored }))
    }
}

#[pymethods]
impl TableMerge {
    /// `json`: the table's ChangeJson (a table without static columns); the other fields are the
    /// change events' source (a ChangeSource's `cluster`, `keyspace`, `table` and `name`).
    /// `table_id` (the id's text in raw events) and `snapshot_source` (a bootstrap read's node and
    /// segment id) let it merge events straight from a raw record's value (`read_plain`, `merge_raw`).
    #[new]
    #[pyo3(signature = (json, cluster, keyspace, table, name, table_id=None, snapshot_source=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        json: Py<ChangeJson>,
        cluster: String,
        keyspace: String,
        table: String,
        name: String,
        table_id: Option<String>,
        snapshot_source: Option<(String, i64)>,
    ) -> PyResult<TableMerge> {
        let mut names = Vec::new();
        for (key, _, is_static, _) in &json.get().columns {
            if *is_static {
                return Err(PyValueError::new_err("TableMerge takes tables without static columns"));
            }
            names.push(key.bind(py).to_str()?.to_string());
        }
        let mut sorted = names.clone();
        sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let ranks: HashMap<String, usize> = sorted.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        let slots = names.iter().map(|n| ranks[n]).collect();
        let source = SourceParts {
            name,
            keyspace,
            table,
            cluster,
            node: None,
            write_time_us: None,
            segment_id: None,
            offset: None,
            snapshot: false,
            expired: false,
        };
        Ok(TableMerge { json, source, names: sorted, ranks, slots, table_id, snapshot_source })
    }

    /// Merge one event: `rows` its prepared rows (key, canonical clustering, record), `stored` their
    /// stored values (None: no row), `node`, `segment_id` and `offset` where the event was read (the
    /// changes' source; each change's write time is its row's), `ts_ms` the emit time. Returns (whether
    /// the stored state changed, the new value of each row or None where it stays, the change records as
    /// (op, key, value) in clustering order, the event's write time as `raw_event_write_time` gives it),
    /// or None.
    #[pyo3(signature = (partition_key, rows, stored, node, segment_id, offset, ts_ms))]
    #[allow(clippy::too_many_arguments)]
    fn merge(
        &self,
        py: Python<'_>,
        partition_key: &Bound<'_, PyBytes>,
        rows: &Bound<'_, PyList>,
        stored: &Bound<'_, PyList>,
        node: Option<String>,
        segment_id: &Bound<'_, PyAny>,
        offset: &Bound<'_, PyAny>,
        ts_ms: i64,
    ) -> PyResult<Option<(bool, Py<PyList>, Py<PyList>, i64)>> {
        if rows.len() != stored.len() {
            return Err(PyValueError::new_err("TableMerge.merge: one stored value per row"));
        }
        let mut objects = Vec::with_capacity(rows.len());
        for (row, value) in rows.iter().zip(stored.iter()) {
            match self.event_row(&row, value)? {
                Some(r) => objects.push(r),
                None => return Ok(None),
            }
        }
        let source = match (Int::of(segment_id).fitted(), Int::of(offset).fitted()) {
            (Some(segment_id), Some(offset)) => SourceParts { node, segment_id, offset, ..self.source.clone() },
            _ => return Ok(None),
        };
        let parts: Vec<MergeRow<'_>> = objects.iter().map(|r| r.parts()).collect();
        self.merge_rows(py, partition_key.as_bytes(), &parts, source, ts_ms)
    }

    /// The event in a raw record's value if `merge_raw` may take it (raw_event_plain.rs: an event of
    /// this table, not a bootstrap read, of plain rows whose cells are all of known columns): (its
    /// partition key, its rows' clusterings as tuples), for the caller to find their keys and stored
    /// values. None: decode the event and merge it the usual way.
    fn read_plain(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Option<(Py<PyBytes>, Py<PyList>)>> {
        let data = match value.downcast::<PyBytes>() {
            Ok(data) => data.as_bytes(),
            Err(_) => return Ok(None),
        };
        let event = match self.plain_event(data) {
            Some((event, _)) => event,
            None => return Ok(None),
        };
        let clusterings = PyList::empty_bound(py);
        for row in &event.rows {
            let values = row.clustering.iter().map(|v| match v {
                Some(b) => PyBytes::new_bound(py, b).into_any(),
                None => py.None().into_bound(py),
            });
            clusterings.append(PyTuple::new_bound(py, values))?;
        }
        Ok(Some((PyBytes::new_bound(py, event.partition_key).unbind(), clusterings.unbind())))
    }

    /// `merge` of the event in a raw record's value that `read_plain` read: `keys` and `clusterings`
    /// its rows' keys and canonical clusterings, `stored` their stored values, in the order of its rows.
    /// The same result as `merge` of its prepared rows, or None.
    #[pyo3(signature = (value, keys, clusterings, stored, ts_ms))]
    fn merge_raw(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyBytes>,
        keys: &Bound<'_, PyList>,
        clusterings: &Bound<'_, PyList>,
        stored: &Bound<'_, PyList>,
        ts_ms: i64,
    ) -> PyResult<Option<(bool, Py<PyList>, Py<PyList>, i64)>> {
        let (event, ranks) = match self.plain_event(value.as_bytes()) {
            Some(found) => found,
            None => return Ok(None),
        };
        let n = event.rows.len();
        if keys.len() != n || clusterings.len() != n || stored.len() != n {
            return Err(PyValueError::new_err("TableMerge.merge_raw: one key, clustering and stored value per row"));
        }
        // the Python objects the rows' parts are borrowed from
        let mut objects = Vec::with_capacity(n);
        for i in 0..n {
            let key = match keys.get_item(i)?.downcast_into::<PyBytes>() {
                Ok(k) => k,
                Err(_) => return Ok(None),
            };
            let clustering = match stored_clustering(&clusterings.get_item(i)?) {
                Some(values) => values,
                None => return Ok(None),
            };
            let value = stored.get_item(i)?;
            let value = if value.is_none() {
                None
            } else {
                match value.downcast_into::<PyBytes>() {
                    Ok(b) => Some(b),
                    Err(_) => return Ok(None),
                }
            };
            objects.push((key, clustering, value));
        }
        let mut parts = Vec::with_capacity(n);
        for ((row, row_ranks), (key, clustering, value)) in event.rows.iter().zip(ranks.iter()).zip(objects.iter()) {
            parts.push(MergeRow {
                key: key.as_bytes(),
                clustering: clustering.iter().map(|v| v.as_ref().map(|b| b.as_bytes())).collect(),
                liveness: row.liveness,
                cells: row.cells.iter().zip(row_ranks.iter()).map(|(c, r)| (*r, c.timestamp, c.value)).collect(),
                stored: value.as_ref().map(|b| b.as_bytes()),
            });
        }
        let source = SourceParts {
            node: Some(event.node.to_string()),
            segment_id: Some(event.segment_id),
            offset: Some(event.entry_offset),
            ..self.source.clone()
        };
        self.merge_rows(py, event.partition_key, &parts, source, ts_ms)
    }
}

impl TableMerge {
    /// The plain event in `data` if it is this table's, no bootstrap read, and writes known columns only;
    /// with the rank of each of its rows' cells.
    fn plain_event<'a>(&self, data: &'a [u8]) -> Option<(raw_event_plain::PlainEvent<'a>, Vec<Vec<usize>>)> {
        let table_id = self.table_id.as_deref()?;
        let event = raw_event_plain::read(data)?;
        if event.table_id != table_id {
            return None;
        }
        if let Some((node, segment_id)) = &self.snapshot_source {
            if event.node == node && event.segment_id == *segment_id {
                return None;
            }
        }
        // each cell's column rank; a column of another table version leaves the event
        let mut ranks = Vec::with_capacity(event.rows.len());
        for row in &event.rows {
            let mut row_ranks = Vec::with_capacity(row.cells.len());
            for cell in &row.cells {
                row_ranks.push(*self.ranks.get(cell.column)?);
            }
            ranks.push(row_ranks);
        }
        Some((event, ranks))
    }

    /// The merge of one event's rows (see `merge`); `source` with the event's node, segment and offset.
    fn merge_rows(
        &self,
        py: Python<'_>,
        partition_key: &[u8],
        objects: &[MergeRow<'_>],
        mut source: SourceParts,
        ts_ms: i64,
    ) -> PyResult<Option<(bool, Py<PyList>, Py<PyList>, i64)>> {
        // the rows in clustering order; a row named twice is the Python merge's (each would meet the other)
        let mut order: Vec<usize> = (0..objects.len()).collect();
        order.sort_by(|a, b| objects[*a].key.cmp(objects[*b].key));
        if order.windows(2).any(|w| objects[w[0]].key == objects[w[1]].key) {
            return Ok(None);
        }
        let columns = self.names.len();
        let rank_of = |name: &str| self.ranks.get(name).copied();
        // per row: the stored row, the row after the merge, the newest kept timestamp
        let mut merged = Vec::with_capacity(objects.len());
        for row in objects {
            let before = match row.stored {
                None => None,
                Some(value) => match row_merge::stored(value, &row.clustering, columns, &rank_of) {
                    Some(r) => Some(r),
                    None => return Ok(None),
                },
            };
            let mut after = before.clone().unwrap_or_else(|| row_merge::PlainRow::empty(columns));
            let kept = after.merge(row.liveness, &row.cells);
            merged.push((before, after, kept));
        }
        order.retain(|i| merged[*i].2.is_some()); // the rows the event changed
        let json = self.json.get();
        let records = PyList::empty_bound(py);
        for &i in &order {
            let clustering = &objects[i].clustering;
            let (before, after, kept) = &merged[i];
            let op = match before {
                Some(b) if b.exists() => {
                    if b.same_values(after) {
                        continue;
                    }
                    "u"
                }
                _ => "c",
            };
            let before_parts = match before {
                Some(b) if b.exists() => Some(image_parts(partition_key, clustering, b, &self.slots)),
                _ => None,
            };
            let after_parts = image_parts(partition_key, clustering, after, &self.slots);
            source.write_time_us = *kept;
            match json.write_change(py, before_parts.as_ref(), Some(&after_parts), op, &source, ts_ms) {
                Some((key, value)) => records.append((
                    PyString::intern_bound(py, op),
                    PyBytes::new_bound(py, key.as_bytes()),
                    PyBytes::new_bound(py, value.as_bytes()),
                ))?,
                None => return Ok(None),
            }
        }
        let values = PyList::empty_bound(py);
        for (row, (_, after, kept)) in objects.iter().zip(merged.iter()) {
            if kept.is_none() {
                values.append(py.None())?;
                continue;
            }
            let new = after.encode(&row.clustering, &self.names);
            match row.stored {
                Some(old) if old == new.as_slice() => values.append(py.None())?,
                _ => values.append(PyBytes::new_bound(py, &new))?,
            }
        }
        // the event's write time (raw_event_write_time): its newest part, kept or not
        let mut event_time = i64::MIN;
        for row in objects {
            let newest = row.cells.iter().map(|(_, t, _)| *t).chain(row.liveness).max();
            event_time = event_time.max(newest.unwrap_or(i64::MIN));
        }
        Ok(Some((!order.is_empty(), values.unbind(), records.unbind(), event_time)))
    }
}

/// Digests computed side by side (md5::md5_many).
const GROUP: usize = 8;

/// One encoded event waiting for its digest.
#[derive(Default)]
struct Slot {
    canonical: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
    digest_at: usize,
    end: i64,
    partition: i64,
}

/// The batch's output lists.
struct Lists<'py> {
    keys: Bound<'py, PyList>,
    values: Bound<'py, PyList>,
    ends: Bound<'py, PyList>,
    partitions: Bound<'py, PyList>,
}

/// Digest the filled slots together, patch each digest into its value, append them to the lists.
fn flush(slots: &mut [Slot], filled: usize, with_partitions: bool, lists: &Lists<'_>) -> PyResult<()> {
    if filled == 0 {
        return Ok(());
    }
    let mut digests = [[0u8; 16]; GROUP];
    {
        let inputs: Vec<&[u8]> = slots[..filled].iter().map(|s| s.canonical.as_slice()).collect();
        md5::md5_many(&inputs, &mut digests);
    }
    let py = lists.keys.py();
    for (slot, digest) in slots[..filled].iter_mut().zip(digests.iter()) {
        slot.value[slot.digest_at..slot.digest_at + 16].copy_from_slice(digest);
        lists.keys.append(PyBytes::new_bound(py, &slot.key))?;
        lists.values.append(PyBytes::new_bound(py, &slot.value))?;
        lists.ends.append(slot.end)?;
        if with_partitions {
            lists.partitions.append(slot.partition)?;
        }
    }
    Ok(())
}

/// Reads one segment range and returns its raw events in batches (see the module docs).
#[pyclass(module = "cdc_native")]
struct SegmentBatchReader {
    scan: Scan,
    decoder: Decoder,
    digest: DigestWriter,
    catalog: Option<Arc<mutation_decoder::Catalog>>,
    messaging_version: i64,
    descriptor_version: i64,
    segment_id: i64,
    cluster: String,
    node: String,
    slots: Vec<Slot>,
}

#[pymethods]
impl SegmentBatchReader {
    #[new]
    #[pyo3(signature = (segment, path, data, start, limit, completed, header_end, segment_id, compressed, decompress, corrupt_section_type, messaging_version, descriptor_version, cluster, node))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        segment: String,
        path: Option<String>,
        data: Option<&[u8]>,
        start: i64,
        limit: Option<i64>,
        completed: bool,
        header_end: Option<i64>,
        segment_id: i64,
        compressed: bool,
        decompress: Option<PyObject>,
        corrupt_section_type: Option<PyObject>,
        messaging_version: i64,
        descriptor_version: i64,
        cluster: String,
        node: String,
    ) -> PyResult<SegmentBatchReader> {
        let scan = new_scan(
            segment, path, data, start, limit, completed, false, header_end, segment_id, compressed, decompress,
            corrupt_section_type,
        )?;
        Ok(SegmentBatchReader {
            scan,
            decoder: Decoder::new(),
            digest: DigestWriter::default(),
            catalog: None,
            messaging_version,
            descriptor_version,
            segment_id,
            cluster,
            node,
            slots: (0..GROUP).map(|_| Slot::default()).collect(),
        })
    }

    /// Up to about `max_events` raw events (whole entries), as a tuple:
    /// (keys, values, ends, partitions, entries, updates, skipped, first write time, last write time,
    /// pending, done, end of the last entry consumed). `partitions` are murmur2(key) positive modulo `partition_count` (when > 0).
    /// `pending` is (position, end, bytes) of an entry for the Python decoder, read right after the
    /// events returned; `done` means the walk has stopped and nothing is pending.
    fn next_batch(
        &mut self,
        py: Python<'_>,
        catalog: &Catalog,
        max_events: usize,
        published_at_ms: i64,
        partition_count: i64,
    ) -> PyResult<PyObject> {
        let same = matches!(&self.catalog, Some(c) if Arc::ptr_eq(c, &catalog.inner));
        if !same {
            self.catalog = Some(catalog.inner.clone());
            self.decoder.reset();
        }
        let cat = catalog.inner.clone();
        let lists = Lists {
            keys: PyList::empty_bound(py),
            values: PyList::empty_bound(py),
            ends: PyList::empty_bound(py),
            partitions: PyList::empty_bound(py),
        };
        let mut filled = 0usize;
        let mut entries = 0i64;
        let mut updates = 0i64;
        let mut skipped = 0i64;
        let mut first_write: Option<i64> = None;
        let mut last_write: Option<i64> = None;
        let mut pending = py.None();
        let mut last_end: Option<i64> = None;
        let mut events = 0usize;
        while events < max_events {
            let entry = match self.scan.next_entry(py) {
                Ok(Some(entry)) => entry,
                Ok(None) => break,
                Err(ScanError::Strict(_)) => unreachable!("the batch reader never reads strictly"),
                Err(ScanError::Py(err)) => return Err(err),
            };
            let data = self.scan.entry_data(&entry);
            let outcome = self.decoder.decode(data, &cat, self.messaging_version);
            if outcome != Outcome::Updates {
                pending = (entry.position, entry.end, PyBytes::new_bound(py, data)).into_py(py);
                break;
            }
            entries += 1;
            last_end = Some(entry.end);
            let d = &self.decoder.out;
            let info = SourceInfo {
                cluster: &self.cluster,
                node: &self.node,
                segment_id: self.segment_id,
                descriptor_version: self.descriptor_version,
                entry_offset: entry.position,
                position: entry.end,
                published_at_ms,
            };
            for u in &d.updates {
                updates += 1;
                if cat.tables[u.table as usize].mode != Mode::Publish {
                    skipped += 1;
                    continue;
                }
                let slot = &mut self.slots[filled];
                self.digest.canonical(&mut slot.canonical, data, d, &cat, u);
                slot.key.clear();
                raw_event::encode_key(&mut slot.key, data, &cat, u);
                slot.value.clear();
                slot.digest_at = raw_event::encode_event(&mut slot.value, data, d, &cat, u, &[0u8; 16], &info);
                slot.end = entry.end;
                if partition_count > 0 {
                    slot.partition = (raw_event::murmur2(&slot.key) & 0x7FFF_FFFF) as i64 % partition_count;
                }
                let written = raw_event::write_time(d, u);
                if first_write.is_none() {
                    first_write = Some(written);
                }
                last_write = Some(written);
                filled += 1;
                if filled == GROUP {
                    flush(&mut self.slots, filled, partition_count > 0, &lists)?;
                    filled = 0;
                }
                events += 1;
            }
        }
        flush(&mut self.slots, filled, partition_count > 0, &lists)?;
        let done = self.scan.stop.is_some() && pending.is_none(py);
        Ok(PyTuple::new_bound(
            py,
            [
                lists.keys.into_any().unbind(),
                lists.values.into_any().unbind(),
                lists.ends.into_any().unbind(),
                lists.partitions.into_any().unbind(),
                entries.into_py(py),
                updates.into_py(py),
                skipped.into_py(py),
                first_write.into_py(py),
                last_write.into_py(py),
                pending,
                done.into_py(py),
                last_end.into_py(py),
            ],
        )
        .into_any()
        .unbind())
    }

    /// Where the next read of this segment starts (the scan's resume position).
    #[getter]
    fn resume_position(&self) -> i64 {
        self.scan.resume_position
    }

    /// Why the walk stopped ("end", "limit", "torn", "damaged"), or None while it goes on.
    #[getter]
    fn stop(&self) -> Option<&'static str> {
        self.scan.stop.map(|s| s.name())
    }

    #[getter]
    fn finished(&self) -> bool {
        self.scan.finished()
    }

    /// Damage found so far, as (offset, position, scope, entry error, message).
    fn damage(&self, py: Python<'_>) -> Vec<PyObject> {
        self.scan.damage.iter().map(|d| damage_tuple(py, d)).collect()
    }
}

/// The rows of a protocol RESULT page, each value its bytes or None (protocol_rows.rs;
/// pipeline/cassandra_scan.py's `_raw_rows` is the specification): the bootstrap scan's rows.
#[pyfunction]
fn raw_rows(py: Python<'_>, data: &[u8], count: usize, width: usize) -> PyResult<Py<PyList>> {
    let spans = protocol_rows::spans(data, count, width).map_err(PyValueError::new_err)?;
    let rows = PyList::empty_bound(py);
    for row in 0..count {
        let values = PyList::empty_bound(py);
        for span in &spans[row * width..(row + 1) * width] {
            match span {
                Some((start, end)) => values.append(PyBytes::new_bound(py, &data[*start..*end]))?,
                None => values.append(py.None())?,
            }
        }
        rows.append(values)?;
    }
    Ok(rows.unbind())
}

/// A column plan of the snapshot encoder: (name, layout 0 single / 1 set / 2 list / 3 map / 4 fields,
/// value position, write time position, TTL position, a UDT's field count).
type SnapshotColumnSpec = (String, u8, usize, usize, usize, usize);

fn snapshot_columns(specs: Vec<SnapshotColumnSpec>) -> PyResult<Vec<snapshot_events::Column>> {
    use snapshot_events::Layout;
    specs
        .into_iter()
        .map(|(name, layout, value_at, time_at, ttl_at, fields)| {
            let layout = match layout {
                0 => Layout::Single,
                1 => Layout::Set,
                2 => Layout::List,
                3 => Layout::Map,
                4 => Layout::Fields,
                other => return Err(PyValueError::new_err(format!("unknown cell layout {} of column {}", other, name))),
            };
            Ok(snapshot_events::Column { name, layout, value_at, time_at, ttl_at, fields })
        })
        .collect()
}

/// The bootstrap's event builder (pipeline/snapshot_encoder.py is its specification; the Python side,
/// pipeline/snapshot_core.py, prepares the plans). `push_page` takes a whole result page of the scan and
/// returns the events of every partition the page completes; the last partition waits for the next page
/// or `finish`.
#[pyclass(module = "cdc_native")]
struct SnapshotEncoder {
    encoder: snapshot_events::Encoder,
    scan_time_at: usize,
    pending_key: Option<Vec<u8>>,
    /// The pending partition's rows from `push_page`: their values' bytes copied end to end (a partition
    /// may continue on the next page), `scan_time_at` spans per row into them, and the page's scan time.
    arena: Vec<u8>,
    arena_spans: Vec<Option<(usize, usize)>>,
    arena_scan_time: i64,
}

impl SnapshotEncoder {
    /// The pending partition's events, appended to `out` as (partition key, [(key, value, md5, rows, cells)]):
    /// its rows as the Python rows make them, `scan_time_at` values and no value at the scan time's position.
    fn flush(&mut self, py: Python<'_>, out: &Bound<'_, PyList>) -> PyResult<()> {
        let key = match self.pending_key.take() {
            None => return Ok(()),
            Some(key) => key,
        };
        let arena = std::mem::take(&mut self.arena);
        let spans = std::mem::take(&mut self.arena_spans);
        let width = self.scan_time_at;
        let values: Vec<snapshot_events::Row<'_>> = spans
            .chunks(width)
            .map(|row| {
                let mut out: snapshot_events::Row<'_> = Vec::with_capacity(width + 1);
                out.extend(row.iter().map(|span| span.map(|(start, end)| &arena[start..end])));
                out.push(None);
                out
            })
            .collect();
        let result = self.emit(py, out, key, &values, self.arena_scan_time);
        drop(values);
        self.arena = arena;
        self.arena.clear();
        self.arena_spans = spans;
        self.arena_spans.clear();
        result
    }

    /// The events of one partition's rows, appended to `out`.
    fn emit(&self, py: Python<'_>, out: &Bound<'_, PyList>, key: Vec<u8>, values: &[snapshot_events::Row<'_>], scan_time: i64) -> PyResult<()> {
        let mut events = Vec::new();
        self.encoder.partition_events(&key, values, scan_time, &mut events).map_err(PyValueError::new_err)?;
        let built = PyList::empty_bound(py);
        for e in events {
            built.append((
                PyBytes::new_bound(py, &e.key),
                PyBytes::new_bound(py, &e.value),
                PyBytes::new_bound(py, &e.md5),
                e.rows,
                e.cells,
            ))?;
        }
        out.append((PyBytes::new_bound(py, &key), built))?;
        Ok(())
    }
}

#[pymethods]
impl SnapshotEncoder {
    #[new]
    #[pyo3(signature = (table, static_columns, regular, key_at, clustering_at, scan_time_at, head, key_head, digest_head, max_rows, max_bytes, no_deletion_time, list_tail))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        table: String,
        static_columns: Vec<SnapshotColumnSpec>,
        regular: Vec<SnapshotColumnSpec>,
        key_at: Vec<usize>,
        clustering_at: Vec<usize>,
        scan_time_at: usize,
        head: Vec<u8>,
        key_head: Vec<u8>,
        digest_head: Vec<u8>,
        max_rows: usize,
        max_bytes: i64,
        no_deletion_time: i64,
        list_tail: Vec<u8>,
    ) -> PyResult<SnapshotEncoder> {
        let plan = snapshot_events::Plan {
            table,
            static_columns: snapshot_columns(static_columns)?,
            regular: snapshot_columns(regular)?,
            key_at,
            clustering_at,
            head,
            key_head,
            digest_head,
            max_rows,
            max_bytes,
            no_deletion_time,
            list_tail,
        };
        Ok(SnapshotEncoder {
            encoder: snapshot_events::Encoder::new(plan),
            scan_time_at,
            pending_key: None,
            arena: Vec::new(),
            arena_spans: Vec::new(),
            arena_scan_time: 0,
        })
    }

    /// The events of the partitions a protocol RESULT page completes, as (partition key, [(key, value,
    /// md5, rows, cells)]); its rows are those of `raw_rows` of it, each with `scan_time` appended, a
    /// partition's rows consecutive as the scan gives them. The values are cut and read here, never
    /// becoming Python objects. A page cut short is a ValueError naming the value, as from `raw_rows`.
    fn push_page(&mut self, py: Python<'_>, data: &[u8], count: usize, width: usize, scan_time: i64) -> PyResult<Py<PyList>> {
        if width != self.scan_time_at {
            return Err(PyValueError::new_err(format!(
                "bootstrap of {}: a raw page of {} values a row, not {}",
                self.encoder.plan.table, width, self.scan_time_at
            )));
        }
        let spans = protocol_rows::spans(data, count, width)
            .map_err(|e| PyValueError::new_err(format!("bootstrap scan: a result page of {} rows is malformed: {}", count, e)))?;
        let out = PyList::empty_bound(py);
        let value = |span: &Option<(usize, usize)>| span.map(|(start, end)| &data[start..end]);
        for row in spans.chunks(width) {
            let parts: snapshot_events::Row<'_> = self.encoder.plan.key_at.iter().map(|&at| value(&row[at])).collect();
            let key = self.encoder.partition_key(&parts).map_err(PyValueError::new_err)?;
            if self.pending_key.as_ref() != Some(&key) {
                self.flush(py, &out)?;
                self.pending_key = Some(key);
                self.arena_scan_time = scan_time;
            }
            for span in row {
                let copied = match *span {
                    None => None,
                    Some((start, end)) => {
                        let at = self.arena.len();
                        self.arena.extend_from_slice(&data[start..end]);
                        Some((at, at + (end - start)))
                    }
                };
                self.arena_spans.push(copied);
            }
        }
        Ok(out.unbind())
    }

    /// The events of the last partition.
    fn finish(&mut self, py: Python<'_>) -> PyResult<Py<PyList>> {
        let out = PyList::empty_bound(py);
        self.flush(py, &out)?;
        Ok(out.unbind())
    }
}

#[pymodule]
fn cdc_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Catalog>()?;
    m.add_class::<SegmentBatchReader>()?;
    m.add_class::<ChangeJson>()?;
    m.add_class::<SnapshotEncoder>()?;
    m.add_class::<RowReader>()?;
    m.add_class::<TableMerge>()?;
    m.add_function(wrap_pyfunction!(scan_segment, m)?)?;
    m.add_function(wrap_pyfunction!(decode_entry, m)?)?;
    m.add_function(wrap_pyfunction!(murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(raw_event_heads, m)?)?;
    m.add_function(wrap_pyfunction!(decode_raw_event, m)?)?;
    m.add_function(wrap_pyfunction!(encode_row_value, m)?)?;
    m.add_function(wrap_pyfunction!(digest_segment, m)?)?;
    m.add_function(wrap_pyfunction!(raw_rows, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
