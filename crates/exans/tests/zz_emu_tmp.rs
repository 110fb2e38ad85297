//! TEMPORARY: a line-by-line CPU emulation of kernels/exans/exans.cu, run on the GPU
//! test's inputs. Deleted after use.
mod common;
use bf16_field::KvCache;
use common::{Rng, cache_from, kv_like};
use exans::{
    EncodeOptions, RawPolicy, container_info, decode_cache, encode_cache, encode_cache_with, inspect_record,
};

fn u16a(p: &[u8], at: u64) -> u32 {
    p[at as usize] as u32 | (p[at as usize + 1] as u32) << 8
}
fn u32a(p: &[u8], at: u64) -> u32 {
    u16a(p, at) | u16a(p, at + 2) << 16
}
fn a16(x: u64) -> u64 {
    (x + 15) & !15
}
fn byte_perm(x: u32, y: u32, s: u32) -> u32 {
    let b = ((y as u64) << 32 | x as u64).to_le_bytes();
    let mut r = 0u32;
    for k in 0..4 {
        r |= (b[((s >> (4 * k)) & 7) as usize] as u32) << (8 * k);
    }
    r
}
fn vadd4(a: u32, b: u32) -> u32 {
    let mut r = 0u32;
    for k in 0..4 {
        r |= (((a >> (8 * k)) as u8).wrapping_add((b >> (8 * k)) as u8) as u32) << (8 * k);
    }
    r
}
fn join_quad(e4: u32, sf4: u32) -> (u32, u32) {
    let e01 = byte_perm(e4, 0, 0x4140);
    let e23 = byte_perm(e4, 0, 0x4342);
    let s01 = byte_perm(sf4, 0, 0x4140);
    let s23 = byte_perm(sf4, 0, 0x4342);
    (
        ((s01 & 0x00800080) << 8) | (e01 << 7) | (s01 & 0x007f007f),
        ((s23 & 0x00800080) << 8) | (e23 << 7) | (s23 & 0x007f007f),
    )
}
static FAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SLOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Default, Clone)]
struct Rec {
    start: u64,
    values: u64,
    per_group: u64,
    directory: u64,
    sm: u64,
    streams: [u64; 8],
    counts: [u32; 8],
    precision: u32,
    symbols: u32,
    model: u32,
    groups: u32,
    raw: bool,
}

fn parse(c: &[u8], offsets: &[u64], rec: u64, l: u32, h: u32, d: u32, b: u32, t: u64) -> Option<Rec> {
    let mut r = Rec::default();
    let (s0, s1) = (offsets[rec as usize], offsets[rec as usize + 1]);
    if s0 > s1 || s1 > c.len() as u64 || s0 % 16 != 0 {
        return None;
    }
    if s1 - s0 < 48 {
        return None;
    }
    let p = &c[s0 as usize..s1 as usize]; // emulates bounds: any read past slot panics
    let record_len = u32a(p, 20) as u64;
    if record_len < 48 || record_len > s1 - s0 {
        return None;
    }
    let p = &p[..record_len as usize];
    if &p[..4] != b"KVXA" || u16a(p, 4) != 1 {
        return None;
    }
    let flags = u16a(p, 6);
    if flags & !1 != 0 {
        return None;
    }
    let ft = rec * b as u64;
    if ft >= t {
        return None;
    }
    let left = t - ft;
    let bt = left.min(b as u64);
    if u16a(p, 8) != l || u16a(p, 10) != h || u16a(p, 12) != d || u16a(p, 14) as u64 != bt {
        return None;
    }
    let pg = bt * h as u64 * d as u64;
    let n = 2 * l as u64 * pg;
    if u32a(p, 16) as u64 != n {
        return None;
    }
    r.start = s0;
    r.values = n;
    r.per_group = pg;
    r.groups = 2 * l;
    r.raw = flags & 1 != 0;
    if r.raw {
        return if record_len == 48 + 2 * n { Some(r) } else { None };
    }
    let precision = p[24] as u32;
    if !(1..=12).contains(&precision) || p[25] != 8 || p[26] != 32 {
        return None;
    }
    let model = 48 + 2 * l as u64;
    if u32a(p, 28) as u64 != model || model + 2 > record_len {
        return None;
    }
    let k = u16a(p, model);
    if !(1..=256).contains(&k) {
        return None;
    }
    let directory = a16(model + 2 + 3 * k as u64);
    let words = directory + 1056;
    if u32a(p, 32) as u64 != directory || u32a(p, 36) as u64 != words || words > record_len {
        return None;
    }
    let mut at = words;
    for q in 0..8 {
        r.counts[q] = u32a(p, directory + 4 * q as u64);
        r.streams[q] = at;
        at = a16(at + 2 * r.counts[q] as u64);
    }
    if u32a(p, 40) as u64 != at || at + n != record_len {
        return None;
    }
    r.precision = precision;
    r.symbols = k;
    r.model = model as u32;
    r.directory = directory;
    r.sm = at;
    Some(r)
}

