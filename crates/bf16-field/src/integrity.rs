//! Integrity checks the codec formats share: the optional checksum of the uncompressed
//! values, and the checksum of a format's header.
//!
//! * **Values: Adler-32** (RFC 1950 §8.2, zlib's checksum) of the BF16 values as
//!   little-endian bytes. It is the standard checksum that a GPU can fold into a kernel
//!   that already holds the values: Adler-32 is two sums, `S = Σ b_i` and
//!   `W = Σ i·b_i` over the bytes `b_i`, so any thread can add its own bytes' share in
//!   any order and the parts combine by addition ([`adler32_from_sums`]). A CRC needs a
//!   table lookup per byte and carry-less products to combine, which costs a memory-bound
//!   kernel far more. Adler-32 detects every change confined to one byte of the values;
//!   its known weakness, short inputs whose sums stay far below the modulus, does not
//!   apply to payloads of thousands of values. Changes of several values can cancel in
//!   both sums (`+d, -d` at `i, i + s` with `-d, +d` at `j, j + s`), which one corrupted
//!   byte of an encoding can cause where a byte holds bits of several values at a fixed
//!   stride: GAAC's planes (`docs/formats/gaac.md` §7.3).
//! * **Headers: CRC-32C** (Castagnoli), with the CPU's CRC instruction (`crc32c` crate):
//!   a header is a few dozen bytes that the host parses before any kernel runs.
//!
//! Source: not in the published designs (neither SplitZip nor ExANS carries a checksum);
//! kvcodec's addition, specified per codec in `docs/formats/`.

use rayon::prelude::*;

use crate::field::{PARALLEL_CHUNK_VALUES, PARALLEL_MIN_VALUES};

/// Adler-32's modulus, the largest prime below 2^16.
pub const ADLER_MODULUS: u32 = 65521;

