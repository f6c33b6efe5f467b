//! Key encoding helpers: keys are byte strings compared with memcmp, so
//! numbers must be encoded such that byte order equals numeric order.

/// Encode an i64 so that memcmp order equals numeric order (big-endian
/// with the sign bit flipped).
pub fn encode_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// Decode a key made by [`encode_i64`]; `None` if it is not 8 bytes.
pub fn decode_i64(b: &[u8]) -> Option<i64> {
    let arr: [u8; 8] = b.try_into().ok()?;
    Some((u64::from_be_bytes(arr) ^ (1 << 63)) as i64)
}

/// Encode a u64 so that memcmp order equals numeric order.
pub fn encode_u64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Encode an i64 in as few bytes as its magnitude needs, keeping memcmp
/// order equal to numeric order: one prefix byte, then the significant
/// bytes. Non-negative values: prefix 9 + n, then the n significant
/// big-endian bytes (n = 0 for 0). Negative values: with u = !v (= -v - 1),
/// prefix 8 - n, then the n low bytes of v. Small ids take 2 or 3 bytes,
/// like SQLite's varint rowids, instead of [`encode_i64`]'s 8.
pub fn encode_i64_compact(v: i64) -> Vec<u8> {
    let (mag, neg) = if v < 0 {
        (!(v as u64), true)
    } else {
        (v as u64, false)
    };
    let n = (8 - mag.leading_zeros() as usize / 8).min(8);
    let bytes = (v as u64).to_be_bytes();
    let mut out = Vec::with_capacity(1 + n);
    out.push(if neg { 8 - n as u8 } else { 9 + n as u8 });
    out.extend_from_slice(&bytes[8 - n..]);
    out
}

/// Decode a key made by [`encode_i64_compact`]; `None` if it is not one.
pub fn decode_i64_compact(b: &[u8]) -> Option<i64> {
    let (&prefix, rest) = b.split_first()?;
    let (n, neg) = match prefix {
        0..=8 => (8 - prefix as usize, true),
        9..=17 => (prefix as usize - 9, false),
        _ => return None,
    };
    if rest.len() != n {
        return None;
    }
    let mut bytes = if neg { [0xff; 8] } else { [0; 8] };
    bytes[8 - n..].copy_from_slice(rest);
    let v = i64::from_be_bytes(bytes);
    // Reject non-canonical encodings (a longer form of a shorter value).
    (encode_i64_compact(v) == b).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_order_is_preserved() {
        let vals = [i64::MIN, -1_000_000, -1, 0, 1, 42, i64::MAX];
        for w in vals.windows(2) {
            assert!(encode_i64(w[0]) < encode_i64(w[1]));
            assert_eq!(decode_i64(&encode_i64(w[0])), Some(w[0]));
        }
    }

    #[test]
    fn compact_i64_order_and_round_trip() {
        let mut vals = vec![
            i64::MIN,
            i64::MIN + 1,
            -1 << 40,
            -65_537,
            -65_536,
            -256,
            -255,
            -1,
            0,
            1,
            255,
            256,
            65_535,
            65_536,
            1 << 40,
            i64::MAX,
        ];
        vals.sort();
        for w in vals.windows(2) {
            assert!(encode_i64_compact(w[0]) < encode_i64_compact(w[1]), "{w:?}");
        }
        for &v in &vals {
            assert_eq!(decode_i64_compact(&encode_i64_compact(v)), Some(v), "{v}");
        }
        assert_eq!(encode_i64_compact(0), vec![9]);
        assert_eq!(encode_i64_compact(5000).len(), 3);
        assert_eq!(decode_i64_compact(&[10, 0]), None); // non-canonical 0
        assert_eq!(decode_i64_compact(&[200]), None);
    }
}
