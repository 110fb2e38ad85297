//! Reading the fields that the container headers of GAAC (`docs/formats/gaac.md` §5.1)
//! and ZipFusion (`docs/formats/zipfusion.md` §7.1) lay out alike: a 4-byte magic at
//! byte 0, a little-endian `u16` version, the shape as little-endian `u32` L, H, D and a
//! `u64` T, and a CRC-32C of the header ([`crate::integrity::header_crc32c`]).
//!
//! Each codec keeps its own error type and its own order of checks: these functions
//! report a [`HeaderFault`] carrying the numbers that went wrong, which the codec converts
//! into its variant of the same name.
//!
//! Source: not in the published designs; kvcodec's container headers.

use crate::KvShape;
use crate::integrity::header_crc32c;

/// What a shared header check found wrong. Each variant maps onto the codec error
/// variant of the same name and fields (exhaustive on purpose: the codecs match every
/// variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderFault {
    /// Fewer bytes than the header's length.
    Truncated {
        /// The header's length in bytes.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The first four bytes are not the format's magic.
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A version other than the one the codec reads.
    UnsupportedVersion {
        /// The version found.
        version: u16,
    },
    /// The stored CRC-32C does not match the header's other bytes.
    HeaderChecksumMismatch {
        /// The stored CRC-32C.
        stored: u32,
        /// The CRC-32C of the header as received.
        computed: u32,
    },
}

/// Implements `From<HeaderFault>` for a codec's error enum, whose variants `Truncated`,
/// `BadMagic`, `UnsupportedVersion` and `HeaderChecksumMismatch` have the fields of the
/// [`HeaderFault`] variants of the same names: `?` then turns a fault into the codec's
/// own error, message included.
#[macro_export]
macro_rules! impl_from_header_fault {
    ($error:ty) => {
        /// The shared header checks' faults ([`bf16_field::header`]) as this crate's
        /// variants of the same name and numbers.
        impl From<$crate::header::HeaderFault> for $error {
            fn from(fault: $crate::header::HeaderFault) -> Self {
                use $crate::header::HeaderFault;
                match fault {
                    HeaderFault::Truncated { needed, got } => Self::Truncated { needed, got },
                    HeaderFault::BadMagic { found } => Self::BadMagic { found },
                    HeaderFault::UnsupportedVersion { version } => Self::UnsupportedVersion { version },
                    HeaderFault::HeaderChecksumMismatch { stored, computed } => {
                        Self::HeaderChecksumMismatch { stored, computed }
                    }
                }
            }
        }
    };
}

/// Byte offsets of a header's shape fields: L, H and D as little-endian `u32`, T as a
/// little-endian `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeFields {
    /// Offset of L.
    pub layers: usize,
    /// Offset of H.
    pub kv_heads: usize,
    /// Offset of D.
    pub head_dim: usize,
    /// Offset of T.
    pub tokens: usize,
}

/// The little-endian `u32` at `at`.
///
/// # Panics
/// If `at + 4 > bytes.len()`: a caller's constant is wrong.
pub fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The first `N` bytes of `bytes` as a header, after checking, in this order, its length,
/// its magic (bytes 0..4) and its little-endian `u16` version at `version_at`.
///
/// # Errors
/// [`HeaderFault::Truncated`], [`HeaderFault::BadMagic`],
/// [`HeaderFault::UnsupportedVersion`].
///
/// # Panics
/// If `version_at + 2 > N`: a caller's constant is wrong.
pub fn header_prefix<const N: usize>(
    bytes: &[u8],
    magic: [u8; 4],
    version_at: usize,
    version: u16,
) -> Result<&[u8; N], HeaderFault> {
    let Some(h) = bytes.first_chunk::<N>() else {
        return Err(HeaderFault::Truncated { needed: N, got: bytes.len() });
    };
    let found = [h[0], h[1], h[2], h[3]];
    if found != magic {
        return Err(HeaderFault::BadMagic { found });
    }
    let found = u16::from_le_bytes([h[version_at], h[version_at + 1]]);
    if found != version {
        return Err(HeaderFault::UnsupportedVersion { version: found });
    }
    Ok(h)
}

/// Checks the CRC-32C stored at `crc_at` against the header's other bytes.
///
/// # Errors
/// [`HeaderFault::HeaderChecksumMismatch`].
///
/// # Panics
/// If `crc_at + 4 > header.len()`: a caller's constant is wrong.
pub fn check_header_crc(header: &[u8], crc_at: usize) -> Result<(), HeaderFault> {
    let stored = le_u32(header, crc_at);
    let computed = header_crc32c(header, crc_at);
    if stored != computed {
        return Err(HeaderFault::HeaderChecksumMismatch { stored, computed });
    }
    Ok(())
}

/// The shape stored at `fields`, unchecked; a T past `usize` reads as `usize::MAX` (which
/// a shape check then rejects as too large).
///
/// # Panics
/// If a field lies past `header`'s end: a caller's constant is wrong.
pub fn read_shape(header: &[u8], fields: ShapeFields) -> KvShape {
    let dim = |at: usize| le_u32(header, at) as usize;
    let tokens = u64::from_le_bytes(std::array::from_fn(|i| header[fields.tokens + i]));
    KvShape {
        layers: dim(fields.layers),
        kv_heads: dim(fields.kv_heads),
        head_dim: dim(fields.head_dim),
        tokens: usize::try_from(tokens).unwrap_or(usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: [u8; 4] = *b"TEST";
    const FIELDS: ShapeFields = ShapeFields { layers: 8, kv_heads: 12, head_dim: 16, tokens: 24 };

    fn header() -> [u8; 40] {
        let mut h = [0u8; 40];
        h[..4].copy_from_slice(&MAGIC);
        h[4..6].copy_from_slice(&3u16.to_le_bytes());
        h[8..12].copy_from_slice(&2u32.to_le_bytes());
        h[12..16].copy_from_slice(&4u32.to_le_bytes());
        h[16..20].copy_from_slice(&64u32.to_le_bytes());
        h[24..32].copy_from_slice(&1000u64.to_le_bytes());
        let crc = header_crc32c(&h, 36);
        h[36..40].copy_from_slice(&crc.to_le_bytes());
        h
    }

    #[test]
    fn the_prefix_checks_length_magic_and_version_in_order() {
        let h = header();
        assert_eq!(header_prefix::<40>(&h, MAGIC, 4, 3), Ok(&h));
        assert_eq!(
            header_prefix::<40>(&h[..39], *b"XXXX", 4, 9),
            Err(HeaderFault::Truncated { needed: 40, got: 39 })
        );
        assert_eq!(header_prefix::<40>(&h, *b"XXXX", 4, 9), Err(HeaderFault::BadMagic { found: MAGIC }));
        assert_eq!(header_prefix::<40>(&h, MAGIC, 4, 9), Err(HeaderFault::UnsupportedVersion { version: 3 }));
    }

    #[test]
    fn the_crc_and_the_shape_read_back() {
        let mut h = header();
        assert_eq!(check_header_crc(&h, 36), Ok(()));
        assert_eq!(read_shape(&h, FIELDS), KvShape { layers: 2, kv_heads: 4, head_dim: 64, tokens: 1000 });
        let stored = le_u32(&h, 36);
        h[9] ^= 1;
        let computed = header_crc32c(&h, 36);
        assert_eq!(check_header_crc(&h, 36), Err(HeaderFault::HeaderChecksumMismatch { stored, computed }));
    }
}
