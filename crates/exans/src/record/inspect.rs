//! A readable summary of a validated record, without decoding it.

use std::fmt;

use super::BlockShape;
use super::parse::{Body, parse};
use crate::Result;
use crate::format::{HEADER_LEN, PARTITIONS};

/// A readable summary of a validated record: header, centers, model and section sizes.
/// Its [`fmt::Display`] form is what the snapshot tests pin (spec §3-§5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordInfo {
    /// The block's shape.
    pub shape: BlockShape,
    /// The record's format version: 4 ([`crate::format::VERSION`]), or 3 or 2, still read
    /// (spec §3).
    pub version: u16,
    /// N, values in the block.
    pub values: usize,
    /// Whether the block is stored raw (flag bit 0).
    pub raw: bool,
    /// Record length in bytes.
    pub record_len: usize,
    /// Probability precision n; 0 for a raw record.
    pub precision: u8,
    /// The 2L group centers; empty for a raw record.
    pub centers: Vec<u8>,
    /// The sparse model's `(symbol, freq)` entries; empty for a raw record.
    pub model: Vec<(u8, u16)>,
    /// Words per partition; zeros for a raw record.
    pub word_counts: [u32; PARTITIONS],
    /// Bytes per section, padding counted with the section it follows:
    /// `[header, centers, model, directory, words, sign_mantissa]`; for a raw record
    /// `[48, 0, 0, 0, 0, 2N]`. They sum to `record_len`. The sign+mantissa section holds
    /// `N - P` bytes in version 4 (`N` in versions 2 and 3); the other `P` travel in the
    /// lanes' initial rANS states, which the decoder ends at (spec §4, §6.4).
    pub section_bytes: [usize; 6],
    /// P, the sign+mantissa bytes the lanes' initial states carry: `min(N, 512)` in a
    /// version 4 coded record, 0 otherwise (spec §6.4).
    pub payload_bytes: usize,
    /// The block's Adler-32 when the record carries one (flag bit 1, spec §3); not
    /// verified here (that needs the decoded values).
    pub checksum: Option<u32>,
}

/// Parses and validates a record without running the rANS decode (every check of
/// spec §10 except the three that need decoding: word stream exhausted, final state,
/// unconsumed words).
///
/// # Errors
/// As [`crate::decode_block_into`], less the decode-time and output-shape errors.
pub fn inspect_record(record: &[u8]) -> Result<RecordInfo> {
    let parsed = parse(record)?;
    let values = parsed.values;
    let checksum = parsed.checksum;
    let version = parsed.version;
    Ok(match parsed.body {
        Body::Raw { .. } => RecordInfo {
            shape: parsed.shape,
            version,
            values,
            raw: true,
            record_len: record.len(),
            precision: 0,
            centers: Vec::new(),
            model: Vec::new(),
            word_counts: [0; PARTITIONS],
            section_bytes: [HEADER_LEN, 0, 0, 0, 0, 2 * values],
            payload_bytes: 0,
            checksum,
        },
        Body::Coded { centers, model, word_counts, sign_mantissa, payload, layout, .. } => RecordInfo {
            shape: parsed.shape,
            version,
            values,
            raw: false,
            record_len: record.len(),
            precision: model.precision(),
            centers: centers.to_vec(),
            model: model.entries().to_vec(),
            word_counts,
            section_bytes: [
                HEADER_LEN,
                layout.model - HEADER_LEN,
                layout.directory - layout.model,
                layout.words - layout.directory,
                layout.sign_mantissa - layout.words,
                sign_mantissa.len(),
            ],
            payload_bytes: payload,
            checksum,
        },
    })
}

impl fmt::Display for RecordInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shape;
        writeln!(
            f,
            "{} record v{}: L={} H={} D={} B'={} N={} len={} ratio={:.4}",
            if self.raw { "raw" } else { "coded" },
            self.version,
            s.layers,
            s.kv_heads,
            s.head_dim,
            s.tokens,
            self.values,
            self.record_len,
            2.0 * self.values as f64 / self.record_len as f64
        )?;
        let [h, c, m, d, w, sm] = self.section_bytes;
        writeln!(f, "sections: header={h} centers={c} model={m} directory={d} words={w} sign_mantissa={sm}")?;
        if self.payload_bytes > 0 {
            writeln!(f, "sign+mantissa bytes in the lanes' states: {}", self.payload_bytes)?;
        }
        if let Some(checksum) = self.checksum {
            writeln!(f, "checksum: adler32 {checksum:08x}")?;
        }
        if self.raw {
            return Ok(());
        }
        write!(f, "centers:")?;
        for (g, c) in self.centers.iter().enumerate() {
            write!(f, "{}{c}", if g % 16 == 0 { "\n  " } else { " " })?;
        }
        writeln!(f)?;
        write!(f, "model: precision={} K={}", self.precision, self.model.len())?;
        for (i, (sym, freq)) in self.model.iter().enumerate() {
            write!(f, "{}{sym}:{freq}", if i % 12 == 0 { "\n  " } else { " " })?;
        }
        writeln!(f)?;
        writeln!(f, "word_counts: {:?}", self.word_counts)
    }
}
