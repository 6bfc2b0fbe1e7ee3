//! A raw event's Avro bytes (schemas/raw_mutation.avsc) read into the dict that schemas/raw_event.py's
//! `decode_raw_event` returns, which stays the specification: the worker merges every raw event that is
//! no replica copy, and this is its decode without a Python call per field.
//!
//! Only bytes the Python reader takes as they are come back as a dict: anything odd (bytes that end
//! early or go on after the event, a negative length or block count, a union branch or an int out of
//! range, names that are not UTF-8, a format other than RAW_FORMAT) gives None, and the caller hands the
//! bytes to the Python reader, which names what is wrong.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3::intern;

use crate::raw_event::{Cursor, RAW_FORMAT};

/// Unwraps a read (None: odd bytes) and then a Python call's result, in a function returning both.
macro_rules! read {
    ($e:expr) => {
        match $e? {
            Ok(value) => value,
            Err(err) => return Some(Err(err)),
        }
    };
}

/// Sets one item of a dict, in a function returning both: a Python error returns from it.
macro_rules! set {
    ($dict:expr, $key:expr, $value:expr) => {
        if let Err(err) = $dict.set_item($key, $value) {
            return Some(Err(err));
        }
    };
}

/// Every item of an Avro array, each read by `item` into `list`.
fn array<'py>(
    py: Python<'py>,
    c: &mut Cursor<'_>,
    mut item: impl FnMut(&mut Cursor<'_>) -> Option<PyResult<PyObject>>,
) -> Option<PyResult<Bound<'py, PyList>>> {
    let list = PyList::empty_bound(py);
    loop {
        let count = c.block()?;
        if count == 0 {
            return Some(Ok(list));
        }
        for _ in 0..count {
            let value = read!(item(c));
            if let Err(err) = list.append(value) {
                return Some(Err(err));
            }
        }
    }
}

fn deletion(py: Python<'_>, c: &mut Cursor<'_>) -> Option<PyResult<PyObject>> {
    let timestamp = c.long()?;
    let local_deletion_time = c.long()?;
    let dict = PyDict::new_bound(py);
    set!(dict, intern!(py, "timestamp"), timestamp);
    set!(dict, intern!(py, "local_deletion_time"), local_deletion_time);
    Some(Ok(dict.into_any().unbind()))
}

fn optional_deletion(py: Python<'_>, c: &mut Cursor<'_>) -> Option<PyResult<PyObject>> {
    if c.present()? {
        deletion(py, c)
    } else {
        Some(Ok(py.None()))
    }
}

fn clustering(py: Python<'_>, c: &mut Cursor<'_>) -> Option<PyResult<PyObject>> {
    let list = read!(array(py, c, |c| {
        Some(Ok(if c.present()? { PyBytes::new_bound(py, c.bytes()?).into_any().unbind() } else { py.None() }))
    }));
    Some(Ok(list.into_any().unbind()))
}

