//! Sync sections and CRC-checked entries of one segment: agents/commitlog/segment_reader.py, step for step.
//!
//! The descriptor is parsed by the Python module (it is read once per segment); this walk gets its
//! header end, segment id and whether sections are compressed. A compressed section's payload is handed
//! to a Python callable (the Python decompressors and their error checks), once per section.
//! Positions, stop reasons, damage scopes and messages are those of the Python reader.

use std::fs::File;
use std::os::unix::fs::FileExt;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

pub const SYNC_MARKER_SIZE: i64 = 8;
pub const COMPRESSED_SECTION_HEADER_SIZE: i64 = 12;
pub const MIN_MUTATION_SIZE: i64 = 10;
const MAX_POSITION: i64 = 0x7FFF_FFFF;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StopReason {
    End,
    Limit,
    Torn,
    Damaged,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::End => "end",
            StopReason::Limit => "limit",
            StopReason::Torn => "torn",
            StopReason::Damaged => "damaged",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    Entry,
    SectionRest,
    Section,
    SegmentRest,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Entry => "entry",
            Scope::SectionRest => "section-rest",
            Scope::Section => "section",
            Scope::SegmentRest => "segment-rest",
        }
    }
}

/// One corrupt region. `entry_error` tells CorruptEntryError from CorruptSectionError. A decompressor's
/// CorruptSectionError is kept as its message only: the exception object's traceback holds the frames
/// that called the reader, a reference cycle through this struct that Python's collector cannot see.
pub struct Damage {
    pub offset: i64,
    pub position: i64,
    pub scope: Scope,
    pub entry_error: bool,
    pub message: String,
}

pub enum ScanError {
    /// strict reading: the first damage ends the read with its error
    Strict(Damage),
    /// an exception of the decompression callable that is not a CorruptSectionError, or an I/O error
    Py(PyErr),
}

impl From<PyErr> for ScanError {
    fn from(err: PyErr) -> Self {
        ScanError::Py(err)
    }
}

pub enum Source {
    Memory(Vec<u8>),
    File { file: File, size: i64 },
}

impl Source {
    pub fn size(&self) -> i64 {
        match self {
            Source::Memory(data) => data.len() as i64,
            Source::File { size, .. } => *size,
        }
    }

