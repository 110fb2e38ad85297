//! [`GaacCodec`]: the [`CacheCodec`] and [`GpuCacheCodec`] implementations over this
//! crate's container API and its GPU path.

use bf16_field::{CacheCodec, KvShape, WordOrder};
use cudarc::driver::{CudaView, CudaViewMut};
use kvcodec_gpu::{GpuCacheCodec, GpuContext};

use crate::Error;
use crate::bases::Bases;
use crate::cache::{CacheHeader, EncodeOptions, decode_cache_into, encode_words};
use crate::gpu::{CacheDecoder, CacheEncoder, GpuError};

/// GAAC over a whole cache: one container (spec §5) of 16-token blocks in fixed-capacity
/// slots and a BF16 tail per layer, taking the cache's words layer-major.
///
/// The options only shape what is encoded: a container records its bases, slot capacity
/// and checksum option, and any codec value decodes any container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GaacCodec {
    /// Calibrated bases (`cargo xtask calibrate --codec gaac`); `None`: every cache
    /// calibrates on its own first tokens.
    pub bases: Option<Bases>,
    /// Slot capacity in bytes; `None`: the default for the cache's head_dim (spec §4).
    pub slot_capacity: Option<usize>,
    /// Store the checksum (spec §5.1: version 2, the Adler-32 of the container's bytes
    /// after the header; version 1, that of the values), which every decoder then
    /// verifies; off by default.
    pub checksum: bool,
    /// The format version to write (spec §5.1); `None`:
    /// [`crate::format::DEFAULT_VERSION`].
    pub version: Option<u16>,
}

impl GaacCodec {
    /// The encoder options of this codec value.
    pub fn options(&self) -> EncodeOptions {
        EncodeOptions {
            bases: self.bases.clone(),
            slot_capacity: self.slot_capacity,
            calibration_tokens: None,
            checksum: self.checksum,
            version: self.version,
        }
    }
}

impl CacheCodec for GaacCodec {
    type Error = Error;

    fn name(&self) -> &'static str {
        match (self.bases.is_some(), self.checksum) {
            (true, false) => "gaac",
            (true, true) => "gaac-checksum",
            (false, false) => "gaac-self",
            (false, true) => "gaac-self-checksum",
        }
    }

    fn word_order(&self) -> WordOrder {
        WordOrder::LayerMajor
    }

    fn encode_words(&self, words: &[u16], shape: KvShape) -> Result<Vec<u8>, Error> {
        encode_words(words, shape, &self.options())
    }

    fn decode_into(&self, encoded: &[u8], shape: KvShape, out: &mut [u16]) -> Result<(), Error> {
        // The caller's shape first, then the container's header against it, then the body.
        CacheHeader::parse_expecting(encoded, Some(shape))?;
        decode_cache_into(encoded, out).map(|_| ())
    }
}

/// The GPU path encodes with the given bases ([`GaacCodec::bases`]) or, without them,
/// calibrates them on the device on each cache's first 128 tokens (spec §5.4), the CPU
/// encoder's bytes either way. Every codec value decodes any container.
impl GpuCacheCodec for GaacCodec {
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
