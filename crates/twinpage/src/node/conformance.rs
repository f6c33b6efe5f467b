//! The node-format conformance kit: what every [`NodeFormat`] must do,
//! checked on generated nodes at several page sizes. A new format (IPS,
//! MVBT) registers by adding one `#[test]` that calls [`check_format`].
//!
//! The contract:
//!
//! 1. **Round trip.** A node that [`NodeFormat::fits`] a fresh page encodes,
//!    and decoding the page as committed by the writer's TID gives the
//!    node back, cell for cell. The same holds when the page is written
//!    over a committed image (`base`) of an earlier node, whenever `fits`
//!    says the new node fits over it.
//! 2. **`fits` agrees with `encode`.** If `fits` says yes, `encode`
//!    succeeds; if it says no, `encode` fails (with an error, not a
//!    panic). An interior node without cells fits over any base.
//! 3. **Damaged bytes are errors.** Decoding any byte string of page
//!    size (a valid page with bytes flipped, zeroes, 0xFF, random bytes)
//!    returns a node or an error, never panics, and never allocates by an
//!    unchecked length (the property runs a few hundred cases quickly).
//! 4. **The committed version survives.** A format that keeps the
//!    previous version inside the page ([`NodeFormat::needs_base`]) must
//!    leave it readable: after writing a new version over the image of
//!    TID `t`, decoding with committed TID `t` still gives the old node.
//!    For formats that rewrite the page in place (`needs_base` false) the
//!    property is vacuous: the journal keeps the old image elsewhere.
//!
//! Keys longer than [`NodeFormat::max_key_len`] are generated as the tree
//! stores them (local bytes and a chain head); a decoded node is compared
//! after [`complete_keys`] read their tails (from the generated node), and
//! each key must come back with its chain.

use super::{
    complete_keys, overflow_key_local, Bytes, DecodeCtx, EncodeCtx, InteriorCell, LeafCell,
    LeafChange, LeafPatch, Node, NodeFormat, Patched, Value,
};
use crate::base::{Error, Pgno, BYTEWISE};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Page sizes the kit runs at.
pub const PAGE_SIZES: &[usize] = &[512, 1024, 4096];

fn enc(ps: usize, tid: u64) -> EncodeCtx {
    EncodeCtx::new(ps, tid, true)
}

fn dec(ps: usize, committed_tid: u64) -> DecodeCtx<'static> {
    DecodeCtx {
        page_size: ps,
        committed_tid,
        checksums: true,
        order: &crate::base::BYTEWISE,
    }
}

/// A key as the tree stores it: whole, or overflowing with a chain head
/// derived from its bytes (the same key gets the same chain in every
/// generated node, like a cell kept across versions).
fn stored_key(key: Vec<u8>, max_key: usize) -> Bytes {
    if key.len() <= max_key {
        return key.into();
    }
    let head = 3 + crc32c::crc32c(&key) % (1 << 30);
    Bytes::chained(Arc::from(key), head, overflow_key_local(max_key)).expect("long key")
}

/// Read back the tails of `node`'s overflowing keys (from the generated
/// node `from`) and order its cells, as the pager does.
fn complete(fmt: &dyn NodeFormat, got: &mut Node, from: &Node) -> Result<(), TestCaseError> {
    let keys: Vec<&Bytes> = match from {
        Node::Leaf(c) => c.iter().map(|c| &c.key).collect(),
        Node::Interior { cells, .. } => cells.iter().map(|c| &c.key).collect(),
    };
    let mut tail = |head: Pgno, len: u64| {
        keys.iter()
            .find_map(|k| {
                let c = k
                    .chain()
                    .filter(|c| c.head == head && c.tail_len() == len)?;
                Some(k[c.local..].to_vec())
            })
            .ok_or_else(|| Error::corrupt("test", head, "no such chain"))
    };
    complete_keys(5, got, &BYTEWISE, fmt.unsorted_slots(), &mut tail)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))
}

/// Decoding `page` as committed by `tid` gives `want` (overflowing keys
/// completed, chains included).
fn reads_back(
    fmt: &dyn NodeFormat,
    page: &[u8],
    ps: usize,
    tid: u64,
    want: &Node,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut got = fmt
        .decode(5, page, &dec(ps, tid))
        .map_err(|e| TestCaseError::fail(format!("{}: {what}: {e}", fmt.name())))?;
    complete(fmt, &mut got, want)?;
    prop_assert!(same_node(&got, want), "{}: {what} at {ps}", fmt.name());
    Ok(())
}

