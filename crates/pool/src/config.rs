//! The pool's geometry: chunks, layers, size classes.

use crate::error::{Error, Result};

/// Every slot starts at a multiple of 16 bytes from its chunk (and the arena) start:
/// the attention kernels load pages with 16-byte vector loads, and ZipFusion pages keep
/// their blocks 16-byte aligned relative to the page start (docs/formats/zipfusion.md §5.2).
pub const SLOT_ALIGN: u32 = 16;

/// The largest [`SizeClasses::fit`] table, in entries (4 MiB of `u32`; open classes up
/// to 16 MiB use it).
const FIT_TABLE_MAX: usize = 1 << 20;

/// The slot sizes the pool serves, in bytes, strictly ascending; the largest is the
/// **open class**: a new page's uncompressed (BF16) size, where every page starts (seed
/// 002, "Memory management": "a new page is always allocated at uncompressed size").
///
/// A compressed page of `b` bytes moves to the smallest class of at least `b` bytes
/// ([`SizeClasses::fit`]); each chunk in use holds slots of one class (a slab), so
/// allocation and free are a bitmap operation and chunks never fragment inside.
///
/// Clients: ZipFusion pages (`M + 768 e + 1024 (2 H D/32 - e)` bytes with `e` coded
/// blocks, docs/formats/zipfusion.md §5.2) use classes a few hundred bytes apart;
/// GAAC's `2H` fixed-capacity block slots of one page are one allocation of `2 H C`
/// bytes, and a page with `k` raw blocks (each `2 N` bytes, docs/formats/gaac.md §3.6,
/// §4) one of `2 H C + k 2 N`: both are size classes of the same allocator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeClasses {
    bytes: Vec<u32>,
    /// `fit` by table: entry `k` is the class of `k * SLOT_ALIGN` bytes (a compression
    /// on the decode path looks its class up, no search); empty past [`FIT_TABLE_MAX`]
    /// entries (a binary search then).
    by_align: Vec<u32>,
}

impl SizeClasses {
    /// Classes of these sizes in bytes; the last is the open (BF16 page) class.
    ///
    /// # Errors
    /// [`Error::NoClasses`] when empty, [`Error::ClassNotAligned`] for a size that is not
    /// a positive multiple of [`SLOT_ALIGN`], [`Error::ClassOrder`] unless strictly
    /// ascending.
    pub fn new(bytes: Vec<u32>) -> Result<SizeClasses> {
        if bytes.is_empty() {
            return Err(Error::NoClasses);
        }
        for (index, &b) in bytes.iter().enumerate() {
            if b == 0 || !b.is_multiple_of(SLOT_ALIGN) {
                return Err(Error::ClassNotAligned { bytes: b, align: SLOT_ALIGN });
            }
            if index > 0 && b <= bytes[index - 1] {
                return Err(Error::ClassOrder { index, bytes: b });
            }
        }
        let top = bytes[bytes.len() - 1] / SLOT_ALIGN;
        let by_align = if top as usize >= FIT_TABLE_MAX {
            Vec::new()
        } else {
            (0..=top).map(|k| bytes.partition_point(|&b| b < k * SLOT_ALIGN) as u32).collect()
        };
        Ok(SizeClasses { bytes, by_align })
    }

    /// The open class alone: an uncompressed pool (every page stays BF16).
    ///
    /// # Errors
    /// As [`SizeClasses::new`].
    pub fn open_only(page_bytes: u32) -> Result<SizeClasses> {
        SizeClasses::new(vec![page_bytes])
    }

    /// Classes every `step` bytes from the smallest multiple of `step` at or above
    /// `min_bytes` up to below `page_bytes`, then `page_bytes` (the open class).
    ///
    /// # Errors
    /// As [`SizeClasses::new`] (`step` must be a positive multiple of [`SLOT_ALIGN`]).
    pub fn stepped(min_bytes: u32, page_bytes: u32, step: u32) -> Result<SizeClasses> {
        if step == 0 || !step.is_multiple_of(SLOT_ALIGN) {
            return Err(Error::ClassNotAligned { bytes: step, align: SLOT_ALIGN });
        }
        let mut bytes: Vec<u32> = (min_bytes.div_ceil(step).max(1)..)
            .map_while(|k| k.checked_mul(step))
            .take_while(|&b| b < page_bytes)
            .collect();
        bytes.push(page_bytes);
        SizeClasses::new(bytes)
    }