    /// Up to `length` bytes at `offset`, fewer at the end of the data (of the size seen at open).
    fn read(&self, offset: i64, length: i64) -> Result<Vec<u8>, PyErr> {
        let size = self.size();
        let length = length.min(size - offset).max(0);
        if length == 0 || offset < 0 {
            return Ok(Vec::new());
        }
        match self {
            Source::Memory(data) => Ok(data[offset as usize..(offset + length) as usize].to_vec()),
            Source::File { file, .. } => {
                let mut out = vec![0u8; length as usize];
                let mut done = 0usize;
                while done < out.len() {
                    match file.read_at(&mut out[done..], offset as u64 + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(err) => return Err(PyErr::from(err)),
                    }
                }
                out.truncate(done);
                Ok(out)
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Section {
    offset: i64,
    position: i64,
    payload_position: i64,
    end: i64,
    next_offset: i64,
    length: i64,
}

/// The entries of the section being split: `buf[0]` is at logical position `base`.
struct Current {
    buf: Vec<u8>,
    base: i64,
    pos: i64,
    n: i64,
    lim: i64,
    section: Section,
}

/// One CRC-valid entry; its bytes are `Scan::entry_data(&entry)`.
#[derive(Clone, Copy)]
pub struct Entry {
    pub position: i64,
    pub end: i64,
    start: usize,
    stop: usize,
}

pub struct SegmentLayout {
    pub header_end: i64,
    pub segment_id: i64,
    pub compressed: bool,
}

pub struct Scan {
    source: Source,
    start: i64,
    limit: i64,
    completed: bool,
    strict: bool,
    layout: Option<SegmentLayout>,
    id_crc: u32,
    decompress: Option<PyObject>,
    corrupt_section_type: Option<PyObject>,
    pub damage: Vec<Damage>,
    pub resume_position: i64,
    pub stop: Option<StopReason>,
    offset: i64,
    position: i64,
    current: Option<Current>,
}

fn crc32(data: &[u8], start: u32) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(start);
    hasher.update(data);
    hasher.finalize()
}

fn be_i32(data: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

fn be_u32(data: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

enum Step {
    Entry(Entry),
    SectionDone,
}

impl Scan {
    /// `layout` None: a live segment whose header is not written yet (the read stops as torn).
    /// `decompress(data, length, offset)` returns a compressed section's payload or raises
    /// `corrupt_section_type`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        source: Source,
        start: i64,
        limit: Option<i64>,
        completed: bool,
        strict: bool,
        layout: Option<SegmentLayout>,
        decompress: Option<PyObject>,
        corrupt_section_type: Option<PyObject>,
    ) -> Scan {
        let start = start.max(0);
        let mut id_crc = 0;
        let mut offset = 0;
        if let Some(layout) = &layout {
            let bits = layout.segment_id as u64;
            let mut packed = [0u8; 8];
            packed[..4].copy_from_slice(&((bits & 0xFFFF_FFFF) as u32).to_be_bytes());
            packed[4..].copy_from_slice(&((bits >> 32) as u32).to_be_bytes());
            id_crc = crc32(&packed, 0);
            offset = layout.header_end;
        }
        Scan {
            source,
            start,
            limit: limit.unwrap_or(MAX_POSITION + 1),
            completed,
            strict,
            layout,
            id_crc,
            decompress,
            corrupt_section_type,
            damage: Vec::new(),
            resume_position: start,
            stop: if offset == 0 { Some(StopReason::Torn) } else { None },
            offset,
            position: offset,
            current: None,
        }
    }

    pub fn compressed(&self) -> bool {
        self.layout.as_ref().map_or(false, |l| l.compressed)
    }

    pub fn finished(&self) -> bool {
        self.completed && matches!(self.stop, Some(StopReason::End) | Some(StopReason::Damaged))
    }

    pub fn entry_data(&self, entry: &Entry) -> &[u8] {
        match &self.current {
            Some(current) => &current.buf[entry.start..entry.stop],
            None => &[],
        }
    }

    fn advance(&mut self, position: i64) {
        if position > self.resume_position {
            self.resume_position = position;
        }
    }

    fn report(&mut self, damage: Damage) -> Result<(), ScanError> {
        if self.strict {
            return Err(ScanError::Strict(damage));
        }
        self.damage.push(damage);
        Ok(())
    }

    /// `_segment_damage`: a torn tail while live, else reported damage; either way the walk ends.
    fn segment_damage(&mut self, offset: i64, position: i64, reason: String) -> Result<StopReason, ScanError> {
        if !self.completed {
            return Ok(StopReason::Torn);
        }
        let damage = Damage {
            offset,
            position,
            scope: Scope::SegmentRest,
            entry_error: false,
            message: format!("{}; the rest of the segment cannot be located", reason),
        };
        self.report(damage)?;
        Ok(StopReason::Damaged)
    }

    fn entry_damage(&mut self, section: Section, position: i64, reason: String, skip_entry: bool) -> Result<(), ScanError> {
        let (scope, detail) = if skip_entry {
            (Scope::Entry, "entry skipped".to_string())
        } else {
            (Scope::SectionRest, format!("rest of the section up to position {} skipped", section.end))
        };
        let (offset, reason) = if self.compressed() {
            (
                section.offset,
                format!(
                    "{} at logical position {} in the section at file offset {}",
                    reason, position, section.offset
                ),
            )
        } else {
            (position, reason)
        };
        let damage = Damage {
            offset,
            position,
            scope,
            entry_error: true,
            message: format!("{}; {}", reason, detail),
        };
        self.report(damage)?;
        if !skip_entry {
            self.advance(section.end);
        }
        Ok(())
    }

    /// The next CRC-valid entry, or None once the walk stopped (`stop` says why).
    pub fn next_entry(&mut self, py: Python<'_>) -> Result<Option<Entry>, ScanError> {
        loop {
            if self.stop.is_some() {
                self.current = None;
                return Ok(None);
            }
            if self.current.is_some() {
                match self.step_entries()? {
                    Ok(Step::Entry(entry)) => return Ok(Some(entry)),
                    Ok(Step::SectionDone) => {
                        self.current = None;
                        continue;
                    }
                    Err(stop) => {
                        self.stop = Some(stop);
                        continue;
                    }
                }
            }
            if let Err(stop) = self.next_section(py)? {
                self.stop = Some(stop);
            }
        }
    }

    /// One turn of `_walk`: read the next section, set `current` when it has entries to split.
    fn next_section(&mut self, py: Python<'_>) -> Result<Result<(), StopReason>, ScanError> {
        let limit = self.limit;
        let compressed = self.compressed();
        let header_size = if compressed { COMPRESSED_SECTION_HEADER_SIZE } else { SYNC_MARKER_SIZE };
        let (offset, position) = (self.offset, self.position);
        if position >= limit {
            return Ok(Err(StopReason::Limit));
        }
        self.advance(position);
        let section = match self.read_section_header(offset, position, header_size, compressed)? {
            Ok(section) => section,
            Err(stop) => return Ok(Err(stop)),
        };
        self.offset = section.next_offset;
        self.position = section.end;
        if section.end > self.start {
            if section.length == 0 {
                if section.end > limit {
                    return Ok(Err(StopReason::Limit));
                }
                self.advance(section.end);
            } else if compressed {
                return self.compressed_section(py, section, limit);
            } else {
                return self.plain_section(section, limit);
            }
        }
        Ok(Ok(()))
    }

    fn read_section_header(
        &mut self,
        offset: i64,
        position: i64,
        header_size: i64,
        compressed: bool,
    ) -> Result<Result<Section, StopReason>, ScanError> {
        let size = self.source.size();
        let raw = self.source.read(offset, header_size)?;
        if (raw.len() as i64) < header_size {
            if self.completed && raw.iter().all(|b| *b == 0) {
                return Ok(Err(StopReason::End));
            }
            let reason = format!("truncated sync marker: only {} bytes left in the file", raw.len());
            return Ok(Err(self.segment_damage(offset, position, reason)?));
        }
        let next_offset = be_i32(&raw, 0) as i64;
        let crc = be_u32(&raw, 4);
        let expected = crc32(&(offset as u32).to_be_bytes(), self.id_crc);
        if crc != expected {
            if next_offset == 0 && crc == 0 {
                return Ok(Err(StopReason::End));
            }
            let reason = format!("sync marker CRC mismatch (next {}, crc {:#010x})", next_offset, crc);
            return Ok(Err(self.segment_damage(offset, position, reason)?));
        }
        if next_offset < offset + header_size || next_offset > size {
            let reason = format!(
                "sync marker has a valid CRC but points to {} (file length {})",
                next_offset, size
            );
            return Ok(Err(self.segment_damage(offset, position, reason)?));
        }
        let length = if compressed {
            let length = be_i32(&raw, SYNC_MARKER_SIZE as usize) as i64;
            if length < 0 || position + SYNC_MARKER_SIZE + length > MAX_POSITION {
                let reason = format!("invalid uncompressed section length {}", length);
                return Ok(Err(self.segment_damage(offset, position, reason)?));
            }
            length
        } else {
            next_offset - offset - SYNC_MARKER_SIZE
        };
        let payload = position + SYNC_MARKER_SIZE;
        Ok(Ok(Section {
            offset,
            position,
            payload_position: payload,
            end: payload + length,
            next_offset,
            length,
        }))
    }

    fn plain_section(&mut self, section: Section, limit: i64) -> Result<Result<(), StopReason>, ScanError> {
        let first = section.payload_position.max(self.start);
        let last = section.end.min(limit.max(first));
        let buf = self.source.read(first, last - first)?;
        if (buf.len() as i64) < last - first {
            let reason = "section extends past the end of the file".to_string();
            return Ok(Err(self.segment_damage(section.offset, section.position, reason)?));
        }
        self.begin_entries(buf, first, section, limit);
        Ok(Ok(()))
    }

    fn compressed_section(
        &mut self,
        py: Python<'_>,
        section: Section,
        limit: i64,
    ) -> Result<Result<(), StopReason>, ScanError> {
        let data_offset = section.offset + COMPRESSED_SECTION_HEADER_SIZE;
        let data = self.source.read(data_offset, section.next_offset - data_offset)?;
        let decompress = match &self.decompress {
            Some(callable) => callable.clone_ref(py),
            None => {
                return Err(ScanError::Py(pyo3::exceptions::PyValueError::new_err(
                    "a compressed segment needs a decompress callable",
                )))
            }
        };
        let result = decompress.call1(py, (PyBytes::new_bound(py, &data), section.length, section.offset));
        match result {
            Ok(payload) => {
                let payload = payload.bind(py).downcast::<PyBytes>().map_err(PyErr::from)?.as_bytes().to_vec();
                self.begin_entries(payload, section.payload_position, section, limit);
                Ok(Ok(()))
            }
            Err(err) => {
                let corrupt = match &self.corrupt_section_type {
                    Some(kind) => err.is_instance_bound(py, kind.bind(py)),
                    None => false,
                };
                if !corrupt {
                    return Err(ScanError::Py(err));
                }
                if !self.completed && section.next_offset >= self.source.size() {
                    return Ok(Err(StopReason::Torn));
                }
                let value = err.value_bound(py);
                let message = value
                    .getattr("reason")
                    .and_then(|r| r.extract::<String>())
                    .unwrap_or_else(|_| value.to_string());
                let damage = Damage {
                    offset: section.offset,
                    position: section.position,
                    scope: Scope::Section,
                    entry_error: false,
                    message,
                };
                self.report(damage)?;
                self.advance(section.end);
                Ok(Ok(()))
            }
        }
    }

    fn begin_entries(&mut self, buf: Vec<u8>, base: i64, section: Section, limit: i64) {
        let n = section.end - base;
        let pos = (self.start - base).max(0);
        let lim = n.min(limit - base);
        self.current = Some(Current { buf, base, pos, n, lim, section });
    }

    /// `_entries`, resumable: the next entry of the current section, its end, or a stop.
    fn step_entries(&mut self) -> Result<Result<Step, StopReason>, ScanError> {
        loop {
            let (base, pos, n, lim, section) = {
                let c = self.current.as_ref().expect("a current section");
                (c.base, c.pos, c.n, c.lim, c.section)
            };
            if pos >= n {
                self.advance(section.end);
                return Ok(Ok(Step::SectionDone));
            }
            if pos >= lim {
                return Ok(Err(StopReason::Limit));
            }
            // The buffer may stop at the limit (plain sections): every read below is checked against lim
            // first, as in the Python reader.
            if pos + 4 > n {
                let reason = "fewer than 4 bytes left for an entry size".to_string();
                self.entry_damage(section, base + pos, reason, false)?;
                return Ok(Ok(Step::SectionDone));
            }
            if pos + 4 > lim {
                return Ok(Err(StopReason::Limit));
            }
            let buf = &self.current.as_ref().unwrap().buf;
            let p = pos as usize;
            if be_i32(buf, p) == 0 {
                self.advance(section.end);
                return Ok(Ok(Step::SectionDone));
            }
            if pos + 8 > n {
                let reason = "entry header cut off by the end of its section".to_string();
                self.entry_damage(section, base + pos, reason, false)?;
                return Ok(Ok(Step::SectionDone));
            }
            if pos + 8 > lim {
                return Ok(Err(StopReason::Limit));
            }
            let size = be_i32(buf, p) as i64;
            let size_crc = be_u32(buf, p + 4);
            if crc32(&buf[p..p + 4], 0) != size_crc {
                let reason = format!("entry size CRC mismatch (size {})", size);
                self.entry_damage(section, base + pos, reason, false)?;
                return Ok(Ok(Step::SectionDone));
            }
            if size < MIN_MUTATION_SIZE {
                let reason = format!("invalid entry size {}", size);
                self.entry_damage(section, base + pos, reason, false)?;
                return Ok(Ok(Step::SectionDone));
            }
            let body_end = pos + 8 + size;
            let end = body_end + 4;
            if end > n {
                let reason = format!("entry of size {} overruns its section", size);
                self.entry_damage(section, base + pos, reason, false)?;
                return Ok(Ok(Step::SectionDone));
            }
            if end > lim {
                return Ok(Err(StopReason::Limit));
            }
            let body = &buf[p + 8..body_end as usize];
            let stored = be_u32(buf, body_end as usize);
            if crc32(body, size_crc) != stored {
                let reason = format!("entry body CRC mismatch (size {})", size);
                self.current.as_mut().unwrap().pos = end;
                self.entry_damage(section, base + pos, reason, true)?;
                self.resume_position = base + end;
                continue;
            }
            self.resume_position = base + end;
            self.current.as_mut().unwrap().pos = end;
            return Ok(Ok(Step::Entry(Entry {
                position: base + pos,
                end: base + end,
                start: p + 8,
                stop: body_end as usize,
            })));
        }
    }
}
