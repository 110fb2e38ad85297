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
    assert_eq!(info.version, 4);
    assert_eq!(info.centers, vec![127, 126]);
    assert_eq!(info.model, vec![(67, 8), (107, 8), (117, 8), (124, 8), (127, 4048), (135, 8), (157, 8)]);
    assert_eq!(info.word_counts, [3, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(info.record_len, 1168);
    assert_eq!(info.payload_bytes, 512);
    assert_eq!(info.section_bytes, [48, 2, 30, 1056, 16, 16]);
    let u32_at = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
    let state = |p: usize, j: usize| u32_at(0x70 + 4 * (32 * p + j));
    assert_eq!(
        (state(0, 0), state(0, 2), state(0, 3), state(0, 8), state(0, 14)),
        (0x0004_4b38, 0x0004_4ff5, 0x0004_569b, 0x0001_cac0, 0x0001_0020)
    );
    for p in 0..8 {
        for j in 0..32 {
            let v = p >= 5 || (p == 4 && j >= 4); // carries V's 80 80
            let expected = match (p, j) {
                (0, 0 | 2 | 3 | 8 | 14) => continue,
                (_, 0..=7) if v => 0x0001_a6d0,
                (_, 8) if v => 0x0001_89c0,
                _ if v => 0x0001_8080,
                (_, 0..=7) => 0x0001_1990,
                (_, 8) => 0x0001_0640,
                _ => 0x0001_0000,
            };
            assert_eq!(state(p, j), expected, "partition {p} lane {j}");
        }
    }
    let words: Vec<u16> = r[0x470..0x476].chunks(2).map(|w| u16::from_le_bytes([w[0], w[1]])).collect();
    assert_eq!(words, vec![0xe018, 0x4000, 0x0010], "step 0: lane 2; step 3: lane 3; step 6: lane 0");
    assert_eq!(r.len(), 48 + 2 + 2 + 21 + 7 + 1056 + 16 + 16);
    // The section: values P..N = 512..528, V's last 16 (-0.5, 0x80).
    assert_eq!(r[0x480..], [0x80; 16]);

    // The step table and the final states, by the decoder's steps of spec §6.3.
    let model = exans::Model::from_entries(12, info.model.clone()).unwrap();
    let table = model.decode_table();
    let mut rows = Vec::new();
    let (mut lane0, mut lane8) = (vec![state(0, 0)], vec![state(0, 8)]);
    let mut finals = [[0u32; 32]; 8];
    for (p, finals) in finals.iter_mut().enumerate() {
        let mut st: [u32; 32] = std::array::from_fn(|j| state(p, j));
        let mut pos = 0;
        for t in 0..8 {
            for (j, x) in st.iter_mut().enumerate() {
                if t >= exans::format::lane_run(66, j) {
                    continue;
                }
                let (before, slot) = (*x, *x & 4095);
                let e = table[slot as usize];
                let (symbol, freq, bias) = (e >> 24, ((e >> 12) & 0xfff) + 1, e & 0xfff);
                let decoded = freq * (*x >> 12) + bias;
                *x = decoded;
                let mut read = None;
                if decoded < 1 << 16 {
                    read = Some(words[pos]);
                    *x = (decoded << 16) | words[pos] as u32;
                    pos += 1;
                }
                if symbol != 127 || read.is_some() {
                    rows.push((t, j, before, slot, symbol, freq, bias, decoded, read, *x));
                }
                if (p, j) == (0, 0) && t < 6 {
                    lane0.push(*x);
                }
                if (p, j) == (0, 8) {
                    lane8.push(*x);
                }
            }
        }
        assert_eq!(pos, info.word_counts[p] as usize, "partition {p}");
        *finals = st;
    }
    assert_eq!(
        rows,
        vec![
            (0, 2, 0x0004_4ff5, 4085, 135, 8, 5, 549, Some(0xe018), 0x0225_e018),
            (1, 2, 0x0225_e018, 24, 124, 8, 0, 70384, None, 0x0001_12f0),
            (3, 3, 0x0004_2ffb, 4091, 157, 8, 3, 531, Some(0x4000), 0x0213_4000),
            (4, 3, 0x0213_4000, 0, 67, 8, 0, 68000, None, 0x0001_09a0),
            (6, 0, 0x0004_0008, 8, 107, 8, 0, 512, Some(0x0010), 0x0200_0010),
            (7, 0, 0x0200_0010, 16, 117, 8, 0, 65536, None, 0x0001_0000),
        ]
    );
    assert_eq!((lane0[1], lane0[6]), (0x0004_3e58, 0x0004_0008));
    assert_eq!(lane8, vec![0x0001_cac0, 0x0001_c560, 0x0001_c000]);
    // Every lane ends at 2^16 plus the bytes of values 2k and 2k + 1, k = 32 p + j.
    for (p, lanes) in finals.iter().enumerate() {
        for (j, &x) in lanes.iter().enumerate() {
            let expected = match (p, j) {
                (0, 3) => 0x0001_0040,
                (0, 8) => 0x0001_c000,
                (0, 14) => 0x0001_0020,
                (4, 4..) | (5.., _) => 0x0001_8080,
                _ => 0x0001_0000,
            };
            assert_eq!(x, expected, "final state of partition {p} lane {j}");
        }
    }
}

/// `EncodeOptions::version = 3` writes what the version 3 encoder wrote: the example's
/// record byte for byte as the old dump holds it, which every decoder still reads, in a
/// container whose header says version 3.
#[test]
fn version_3_writer_gives_the_version_3_record() {
    let (shape, groups) = common::example_block();
    let refs: Vec<&[u16]> = groups.iter().map(Vec::as_slice).collect();
    let options = exans::EncodeOptions {
        raw: exans::RawPolicy::Never,
        version: Some(exans::format::VERSION_3),
        ..Default::default()
    };
    let v3 = exans::encode_block_with(&refs, shape, &options).unwrap();
    assert_eq!(v3, common::example_record_v3());
    let (_, words) = exans::decode_block(&v3).unwrap();
    assert_eq!(words, groups.concat());
    // The container's header says the version too: 3 with `version: Some(3)`, 4 by default.
    let cache = kvcodec_testkit::cache_from(1, 1, 33, 8, |_, k, i| groups[k][i]);
    let version_of = |c: &[u8]| u16::from_le_bytes([c[4], c[5]]);
    let c3 = exans::encode_cache_with(&cache, 8, &options).unwrap();
    assert_eq!(version_of(&c3), 3);
    assert_eq!(exans::container_info(&c3).unwrap().record(&c3, 0), &v3[..]);
    assert_eq!(exans::decode_cache(&c3).unwrap(), cache);
    let default = exans::EncodeOptions { raw: exans::RawPolicy::Never, ..Default::default() };
    let c4 = exans::encode_cache_with(&cache, 8, &default).unwrap();
    assert_eq!(version_of(&c4), exans::format::VERSION);
    assert_eq!(version_of(&c4), 4);
    assert_eq!(exans::container_info(&c4).unwrap().record(&c4, 0), &common::example_record()[..]);
    let v2 = exans::EncodeOptions { version: Some(exans::format::VERSION_2), ..options };
    kvcodec_testkit::assert_rejects!(
        exans::encode_block_with(&refs, shape, &v2),
        exans::Error::UnsupportedVersion { version: 2 }
    );
}
