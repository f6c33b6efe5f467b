//! Page checksums: crc32c over a page, seeded with its page number.
//!
//! Every page of a database carries one 4-byte checksum field (where
//! depends on the format; see ARCHITECTURE.md "Page checksums"). The sum
//! covers the page number and every byte of the page except the field
//! itself, so a page that rots, is torn, or lands at another page's offset
//! (a misdirected write) fails it. A page that is stale but intact (a lost
//! write) passes: no per-page sum can tell an old image from a new one.
//!
//! crc32c because both targets have it in hardware (SSE 4.2 `crc32`, ARMv8
//! `crc32c*`); the `crc32c` crate picks the instruction at run time.

use super::Pgno;

/// Size of a checksum field.
pub const SUM_LEN: usize = 4;

/// The checksum of `page` as page `pgno`, skipping the field at `at`.
pub fn page_sum(pgno: Pgno, page: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(&pgno.to_be_bytes());
    let c = crc32c::crc32c_append(c, &page[..at]);
    crc32c::crc32c_append(c, &page[at + SUM_LEN..])
}

/// Store the checksum of `page` in its field at `at`.
pub fn seal(pgno: Pgno, page: &mut [u8], at: usize) {
    let s = page_sum(pgno, page, at);
    page[at..at + SUM_LEN].copy_from_slice(&s.to_be_bytes());
}

/// The checksum stored at `at`.
pub fn stored(page: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]])
}

/// Whether the field at `at` holds the checksum of `page`.
pub fn verify(pgno: Pgno, page: &[u8], at: usize) -> bool {
    page.len() >= at + SUM_LEN && stored(page, at) == page_sum(pgno, page, at)
}

/// `crc32c_append(crc, page)` for page `pgno` whose field at `at` holds
/// its page checksum ([`page_sum`]), from that checksum and the bytes up
/// to the end of the field: O(`at`), not O(page). With `A` the page number
/// and the bytes before the field and `B` the bytes after it, the stored
/// sum is crc(A ‖ B) and the result goes on over `B` from the register
/// after `crc` and the bytes up to the field's end; two sums that go on
/// over the same bytes differ by the XOR of their registers before them,
/// advanced over them ([`advance`]). The caller vouches that the field
/// matches the page (an image it verified or sealed): otherwise the
/// result is that of the page the field describes, not of `page`.
pub fn append_page(crc: u32, pgno: Pgno, page: &[u8], at: usize) -> u32 {
    let c_a = crc32c::crc32c_append(crc32c::crc32c(&pgno.to_be_bytes()), &page[..at]);
    let c_x = crc32c::crc32c_append(crc, &page[..at + SUM_LEN]);
    stored(page, at) ^ advance(c_x ^ c_a, page.len() - at - SUM_LEN)
}

/// A derived sum ([`append_page`]) sums the bytes before the field: past
/// this offset the whole page is summed instead.
const DERIVED_HEAD: usize = 256;

/// `crc32c_append(crc, page)` for page `pgno`: derived from its page
/// checksum ([`append_page`]) when `sum_at` says where one lies that the
/// caller vouches for, in the page's first bytes; else summed.
pub fn append_image(crc: u32, pgno: Pgno, page: &[u8], sum_at: Option<usize>) -> u32 {
    match sum_at.filter(|&at| at < DERIVED_HEAD && at + SUM_LEN <= page.len()) {
        Some(at) => append_page(crc, pgno, page, at),
        None => crc32c::crc32c_append(crc, page),
    }
}

/// The checksum of a page after some of its bytes changed, from the old
/// page's stored checksum and only the changed bytes: O(changed bytes)
/// instead of O(page).
///
/// `old` and `new` are the page before and after, equal outside `ranges`
/// (half-open byte ranges, none overlapping the field at `at`); `old`'s
/// field holds its checksum as written. CRC is linear over GF(2): the sums
/// of two equal-length messages differ by the raw CRC of their XOR, which
/// is the CRC of each changed run advanced over the message bytes that
/// follow it (`shift`). If `old`'s stored checksum does not match its
/// bytes (damage), the result does not match `new` either: a patch never
/// seals damage outside the changed ranges. A range that overlaps the
/// field or the page end falls back to the full sum.
pub fn patched_sum(
    pgno: Pgno,
    old: &[u8],
    new: &[u8],
    at: usize,
    ranges: &[(usize, usize)],
) -> u32 {
    patch(stored(old, at), old, new, ranges, (at, at + SUM_LEN))
        .unwrap_or_else(|| page_sum(pgno, new, at))
}

