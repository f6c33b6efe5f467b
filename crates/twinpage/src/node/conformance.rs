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

use super::{DecodeCtx, EncodeCtx, InteriorCell, LeafCell, Node, NodeFormat, Value};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

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

/// Generated nodes whose cells respect the format's key and inline
/// limits (the tree never produces others).
fn node_strategy(fmt: &'static dyn NodeFormat, ps: usize) -> BoxedStrategy<Node> {
    let max_key = fmt.max_key_len(ps).max(1);
    let max_inline = fmt.max_inline_cell(ps);
    let key = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 1..=max_key.min(24)),
        1 => proptest::collection::vec(any::<u8>(), 1..=max_key),
    ];
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
            .map(|(key, value)| LeafCell {
                key: key.into(),
                value,
            })
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
                .map(|(key, child)| InteriorCell {
                    key: key.into(),
                    child,
                })
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

/// Run the whole kit on `fmt`.
pub fn check_format(fmt: &'static dyn NodeFormat) {
    for &ps in PAGE_SIZES {
        let nodes = node_strategy(fmt, ps);
        // 1 and 2 on a fresh page; 4 and 1 over a committed image.
        let (fresh, over) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let patches = AtomicUsize::new(0);
        runner(192)
            .run(&(nodes.clone(), nodes), |(old, new)| {
                let Some(page) = write(fmt, ps, &old, None, 7)? else {
                    return Ok(());
                };
                let got = fmt
                    .decode(5, &page, &dec(ps, 7))
                    .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))?;
                prop_assert_eq!(&got, &old, "{}: round trip at {} bytes", fmt.name(), ps);
                fresh.fetch_add(1, Relaxed);
                let base = fmt.needs_base().then_some(page.as_slice());
                if let Some(page2) = write(fmt, ps, &new, base, 8)? {
                    let got = fmt
                        .decode(5, &page2, &dec(ps, 8))
                        .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))?;
                    prop_assert_eq!(&got, &new, "{}: over a base at {}", fmt.name(), ps);
                    over.fetch_add(1, Relaxed);
                    if fmt.needs_base() {
                        let committed = fmt.decode(5, &page2, &dec(ps, 7)).map_err(|e| {
                            TestCaseError::fail(format!("{}: old version lost: {e}", fmt.name()))
                        })?;
                        prop_assert_eq!(
                            &committed,
                            &old,
                            "{}: the committed version changed at {}",
                            fmt.name(),
                            ps
                        );
                    }
                }
                // One cell's value changed, nothing else: a format that
                // patches its image must produce what a full encode reads
                // as the new node; one that declines must say so.
                if let Node::Leaf(cells) = &old {
                    if let Some(i) = cells
                        .iter()
                        .position(|c| matches!(c.value, Value::Inline(_)))
                    {
                        let mut cells2 = cells.clone();
                        if let Value::Inline(v) = &cells2[i].value {
                            let flipped: Vec<u8> = v.iter().map(|b| b ^ 0x5A).collect();
                            cells2[i].value = Value::Inline(flipped.into());
                        }
                        let changed = Node::Leaf(cells2);
                        let ctx = enc(ps, 8);
                        let mut out = vec![0xEEu8; ps];
                        let patched = fmt
                            .encode_changed(5, &changed, &page, i, &ctx, &mut out)
                            .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))?;
                        if patched {
                            let got = fmt
                                .decode(5, &out, &dec(ps, 8))
                                .map_err(|e| TestCaseError::fail(format!("{}: {e}", fmt.name())))?;
                            prop_assert_eq!(
                                &got,
                                &changed,
                                "{}: patched cell at {}",
                                fmt.name(),
                                ps
                            );
                            patches.fetch_add(1, Relaxed);
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
        // The slotted formats patch a changed cell in place.
        let patches = patches.into_inner();
        assert!(
            fmt.name() != "slotted" || patches >= 16,
            "{} at {ps}: only {patches} in-place patches",
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
    use super::check_format;
    use crate::node::{DhlFormat, IpsFormat, SlottedFormat, SlottedMetaFormat};

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
}
