//! The worked example of `docs/formats/exans.md` §9: the hex dump in the spec must be
//! exactly what the encoder produces, and the decode trace the spec walks through must
//! hold. `KVCODEC_BLESS=1 cargo test -p exans --test spec_example` rewrites the dump.

mod common;

#[test]
fn spec_hexdump_is_the_encoder_output() {
    let record = common::example_record();
    let spec = kvcodec_testkit::format_spec("exans.md");
    kvcodec_testkit::assert_doc_block(&spec, "record-hex", &kvcodec_testkit::hexdump(&record));
}

#[test]
fn spec_walkthrough_numbers_hold() {
    let r = common::example_record();
    let info = exans::inspect_record(&r).unwrap();
    assert_eq!(info.centers, vec![127, 126]);
    assert_eq!(info.model, vec![(67, 8), (107, 8), (117, 8), (124, 8), (127, 4048), (135, 8), (157, 8)]);
    assert_eq!(info.word_counts, [3, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(info.record_len, 1680);
    let u32_at = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
    let state = |p: usize, j: usize| u32_at(0x70 + 4 * (32 * p + j));
    assert_eq!((state(0, 0), state(0, 2), state(0, 3)), (0x0004_4b38, 0x0004_4ff5, 0x0004_569a));
    for p in 0..8 {
        for j in 0..32 {
            let expected = match (p, j) {
                (0, 0 | 2 | 3) => continue,
                (_, 0..=7) => 0x0001_1990,
                (_, 8) => 0x0001_0640,
                _ => 0x0001_0000,
            };
            assert_eq!(state(p, j), expected, "partition {p} lane {j}");
        }
    }
    let words: Vec<u16> = r[0x470..0x476].chunks(2).map(|w| u16::from_le_bytes([w[0], w[1]])).collect();
    assert_eq!(words, vec![0xe018, 0xc000, 0x0010], "step 0: lane 2; step 3: lane 3; step 6: lane 0");
    assert_eq!(r.len(), 48 + 2 + 2 + 21 + 7 + 1056 + 16 + 528);
}
