//! The merge of the worker's common raw event in one step: rows of plain live cells (no TTL, no
//! tombstone, no path) with a liveness without TTL, into stored rows of the same kind, in a table
//! without static, collection or counter columns, in a partition without deletions. The Python merge
//! is the specification (state/partition_state.py's `apply_prepared`, state/change.py's changes,
//! state/store/transaction.py's save); the caller hands anything else to it.
//!
//! On such rows the rules are short: a cell replaces the stored one with a higher timestamp, or an
//! equal timestamp and a greater value (state/cell_merge.py's `compare_cells` for two plain live cells);
//! a liveness replaces one with a lower timestamp; the row exists while it has a liveness or a cell; a
//! stored row is nothing but its cells and liveness, with no due second (nothing in it expires).

use crate::row_codec;

/// One row of plain live cells: its liveness's timestamp, and each column's cell (timestamp, value)
/// by the column's rank (the columns sorted by name, the order a stored row keeps).
#[derive(Clone)]
pub struct PlainRow<'a> {
    pub liveness: Option<i64>,
    pub cells: Vec<Option<(i64, &'a [u8])>>,
}

impl<'a> PlainRow<'a> {
    pub fn empty(columns: usize) -> PlainRow<'a> {
        PlainRow { liveness: None, cells: vec![None; columns] }
    }

    /// Cassandra's `hasLiveData` for such a row: it has a liveness or a cell.
    pub fn exists(&self) -> bool {
        self.liveness.is_some() || self.cells.iter().any(|c| c.is_some())
    }

    /// Whether both rows show the same values (write times aside).
    pub fn same_values(&self, other: &PlainRow<'_>) -> bool {
        self.cells.iter().zip(other.cells.iter()).all(|(a, b)| match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => a.1 == b.1,
            _ => false,
        })
    }

    /// Merge one record's liveness and cells (rank, timestamp, value); the newest timestamp among the
    /// parts that were kept, None when none was (`RowState.merge`).
    pub fn merge(&mut self, liveness: Option<i64>, cells: &[(usize, i64, &'a [u8])]) -> Option<i64> {
        let mut newest: Option<i64> = None;
        let mut keep = |t: i64| {
            newest = Some(newest.map_or(t, |n| n.max(t)));
        };
        if let Some(t) = liveness {
            if self.liveness.map_or(true, |old| t > old) {
                self.liveness = Some(t);
                keep(t);
            }
        }
        for &(rank, timestamp, value) in cells {
            let wins = match self.cells[rank] {
                None => true,
                Some((old_ts, old_value)) => timestamp > old_ts || (timestamp == old_ts && value > old_value),
            };
            if wins {
                self.cells[rank] = Some((timestamp, value));
                keep(timestamp);
            }
        }
        newest
    }

    /// The stored value of the row (`encode_row_value` with no due second); `names` by rank.
    pub fn encode(&self, clustering: &[Option<&[u8]>], names: &[String]) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.cells.len() * 32);
        row_codec::prefix(&mut out, 0, clustering);
        row_codec::head(&mut out, self.liveness.map(|t| (t, None, None)), None);
        let cells: Vec<row_codec::SimpleCell<'_>> = self
            .cells
            .iter()
            .zip(names.iter())
            .filter_map(|(cell, name)| {
                cell.map(|(timestamp, value)| row_codec::SimpleCell {
                    name,
                    timestamp,
                    ttl: 0,
                    local_deletion_time: row_codec::NO_DELETION_TIME,
                    flags: 0,
                    value,
                })
            })
            .collect();
        row_codec::cells(&mut out, &cells);
        out
    }
}

/// A stored row value as a PlainRow, when it is one: no due second, no deletion, a liveness without
/// TTL, plain live cells of known columns (`rank_of`), and the clustering given (the event's canonical
/// one). None otherwise: the Python merge takes the event.
pub fn stored<'a>(
    value: &'a [u8],
    clustering: &[Option<&[u8]>],
    columns: usize,
    rank_of: &dyn Fn(&str) -> Option<usize>,
) -> Option<PlainRow<'a>> {
    if value.len() < 9 || value[1..9].iter().any(|b| *b != 0) {
        return None;
    }
    let row = row_codec::parse(value)?;
    if row.deletion.is_some() || row.clustering.len() != clustering.len() {
        return None;
    }
    if row.clustering.iter().zip(clustering.iter()).any(|(a, b)| a != b) {
        return None;
    }
    let mut plain = PlainRow::empty(columns);
    plain.liveness = match row.liveness {
        None => None,
        Some((timestamp, 0, None)) => Some(timestamp),
        Some(_) => return None,
    };
    for cell in &row.cells {
        if cell.flags != 0 || cell.ttl != 0 || cell.local_deletion_time != row_codec::NO_DELETION_TIME {
            return None;
        }
        let rank = rank_of(cell.name)?;
        plain.cells[rank] = Some((cell.timestamp, cell.value));
    }
    Some(plain)
}
