//! The rows of a native protocol RESULT (kind Rows) page, each value left as its bytes: what
//! pipeline/cassandra_scan.py's `_raw_rows` makes (its specification). The bootstrap's scan keeps every
//! value undecoded, so cutting a page into values is all the Python would do per value, and at ~30
//! values a row it was most of the scan's own CPU.

/// Where each value lies in `data`: `count` rows of `width` values, each an int32 length (negative:
/// null) and that many bytes. An error names the row and value that run past the page's end.
pub fn spans(data: &[u8], count: usize, width: usize) -> Result<Vec<Option<(usize, usize)>>, String> {
    let mut out = Vec::with_capacity(count.saturating_mul(width).min(1 << 24));
    let mut pos = 0usize;
    for row in 0..count {
        for value in 0..width {
            let head = data.get(pos..pos + 4).ok_or_else(|| past_end(row, count, value, width, data.len()))?;
            let size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            pos += 4;
            if size < 0 {
                out.push(None);
                continue;
            }
            let end = pos + size as usize;
            if end > data.len() {
                return Err(past_end(row, count, value, width, data.len()));
            }
            out.push(Some((pos, end)));
            pos = end;
        }
    }
    Ok(out)
}

fn past_end(row: usize, count: usize, value: usize, width: usize, len: usize) -> String {
    format!(
        "value {} of {} in row {} of {} runs past the end of the page ({} bytes)",
        value + 1,
        width,
        row + 1,
        count,
        len
    )
}

#[cfg(test)]
mod tests {
    use super::spans;

    #[test]
    fn cuts_values_and_nulls() {
        let data = [0, 0, 0, 2, 7, 8, 255, 255, 255, 255, 0, 0, 0, 0];
        let got = spans(&data, 1, 3).unwrap();
        assert_eq!(got, vec![Some((4, 6)), None, Some((14, 14))]);
    }

    #[test]
    fn names_the_value_past_the_end() {
        let data = [0, 0, 0, 9, 1];
        let err = spans(&data, 2, 1).unwrap_err();
        assert!(err.contains("value 1 of 1 in row 1 of 2"), "{}", err);
    }
}