/// Returns (status, out).
fn emulate(c: &[u8]) -> (u32, Vec<u16>) {
    let info = container_info(c).unwrap();
    let s = info.shape;
    let (l, h, d, b, t) =
        (s.layers as u32, s.kv_heads as u32, s.head_dim as u32, info.block_tokens as u32, s.tokens as u64);
    let offsets: Vec<u64> = info.offsets.iter().map(|&o| o as u64).collect();
    let mut out = vec![0xdeadu16; s.total_values()];
    let mut status = 0u32;
    let (mut fast, mut slow) = (0u64, 0u64);
    let hd = h as u64 * d as u64;
    let tv = t * hd;
    for rec in 0..info.blocks() as u64 {
        let Some(rs) = parse(c, &offsets, rec, l, h, d, b, t) else {
            status |= 1;
            continue;
        };
        let rp = &c[rs.start as usize..];
        let rl = u32a(rp, 20) as usize;
        let rp = &rp[..rl];
        let n = rs.values;
        let pg = rs.per_group;
        let ob = rec * b as u64 * hd;
        if rs.raw {
            for g in 0..rs.groups as u64 {
                for i in 0..pg {
                    out[(g * tv + ob + i) as usize] = u16a(rp, 48 + 2 * (g * pg + i)) as u16;
                }
            }
            continue;
        }
        let k = rs.symbols;
        let precision = rs.precision;
        let mut freq = [0u32; 256];
        let mut sym = [0u32; 256];
        for tid in 0..k as usize {
            let e = rs.model as u64 + 2 + 3 * tid as u64;
            sym[tid] = rp[e as usize] as u32;
            freq[tid] = u16a(rp, e + 1);
        }
        let mut cdf = [0u32; 256];
        let mut base = [0u32; 256];
        let mut total = 0u32;
        let mut bad = false;
        for tid in 0..256 {
            cdf[tid] = total;
            total += freq[tid];
        }
        for tid in 0..k as usize {
            base[tid] = sym[tid] << 24 | (freq[tid].wrapping_sub(1) & 0xfff) << 12;
            bad |= freq[tid] == 0 || (tid > 0 && sym[tid - 1] >= sym[tid]);
        }
        bad |= total != 1 << precision;
        if bad {
            status |= 2;
            continue;
        }
        let slots = 1u32 << precision;
        let mut table = vec![0u32; 4096];
        for x in 0..slots {
            let (mut lo, mut hi) = (0u32, k - 1);
            while lo < hi {
                let mid = (lo + hi + 1) / 2;
                if cdf[mid as usize] <= x { lo = mid } else { hi = mid - 1 }
            }
            table[x as usize] = base[lo as usize] | (x - cdf[lo as usize]);
        }
        for p in 0..8u64 {
            let ps = p * n / 8;
            let pe = (p + 1) * n / 8;
            let plen = pe - ps;
            let m = plen.div_ceil(32);
            let full = if m > 0 { plen / m } else { 0 };
            let rem = if m > 0 { plen % m } else { 0 };
            let mut x = [0u32; 32];
            let mut run = [0u64; 32];
            let mut g = [0u64; 32];
            let mut r = [0u64; 32];
            let mut obase = [0u64; 32];
            let mut center = [0u32; 32];
            for lane in 0..32u64 {
                run[lane as usize] = if lane < full {
                    m
                } else if lane == full {
                    rem
                } else {
                    0
                };
                x[lane as usize] = u32a(rp, rs.directory + 32 + 4 * (32 * p + lane));
                let v0 = ps + lane * m;
                if run[lane as usize] > 0 {
                    let j = lane as usize;
                    g[j] = v0 / pg;
                    r[j] = v0 % pg;
                    obase[j] = g[j] * tv + ob;
                    center[j] = rp[(48 + g[j]) as usize] as u32;
                }
            }
            if x.iter().any(|&v| v < 65536) {
                status |= 4;
                continue;
            }
            let count = rs.counts[p as usize] as u64;
            let mask = slots - 1;
            let mut pos = 0u64;
            let stream = rs.streams[p as usize];
            let wd = |idx: u64| -> u32 { if idx < count { u16a(rp, stream + 2 * idx) } else { 0 } };
            let mut window = [0u32; 32];
            for j in 0..32 {
                window[j] = wd(pos + j as u64);
            }
            const R: u64 = 16;
            let mut t0 = 0u64;
            while t0 < m {
                let mut syms = [[0u32; 4]; 32];
                for i in 0..R {
                    let mut need = [false; 32];
                    for j in 0..32 {
                        let active = t0 + i < run[j];
                        if active {
                            let e = table[(x[j] & mask) as usize];
                            let f = ((e >> 12) & 0xfff) + 1;
                            x[j] = f.wrapping_mul(x[j] >> precision).wrapping_add(e & 0xfff);
                            syms[j][(i / 4) as usize] |= (e >> 24) << (8 * (i % 4));
                        }
                        need[j] = active && x[j] < 65536;
                    }
                    let ballot: u32 = (0..32).filter(|&j| need[j]).map(|j| 1u32 << j).sum();
                    let ws: Vec<u32> =
                        (0..32).map(|j| window[(ballot & ((1u32 << j) - 1)).count_ones() as usize]).collect();
                    for j in 0..32 {
                        if need[j] {
                            x[j] = x[j] << 16 | ws[j];
                        }
                    }
                    if ballot != 0 {
                        pos += ballot.count_ones() as u64;
                        for j in 0..32 {
                            window[j] = wd(pos + j as u64);
                        }
                    }
                }
                for j in 0..32 {
                    if t0 >= run[j] {
                        continue;
                    }
                    let v0 = ps + j as u64 * m;
                    let first = v0 + t0;
                    let dst = obase[j] + r[j]; // out base assumed 16-byte aligned (cudaMalloc)
                    let src = rs.start + rs.sm + first; // container base 256-aligned
                    if t0 + R <= run[j] && r[j] + R <= pg && ((dst * 2) | src) & 15 == 0 {
                        fast += 1;
                        let c4 = (center[j].wrapping_sub(127) & 0xff).wrapping_mul(0x01010101);
                        for c in 0..(R / 16) as usize {
                            let smb = &rp
                                [(rs.sm + first) as usize + 16 * c..(rs.sm + first) as usize + 16 * c + 16];
                            let mut wordsv = [0u32; 8];
                            for q in 0..4 {
                                let sf4 = u32::from_le_bytes(smb[4 * q..4 * q + 4].try_into().unwrap());
                                let e4 = vadd4(syms[j][4 * c + q], c4);
                                let (a, b) = join_quad(e4, sf4);
                                wordsv[2 * q] = a;
                                wordsv[2 * q + 1] = b;
                            }
                            for (k, wv) in wordsv.iter().enumerate() {
                                let o = (dst + 16 * c as u64 + 2 * k as u64) as usize;
                                out[o] = *wv as u16;
                                out[o + 1] = (*wv >> 16) as u16;
                            }
                        }
                        r[j] += R;
                        if r[j] == pg {
                            r[j] = 0;
                            g[j] += 1;
                            obase[j] += tv;
                            if t0 + R < run[j] {
                                center[j] = rp[(48 + g[j]) as usize] as u32;
                            }
                        }
                    } else {
                        slow += 1;
                        for i in 0..R {
                            let tt = t0 + i;
                            if tt < run[j] {
                                let sym = (syms[j][(i / 4) as usize] >> (8 * (i % 4))) & 0xff;
                                let e = (sym + center[j]).wrapping_sub(127) & 0xff;
                                let sf = rp[(rs.sm + v0 + tt) as usize] as u32;
                                out[(obase[j] + r[j]) as usize] =
                                    (((sf & 0x80) << 8) | (e << 7) | (sf & 0x7f)) as u16;
                                r[j] += 1;
                                if r[j] == pg {
                                    r[j] = 0;
                                    g[j] += 1;
                                    obase[j] += tv;
                                    if tt + 1 < run[j] {
                                        center[j] = rp[(48 + g[j]) as usize] as u32;
                                    }
                                }
                            }
                        }
                    }
                }
                t0 += R;
            }
            if pos > count {
                status |= 8;
            }
            if x.iter().any(|&v| v != 65536) {
                status |= 16;
            }
            if pos != count {
                status |= 32;
            }
        }
    }
    FAST.fetch_add(fast, std::sync::atomic::Ordering::Relaxed);
    SLOW.fetch_add(slow, std::sync::atomic::Ordering::Relaxed);
    (status, out)
}