/// [`patched_sum`] for any crc32c over a page's bytes minus the run
/// `skip` (which holds the stored `sum`), whatever the message's prefix:
/// `None` if a range overlaps `skip` or the page end.
pub fn patch(
    sum: u32,
    old: &[u8],
    new: &[u8],
    ranges: &[(usize, usize)],
    skip: (usize, usize),
) -> Option<u32> {
    let ps = new.len();
    let ok = old.len() == ps
        && skip.0 <= skip.1
        && skip.1 <= ps
        && ranges
            .iter()
            .all(|&(s, e)| s <= e && e <= ps && (e <= skip.0 || s >= skip.1));
    if !ok {
        return None;
    }
    let mut sum = sum;
    for &(s, e) in ranges {
        if s == e {
            continue;
        }
        // Message bytes after the run (the skipped run is not in it).
        let after = if e <= skip.0 {
            ps - e - (skip.1 - skip.0)
        } else {
            ps - e
        };
        sum ^= run_term(&old[s..e], &new[s..e], after);
    }
    Some(sum)
}

/// What changing the run `old_run` of a crc32c message into `new_run`
/// (equal lengths) XORs into the message's crc32c, when `after` bytes of
/// the message follow the run: the raw CRC of the change, advanced over
/// those bytes. Which bytes they are does not matter, only their count.
pub fn run_term(old_run: &[u8], new_run: &[u8], after: usize) -> u32 {
    if old_run.len() != new_run.len() {
        return 0;
    }
    shift(raw_crc_xor(old_run, new_run), after)
}

/// The raw CRC-32C register (no pre- or post-inversion) after `bytes`,
/// from a zero register.
pub fn raw_crc(bytes: &[u8]) -> u32 {
    !crc32c::crc32c_append(!0, bytes)
}

/// The raw CRC-32C register (no pre- or post-inversion), from a zero
/// register, of the XOR of two equal-length runs: what the change from `a`
/// to `b` adds to the register. A short run is XORed into a buffer and
/// summed once; a long one is summed twice, without the buffer: the raw
/// CRC is linear, so the XOR of the runs' raw CRCs is the same register.
fn raw_crc_xor(a: &[u8], b: &[u8]) -> u32 {
    const SHORT: usize = 256;
    if a.len() > SHORT {
        return raw_crc(a) ^ raw_crc(b);
    }
    let mut buf = [0u8; SHORT];
    for ((x, &p), &q) in buf.iter_mut().zip(a).zip(b) {
        *x = p ^ q;
    }
    raw_crc(&buf[..a.len().min(b.len())])
}

/// Zero-byte shift operators: `SHIFT[k][j][b]` is the raw register that
/// byte `j` of the register holding `b` (the rest zero) becomes after
/// `2^k` zero bytes. 18 powers cover a 64 KiB page and its page number.
type ShiftTables = [[[u32; 256]; 4]; SHIFT_POWERS];
const SHIFT_POWERS: usize = 18;

fn shift_tables() -> &'static ShiftTables {
    static TABLES: std::sync::OnceLock<Box<ShiftTables>> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut t: Box<ShiftTables> = vec![[[0u32; 256]; 4]; SHIFT_POWERS]
            .into_boxed_slice()
            .try_into()
            .expect("SHIFT_POWERS tables");
        // Columns of the operator: the image of each register bit. One
        // zero byte from the hardware CRC; each next power is the current
        // one applied to its own columns (A^(2m) = A^m composed with A^m).
        let mut col = [0u32; 32];
        for (i, c) in col.iter_mut().enumerate() {
            *c = !crc32c::crc32c_append(!(1u32 << i), &[0]);
        }
        for table in t.iter_mut() {
            for (j, row) in table.iter_mut().enumerate() {
                for b in 1..256usize {
                    let low = b.trailing_zeros() as usize;
                    row[b] = row[b & (b - 1)] ^ col[8 * j + low];
                }
            }
            let apply = |v: u32| -> u32 {
                (0..4).fold(0, |acc, j| acc ^ table[j][(v >> (8 * j)) as u8 as usize])
            };
            let next: Vec<u32> = col.iter().map(|&c| apply(c)).collect();
            col.copy_from_slice(&next);
        }
        t
    })
}

/// Distances [`shift`] takes from [`byte_powers`]: any within an 8 KiB
/// page (and a message a little longer than one); past it the tables of
/// [`shift_tables`] step through the powers of two.
const POWERS_LEN: usize = 16 * 1024 + 64;

