//! [`ExansCodec`]: the [`CacheCodec`] and [`GpuCacheCodec`] implementations over this
//! crate's container API.

use bf16_field::{CacheCodec, KvShape, WordOrder};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use kvcodec_gpu::{GpuCacheCodec, GpuContext};

use crate::gpu::{
    DecodeChecks, DeviceIndex, EncodeWorkspace, GpuError, decode_device, encode_device, max_container_len,
};
use crate::{Error, decode_cache_into, encode_words_with};

/// ExANS over a whole cache: one container of self-contained block records (spec §8)
/// at precision 12 with the raw fallback. The GPU path needs nothing but the block size
/// and whether to checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExansCodec {
    /// Tokens per physical KV block (B; the last block may be partial).
    pub block_tokens: usize,
    /// Store each record's Adler-32 (spec §3), which every decoder verifies.
    pub checksum: bool,
}

impl Default for ExansCodec {
    /// Blocks of [`crate::format::DEFAULT_BLOCK_TOKENS`] tokens, no checksum.
    fn default() -> Self {
        ExansCodec { block_tokens: crate::format::DEFAULT_BLOCK_TOKENS, checksum: false }
    }
}

fn check_shape(expected: KvShape, found: KvShape) -> Result<(), Error> {
    if expected != found {
        return Err(Error::CacheShapeMismatch { expected: expected.dims(), found: found.dims() });
    }
    Ok(())
}

impl CacheCodec for ExansCodec {
    type Error = Error;

    fn name(&self) -> &'static str {
        if self.checksum { "exans-checksum" } else { "exans" }
    }

    fn word_order(&self) -> WordOrder {
        WordOrder::LayerMajor
    }

    fn encode_words(&self, words: &[u16], shape: KvShape) -> Result<Vec<u8>, Error> {
        let options = crate::EncodeOptions { checksum: self.checksum, ..Default::default() };
        encode_words_with(words, shape, self.block_tokens, &options)
    }

    fn decode_into(&self, encoded: &[u8], shape: KvShape, out: &mut [u16]) -> Result<(), Error> {
        check_shape(shape, crate::container_info(encoded)?.shape)?;
        decode_cache_into(encoded, out)?;
        Ok(())
    }
}

/// [`ExansCodec`]'s device encoder state: the workspace and the output buffer.
pub struct ExansEncoder {
    workspace: EncodeWorkspace,
    out: CudaSlice<u8>,
    shape: KvShape,
}

/// [`ExansCodec`]'s device decoder state: the validated index, the container on the
/// device, the host bytes the CPU decoder reruns on when the kernel flags them, and the
/// checks a decode leaves.
pub struct ExansDecoder {
    index: DeviceIndex,
    container: CudaSlice<u8>,
    encoded: Vec<u8>,
    checks: DecodeChecks,
}

impl GpuCacheCodec for ExansCodec {
    type Encoder = ExansEncoder;
    type Decoder = ExansDecoder;

    fn device_encoder(&self, gpu: &GpuContext, shape: KvShape) -> Result<ExansEncoder, GpuError> {
        Ok(ExansEncoder {
            workspace: EncodeWorkspace::new(gpu, shape, self.block_tokens)?,
            out: gpu.zeros(max_container_len(shape, self.block_tokens)?)?,
            shape,
        })
    }

    fn encode_device(
        &self,
        gpu: &GpuContext,
        encoder: &mut ExansEncoder,
        words: &CudaView<'_, u16>,
    ) -> Result<(), GpuError> {
        let ExansEncoder { workspace, out, shape } = encoder;
        encode_device(gpu, words, *shape, self.block_tokens, self.checksum, &mut out.as_view_mut(), workspace)
    }

    fn encoded_bytes(&self, gpu: &GpuContext, encoder: &ExansEncoder) -> Result<Vec<u8>, GpuError> {
        let len = encoder.workspace.encoded_len(gpu)?;
        Ok(gpu.download(&encoder.out, len)?)
    }

    fn device_decoder(
        &self,
        gpu: &GpuContext,
        encoded: &[u8],
        shape: KvShape,
    ) -> Result<ExansDecoder, GpuError> {
        // The CPU decoder's order: the container header, then the caller's shape, then
        // the records.
        check_shape(shape, crate::container_info(encoded)?.shape)?;
        let index = DeviceIndex::new(gpu, encoded)?;
        let container = gpu.upload(encoded)?;
        let records = if index.has_checksums() { index.info().blocks() } else { 0 };
        let checks = DecodeChecks::new(gpu, records)?;
        Ok(ExansDecoder { index, container, encoded: encoded.to_vec(), checks })
    }

    fn decode_device(
        &self,
        gpu: &GpuContext,
        decoder: &mut ExansDecoder,
        out: &mut CudaViewMut<'_, u16>,
    ) -> Result<(), GpuError> {
        let ExansDecoder { index, container, checks, .. } = decoder;
        decode_device(gpu, &container.slice(..index.container_len()), index, out, checks)
    }

    fn finish_decode(&self, gpu: &GpuContext, decoder: &ExansDecoder) -> Result<(), GpuError> {
        decoder.checks.verify(gpu, &decoder.encoded)
    }
}