/// Whether a node holds an overflowing key.
fn has_chains(n: &Node) -> bool {
    match n {
        Node::Leaf(c) => c.iter().any(|c| c.key.chain().is_some()),
        Node::Interior { cells, .. } => cells.iter().any(|c| c.key.chain().is_some()),
    }
}

/// `got` equals `want`, overflow chains included.
fn same_node(got: &Node, want: &Node) -> bool {
    let chains = |n: &Node| -> Vec<_> {
        match n {
            Node::Leaf(c) => c.iter().map(|c| c.key.chain()).collect(),
            Node::Interior { cells, .. } => cells.iter().map(|c| c.key.chain()).collect(),
        }
    };
    got == want && chains(got) == chains(want)
}

/// Generated nodes whose cells respect the format's key and inline
/// limits (the tree never produces others).
fn node_strategy(fmt: &'static dyn NodeFormat, ps: usize) -> BoxedStrategy<Node> {
    let max_key = fmt.max_key_len(ps).max(1);
    let max_inline = fmt.max_inline_cell(ps);
    let key = prop_oneof![
        16 => proptest::collection::vec(any::<u8>(), 1..=max_key.min(24)),
        4 => proptest::collection::vec(any::<u8>(), 1..=max_key),
        1 => proptest::collection::vec(any::<u8>(), max_key + 1..=max_key + 2 * ps),
    ]
    .prop_map(move |k| stored_key(k, max_key));
    let value = prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..=64).prop_map(|v| Value::Inline(v.into())),
        1 => (1u64..1 << 40, 3u32..1 << 30).prop_map(|(len, head)| Value::Overflow { len, head }),
    ];
    // Up to about a page of small cells, so most nodes fit a fresh page
    // and many fit over a committed image too.
    let most = (ps / 64).max(4);
    let leaf = proptest::collection::vec((key.clone(), value), 0..most).prop_map(move |cells| {
        let mut cells: Vec<LeafCell> = cells
            .into_iter()
            .map(|(key, value)| LeafCell { key, value })
            .filter(|c| match &c.value {
                Value::Inline(_) => fmt.leaf_cell_size(c) <= max_inline,
                Value::Overflow { .. } => true,
            })
            .collect();
        cells.sort_by(|a, b| a.key.cmp(&b.key));
        cells.dedup_by(|a, b| a.key == b.key);
        Node::Leaf(cells)
    });
    let interior = (
        proptest::collection::vec((key, 3u32..1 << 30), 0..most),
        3u32..1 << 30,
    )
        .prop_map(|(cells, right)| {
            let mut cells: Vec<InteriorCell> = cells
                .into_iter()
                .map(|(key, child)| InteriorCell { key, child })
                .collect();
            cells.sort_by(|a, b| a.key.cmp(&b.key));
            cells.dedup_by(|a, b| a.key == b.key);
            Node::Interior { cells, right }
        });
    prop_oneof![2 => leaf, 1 => interior].boxed()
}

/// Encode `node` over `base` at `tid`, if it fits.
fn write(
    fmt: &dyn NodeFormat,
    ps: usize,
    node: &Node,
    base: Option<&[u8]>,
    tid: u64,
) -> Result<Option<Vec<u8>>, TestCaseError> {
    let ctx = enc(ps, tid);
    let fits = fmt.fits(node, base, &ctx);
    let mut out = vec![0u8; ps];
    let r = fmt.encode(5, node, base, &ctx, &mut out);
    prop_assert_eq!(
        fits,
        r.is_ok(),
        "{}: fits says {} but encode gave {:?}",
        fmt.name(),
        fits,
        r.err()
    );
    // Every byte of the page is written: a buffer that held something
    // else (the pager recycles page buffers) encodes to the same image.
    if fits {
        let mut dirty = vec![0xA5u8; ps];
        prop_assert!(fmt.encode(5, node, base, &ctx, &mut dirty).is_ok());
        prop_assert!(dirty == out, "{}: encode left stale bytes", fmt.name());
        let mut dirty = vec![0x5Au8; ps];
        prop_assert!(fmt.encode_if_fits(5, node, base, &ctx, &mut dirty)?);
        prop_assert!(
            dirty == out,
            "{}: encode_if_fits left stale bytes",
            fmt.name()
        );
    }
    Ok(fits.then_some(out))
}

/// A deterministic runner: the same cases on every run, so the coverage
/// floor below cannot flake.
fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    TestRunner::new_with_rng(config, rng)
}