/// `X[n]` = x^(8n) mod P as a raw register (bit i holds the coefficient of
/// x^(31-i)): what multiplying a register by it does is advancing the
/// register over `n` zero bytes. 64 KiB, built once.
fn byte_powers() -> &'static [u32] {
    static POWERS: std::sync::OnceLock<Box<[u32]>> = std::sync::OnceLock::new();
    POWERS.get_or_init(|| {
        let mut x = 1u32 << 31; // x^0
        (0..POWERS_LEN)
            .map(|_| {
                let this = x;
                x = !crc32c::crc32c_append(!x, &[0]);
                this
            })
            .collect()
    })
}

/// `a` times `b` mod P, both raw registers. The carry-less product of two
/// reflected 32-bit polynomials is a reflected 63-bit one one bit short of
/// the 64-bit form: shifted left once, its high half holds degrees 0..31
/// and its low half degrees 32..63, which a CRC step of that half from a
/// zero register reduces (it computes D(x)·x^32 mod P).
fn mul_mod(a: u32, b: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.2")
        {
            // SAFETY: both features were detected at run time.
            return unsafe { mul_mod_clmul(a, b) };
        }
    }
    mul_mod_soft(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse4.2")]
unsafe fn mul_mod_clmul(a: u32, b: u32) -> u32 {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u32, _mm_cvtsi128_si64, _mm_cvtsi64_si128,
    };
    let p = _mm_clmulepi64_si128(_mm_cvtsi64_si128(a as i64), _mm_cvtsi64_si128(b as i64), 0);
    let p = (_mm_cvtsi128_si64(p) as u64) << 1;
    _mm_crc32_u32(0, p as u32) ^ (p >> 32) as u32
}

/// [`mul_mod`] without the carry-less multiply instruction.
fn mul_mod_soft(a: u32, b: u32) -> u32 {
    let mut p = 0u64;
    for i in 0..32 {
        if a >> i & 1 == 1 {
            p ^= (b as u64) << i;
        }
    }
    let p = p << 1;
    raw_crc(&(p as u32).to_le_bytes()) ^ (p >> 32) as u32
}

/// The raw register `v` after `n` zero bytes: one multiplication by a
/// tabulated power when `n` is in [`byte_powers`] (every distance within
/// a page up to 8 KiB); else a table step per set bit of `n`.
fn shift(v: u32, n: usize) -> u32 {
    match byte_powers().get(n) {
        Some(&x) => mul_mod(v, x),
        None => shift_by_steps(v, n),
    }
}

/// `crc32c_append(crc, &[0; n])` without reading `n` zero bytes: a page
/// whose tail is zero by construction (page 1 of the in-page modes) is
/// summed over the bytes written only.
pub fn append_zeros(crc: u32, n: usize) -> u32 {
    !shift(!crc, n)
}

/// What the difference `term` of two sums (their XOR) becomes when both
/// messages go on with the same `n` bytes: the later bytes cancel, and
/// the difference moves over them.
pub fn advance(term: u32, n: usize) -> u32 {
    shift(term, n)
}

/// The inverse of [`append_zeros`]: the crc32c of a message whose crc32c
/// followed by `n` zero bytes is `crc`. A crc32c is linear in its message
/// bytes, so the sum of a message that changed in the middle (a run
/// inserted or cut) is patched from the old one by summing the shorter
/// side only: the part after the change only moves.
pub fn remove_zeros(crc: u32, n: usize) -> u32 {
    !shift_back(!crc, n)
}

/// The crc32c of a message's head, from the crc32c `whole` of the message
/// and the raw CRC ([`raw_crc`]) of its `tail_len`-byte tail: the tail's
/// bytes XORed out, its length shifted back. A patch that moves a run in
/// the middle of a checksummed message sums the tail this way when it is
/// shorter than the head.
pub fn head_crc(whole: u32, tail_raw: u32, tail_len: usize) -> u32 {
    remove_zeros(whole ^ tail_raw, tail_len)
}

/// A raw register moved back over `n` zero bytes: `v` times x^(-8n) mod
/// P. x has order 2^31 - 1 modulo the CRC-32C polynomial (P is x + 1
/// times a degree-31 factor, and 2^31 - 1 is prime; the tests check
/// x^(2^31-1) = 1), so x^(-8) = x^(2^31 - 9): one table of its powers of
/// two, one multiplication per set bit of `n`.
fn shift_back(mut v: u32, mut n: usize) -> u32 {
    // 2^k-th powers of x^(-8); 2^31 - 1 zero bytes make one full turn,
    // so any n reduces below it.
    static BACK: std::sync::OnceLock<[u32; 31]> = std::sync::OnceLock::new();
    let back = BACK.get_or_init(|| {
        let mut t = [0u32; 31];
        t[0] = x_pow(ORDER - 8);
        for k in 1..31 {
            t[k] = mul_mod(t[k - 1], t[k - 1]);
        }
        t
    });
    n %= ORDER as usize;
    let mut k = 0;
    while n != 0 && v != 0 {
        if n & 1 == 1 {
            v = mul_mod(v, back[k]);
        }
        n >>= 1;
        k += 1;
    }
    v
}