fn row(py: Python<'_>, c: &mut Cursor<'_>) -> Option<PyResult<PyObject>> {
    let dict = PyDict::new_bound(py);
    set!(dict, intern!(py, "clustering"), read!(clustering(py, c)));
    let liveness = if c.present()? {
        let timestamp = c.long()?;
        let ttl = c.int()?;
        let expiration = if c.present()? { Some(c.long()?) } else { None };
        let liveness = PyDict::new_bound(py);
        set!(liveness, intern!(py, "timestamp"), timestamp);
        set!(liveness, intern!(py, "ttl"), ttl);
        set!(liveness, intern!(py, "local_expiration_time"), expiration);
        liveness.into_any().unbind()
    } else {
        py.None()
    };
    set!(dict, intern!(py, "liveness"), liveness);
    set!(dict, intern!(py, "deletion"), read!(optional_deletion(py, c)));
    let complex = read!(array(py, c, |c| {
        let column = c.text()?;
        let item = PyDict::new_bound(py);
        set!(item, intern!(py, "column"), column);
        set!(item, intern!(py, "deletion"), read!(deletion(py, c)));
        Some(Ok(item.into_any().unbind()))
    }));
    set!(dict, intern!(py, "complex_deletions"), complex);
    let cells = read!(array(py, c, |c| {
        let column = c.text()?;
        let path = if c.present()? { Some(c.bytes()?) } else { None };
        let timestamp = c.long()?;
        let ttl = c.int()?;
        let local_deletion_time = c.long()?;
        let flags = c.int()?;
        let value = c.bytes()?;
        let cell = PyDict::new_bound(py);
        set!(cell, intern!(py, "column"), column);
        set!(cell, intern!(py, "path"), path.map(|p| PyBytes::new_bound(py, p)));
        set!(cell, intern!(py, "timestamp"), timestamp);
        set!(cell, intern!(py, "ttl"), ttl);
        set!(cell, intern!(py, "local_deletion_time"), local_deletion_time);
        set!(cell, intern!(py, "flags"), flags);
        set!(cell, intern!(py, "value"), PyBytes::new_bound(py, value));
        Some(Ok(cell.into_any().unbind()))
    }));
    set!(dict, intern!(py, "cells"), cells);
    Some(Ok(dict.into_any().unbind()))
}

fn marker(py: Python<'_>, c: &mut Cursor<'_>) -> Option<PyResult<PyObject>> {
    let kind = c.int()?;
    let dict = PyDict::new_bound(py);
    set!(dict, intern!(py, "kind"), kind);
    set!(dict, intern!(py, "clustering"), read!(clustering(py, c)));
    set!(dict, intern!(py, "deletion"), read!(deletion(py, c)));
    set!(dict, intern!(py, "start_deletion"), read!(optional_deletion(py, c)));
    Some(Ok(dict.into_any().unbind()))
}

/// The dict of one encoded raw event, or None where the Python reader must read it (see the module).
pub fn decode(py: Python<'_>, data: &[u8]) -> Option<PyResult<PyObject>> {
    let mut c = Cursor { data, pos: 0 };
    let format = c.int()?;
    if format != RAW_FORMAT {
        return None;
    }
    let dict = PyDict::new_bound(py);
    set!(dict, intern!(py, "format"), format);
    let source = PyDict::new_bound(py);
    set!(source, intern!(py, "cluster"), c.text()?);
    set!(source, intern!(py, "node"), c.text()?);
    set!(source, intern!(py, "segment_id"), c.long()?);
    set!(source, intern!(py, "descriptor_version"), c.int()?);
    set!(source, intern!(py, "entry_offset"), c.long()?);
    set!(source, intern!(py, "position"), c.long()?);
    set!(source, intern!(py, "published_at_ms"), c.long()?);
    set!(dict, intern!(py, "source"), source);
    set!(dict, intern!(py, "keyspace"), c.text()?);
    set!(dict, intern!(py, "table"), c.text()?);
    set!(dict, intern!(py, "table_id"), c.text()?);
    set!(dict, intern!(py, "partition_key"), PyBytes::new_bound(py, c.bytes()?));
    set!(dict, intern!(py, "digest"), PyBytes::new_bound(py, c.fixed(16)?));
    let is_counter = match *c.data.get(c.pos)? {
        0 => false,
        1 => true,
        _ => return None,
    };
    c.pos += 1;
    set!(dict, intern!(py, "is_counter"), is_counter);
    set!(dict, intern!(py, "partition_deletion"), read!(optional_deletion(py, &mut c)));
    let static_row = if c.present()? { read!(row(py, &mut c)) } else { py.None() };
    set!(dict, intern!(py, "static_row"), static_row);
    set!(dict, intern!(py, "rows"), read!(array(py, &mut c, |c| row(py, c))));
    set!(dict, intern!(py, "range_tombstones"), read!(array(py, &mut c, |c| marker(py, c))));
    if c.pos != data.len() {
        return None;
    }
    Some(Ok(dict.into_any().unbind()))
}
