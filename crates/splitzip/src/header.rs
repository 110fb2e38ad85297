//! The 128-byte payload header (spec §2): parse and validate, build, serialize, and a
//! readable summary.

use crate::codebook::Codebook;
use crate::error::DecodeError;
use crate::format::{
    CODEBOOK_LEN, CodedLayout, FLAG_CHECKSUM, FLAG_RAW, HEADER_LEN, KNOWN_FLAGS, KNOWN_FLAGS_V1, Layout,
    MAGIC, Section, VERSION, VERSION_1, chunk_size_is_valid, field, raw_encoded_len,
};

/// The validated header of a payload (spec §2): everything a receiver needs to size its
/// buffers before it has the rest of the payload.
///
/// Built by [`PayloadHeader::parse`] (from bytes) or [`PayloadHeader::coded`] /
/// [`PayloadHeader::raw`] (for a writer such as a GPU encoder's host code); serialized by
/// [`PayloadHeader::to_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PayloadHeader {
    /// n, the number of BF16 values.
    pub value_count: u64,
    /// Values per chunk (valid per [`chunk_size_is_valid`]; recorded in raw payloads too).
    pub chunk_size: u32,
    /// Total escapes E (0 when raw).
    pub escape_count: u64,
    /// The codebook (recorded in raw payloads too, for diagnostics).
    pub codebook: Codebook,
    /// Coded or raw, with the section offsets.
    pub layout: Layout,
    /// The Adler-32 of the n values as little-endian bytes, when the payload carries one
    /// (flag bit 1, version 2; spec §2).
    pub checksum: Option<u32>,
    /// The format version read ([`VERSION`] for a header built here; [`VERSION_1`] for
    /// an old payload, which has no checksums). [`PayloadHeader::to_bytes`] always
    /// writes [`VERSION`].
    pub version: u16,
}

