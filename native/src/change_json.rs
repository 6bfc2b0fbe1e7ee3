//! Change events as UTF-8 JSON (schemas/change_json.py's `JsonChangeCodec.encode_change`, with
//! schemas/json_row_form.py's one-step forms): the same bytes, for the column types most tables are made
//! of. Anything else (another type, a value of an unusual length, text that is not UTF-8) is left to the
//! Python codec, which is the specification: `None` says so.
//!
//! The JSON is what Python's `json` module writes with `ensure_ascii=False` and compact separators:
//! strings escaped as its encoder escapes them, floats by `float.__repr__` itself, decimals as
//! `str(Decimal)` writes them.

use std::fmt::Write;

/// How a column's serialized value becomes JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int,
    BigInt,
    Uuid,
    Double,
    Boolean,
    Decimal,
}

impl Kind {
    pub fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            0 => Kind::Text,
            1 => Kind::Int,
            2 => Kind::BigInt,
            3 => Kind::Uuid,
            4 => Kind::Double,
            5 => Kind::Boolean,
            6 => Kind::Decimal,
            _ => return None,
        })
    }
}

/// A JSON string as Python's encoder writes it (`ensure_ascii=False`).
pub fn string(out: &mut String, text: &str) {
    out.push('"');
    let mut start = 0;
    for (i, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[start..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", byte);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

/// A float as `json.dumps(_json_float(v))` writes it: a string for NaN and the infinities, else
/// `repr(v)`, which `repr` itself writes (its shortest digits break ties to even, as Rust's do not).
pub fn float(out: &mut String, v: f64, repr: &dyn Fn(f64) -> Option<String>) -> bool {
    if v.is_nan() {
        out.push_str("\"NaN\"");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "\"Infinity\"" } else { "\"-Infinity\"" });
    } else {
        match repr(v) {
            Some(text) => out.push_str(&text),
            None => return false,
        }
    }
    true
}

/// The decimal digits of a big-endian two's complement integer, and whether it is negative.
fn big_digits(bytes: &[u8]) -> (bool, String) {
    let negative = bytes.first().map_or(false, |b| b & 0x80 != 0);
    let mut magnitude: Vec<u8> = bytes.to_vec();
    if negative {
        // two's complement: invert and add one
        for byte in magnitude.iter_mut() {
            *byte = !*byte;
        }
        for byte in magnitude.iter_mut().rev() {
            let (sum, carry) = byte.overflowing_add(1);
            *byte = sum;
            if !carry {
                break;
            }
        }
    }
    // repeated division by 10^9 over 32-bit limbs
    let mut limbs: Vec<u32> = Vec::with_capacity(magnitude.len() / 4 + 1);
    let pad = (4 - magnitude.len() % 4) % 4;
    let mut padded = vec![0u8; pad];
    padded.extend_from_slice(&magnitude);
    for chunk in padded.chunks(4) {
        limbs.push(u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
    }
    let mut groups: Vec<u32> = Vec::new();
    while limbs.iter().any(|l| *l != 0) {
        let mut rest: u64 = 0;
        for limb in limbs.iter_mut() {
            let value = (rest << 32) | u64::from(*limb);
            *limb = (value / 1_000_000_000) as u32;
            rest = value % 1_000_000_000;
        }
        groups.push(rest as u32);
        while limbs.first() == Some(&0) && limbs.len() > 1 {
            limbs.remove(0);
        }
    }
    let mut text = String::new();
    match groups.split_last() {
        None => text.push('0'),
        Some((top, lower)) => {
            let _ = write!(text, "{}", top);
            for group in lower.iter().rev() {
                let _ = write!(text, "{:09}", group);
            }
        }
    }
    (negative, text)
}

/// A CQL decimal (i32 scale, then the unscaled value) as `str(Decimal)` writes it, quoted; false when it
/// does not fit the forms here (then Python decides).
fn decimal(out: &mut String, raw: &[u8]) -> bool {
    if raw.len() < 5 {
        return false;
    }
    let scale = i32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let (negative, digits) = big_digits(&raw[4..]);
    let exponent = -i64::from(scale);
    let left = exponent + digits.len() as i64; // Python's leftdigits
    let dot = if exponent <= 0 && left > -6 { left } else { 1 };
    out.push('"');
    if negative {
        out.push('-');
    }
    if dot <= 0 {
        out.push_str("0.");
        for _ in 0..(-dot) {
            out.push('0');
        }
        out.push_str(&digits);
    } else if dot as usize >= digits.len() {
        out.push_str(&digits);
        for _ in digits.len()..dot as usize {
            out.push('0');
        }
    } else {
        out.push_str(&digits[..dot as usize]);
        out.push('.');
        out.push_str(&digits[dot as usize..]);
    }
    if left != dot {
        let _ = write!(out, "E{:+}", left - dot);
    }
    out.push('"');
    true
}

/// One serialized value in its JSON form; false when Python must decide (an unusual length, bad text).
pub fn value(out: &mut String, kind: Kind, raw: &[u8], repr: &dyn Fn(f64) -> Option<String>) -> bool {
    match kind {
        Kind::Text => match std::str::from_utf8(raw) {
            Ok(text) => string(out, text),
            Err(_) => return false,
        },
        Kind::Int => {
            if raw.len() != 4 {
                return false;
            }
            let _ = write!(out, "{}", i32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]));
        }
        Kind::BigInt => {
            if raw.len() != 8 {
                return false;
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(raw);
            let _ = write!(out, "{}", i64::from_be_bytes(b));
        }
        Kind::Uuid => {
            if raw.len() != 16 {
                return false;
            }
            out.push('"');
            for (i, byte) in raw.iter().enumerate() {
                if i == 4 || i == 6 || i == 8 || i == 10 {
                    out.push('-');
                }
                let _ = write!(out, "{:02x}", byte);
            }
            out.push('"');
        }
        Kind::Double => {
            if raw.len() != 8 {
                return false;
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(raw);
            return float(out, f64::from_be_bytes(b), repr);
        }
        Kind::Boolean => {
            if raw.len() != 1 {
                return false;
            }
            out.push_str(if raw[0] != 0 { "true" } else { "false" });
        }
        Kind::Decimal => return decimal(out, raw),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_read_as_python_writes_them() {
        let text = |scale: i32, unscaled: &[u8]| {
            let mut raw = scale.to_be_bytes().to_vec();
            raw.extend_from_slice(unscaled);
            let mut out = String::new();
            assert!(decimal(&mut out, &raw));
            out
        };
        assert_eq!(text(2, &[0x96]), "\"-1.06\"");
        assert_eq!(text(2, &[0x00, 0x96]), "\"1.50\"");
        assert_eq!(text(-3, &[1]), "\"1E+3\"");
        assert_eq!(text(9, &[1]), "\"1E-9\"");
        assert_eq!(text(0, &[0]), "\"0\"");
    }
}
