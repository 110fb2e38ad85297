//! A deterministic mutator for the stable driver: the same seed gives the same inputs
//! on every machine, so a CI failure replays anywhere.

/// SplitMix64: small, fast and good enough to pick mutations.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next_u64() % n as u64) as usize }
    }

    /// A random byte.
    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }
}

/// Values worth writing into a length, count or offset field.
fn interesting(rng: &mut Rng, current: u64, len: usize) -> u64 {
    match rng.below(10) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => current.wrapping_add(1),
        4 => current.wrapping_sub(1),
        5 => current.wrapping_add(1 + rng.below(64) as u64),
        6 => current.wrapping_sub(1 + rng.below(64) as u64),
        7 => len as u64,
        8 => 1u64 << rng.below(64),
        _ => rng.next_u64(),
    }
}

/// One mutation of `data`, in place: a bit flip, a byte overwrite, a truncation, an
/// insertion or deletion, a run of random bytes, a chunk copied elsewhere, or an edit of
/// an aligned little-endian field (u16, u32 or u64, as the formats' headers lay them out)
/// to an interesting value.
pub fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>) {
    let len = data.len();
    match rng.below(9) {
        0 if len > 0 => {
            let at = rng.below(len);
            data[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            data[at] = rng.byte();
        }
        2 if len > 0 => data.truncate(rng.below(len)),
        3 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            for _ in 0..n {
                data.insert(at, rng.byte());
            }
        }
        4 if len > 0 => {
            let at = rng.below(len);
            let n = (1 + rng.below(16)).min(len - at);
            data.drain(at..at + n);
        }
        5 if len > 0 => {
            let at = rng.below(len);
            let n = (1 + rng.below(32)).min(len - at);
            for b in &mut data[at..at + n] {
                *b = rng.byte();
            }
        }
        6 if len > 1 => {
            let from = rng.below(len);
            let to = rng.below(len);
            let n = (1 + rng.below(64)).min(len - from).min(len - to);
            data.copy_within(from..from + n, to);
        }
        _ => {
            // A field edit, mostly in the headers (the first 128 bytes of every format).
            let width = [2usize, 4, 8][rng.below(3)];
            let span = if rng.below(4) == 0 { len } else { len.min(256) };
            if span < width {
                data.push(rng.byte());
                return;
            }
            let at = rng.below(span / width) * width;
            let mut field = [0u8; 8];
            field[..width].copy_from_slice(&data[at..at + width]);
            let value = interesting(rng, u64::from_le_bytes(field), len).to_le_bytes();
            data[at..at + width].copy_from_slice(&value[..width]);
        }
    }
}

/// The `index`-th input of a run over `seeds`: usually one of them with 1 to 4
/// mutations, now and then random bytes or a splice of two seeds.
pub fn input(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if seeds.is_empty() || rng.below(32) == 0 {
        let n = rng.below(512);
        return (0..n).map(|_| rng.byte()).collect();
    }
    let mut data = seeds[rng.below(seeds.len())].clone();
    if rng.below(16) == 0 {
        let other = &seeds[rng.below(seeds.len())];
        let cut = rng.below(data.len() + 1);
        let from = rng.below(other.len() + 1);
        data.truncate(cut);
        data.extend_from_slice(&other[from..]);
    }
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, &mut data);
    }
    data
}
