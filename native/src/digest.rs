//! The replica-stable MD5 of a partition update: cassandra_model/digest.py, byte for byte.

use crate::mutation_decoder::{Catalog, Decoded, Deletion, RowRec, Span, UpdateRec};

fn blob(out: &mut Vec<u8>, data: Option<&[u8]>) {
    match data {
        None => out.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]),
        Some(bytes) => {
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
    }
}

fn deletion(out: &mut Vec<u8>, d: Option<Deletion>) {
    match d {
        None => out.push(b'-'),
        Some(d) => {
            out.push(b'D');
            out.extend_from_slice(&d.ts.to_be_bytes());
            out.extend_from_slice(&d.ldt.to_be_bytes());
        }
    }
}

pub fn bytes_of(buf: &[u8], span: Span) -> &[u8] {
    &buf[span.0 as usize..span.1 as usize]
}

fn prefix(out: &mut Vec<u8>, buf: &[u8], values: &[Option<Span>]) {
    out.extend_from_slice(&(values.len() as u32).to_be_bytes());
    for value in values {
        blob(out, value.map(|s| bytes_of(buf, s)));
    }
}

/// Scratch space reused from one digest to the next.
#[derive(Default)]
pub struct DigestWriter {
    out: Vec<u8>,
    order: Vec<u32>,
}

impl DigestWriter {
    fn row(&mut self, buf: &[u8], d: &Decoded, catalog: &Catalog, table: usize, row: &RowRec) {
        let columns = &catalog.tables[table].columns;
        let out = &mut self.out;
        prefix(out, buf, &d.clustering[row.clustering.0 as usize..row.clustering.1 as usize]);
        match row.timestamp {
            None => out.push(b'-'),
            Some(ts) => {
                out.push(b'L');
                out.extend_from_slice(&ts.to_be_bytes());
                out.extend_from_slice(&row.ttl.to_be_bytes());
                out.extend_from_slice(&row.expiration.unwrap_or(-1).to_be_bytes());
            }
        }
        deletion(out, row.deletion);
        let complex = &d.complex[row.complex.0 as usize..row.complex.1 as usize];
        self.order.clear();
        self.order.extend(0..complex.len() as u32);
        self.order
            .sort_by(|a, b| columns[complex[*a as usize].0 as usize].name.as_bytes().cmp(columns[complex[*b as usize].0 as usize].name.as_bytes()));
        out.extend_from_slice(&(complex.len() as u32).to_be_bytes());
        for i in &self.order {
            let (column, del) = complex[*i as usize];
            blob(out, Some(columns[column as usize].name.as_bytes()));
            deletion(out, Some(del));
        }
        let cells = &d.cells[row.cells.0 as usize..row.cells.1 as usize];
        self.order.clear();
        self.order.extend(0..cells.len() as u32);
        let path_of = |i: u32| -> &[u8] {
            match cells[i as usize].path {
                Some(p) => bytes_of(buf, p),
                None => &[],
            }
        };
        let sorted = cells.windows(2).enumerate().all(|(i, pair)| {
            let (a, b) = (&pair[0], &pair[1]);
            let by_name = columns[a.column as usize].name.as_bytes().cmp(columns[b.column as usize].name.as_bytes());
            by_name == std::cmp::Ordering::Less
                || (by_name == std::cmp::Ordering::Equal && path_of(i as u32) <= path_of(i as u32 + 1))
        });
        if !sorted {
            self.order.sort_by(|a, b| {
                let (ca, cb) = (&cells[*a as usize], &cells[*b as usize]);
                columns[ca.column as usize]
                    .name
                    .as_bytes()
                    .cmp(columns[cb.column as usize].name.as_bytes())
                    .then_with(|| path_of(*a).cmp(path_of(*b)))
            });
        }
        out.extend_from_slice(&(cells.len() as u32).to_be_bytes());
        for i in &self.order {
            let cell = &cells[*i as usize];
            blob(out, Some(columns[cell.column as usize].name.as_bytes()));
            blob(out, cell.path.map(|p| bytes_of(buf, p)));
            let state: u8 = if cell.flags & 0x01 != 0 {
                1
            } else if cell.flags & 0x02 != 0 {
                2
            } else {
                0
            };
            out.push(state);
            out.extend_from_slice(&cell.ts.to_be_bytes());
            out.extend_from_slice(&cell.ttl.to_be_bytes());
            out.extend_from_slice(&cell.ldt.to_be_bytes());
            blob(out, Some(bytes_of(buf, cell.value)));
        }
    }

    /// The 16-byte canonical MD5 of one update.
    pub fn digest(&mut self, buf: &[u8], d: &Decoded, catalog: &Catalog, update: &UpdateRec) -> [u8; 16] {
        self.build(buf, d, catalog, update);
        crate::md5::md5(&self.out)
    }

    /// The canonical bytes of one update, into `dest` (to be digested with others: md5::md5_many).
    pub fn canonical(&mut self, dest: &mut Vec<u8>, buf: &[u8], d: &Decoded, catalog: &Catalog, update: &UpdateRec) {
        std::mem::swap(&mut self.out, dest);
        self.build(buf, d, catalog, update);
        std::mem::swap(&mut self.out, dest);
    }

    fn build(&mut self, buf: &[u8], d: &Decoded, catalog: &Catalog, update: &UpdateRec) {
        let table = update.table as usize;
        self.out.clear();
        self.out.extend_from_slice(b"cdc-pu-v1");
        self.out.extend_from_slice(&catalog.tables[table].id);
        blob(&mut self.out, Some(bytes_of(buf, update.key)));
        deletion(&mut self.out, update.partition_deletion);
        match update.static_row {
            None => self.out.push(b'-'),
            Some(index) => {
                self.out.push(b'S');
                self.row(buf, d, catalog, table, &d.rows[index as usize]);
            }
        }
        let rows = &d.rows[update.rows.0 as usize..update.rows.1 as usize];
        self.out.extend_from_slice(&(rows.len() as u32).to_be_bytes());
        for row in rows {
            self.row(buf, d, catalog, table, row);
        }
        let markers = &d.markers[update.markers.0 as usize..update.markers.1 as usize];
        self.out.extend_from_slice(&(markers.len() as u32).to_be_bytes());
        for marker in markers {
            self.out.push(marker.kind);
            prefix(&mut self.out, buf, &d.clustering[marker.clustering.0 as usize..marker.clustering.1 as usize]);
            deletion(&mut self.out, Some(marker.deletion));
            if let Some(start) = marker.start_deletion {
                deletion(&mut self.out, Some(start));
            }
        }
    }
}