    /// The class sizes in bytes, ascending.
    pub fn bytes(&self) -> &[u32] {
        &self.bytes
    }

    /// The open class's index (the last).
    pub fn open(&self) -> usize {
        self.bytes.len() - 1
    }

    /// The open class's size: one uncompressed page, in bytes.
    pub fn open_bytes(&self) -> u32 {
        self.bytes[self.open()]
    }

    /// The smallest class of at least `bytes`, or `None` when `bytes` exceeds the open
    /// class.
    #[inline]
    pub fn fit(&self, bytes: u32) -> Option<usize> {
        if self.by_align.is_empty() {
            let i = self.bytes.partition_point(|&b| b < bytes);
            return (i < self.bytes.len()).then_some(i);
        }
        self.by_align.get(bytes.div_ceil(SLOT_ALIGN) as usize).map(|&c| c as usize)
    }
}

/// The pool's geometry. Memory is `chunks() * chunk_bytes` bytes: chunk `c` covers arena
/// bytes `c * chunk_bytes ..+ chunk_bytes`; chunks `0 .. layers * private_chunks` are the
/// layers' private space (layer `c / private_chunks`), the rest the shared pool (seed
/// 002, "Memory management": "each layer has private space plus a shared pool").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Model layers: each page belongs to one layer.
    pub layers: u32,
    /// Bytes per chunk, the unit that moves between a layer and the shared pool.
    pub chunk_bytes: u64,
    /// Chunks of private space per layer.
    pub private_chunks: u32,
    /// Chunks in the shared pool, any layer may take one.
    pub shared_chunks: u32,
    /// Tokens per page (16 for ZipFusion and GAAC pages): converts requests' tokens into
    /// pages for admission.
    pub page_tokens: u32,
    /// The slot sizes.
    pub classes: SizeClasses,
    /// A compressed page takes a fresh segment only if its sequence's pages still to come
    /// in the layer (its reservation there, plus this page), at this page's class, fill
    /// at least this percent of a chunk; otherwise the page stays BF16 in its open slot
    /// ([`crate::CompressOutcome::Kept`]). A request's last segment is then at least that
    /// full, and the tail of fewer pages costs their BF16 excess instead of a mostly
    /// empty chunk. 0: always take one. At most 100.
    pub tail_fill_percent: u32,
}

impl PoolConfig {
    /// Checks the geometry.
    ///
    /// # Errors
    /// [`Error::ZeroField`], [`Error::ChunkTooSmall`] (a chunk must hold one open slot
    /// and be a multiple of [`SLOT_ALIGN`]), [`Error::TooLarge`] (chunk count or in-chunk
    /// offsets past `u32`), [`Error::TailFill`] (a percent above 100).
    pub fn validate(&self) -> Result<()> {
        for (field, zero) in [
            ("layers", self.layers == 0),
            ("chunk_bytes", self.chunk_bytes == 0),
            ("page_tokens", self.page_tokens == 0),
        ] {
            if zero {
                return Err(Error::ZeroField { field });
            }
        }
        let open = self.classes.open_bytes();
        if self.chunk_bytes < u64::from(open) || !self.chunk_bytes.is_multiple_of(u64::from(SLOT_ALIGN)) {
            return Err(Error::ChunkTooSmall { chunk_bytes: self.chunk_bytes, class_bytes: open });
        }
        if self.tail_fill_percent > 100 {
            return Err(Error::TailFill { percent: self.tail_fill_percent });
        }
        let chunks = u64::from(self.layers) * u64::from(self.private_chunks) + u64::from(self.shared_chunks);
        if chunks > u64::from(u32::MAX - 1) || self.chunk_bytes > u64::from(u32::MAX) {
            return Err(Error::TooLarge { chunks, chunk_bytes: self.chunk_bytes });
        }
        Ok(())
    }

    /// Total chunks: private and shared.
    pub fn chunks(&self) -> u32 {
        self.layers * self.private_chunks + self.shared_chunks
    }

    /// Total bytes of the arena.
    pub fn arena_bytes(&self) -> u64 {
        u64::from(self.chunks()) * self.chunk_bytes
    }

    /// Slots of class `class` in one chunk.
    pub fn slots_per_chunk(&self, class: usize) -> u32 {
        (self.chunk_bytes / u64::from(self.classes.bytes()[class])) as u32
    }

    /// Pages (per layer) of a request of `tokens` tokens: `ceil(tokens / page_tokens)`.
    pub fn pages_for_tokens(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.page_tokens))
    }
}
