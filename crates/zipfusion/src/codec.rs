//! [`ZipfusionCodec`]: the [`CacheCodec`] and [`GpuCacheCodec`] implementations over this
//! crate's container API and its GPU path.

use bf16_field::{CacheCodec, KvShape, WordOrder};
use cudarc::driver::{CudaView, CudaViewMut};
use kvcodec_gpu::{GpuCacheCodec, GpuContext};

use crate::Error;
use crate::cache::{CacheHeader, EncodeOptions, decode_cache_into, encode_words};
use crate::format::Variant;
use crate::gpu::{CacheDecoder, CacheEncoder, GpuError};

/// ZipFusion over a whole cache: one container (spec §7) of `floor(T / 16)` compressed
/// pages and a BF16 tail per layer, taking the cache's words layer-major.
///
/// The options only shape what is encoded: a container records its variant and whether
/// it carries a checksum, and any codec value decodes any container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ZipfusionCodec {
    /// Which blocks the encoder may write (spec §2.2): base by default.
    pub variant: Variant,
    /// Store the Adler-32 of the values (spec §7.3), which every decoder then verifies;
    /// off by default.
    pub checksum: bool,
}

impl ZipfusionCodec {
    /// The encoder options of this codec value.
    pub fn options(&self) -> EncodeOptions {
        EncodeOptions { variant: self.variant, checksum: self.checksum }
    }
}

impl CacheCodec for ZipfusionCodec {
    type Error = Error;

    fn name(&self) -> &'static str {
        match (self.variant, self.checksum) {
            (Variant::Base, false) => "zipfusion",
            (Variant::Base, true) => "zipfusion-checksum",
            (Variant::ZeroAware, false) => "zipfusion-zero",
            (Variant::ZeroAware, true) => "zipfusion-zero-checksum",
        }
    }

    fn word_order(&self) -> WordOrder {
        WordOrder::LayerMajor
    }

    fn encode_words(&self, words: &[u16], shape: KvShape) -> Result<Vec<u8>, Error> {
        encode_words(words, shape, &self.options())
    }

    fn decode_into(&self, encoded: &[u8], shape: KvShape, out: &mut [u16]) -> Result<(), Error> {
        // The caller's shape first (it must be one the format can hold), then the
        // container's header against it, then the body.
        CacheHeader::parse_expecting(encoded, Some(shape))?;
        decode_cache_into(encoded, out).map(|_| ())
    }
}

impl GpuCacheCodec for ZipfusionCodec {
    type Encoder = CacheEncoder;
    type Decoder = CacheDecoder;

    fn device_encoder(&self, gpu: &GpuContext, shape: KvShape) -> Result<CacheEncoder, GpuError> {
        CacheEncoder::new(gpu, shape, &self.options())
    }

    fn encode_device(
        &self,
        gpu: &GpuContext,
        encoder: &mut CacheEncoder,
        words: &CudaView<'_, u16>,
    ) -> Result<(), GpuError> {
        encoder.encode(gpu, words)
    }

    fn encoded_bytes(&self, gpu: &GpuContext, encoder: &CacheEncoder) -> Result<Vec<u8>, GpuError> {
        encoder.to_vec(gpu)
    }

    fn device_decoder(
        &self,
        gpu: &GpuContext,
        encoded: &[u8],
        shape: KvShape,
    ) -> Result<CacheDecoder, GpuError> {
        CacheDecoder::new(gpu, encoded, Some(shape))
    }

    fn decode_device(
        &self,
        gpu: &GpuContext,
        decoder: &mut CacheDecoder,
        out: &mut CudaViewMut<'_, u16>,
    ) -> Result<(), GpuError> {
        decoder.decode(gpu, out)
    }

    fn finish_decode(&self, gpu: &GpuContext, decoder: &CacheDecoder) -> Result<(), GpuError> {
        decoder.finish(gpu)
    }
}