/// The multiplicative order of x modulo the CRC-32C polynomial.
const ORDER: u64 = (1 << 31) - 1;

/// x^e mod P as a raw register (x^0 is bit 31).
fn x_pow(mut e: u64) -> u32 {
    let (mut acc, mut base) = (1u32 << 31, 1u32 << 30);
    while e != 0 {
        if e & 1 == 1 {
            acc = mul_mod(acc, base);
        }
        base = mul_mod(base, base);
        e >>= 1;
    }
    acc
}

/// [`shift`] through the zero-byte operators of the powers of two.
fn shift_by_steps(mut v: u32, mut n: usize) -> u32 {
    let t = shift_tables();
    let mut k = 0;
    let step = |v: u32, tk: &[[u32; 256]; 4]| {
        tk[0][v as u8 as usize]
            ^ tk[1][(v >> 8) as u8 as usize]
            ^ tk[2][(v >> 16) as u8 as usize]
            ^ tk[3][(v >> 24) as u8 as usize]
    };
    while n != 0 && v != 0 && k < SHIFT_POWERS {
        if n & 1 == 1 {
            v = step(v, &t[k]);
        }
        n >>= 1;
        k += 1;
    }
    // Beyond the largest power (never for a page): what is left of `n`
    // counts 2^SHIFT_POWERS bytes, two steps of the largest power each.
    if v != 0 {
        for _ in 0..n.saturating_mul(2) {
            v = step(v, &t[SHIFT_POWERS - 1]);
        }
    }
    v
}

