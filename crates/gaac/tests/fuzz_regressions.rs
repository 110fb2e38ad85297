//! Inputs the fuzz targets found (docs/fuzzing.md), each a named test beside its fix.

mod common;

use bf16_field::KvKind;
use common::example_container;
use gaac::{Error, cache_info, decode_cache};

/// `gaac_cache` (stable driver, CI, 2026-12-01): with two invalid blocks, `cache_info` and
/// `decode_cache` reported different ones: the parallel block check returned whichever
/// invalid block a thread met first. Both now report the first in storage order (spec
/// §7.2). The example container's K slot (offset 208, 1446 bytes coded) gets a nonzero
/// padding byte and its V slot (offset 1696, empty: V is raw) a nonzero byte.
#[test]
fn two_invalid_blocks_report_the_first_in_storage_order() {
    let mut bytes = example_container();
    bytes[208 + 1446] = 9;
    bytes[1696 + 5] = 1;
    let first = Error::InBlock {
        layer: 0,
        kind: KvKind::K,
        head: 0,
        block: 0,
        source: Box::new(Error::SlotPaddingNotZero { offset: 1446, value: 9 }),
    };
    // The old check failed this only when the V block's thread won the race: repeat.
    for _ in 0..200 {
        assert_eq!(cache_info(&bytes).map(|_| ()), Err(first.clone()));
        assert_eq!(decode_cache(&bytes).map(|_| ()), Err(first.clone()));
    }
}