fn rd_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn rd_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn rd_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl PayloadHeader {
    /// The header of a coded payload, or `None` when [`CodedLayout::new`] refuses the
    /// numbers (invalid chunk size, too many chunks, overflow).
    pub fn coded(value_count: u64, chunk_size: u32, escape_count: u64, codebook: Codebook) -> Option<Self> {
        let layout = CodedLayout::new(value_count, chunk_size, escape_count)?;
        Some(PayloadHeader {
            value_count,
            chunk_size,
            escape_count,
            codebook,
            layout: Layout::Coded(layout),
            checksum: None,
            version: VERSION,
        })
    }

    /// The header of a raw payload, or `None` for an invalid chunk size or when
    /// `HEADER_LEN + 2n` overflows `u64`.
    pub fn raw(value_count: u64, chunk_size: u32, codebook: Codebook) -> Option<Self> {
        if !chunk_size_is_valid(chunk_size) {
            return None;
        }
        let len = raw_encoded_len(value_count)? - HEADER_LEN as u64;
        Some(PayloadHeader {
            value_count,
            chunk_size,
            escape_count: 0,
            codebook,
            layout: Layout::Raw { words: Section { offset: HEADER_LEN as u64, len } },
            checksum: None,
            version: VERSION,
        })
    }

    /// This header with `checksum`, the Adler-32 of its values
    /// ([`bf16_field::integrity::adler32_words`]), stored (flag bit 1).
    pub fn with_checksum(self, checksum: u32) -> Self {
        PayloadHeader { checksum: Some(checksum), ..self }
    }

    /// Whether the values are stored raw (flag bit 0).
    pub fn is_raw(&self) -> bool {
        matches!(self.layout, Layout::Raw { .. })
    }

    /// Chunks stored: `ceil(n / chunk_size)` when coded, 0 when raw.
    pub fn chunk_count(&self) -> u32 {
        match self.layout {
            Layout::Coded(l) => l.chunk_count,
            Layout::Raw { .. } => 0,
        }
    }

    /// Total payload length in bytes, header included.
    pub fn encoded_len(&self) -> u64 {
        match self.layout {
            Layout::Coded(l) => l.encoded_len,
            Layout::Raw { words } => words.end(),
        }
    }

    /// The [`HEADER_LEN`] header bytes of format [`VERSION`] (spec §2), its CRC-32C
    /// included.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
        put(field::MAGIC, &MAGIC);
        put(field::VERSION, &VERSION.to_le_bytes());
        let raw = if self.is_raw() { FLAG_RAW } else { 0 };
        let checksum = if self.checksum.is_some() { FLAG_CHECKSUM } else { 0 };
        put(field::FLAGS, &(raw | checksum).to_le_bytes());
        put(field::CHECKSUM, &self.checksum.unwrap_or(0).to_le_bytes());
        put(field::VALUE_COUNT, &self.value_count.to_le_bytes());
        put(field::CHUNK_SIZE, &self.chunk_size.to_le_bytes());
        put(field::CHUNK_COUNT, &self.chunk_count().to_le_bytes());
        put(field::ESCAPE_COUNT, &self.escape_count.to_le_bytes());
        put(field::CODEBOOK, &self.codebook.exponents());
        if let Layout::Coded(l) = self.layout {
            put(field::CODES_OFFSET, &l.codes.offset.to_le_bytes());
            put(field::SIGN_MANTISSA_OFFSET, &l.sign_mantissa.offset.to_le_bytes());
            put(field::ESCAPE_OFFSETS_OFFSET, &l.escape_offsets.offset.to_le_bytes());
            put(field::ESCAPE_POSITIONS_OFFSET, &l.escape_positions.offset.to_le_bytes());
            put(field::ESCAPE_EXPONENTS_OFFSET, &l.escape_exponents.offset.to_le_bytes());
        }
        put(field::ENCODED_LEN, &self.encoded_len().to_le_bytes());
        let crc = bf16_field::integrity::header_crc32c(&h, field::HEADER_CRC);
        h[field::HEADER_CRC..field::HEADER_CRC + 4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Parses and validates the first [`HEADER_LEN`] bytes of a payload; the rest of
    /// `payload` is not read, so a receiver can call this on the header alone to learn
    /// the value count and the encoded length before it has the body.
    ///
    /// Checks, in this order (spec §5): length >= [`HEADER_LEN`], magic, version (1 or 2),
    /// no flag the version does not define, reserved bytes zero (and the checksum field
    /// without the checksum flag), chunk size, codebook entries distinct, `n` fits `usize`
    /// and `HEADER_LEN + 2n` fits `u64`; then for a raw payload that chunk count, escape
    /// count and section offsets are 0, and for a coded one that the chunk count is
    /// `ceil(n / chunk_size)`, `E <= min(n, u32::MAX)`, every section offset is the one
    /// spec §3 implies; then the encoded length, and that a coded payload is not longer
    /// than the raw one would be (the encoder never writes such a payload); last, in
    /// version 2, the header's CRC-32C, which catches a corrupted field whose value is
    /// valid on its own (a value count off by one, a codebook byte).
    ///
    /// # Errors
    /// [`DecodeError::Truncated`], [`DecodeError::BadMagic`],
    /// [`DecodeError::UnsupportedVersion`], [`DecodeError::UnknownFlags`],
    /// [`DecodeError::ReservedNotZero`], [`DecodeError::ChunkSizeInvalid`],
    /// [`DecodeError::CodebookDuplicate`], [`DecodeError::LengthOverflow`],
    /// [`DecodeError::ChunkCountMismatch`], [`DecodeError::EscapeCountOutOfRange`],
    /// [`DecodeError::SectionOffsetMismatch`], [`DecodeError::EncodedLengthMismatch`],
    /// [`DecodeError::CodedLargerThanRaw`], [`DecodeError::HeaderChecksumMismatch`].
    pub fn parse(payload: &[u8]) -> Result<Self, DecodeError> {
        if payload.len() < HEADER_LEN {
            return Err(DecodeError::Truncated { needed: HEADER_LEN as u64, got: payload.len() as u64 });
        }
        let h = &payload[..HEADER_LEN];
        let magic: [u8; 4] = h[field::MAGIC..field::MAGIC + 4].try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(DecodeError::BadMagic { found: magic });
        }
        let version = rd_u16(h, field::VERSION);
        let (known_flags, reserved) = match version {
            VERSION => (KNOWN_FLAGS, field::RESERVED),
            VERSION_1 => (KNOWN_FLAGS_V1, field::RESERVED_V1),
            _ => return Err(DecodeError::UnsupportedVersion { version }),
        };
        let flags = rd_u16(h, field::FLAGS);
        if flags & !known_flags != 0 {
            return Err(DecodeError::UnknownFlags { flags });
        }
        if let Some(i) = h[reserved..].iter().position(|&b| b != 0) {
            return Err(DecodeError::ReservedNotZero { offset: (reserved + i) as u64 });
        }
        let stored_checksum = rd_u32(h, field::CHECKSUM);
        let checksum = (flags & FLAG_CHECKSUM != 0).then_some(stored_checksum);
        if version == VERSION && checksum.is_none() && stored_checksum != 0 {
            return Err(DecodeError::ReservedNotZero { offset: field::CHECKSUM as u64 });
        }
        let chunk_size = rd_u32(h, field::CHUNK_SIZE);
        if !chunk_size_is_valid(chunk_size) {
            return Err(DecodeError::ChunkSizeInvalid { chunk_size });
        }
        let entries: [u8; CODEBOOK_LEN] =
            h[field::CODEBOOK..field::CODEBOOK + CODEBOOK_LEN].try_into().expect("16 bytes");
        let codebook = Codebook::new(entries)
            .map_err(|_| DecodeError::CodebookDuplicate { exponent: first_duplicate(&entries) })?;
        let value_count = rd_u64(h, field::VALUE_COUNT);
        let raw_len = raw_encoded_len(value_count).ok_or(DecodeError::LengthOverflow { value_count })?;
        if usize::try_from(value_count).is_err() || usize::try_from(raw_len).is_err() {
            return Err(DecodeError::LengthOverflow { value_count });
        }
        let chunk_count = rd_u32(h, field::CHUNK_COUNT);
        let escape_count = rd_u64(h, field::ESCAPE_COUNT);
        let stored_offsets = [
            ("codes", rd_u64(h, field::CODES_OFFSET)),
            ("sign_mantissa", rd_u64(h, field::SIGN_MANTISSA_OFFSET)),
            ("escape_offsets", rd_u64(h, field::ESCAPE_OFFSETS_OFFSET)),
            ("escape_positions", rd_u64(h, field::ESCAPE_POSITIONS_OFFSET)),
            ("escape_exponents", rd_u64(h, field::ESCAPE_EXPONENTS_OFFSET)),
        ];
        let stored_len = rd_u64(h, field::ENCODED_LEN);
        let header = if flags & FLAG_RAW != 0 {
            if chunk_count != 0 {
                return Err(DecodeError::ChunkCountMismatch { stored: chunk_count, expected: 0 });
            }
            if escape_count != 0 {
                return Err(DecodeError::EscapeCountOutOfRange { escapes: escape_count, max: 0 });
            }
            for (section, stored) in stored_offsets {
                if stored != 0 {
                    return Err(DecodeError::SectionOffsetMismatch { section, stored, expected: 0 });
                }
            }
            PayloadHeader::raw(value_count, chunk_size, codebook)
                .ok_or(DecodeError::LengthOverflow { value_count })?
        } else {
            let expected_chunks = value_count.div_ceil(chunk_size as u64);
            if chunk_count as u64 != expected_chunks {
                return Err(DecodeError::ChunkCountMismatch {
                    stored: chunk_count,
                    expected: expected_chunks,
                });
            }
            let max = value_count.min(u32::MAX as u64);
            if escape_count > max {
                return Err(DecodeError::EscapeCountOutOfRange { escapes: escape_count, max });
            }
            let header = PayloadHeader::coded(value_count, chunk_size, escape_count, codebook)
                .ok_or(DecodeError::LengthOverflow { value_count })?;
            let Layout::Coded(layout) = header.layout else { unreachable!("built coded") };
            for ((section, stored), (_, expected)) in stored_offsets.into_iter().zip(layout.sections()) {
                if stored != expected.offset {
                    return Err(DecodeError::SectionOffsetMismatch {
                        section,
                        stored,
                        expected: expected.offset,
                    });
                }
            }
            header
        };
        let expected_len = header.encoded_len();
        if stored_len != expected_len {
            return Err(DecodeError::EncodedLengthMismatch { stored: stored_len, expected: expected_len });
        }
        if !header.is_raw() && expected_len > raw_len {
            return Err(DecodeError::CodedLargerThanRaw { coded: expected_len, raw: raw_len });
        }
        if version == VERSION {
            let stored = rd_u32(h, field::HEADER_CRC);
            let computed = bf16_field::integrity::header_crc32c(h, field::HEADER_CRC);
            if stored != computed {
                return Err(DecodeError::HeaderChecksumMismatch { stored, computed });
            }
        }
        Ok(PayloadHeader { checksum, version, ..header })
    }

    /// A readable multi-line description (header fields, coverage, ratio, section table),
    /// stable enough for snapshot tests.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let n = self.value_count;
        let len = self.encoded_len();
        let mut s = String::new();
        let mode = if self.is_raw() { "raw" } else { "coded" };
        let _ = writeln!(s, "splitzip v{} payload, {mode}", self.version);
        let _ = writeln!(s, "values:        {n} ({} bytes as BF16)", 2 * n);
        let _ =
            writeln!(s, "chunk size:    {} values, {} chunks stored", self.chunk_size, self.chunk_count());
        if !self.is_raw() {
            let coverage = if n == 0 { 1.0 } else { 1.0 - self.escape_count as f64 / n as f64 };
            let _ = writeln!(
                s,
                "escapes:       {} (codebook coverage {:.4}%)",
                self.escape_count,
                100.0 * coverage
            );
        }
        let cb: Vec<String> = self.codebook.exponents().iter().map(|e| format!("{e:02x}")).collect();
        let _ = writeln!(s, "codebook:      {}", cb.join(" "));
        if let Some(checksum) = self.checksum {
            let _ = writeln!(s, "checksum:      adler32 {checksum:08x}");
        }
        let ratio = if len == 0 { 0.0 } else { (2 * n) as f64 / len as f64 };
        let bits = if n == 0 { 0.0 } else { 8.0 * len as f64 / n as f64 };
        let _ = writeln!(s, "encoded:       {len} bytes, ratio {ratio:.4}, {bits:.4} bits/value");
        let _ = writeln!(s, "{:<17}{:>10} {:>10}", "section", "offset", "bytes");
        let _ = writeln!(s, "{:<17}{:>10} {:>10}", "header", 0, HEADER_LEN);
        match self.layout {
            Layout::Coded(l) => {
                for (name, sec) in l.sections() {
                    let _ = writeln!(s, "{name:<17}{:>10} {:>10}", sec.offset, sec.len);
                }
            }
            Layout::Raw { words } => {
                let _ = writeln!(s, "{:<17}{:>10} {:>10}", "raw_words", words.offset, words.len);
            }
        }
        s
    }
}

/// The exponent of the first repeated entry (the later occurrence), scanning in code
/// order; only called on a codebook known to hold a duplicate.
fn first_duplicate(entries: &[u8; CODEBOOK_LEN]) -> u8 {
    let mut seen = [false; 256];
    for &e in entries {
        if std::mem::replace(&mut seen[e as usize], true) {
            return e;
        }
    }
    unreachable!("called only on a codebook with a duplicate")
}