/// Whether every byte is zero (a page that was never written: the file
/// grew over it, or a transaction allocated and freed it).
pub fn is_zero(page: &[u8]) -> bool {
    // OR the bytes together a block at a time without an early exit, so
    // the loop vectorizes: a patch checks a page's free space with it.
    let mut blocks = page.chunks_exact(32);
    let or = blocks.by_ref().fold([0u8; 32], |mut acc, b| {
        acc.iter_mut().zip(b).for_each(|(a, b)| *a |= b);
        acc
    });
    or.iter().chain(blocks.remainder()).all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appending_zeros_is_summing_them() {
        let zeros = vec![0u8; 70_000];
        for crc in [0u32, 1, 0xdead_beef, !0] {
            for n in [0usize, 1, 7, 64, 4016, 8192, 8193, 65_456, 70_000] {
                assert_eq!(
                    append_zeros(crc, n),
                    crc32c::crc32c_append(crc, &zeros[..n]),
                    "{crc:#x} {n}"
                );
            }
        }
    }

    #[test]
    fn a_page_appended_from_its_checksum_is_the_page_summed() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for ps in [512usize, 4096, 65_536] {
            for at in [0usize, 12, 56, 200, ps - 4] {
                for prefix in [&[][..], &[7u8; 8][..], b"salt-and-more"] {
                    let mut page = vec![0u8; ps];
                    for b in page.iter_mut() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        *b = x as u8;
                    }
                    let pgno = (x % 100_000) as Pgno + 2;
                    seal(pgno, &mut page, at);
                    let mut msg = prefix.to_vec();
                    msg.extend_from_slice(&pgno.to_be_bytes());
                    msg.extend_from_slice(&page);
                    let c = crc32c::crc32c(&msg[..msg.len() - ps]);
                    assert_eq!(
                        append_page(c, pgno, &page, at),
                        crc32c::crc32c(&msg),
                        "ps {ps} at {at} prefix {prefix:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn detects_flips_and_misplacement() {
        let mut p = vec![7u8; 512];
        seal(9, &mut p, 508);
        assert!(verify(9, &p, 508));
        assert!(!verify(10, &p, 508), "a page at the wrong offset fails");
        for bit in [0, 100 * 8 + 3, 508 * 8, 511 * 8 + 7] {
            let mut q = p.clone();
            q[bit / 8] ^= 1 << (bit % 8);
            assert!(!verify(9, &q, 508), "flip of bit {bit} detected");
        }
    }
    #[test]
    fn every_shift_is_the_crc_of_zeros() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let zeros = vec![0u8; 70_000];
        for n in (0..300).chain([4095, 4096, 4100, 8191, POWERS_LEN - 1, POWERS_LEN, 65_540]) {
            let v: u32 = rng.random();
            let want = !crc32c::crc32c_append(!v, &zeros[..n]);
            assert_eq!(shift(v, n), want, "{n} bytes");
            assert_eq!(shift_by_steps(v, n), want, "{n} bytes by steps");
            if let Some(&x) = byte_powers().get(n) {
                assert_eq!(mul_mod_soft(v, x), want, "{n} bytes, software multiply");
            }
        }
    }

    #[test]
    fn patched_sum_matches_a_full_sum() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for ps in [512usize, 4096, 65536] {
            for _ in 0..40 {
                let at = rng.random_range(0..ps - SUM_LEN);
                let mut old: Vec<u8> = (0..ps).map(|_| rng.random()).collect();
                seal(5, &mut old, at);
                let mut new = old.clone();
                let mut ranges = Vec::new();
                for _ in 0..rng.random_range(0..4) {
                    let s = rng.random_range(0..ps);
                    let e = (s + rng.random_range(0..300)).min(ps);
                    if e <= at || s >= at + SUM_LEN {
                        for b in &mut new[s..e] {
                            *b = rng.random();
                        }
                        ranges.push((s, e));
                    }
                }
                // Disjoint ranges only: merge by sorting and dropping overlaps.
                ranges.sort_unstable();
                let mut kept: Vec<(usize, usize)> = Vec::new();
                for r in ranges {
                    match kept.last_mut() {
                        Some(l) if r.0 < l.1 => l.1 = l.1.max(r.1),
                        _ => kept.push(r),
                    }
                }
                let kept: Vec<_> = kept
                    .into_iter()
                    .filter(|&(s, e)| e <= at || s >= at + SUM_LEN)
                    .collect();
                // Bytes outside the kept ranges are the old ones.
                let mut covered = vec![false; ps];
                for &(s, e) in &kept {
                    covered[s..e].iter_mut().for_each(|c| *c = true);
                }
                for i in 0..ps {
                    if !covered[i] && i != at && !(at..at + SUM_LEN).contains(&i) {
                        new[i] = old[i];
                    }
                }
                new[at..at + SUM_LEN].copy_from_slice(&old[at..at + SUM_LEN]);
                assert_eq!(
                    patched_sum(5, &old, &new, at, &kept),
                    page_sum(5, &new, at),
                    "ps {ps} at {at} ranges {kept:?}"
                );
            }
        }
    }

    #[test]
    fn x_has_order_two_to_the_31_minus_1() {
        assert_eq!(x_pow(ORDER), 1 << 31);
        assert_ne!(x_pow(1), 1 << 31);
    }

    #[test]
    fn removing_zeros_undoes_appending_them() {
        let msg: Vec<u8> = (0..300u32).map(|i| (i * 31 + 7) as u8).collect();
        for n in [0usize, 1, 2, 7, 8, 100, 4095, 4096, 8191, 20_000, 70_000] {
            let c = crc32c::crc32c(&msg);
            assert_eq!(remove_zeros(append_zeros(c, n), n), c, "{n}");
            // A message's sum from the sum with a tail, and the tail's raw
            // sum: the tail's bytes are XORed out, its length shifted back.
            let tail = &msg[..n.min(msg.len())];
            let whole = crc32c::crc32c_append(c, tail);
            assert_eq!(head_crc(whole, raw_crc(tail), tail.len()), c, "{n}");
        }
    }

    #[test]
    fn shift_is_a_run_of_zero_bytes() {
        let zeros = vec![0u8; (1 << SHIFT_POWERS) * 3 + 77];
        for n in [0usize, 1, 2, 3, 255, 4096, 65539, zeros.len()] {
            let v = 0x1234_5678;
            assert_eq!(
                shift(v, n),
                !crc32c::crc32c_append(!v, &zeros[..n]),
                "n {n}"
            );
        }
    }

    #[test]
    fn a_patch_keeps_damage_detectable() {
        let mut old = vec![3u8; 4096];
        seal(2, &mut old, 12);
        old[3000] ^= 0x10; // damage outside the patched range
        let mut new = old.clone();
        new[100..140].fill(9);
        let s = patched_sum(2, &old, &new, 12, &[(100, 140)]);
        assert_ne!(s, page_sum(2, &new, 12));
    }
}