fn check(name: &str, c: &[u8]) -> bool {
    let cpu = decode_cache(c);
    if let Ok(i) = container_info(c) {
        if !(0..i.blocks()).all(|k| inspect_record(i.record(c, k)).is_ok()) {
            assert!(cpu.is_err());
            return false;
        }
    } else {
        assert!(cpu.is_err());
        return false;
    }
    let (st, out) = emulate(c);
    match cpu {
        Ok(cache) => {
            assert_eq!(st, 0, "{name}");
            assert!(out == cache.concat_words(), "{name}: output");
            false
        }
        Err(e) => {
            assert_ne!(st, 0, "{name}: CPU error {e} but emu ok");
            true
        }
    }
}

fn opts(raw: RawPolicy, precision: u8) -> EncodeOptions {
    EncodeOptions { precision, raw }
}
fn raw_flags(container: &[u8]) -> Vec<bool> {
    let info = container_info(container).unwrap();
    (0..info.blocks()).map(|i| inspect_record(info.record(container, i)).unwrap().raw).collect()
}
fn rt(name: &str, cache: &KvCache, b: usize, o: &EncodeOptions) {
    let c = encode_cache_with(cache, b, o).unwrap();
    check(name, &c);
}

#[test]
fn emu() {
    let auto = opts(RawPolicy::Auto, 12);
    let never = opts(RawPolicy::Never, 12);
    let always = opts(RawPolicy::Always, 12);
    for tokens in [1, 5] {
        let tiny = kv_like(1, 1, 1, tokens, 3);
        assert!(raw_flags(&encode_cache(&tiny, 1).unwrap()).iter().all(|&r| r));
        for o in [auto, never, always] {
            rt("tiny", &tiny, 1, &o);
        }
    }
    for (l, h, d, t, b) in
        [(1, 1, 2, 2, 2), (1, 1, 33, 8, 8), (2, 1, 16, 3, 3), (1, 3, 5, 19, 19), (3, 2, 7, 7, 7)]
    {
        rt("small", &kv_like(l, h, d, t, 11 + d as u32), b, &never);
    }
    let partial = kv_like(2, 2, 64, 37, 5);
    for o in [auto, never, opts(RawPolicy::Never, 9)] {
        rt("partial", &partial, 16, &o);
    }
    let mut rng = Rng(99);
    let base = kv_like(2, 2, 64, 48, 7);
    let mixed = cache_from(2, 2, 64, 48, |l, k, i| {
        let token = i / 128;
        let w = base.tensor(l, bf16_field::KvKind::BOTH[k])[i];
        if (16..32).contains(&token) { rng.next() as u16 } else { w }
    });
    let c = encode_cache(&mixed, 16).unwrap();
    assert_eq!(raw_flags(&c), vec![false, true, false]);
    check("mixed", &c);
    let one = cache_from(1, 2, 64, 40, |_, _, i| if i % 3 == 0 { 0xbf80 } else { 0x3f80 });
    let c = encode_cache(&one, 16).unwrap();
    let info = container_info(&c).unwrap();
    let first = inspect_record(info.record(&c, 0)).unwrap();
    assert!(!first.raw);
    assert_eq!(first.model, vec![(127, 4096)]);
    assert_eq!(first.word_counts, [0; 8]);
    check("one", &c);
    rt("one p1", &one, 16, &opts(RawPolicy::Never, 1));
    let mut rng = Rng(1234);
    let all = cache_from(2, 2, 64, 32, |_, _, i| {
        let e = if i % 7 == 0 { (i / 7) % 256 } else { 120 + (rng.next() % 9) as usize };
        ((e as u16) << 7) | (rng.next() as u16 & 0x807f)
    });
    let c = encode_cache_with(&all, 32, &never).unwrap();
    let info = container_info(&c).unwrap();
    assert_eq!(inspect_record(info.record(&c, 0)).unwrap().model.len(), 256);
    println!("all auto raw: {:?}", raw_flags(&encode_cache(&all, 32).unwrap()));
    for o in [auto, never, opts(RawPolicy::Never, 8)] {
        rt("all", &all, 32, &o);
    }
    let uniform =
        cache_from(1, 1, 256, 4, |_, k, i| (((i + 17 * k) % 256) as u16) << 7 | (i as u16 & 0x807f));
    for o in [never, opts(RawPolicy::Never, 8)] {
        rt("uniform", &uniform, 4, &o);
    }
    let many = kv_like(4, 3, 32, 333, 77);
    for b in [1, 7, 16, 64, 333] {
        rt("many", &many, b, &auto);
        rt("many", &many, b, &never);
    }
    // Fixtures and corruptions.
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    for name in ["smollm2-135m-code", "smollm2-135m-prose"] {
        let cache = bf16_field::io::read_kv_cache(&dir.join(format!("{name}.safetensors"))).unwrap();
        for b in [16, 13] {
            let c = encode_cache(&cache, b).unwrap();
            assert!(raw_flags(&c).iter().all(|r| !r));
            check(name, &c);
        }
        rt(name, &cache, 16, &opts(RawPolicy::Never, 10));
        let container = encode_cache(&cache, 16).unwrap();
        let info = container_info(&container).unwrap();
        let (mut kernel, mut total) = (0, 0);
        for block in [0, info.blocks() - 1] {
            let start = info.offsets[block];
            let record = inspect_record(info.record(&container, block)).unwrap();
            let [_, centers, model, _, words, sign_mantissa] = record.section_bytes;
            let model_at = 48 + centers;
            let directory = model_at + model;
            let words_at = directory + 1056;
            let sm_at = words_at + words;
            let states = directory + 32;
            let word_bytes = 2 * record.word_counts.iter().sum::<u32>() as usize;
            let spots = [
                0,
                8,
                20,
                24,
                48,
                model_at,
                model_at + 2,
                model_at + 3,
                model_at + 4 + 15,
                directory,
                directory + 28,
                states,
                states + 4 * 37 + 3,
                states + 4 * 255 + 1,
                states + 4 * 105,
                words_at,
                words_at + 1,
                words_at + word_bytes / 2,
                sm_at - 18,
                sm_at - 1,
                sm_at,
                sm_at + sign_mantissa - 1,
            ];
            for at in spots {
                for flip in [1u8, 0x5a, 0x80] {
                    let mut bad = container.clone();
                    bad[start + at] ^= flip;
                    // Only containers whose index still parses reach the kernel.
                    if container_info(&bad).is_err() {
                        continue;
                    }
                    let host_ok = {
                        let i = container_info(&bad).unwrap();
                        (0..i.blocks()).all(|k| inspect_record(i.record(&bad, k)).is_ok())
                    };
                    let e = check(&format!("{name} {block} {at} {flip}"), &bad);
                    total += 1;
                    if e {
                        assert!(host_ok);
                        kernel += 1;
                    }
                }
            }
            let mut bad = container.clone();
            bad.swap(start + words_at, start + words_at + 2);
            bad.swap(start + words_at + 1, start + words_at + 3);
            assert!(check("swap", &bad));
            kernel += 1;
            let mut bad = container.clone();
            bad[start + states + 40..start + states + 44].copy_from_slice(&65_536u32.to_le_bytes());
            assert!(check("reset", &bad));
            kernel += 1;
        }
        println!(
            "{name}: {total} corruptions, {kernel} reach the kernel path; fast rounds {} slow rounds {}",
            FAST.load(std::sync::atomic::Ordering::Relaxed),
            SLOW.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}
