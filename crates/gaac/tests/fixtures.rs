//! Snapshots of the fixtures' container summaries (bases calibrated on the other
//! fixture, the default slot): ratios, raw blocks and tag shares, so that a format or
//! calibration change shows up in review.

use gaac::{Bases, EncodeOptions, cache_info, encode_cache};
use kvcodec_testkit::fixtures;

#[test]
fn fixture_summaries() {
    let all = fixtures();
    for (i, (name, cache)) in all.iter().enumerate() {
        let bases = Bases::calibrate(&all[1 - i].1);
        let bytes = encode_cache(cache, &EncodeOptions { bases: Some(bases), ..Default::default() }).unwrap();
        insta::assert_snapshot!(name.clone(), cache_info(&bytes).unwrap().to_string());
    }
}
