//! [`CacheCodec`]: one narrow interface over every codec's whole-cache CPU path, so that
//! benchmarks and tests run each codec the same way (constriction's coders implement
//! shared `Encode`/`Decode` traits on top of their own APIs in the same spirit). Each
//! codec's own API stays primary: this trait is implemented on top of it.

use crate::{KvCache, KvShape, WordOrder};

/// A lossless codec for a whole KV cache, taken as one flat run of its `2 L T H D` words
/// in the codec's [`CacheCodec::word_order`] (the order its format and its kernels read
/// them in, so that neither side reorders anything).
///
/// `decode(&encode(cache)?, cache.shape())` returns `cache` exactly, for every cache.
/// Decoders never panic: malformed, truncated or hostile bytes get `Self::Error`.
pub trait CacheCodec {
    /// The codec's error type (encoder arguments and invalid encoded bytes).
    type Error: std::error::Error + Send + Sync + 'static;

    /// The codec's name in tables and reports (`"exans"`).
    fn name(&self) -> &'static str;

    /// The order in which the codec takes and returns a cache's words.
    fn word_order(&self) -> WordOrder;

    /// Encodes a cache of `shape` given as its words in [`CacheCodec::word_order`] into
    /// one byte string (headers and every byte of metadata included: its length is what
    /// a ratio counts).
    ///
    /// # Errors
    /// The codec's error for a shape it cannot encode (a dimension past a format limit),
    /// or `words` of another length than `shape.total_values()`.
    fn encode_words(&self, words: &[u16], shape: KvShape) -> Result<Vec<u8>, Self::Error>;

    /// Decodes `encoded` into `out`, which holds at least the cache's `2 L T H D` words,
    /// in [`CacheCodec::word_order`]; words past them are left as they were. The caller
    /// gives the shape it expects: codecs whose bytes record the shape check it against
    /// them, the others (SplitZip's flat payloads) need it to place the words. A shape that
    /// [`KvShape::validate`] rejects is always an error, checked before `out` is used.
    ///
    /// # Errors
    /// The codec's error for bytes that are invalid or do not hold a cache of `shape`,
    /// or for an `out` that is too short.
    fn decode_into(&self, encoded: &[u8], shape: KvShape, out: &mut [u16]) -> Result<(), Self::Error>;

    /// [`CacheCodec::encode_words`] of a [`KvCache`] (its words gathered in the codec's
    /// order first).
    ///
    /// # Errors
    /// As [`CacheCodec::encode_words`].
    fn encode(&self, cache: &KvCache) -> Result<Vec<u8>, Self::Error> {
        self.encode_words(&cache.words_in(self.word_order()), cache.shape())
    }

    /// [`CacheCodec::decode_into`] into a new [`KvCache`].
    ///
    /// # Errors
    /// As [`CacheCodec::decode_into`].
    fn decode(&self, encoded: &[u8], shape: KvShape) -> Result<KvCache, Self::Error> {
        // An invalid shape gets no buffer: decode_into rejects it before using `out`.
        let mut words = if shape.validate().is_ok() { vec![0u16; shape.total_values()] } else { Vec::new() };
        self.decode_into(encoded, shape, &mut words)?;
        Ok(KvCache::from_words(shape, self.word_order(), words)
            .expect("decode_into accepts only valid shapes"))
    }
}
