//! [`GpuCacheCodec`]: the GPU counterpart of [`bf16_field::CacheCodec`], implemented by
//! each codec on top of its own `gpu` module, so that `cargo xtask bench` and the test
//! kit run every codec the same way.

use bf16_field::{CacheCodec, KvCache, KvShape};
use cudarc::driver::{CudaView, CudaViewMut};

use crate::{GpuContext, GpuError};

/// A codec's whole-cache GPU path: encode a device cache into the exact bytes of
/// [`CacheCodec::encode`], and decode those bytes into a device cache, each enqueued on
/// [`GpuContext::stream`] without a host synchronisation, with the device state kept in
/// an [`GpuCacheCodec::Encoder`] / [`GpuCacheCodec::Decoder`] so that repeated calls
/// allocate nothing (and can be timed or captured in a CUDA graph).
///
/// Every GPU path produces the CPU's bytes and accepts and rejects what the CPU decoder
/// does, with the CPU decoder's error: the test kit checks both directions.
pub trait GpuCacheCodec: CacheCodec {
    /// Device buffers and scratch for encoding caches of one shape.
    type Encoder;
    /// The encoded bytes on the device and what the codec validated on the host.
    type Decoder;

    /// Allocates what encoding a cache of `shape` needs.
    ///
    /// # Errors
    /// The CPU encoder's error for a shape it rejects; GPU errors.
    fn device_encoder(
        &self,
        gpu: &GpuContext,
        shape: KvShape,
    ) -> Result<Self::Encoder, GpuError<Self::Error>>;

    /// Enqueues the encoding of the device cache `words` (the shape's
    /// `total_values()` words in [`CacheCodec::word_order`]) on `gpu`'s stream.
    ///
    /// # Errors
    /// GPU errors (a short or misaligned buffer, a driver failure).
    fn encode_device(
        &self,
        gpu: &GpuContext,
        encoder: &mut Self::Encoder,
        words: &CudaView<'_, u16>,
    ) -> Result<(), GpuError<Self::Error>>;

    /// The bytes the last [`GpuCacheCodec::encode_device`] wrote, copied to the host
    /// (synchronises): exactly [`CacheCodec::encode`]'s. What it returns before any encode
    /// is unspecified (an error or no bytes).
    ///
    /// # Errors
    /// GPU errors.
    fn encoded_bytes(
        &self,
        gpu: &GpuContext,
        encoder: &Self::Encoder,
    ) -> Result<Vec<u8>, GpuError<Self::Error>>;

    /// Checks `encoded` on the host as far as the codec's GPU decoder relies on it, in the
    /// CPU decoder's order of checks, and copies it to the device (keeping the host bytes,
    /// which the CPU decoder reruns on if a kernel flags them).
    ///
    /// # Errors
    /// The CPU decoder's error for invalid bytes, or for bytes that do not hold a
    /// cache of `shape`; GPU errors.
    fn device_decoder(
        &self,
        gpu: &GpuContext,
        encoded: &[u8],
        shape: KvShape,
    ) -> Result<Self::Decoder, GpuError<Self::Error>>;

    /// Enqueues the decoding into `out` (the shape's `total_values()` words in
    /// [`CacheCodec::word_order`]) on `gpu`'s stream. A kernel that finds invalid
    /// input leaves a status that [`GpuCacheCodec::finish_decode`] reports; `out`'s
    /// contents are then unspecified (kernels may have written the parts they decoded).
    ///
    /// # Errors
    /// GPU errors (a short or misaligned `out`, a driver failure).
    fn decode_device(
        &self,
        gpu: &GpuContext,
        decoder: &mut Self::Decoder,
        out: &mut CudaViewMut<'_, u16>,
    ) -> Result<(), GpuError<Self::Error>>;

    /// Waits for the last [`GpuCacheCodec::decode_device`] (synchronises) and checks its
    /// status: flagged input gets the CPU decoder's error for the bytes the decoder was
    /// made from.
    ///
    /// # Errors
    /// [`GpuError::Codec`] with the CPU decoder's error; [`GpuError::Disagreement`];
    /// GPU errors.
    fn finish_decode(&self, gpu: &GpuContext, decoder: &Self::Decoder) -> Result<(), GpuError<Self::Error>>;

    /// Uploads `cache`, encodes it on the GPU and returns the bytes (synchronises).
    ///
    /// # Errors
    /// As [`GpuCacheCodec::device_encoder`] and [`GpuCacheCodec::encode_device`].
    fn gpu_encode_cache(&self, gpu: &GpuContext, cache: &KvCache) -> Result<Vec<u8>, GpuError<Self::Error>> {
        let shape = cache.shape();
        let words = gpu.upload(&cache.words_in(self.word_order()))?;
        let mut encoder = self.device_encoder(gpu, shape)?;
        self.encode_device(gpu, &mut encoder, &words.slice(..shape.total_values()))?;
        self.encoded_bytes(gpu, &encoder)
    }

    /// Decodes `encoded` on the GPU into a host cache of `shape` (synchronises).
    ///
    /// # Errors
    /// The CPU decoder's error for invalid bytes; GPU errors.
    fn gpu_decode_cache(
        &self,
        gpu: &GpuContext,
        encoded: &[u8],
        shape: KvShape,
    ) -> Result<KvCache, GpuError<Self::Error>> {
        let mut decoder = self.device_decoder(gpu, encoded, shape)?;
        let n = shape.total_values();
        let mut out = gpu.zeros::<u16>(n)?;
        self.decode_device(gpu, &mut decoder, &mut out.slice_mut(..n))?;
        self.finish_decode(gpu, &decoder)?;
        let words = gpu.download(&out, n)?;
        Ok(KvCache::from_words(shape, self.word_order(), words).expect("the shape's value count"))
    }
}
