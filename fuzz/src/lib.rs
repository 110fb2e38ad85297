//! kvcodec's fuzz targets (docs/fuzzing.md).
//!
//! * [`targets`]: the target bodies, one per decoder stage per codec and one round trip
//!   per codec; `fuzz_targets/<name>.rs` hands each to libFuzzer.
//! * [`seeds`]: seed inputs encoded from small pieces of the real KV fixtures.
//! * [`mutate`]: the fixed-seed mutator of the stable driver (`src/bin/fuzz-stable.rs`),
//!   which runs the same bodies without nightly or libFuzzer.

pub mod mutate;
pub mod seeds;
pub mod targets;