/// Adler-32 (RFC 1950) of `words` as little-endian bytes (2 bytes per BF16 value, low
/// byte first), computed in parallel above [`PARALLEL_MIN_VALUES`] values. The empty
/// input gives 1.
pub fn adler32_words(words: &[u16]) -> u32 {
    // The values' little-endian bytes: the words' own memory on a little-endian machine.
    if cfg!(target_endian = "little") {
        return adler32_bytes(bytemuck::cast_slice(words));
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    adler32_bytes(&bytes)
}

/// Adler-32 (RFC 1950) of `bytes`, computed in parallel above [`PARALLEL_MIN_VALUES`]
/// values' worth of bytes, each thread with the CPU's vector unit (`simd-adler32`: AVX2,
/// SSSE3 or SSE2, picked at run time): the container checksums that cover encoded bytes
/// (GAAC version 2's) and, through [`adler32_words`], the values'. The empty input gives 1.
pub fn adler32_bytes(bytes: &[u8]) -> u32 {
    let serial = |chunk: &[u8]| {
        let mut adler = simd_adler32::Adler32::new();
        adler.write(chunk);
        adler.finish()
    };
    if bytes.len() < 2 * PARALLEL_MIN_VALUES {
        return serial(bytes);
    }
    bytes
        .par_chunks(2 * PARALLEL_CHUNK_VALUES)
        .map(|chunk| (serial(chunk), chunk.len() as u64))
        .collect::<Vec<_>>()
        .into_iter()
        .fold(1, |acc, (adler, len)| adler32_combine(acc, adler, len))
}

/// The Adler-32 of `a ‖ b` from `adler_a`, `adler_b` and `b`'s length in bytes (zlib's
/// `adler32_combine`).
pub fn adler32_combine(adler_a: u32, adler_b: u32, len_b: u64) -> u32 {
    let m = ADLER_MODULUS as u64;
    let (a1, b1) = ((adler_a & 0xffff) as u64, (adler_a >> 16) as u64);
    let (a2, b2) = ((adler_b & 0xffff) as u64, (adler_b >> 16) as u64);
    // A = A1 + A2 - 1; B = B1 + B2 + len_b (A1 - 1), all mod m.
    let a = (a1 + a2 + m - 1) % m;
    let b = (b1 + b2 + (len_b % m) * ((a1 + m - 1) % m)) % m;
    (b << 16 | a) as u32
}

/// The Adler-32 of `len` bytes from two sums over them: `byte_sum` = Σ b_i and
/// `weighted_sum` = Σ i·b_i (i from 0), each given modulo [`ADLER_MODULUS`] (any
/// representative works). This is how a GPU kernel's partial sums become the checksum:
/// A = 1 + S and B = len + len·S − W, modulo 65521.
pub fn adler32_from_sums(len: u64, byte_sum: u64, weighted_sum: u64) -> u32 {
    let m = ADLER_MODULUS as u64;
    let s = byte_sum % m;
    let n = len % m;
    let a = (1 + s) % m;
    let b = (n + n * s % m + m - weighted_sum % m) % m;
    (b << 16 | a) as u32
}

/// CRC-32C of `header` with the 4 bytes at `crc_at` read as zero: the header checksum of
/// the formats that carry one (the field holds the CRC itself).
///
/// # Panics
/// If `crc_at + 4 > header.len()`: a caller's constant is wrong.
pub fn header_crc32c(header: &[u8], crc_at: usize) -> u32 {
    let crc = crc32c::crc32c(&header[..crc_at]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &header[crc_at + 4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(words: &[u16]) -> u32 {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // RFC 1950's definition, byte by byte.
        let (mut a, mut b) = (1u32, 0u32);
        for &x in &bytes {
            a = (a + x as u32) % ADLER_MODULUS;
            b = (b + a) % ADLER_MODULUS;
        }
        b << 16 | a
    }

    fn words(n: usize, seed: u64) -> Vec<u16> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 48) as u16
            })
            .collect()
    }

    #[test]
    fn adler_matches_the_rfc_definition() {
        assert_eq!(adler32_words(&[]), 1);
        // RFC 1950's example string "Wikipedia" is bytes; check words of known bytes.
        let w: Vec<u16> = b"Wikipedia\0".chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        assert_eq!(reference(&w), adler2::adler32_slice(b"Wikipedia\0"));
        for n in [1, 2, 7, 5552, 70_000, PARALLEL_MIN_VALUES + 3 * PARALLEL_CHUNK_VALUES + 11] {
            let w = words(n, n as u64);
            assert_eq!(adler32_words(&w), reference(&w), "n = {n}");
        }
        let max = vec![0xffffu16; PARALLEL_MIN_VALUES + 5];
        assert_eq!(adler32_words(&max), reference(&max));
    }

    #[test]
    fn adler_of_bytes_is_that_of_the_same_words() {
        assert_eq!(adler32_bytes(&[]), 1);
        assert_eq!(adler32_bytes(b"Wikipedia"), adler2::adler32_slice(b"Wikipedia"));
        for n in [3, 5552, PARALLEL_MIN_VALUES + 3 * PARALLEL_CHUNK_VALUES + 11] {
            let w = words(n, n as u64);
            let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
            assert_eq!(adler32_bytes(&bytes), reference(&w), "n = {n}");
            // An odd length, in parallel too.
            assert_eq!(adler32_bytes(&bytes[1..]), adler2::adler32_slice(&bytes[1..]), "n = {n}");
        }
    }

    #[test]
    fn sums_and_combine_give_the_same_checksum() {
        let w = words(10_001, 7);
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let s: u64 = bytes.iter().map(|&b| b as u64).sum();
        let weighted: u64 = bytes.iter().enumerate().map(|(i, &b)| i as u64 * b as u64).sum();
        assert_eq!(adler32_from_sums(bytes.len() as u64, s, weighted), reference(&w));
        let (a, b) = w.split_at(3_333);
        assert_eq!(adler32_combine(reference(a), reference(b), 2 * b.len() as u64), reference(&w));
        assert_eq!(adler32_combine(reference(&w), 1, 0), reference(&w));
    }

    #[test]
    fn header_crc_ignores_its_own_field() {
        let mut h = [7u8; 48];
        let crc = header_crc32c(&h, 44);
        h[44..48].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(header_crc32c(&h, 44), crc);
        h[3] ^= 1;
        assert_ne!(header_crc32c(&h, 44), crc);
        // CRC-32C of 32 zero bytes, the RFC 3720 test vector.
        assert_eq!(crc32c::crc32c(&[0; 32]), 0x8a91_36aa);
        assert_eq!(header_crc32c(&[0; 32], 0), 0x8a91_36aa);
    }
}