/// The leaf changes the kit tries on `cells`, each with the node it
/// gives, in the order value, insert, remove (any that does not apply is
/// left out): the value of the middle inline cell flipped; a cell whose key
/// follows the middle cell's (that key and a zero byte, if it stays short
/// and sorts before the next); the middle, first and last cells removed.
fn leaf_changes(fmt: &dyn NodeFormat, ps: usize, cells: &[LeafCell]) -> Vec<(LeafChange, Node)> {
    let mut out = Vec::new();
    let m = cells.len() / 2;
    if let Some(i) = (m..cells.len()).find(|&i| matches!(cells[i].value, Value::Inline(_))) {
        let mut c = cells.to_vec();
        if let Value::Inline(v) = &c[i].value {
            let flipped: Vec<u8> = v.iter().map(|b| b ^ 0x5A).collect();
            c[i].value = Value::Inline(flipped.into());
        }
        out.push((LeafChange::Value(i), Node::Leaf(c)));
    }
    if let Some(prev) = cells.get(m).filter(|p| p.key.chain().is_none()) {
        let mut key = prev.key.to_vec();
        key.push(0);
        let before_next = cells.get(m + 1).is_none_or(|n| key.as_slice() < &n.key[..]);
        if before_next && key.len() <= fmt.max_key_len(ps) {
            let mut c = cells.to_vec();
            let cell = LeafCell {
                key: key.into(),
                value: Value::Inline(Bytes::from(&b"inserted"[..])),
            };
            c.insert(m + 1, cell);
            out.push((LeafChange::Inserted(m + 1), Node::Leaf(c)));
        }
    }
    // The middle cell removed, and the first and the last (the cells that
    // move in a packed page are all or none of the others).
    let mut removed = vec![m, 0, cells.len().saturating_sub(1)];
    removed.dedup();
    for r in removed.into_iter().filter(|&r| r < cells.len()) {
        let mut c = cells.to_vec();
        c.remove(r);
        out.push((LeafChange::Removed(r), Node::Leaf(c)));
    }
    out
}

/// The interior changes the kit tries on `cells` and `right`, each with
/// the node it gives: the middle cell's child moved, the right child
/// moved, and a split of the middle cell's child (a cell whose key follows
/// the middle cell's, as in [`leaf_changes`], and the next slot's child
/// moved).
fn interior_changes(
    fmt: &dyn NodeFormat,
    ps: usize,
    cells: &[InteriorCell],
    right: Pgno,
) -> Vec<(LeafChange, Node)> {
    let mut out = Vec::new();
    let moved = |c: Pgno| if c > 1_000_000 { c - 999 } else { c + 999 };
    let m = cells.len() / 2;
    if m < cells.len() {
        let mut c = cells.to_vec();
        c[m].child = moved(c[m].child);
        out.push((LeafChange::Child(m), Node::Interior { cells: c, right }));
    }
    out.push((
        LeafChange::Child(cells.len()),
        Node::Interior {
            cells: cells.to_vec(),
            right: moved(right),
        },
    ));
    if let Some(prev) = cells.get(m).filter(|p| p.key.chain().is_none()) {
        let mut key = prev.key.to_vec();
        key.push(0);
        let before_next = cells.get(m + 1).is_none_or(|n| key.as_slice() < &n.key[..]);
        if before_next && key.len() <= fmt.max_key_len(ps) {
            let (mut c, mut r) = (cells.to_vec(), right);
            match c.get_mut(m + 1) {
                Some(next) => next.child = moved(next.child),
                None => r = moved(r),
            }
            c.insert(
                m + 1,
                InteriorCell {
                    key: key.into(),
                    child: 77,
                },
            );
            out.push((
                LeafChange::Split(m + 1),
                Node::Interior { cells: c, right: r },
            ));
        }
    }
    // A separator and its (emptied) child dropped.
    if m < cells.len() {
        let mut c = cells.to_vec();
        c.remove(m);
        out.push((LeafChange::Dropped(m), Node::Interior { cells: c, right }));
    }
    out
}

