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
}