/// Run the whole kit on `fmt`.
/// The one-row patch ([`NodeFormat::patch_leaf`]) that makes `changed`
/// of the leaf `old` by `change`: a put of the changed or inserted cell, a
/// delete of the removed one. `None` for a cell the patch cannot carry
/// (an overflowing key or value) or an interior change.
fn leaf_patch<'a>(
    old: &'a Node,
    changed: &'a Node,
    change: LeafChange,
) -> Option<(Vec<u8>, LeafPatch<'a>)> {
    let (Node::Leaf(before), Node::Leaf(after)) = (old, changed) else {
        return None;
    };
    let (cell, patch) = match change {
        LeafChange::Value(i) | LeafChange::Inserted(i) => {
            let c = after.get(i)?;
            match &c.value {
                Value::Inline(v) => (c, LeafPatch::Put(&v[..])),
                Value::Overflow { .. } => return None,
            }
        }
        LeafChange::Removed(i) => (before.get(i)?, LeafPatch::Delete { keep: 0 }),
        LeafChange::Child(_) | LeafChange::Split(_) | LeafChange::Dropped(_) => return None,
    };
    cell.key
        .chain()
        .is_none()
        .then(|| (cell.key.to_vec(), patch))
}

pub fn check_format(fmt: &'static dyn NodeFormat) {
    for &ps in PAGE_SIZES {
        let nodes = node_strategy(fmt, ps);
        // 1 and 2 on a fresh page; 4 and 1 over a committed image.
        let (fresh, over) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let patches = [0; 6].map(AtomicUsize::new);
        let hinted = [0; 6].map(AtomicUsize::new);
        let leaf_patched = AtomicUsize::new(0);
        let (long, long_over) = (AtomicUsize::new(0), AtomicUsize::new(0));
        runner(192)
            .run(&(nodes.clone(), nodes), |(old, new)| {
                let Some(page) = write(fmt, ps, &old, None, 7)? else {
                    return Ok(());
                };
                reads_back(fmt, &page, ps, 7, &old, "round trip")?;
                fresh.fetch_add(1, Relaxed);
                if has_chains(&old) {
                    long.fetch_add(1, Relaxed);
                }
                let base = fmt.needs_base().then_some(page.as_slice());
                if let Some(page2) = write(fmt, ps, &new, base, 8)? {
                    reads_back(fmt, &page2, ps, 8, &new, "over a base")?;
                    over.fetch_add(1, Relaxed);
                    if fmt.needs_base() {
                        reads_back(fmt, &page2, ps, 7, &old, "the committed version")?;
                    }
                }
                // The same node less its first cell, over its own image:
                // the cells it keeps (overflowing keys among them) stay
                // where they are in formats that keep versions.
                if has_chains(&old) && old.len() > 1 {
                    let mut trimmed = old.clone();
                    match &mut trimmed {
                        Node::Leaf(c) => {
                            c.remove(0);
                        }
                        Node::Interior { cells, .. } => {
                            cells.remove(0);
                        }
                    }
                    let base = fmt.needs_base().then_some(page.as_slice());
                    let page3 = write(fmt, ps, &trimmed, base, 8)?;
                    // Every cell it keeps is paired with the committed
                    // one (overflowing keys by their stored bytes), so
                    // nothing new is written and it always fits.
                    prop_assert!(
                        page3.is_some(),
                        "{}: a subset of the committed cells does not fit over them at {}",
                        fmt.name(),
                        ps
                    );
                    if let Some(page3) = page3 {
                        reads_back(fmt, &page3, ps, 8, &trimmed, "trimmed over its base")?;
                        long_over.fetch_add(1, Relaxed);
                    }
                }
                // One change, nothing else (a leaf's value, inserted cell
                // or removed one; an interior node's moved child or split
                // child): a format that patches its image must produce
                // what a full encode reads as the new node; one that
                // declines must say so.
                let changes = match &old {
                    Node::Leaf(cells) => leaf_changes(fmt, ps, cells),
                    Node::Interior { cells, right } => interior_changes(fmt, ps, cells, *right),
                };
                for (change, changed) in changes {
                    let kind = match change {
                        LeafChange::Value(_) => 0,
                        LeafChange::Inserted(_) => 1,
                        LeafChange::Removed(_) => 2,
                        LeafChange::Child(_) => 3,
                        LeafChange::Split(_) => 4,
                        LeafChange::Dropped(_) => 5,
                    };
                    let ctx = enc(ps, 8);
                    let mut out = vec![0xEEu8; ps];
                    let patched = fmt
                        .encode_changed(5, &changed, &page, change, &ctx, &mut out)
                        .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))?;
                    if patched {
                        reads_back(fmt, &out, ps, 8, &changed, &format!("patched {change:?}"))?;
                        patches[kind].fetch_add(1, Relaxed);
                    }
                    // The same change as a one-row patch of the page
                    // (`patch_leaf`, without the logical view), over a
                    // base verified or not: what it writes reads back as
                    // the new node (and, beside the committed version,
                    // as the old one too).
                    if let Some((key, patch)) = leaf_patch(&old, &changed, change) {
                        for verified in [false, true] {
                            let mut ctx = enc(ps, 8);
                            ctx.base_verified = verified;
                            let mut out = vec![0xEEu8; ps];
                            let done = fmt
                                .patch_leaf(5, &page, &key, patch, &BYTEWISE, &ctx, &mut out)
                                .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))?;
                            let existed = !matches!(change, LeafChange::Inserted(_));
                            match done {
                                None => {}
                                Some(Patched::Written { existed: e }) => {
                                    prop_assert_eq!(e, existed, "{}: {:?}", fmt.name(), change);
                                    let what = format!("leaf patch {change:?}");
                                    reads_back(fmt, &out, ps, 8, &changed, &what)?;
                                    // MVBT places the change where its
                                    // full layout would: the same bytes.
                                    if fmt.name() == "mvbt" {
                                        let full = write(fmt, ps, &changed, Some(&page), 8)?;
                                        prop_assert!(
                                            full.as_deref() == Some(&out[..]),
                                            "mvbt: {:?} patched unlike its full encode",
                                            change
                                        );
                                    }
                                    if fmt.needs_base() {
                                        let what = format!("{what}, old version");
                                        reads_back(fmt, &out, ps, 7, &old, &what)?;
                                    }
                                    leaf_patched.fetch_add(1, Relaxed);
                                }
                                Some(Patched::Absent) => {
                                    return Err(TestCaseError::fail(format!(
                                        "{}: {change:?}: the key was not found",
                                        fmt.name()
                                    )))
                                }
                                // Full: the full layout refuses the node.
                                Some(Patched::Full) => {
                                    let full = write(fmt, ps, &changed, Some(&page), 8)?;
                                    prop_assert!(
                                        full.is_none(),
                                        "{}: {:?} found full, yet the node fits",
                                        fmt.name(),
                                        change
                                    );
                                }
                            }
                        }
                    }
                    // The same change as the pager's hint to a format
                    // that writes beside the committed version (over a
                    // base it verified): both versions read back.
                    if fmt.needs_base() {
                        let mut ctx = enc(ps, 8);
                        ctx.leaf_change = Some(change);
                        ctx.base_verified = true;
                        let mut out = vec![0xEEu8; ps];
                        let written = fmt
                            .encode_if_fits(5, &changed, Some(&page), &ctx, &mut out)
                            .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))?;
                        if written {
                            let what = format!("hinted {change:?}");
                            reads_back(fmt, &out, ps, 8, &changed, &what)?;
                            reads_back(fmt, &out, ps, 7, &old, &format!("{what}, old version"))?;
                            hinted[kind].fetch_add(1, Relaxed);
                        }
                    }
                }
                // The root's last resort fits over anything.
                let empty = Node::Interior {
                    cells: Vec::new(),
                    right: 3,
                };
                prop_assert!(fmt.fits(&empty, Some(&page), &enc(ps, 8)));
                Ok(())
            })
            .unwrap();
        // The generator must exercise the properties, not skip them.
        let (fresh, over) = (fresh.into_inner(), over.into_inner());
        // The slotted formats patch each kind of change in place.
        let patches = patches.map(AtomicUsize::into_inner);
        assert!(
            // (A dropped child is laid out whole: no in-place patch.)
            fmt.name() != "slotted" || patches[..5].iter().all(|&n| n >= 16),
            "{} at {ps}: only {patches:?} in-place patches (value, insert, remove, child, split)",
            fmt.name()
        );
        let leaf_patched = leaf_patched.into_inner();
        assert!(
            !fmt.patches_leaf(&LeafPatch::Put(&[])) || leaf_patched >= 16,
            "{} at {ps}: only {leaf_patched} one-row leaf patches",
            fmt.name()
        );
        let hinted = hinted.map(AtomicUsize::into_inner);
        assert!(
            !fmt.needs_base() || hinted.iter().all(|&n| n >= 16),
            "{} at {ps}: only {hinted:?} hinted writes (value, insert, remove, child, split, dropped)",
            fmt.name()
        );
        let (long, long_over) = (long.into_inner(), long_over.into_inner());
        assert!(
            long >= 8 && long_over >= 8,
            "{} at {ps}: only {long} round trips and {long_over} overwrites with overflowing keys",
            fmt.name()
        );
        assert!(
            fresh >= 64 && over >= 16,
            "{} at {ps}: only {fresh} round trips and {over} overwrites of 192 cases",
            fmt.name()
        );
        // 3: damaged pages.
        let nodes = node_strategy(fmt, ps);
        let flips = proptest::collection::vec((0..ps, any::<u8>()), 1..16);
        runner(128)
            .run(&(nodes, flips, any::<u64>()), |(node, flips, tid)| {
                let mut page = write(fmt, ps, &node, None, 7)?.unwrap_or_else(|| vec![0; ps]);
                for (at, x) in flips {
                    page[at] ^= x | 1;
                }
                let _ = fmt.decode(5, &page, &dec(ps, tid % 16));
                let _ = fmt.check_raw(5, &page, &dec(ps, tid % 16));
                Ok(())
            })
            .unwrap();
        runner(64)
            .run(&proptest::collection::vec(any::<u8>(), ps), |page| {
                let _ = fmt.decode(5, &page, &dec(ps, 7));
                Ok(())
            })
            .unwrap();
        for fill in [0u8, 0xFF] {
            let _ = fmt.decode(5, &vec![fill; ps], &dec(ps, 7));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{check_format, dec, enc, PAGE_SIZES};
    use crate::base::Error;
    use crate::node::{
        DhlFormat, IpsFormat, LeafCell, MvbtFormat, Node, NodeFormat, SlottedFormat,
        SlottedMetaFormat, Value,
    };
    use std::sync::Arc;

    /// Formats that store a leaf's cells in key order must refuse a page
    /// whose keys do not ascend (or repeat), whether the cells are plain
    /// (decoded in one pass) or not (a value in an overflow chain).
    #[test]
    fn keys_out_of_order_are_corruption() {
        let plain = |k: &[u8]| LeafCell {
            key: k.into(),
            value: Value::Inline(vec![7u8; 40].into()),
        };
        let chained = |k: &[u8]| LeafCell {
            key: k.into(),
            value: Value::Overflow { len: 5000, head: 9 },
        };
        let ordered = |v: &[LeafCell]| v.windows(2).all(|w| w[0].key < w[1].key);
        let cases: Vec<Vec<LeafCell>> = vec![
            vec![plain(b"a"), plain(b"c"), plain(b"b")],
            vec![plain(b"a"), plain(b"a")],
            vec![plain(&[1; 9]), plain(&[1; 8])],
            vec![
                plain(&[1, 2, 3, 4, 5, 6, 7, 9]),
                plain(&[1, 2, 3, 4, 5, 6, 8, 9, 9]),
            ],
            vec![plain(&[4; 20]), plain(&[4; 19])],
            vec![plain(b"a"), chained(b"c"), plain(b"b")],
            vec![chained(b"b"), plain(b"a")],
            // Ordered: must decode.
            vec![
                plain(&[1; 8]),
                plain(&[1; 9]),
                chained(&[2; 3]),
                plain(&[2; 4]),
            ],
        ];
        let formats: [&dyn NodeFormat; 3] = [&SlottedFormat, &SlottedMetaFormat, &DhlFormat];
        for fmt in formats {
            for &ps in PAGE_SIZES {
                for cells in &cases {
                    let node = Node::Leaf(cells.clone());
                    let mut out = vec![0u8; ps];
                    fmt.encode(5, &node, None, &enc(ps, 1), &mut out).unwrap();
                    let shared: Arc<[u8]> = out.clone().into();
                    for got in [
                        fmt.decode(5, &out, &dec(ps, 1)),
                        fmt.decode_shared(5, &shared, &dec(ps, 1)),
                    ] {
                        if ordered(cells) {
                            assert_eq!(got.unwrap(), node, "{} {ps}", fmt.name());
                        } else {
                            assert!(
                                matches!(got, Err(Error::Corruption { .. })),
                                "{} {ps} {cells:?}: {got:?}",
                                fmt.name()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn slotted_conforms() {
        check_format(&SlottedFormat);
    }

    #[test]
    fn slotted_meta_conforms() {
        check_format(&SlottedMetaFormat);
    }

    #[test]
    fn dhl_conforms() {
        check_format(&DhlFormat);
    }

    #[test]
    fn ips_conforms() {
        check_format(&IpsFormat);
    }

    #[test]
    fn mvbt_conforms() {
        check_format(&MvbtFormat::MVBT);
    }

    #[test]
    fn ls_mvbt_conforms() {
        check_format(&MvbtFormat::LAZY);
    }
}
