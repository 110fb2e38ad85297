//! The GPU decoder: see the module docs of [`crate::gpu`].

use bf16_field::KvShape;
use cudarc::driver::{CudaSlice, CudaViewMut, PushKernelArg};
use kvcodec_gpu::integrity::{AdlerSums, RecordRuns, add_record_sums, status_with_checksum};
use kvcodec_gpu::{DeviceStatus, GpuContext, check_aligned, check_len, cpu_verdict, device_address};

use super::{
    DECODE_STATUS, Dim, GaacKernel, GpuError, Launch, LayoutArg, check_gpu_shape, decode_warp_bytes,
};
use crate::cache::{CacheHeader, cache_info};
use crate::format::{HEADER_LEN, STATUS_RAW, VERSION_1};

/// The status code the host reports for a checksum mismatch (`CHECKSUM` of
/// [`DECODE_STATUS`]).
const CHECKSUM_STATUS: u32 = 8;
const _: () = assert!(
    DECODE_STATUS.values[CHECKSUM_STATUS as usize - 1].value == CHECKSUM_STATUS,
    "CHECKSUM_STATUS is the CHECKSUM code of DECODE_STATUS"
);

/// A container on the device, ready to be decoded any number of times: its header and
/// layout, the raw blocks' indices (a host pass over the status bytes, which the kernels
/// check), the host bytes (which the CPU decoder reruns on when a kernel flags them), and
/// the status word, counters and checksum sums of the last decode.
pub struct CacheDecoder {
    header: CacheHeader,
    dim: Dim,
    layout: LayoutArg,
    launch: Launch,
    bytes: Vec<u8>,
    device: CudaSlice<u8>,
    /// The block index of each raw status, in order, at most R of them.
    raw_list: CudaSlice<u32>,
    listed: u32,
    /// The decode kernel's counters, zeroed before each decode: the raw blocks it saw
    /// (which `gaac_decode_finish` compares with R) and its work counter (the blocks
    /// handed out so far, in runs of 4, to the warps).
    counters: CudaSlice<u32>,
    status: DeviceStatus,
    /// The checksum's sums (flag bit 0): over the bytes after the header (version 2) or
    /// the decoded values (version 1).
    sums: Option<AdlerSums>,
    /// The container's length, where `gaac_body_sums` reads it.
    end: CudaSlice<u64>,
}

impl std::fmt::Debug for CacheDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheDecoder").field("header", &self.header).finish_non_exhaustive()
    }
}

impl CacheDecoder {
    /// Parses the header of the container `bytes`, checks it holds a cache of `shape`
    /// (when given) and that its length is the one the header gives, and uploads it
    /// (synchronises). The bases, statuses, paddings and blocks are checked by the decode
    /// kernels, not here.
    ///
    /// # Errors
    /// [`GpuError::Codec`] with the CPU decoder's error for a header it rejects, a shape
    /// mismatch ([`crate::Error::CacheShapeMismatch`]) or a wrong length;
    /// [`kvcodec_gpu::Error::Unsupported`] past the GPU limits;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, bytes: &[u8], shape: Option<KvShape>) -> Result<Self, GpuError> {
        let header = CacheHeader::parse_expecting(bytes, shape)?;
        let sections = header.sections();
        if bytes.len() != sections.end {
            // The CPU's checks fail too (Truncated or TrailingBytes), with its exact error.
            return Err(cpu_verdict(0, &DECODE_STATUS, || cache_info(bytes)));
        }
        let dim = check_gpu_shape(header.shape)?;
        let layout = LayoutArg::cache(header.shape, header.slot_capacity, &sections, header.raw_blocks);
        let blocks = header.blocks();
        let raw_list: Vec<u32> = bytes[sections.statuses..sections.statuses + blocks]
            .iter()
            .enumerate()
            .filter(|&(_, &s)| s == STATUS_RAW)
            .map(|(i, _)| i as u32)
            .take(header.raw_blocks)
            .collect();
        let warp_bytes = decode_warp_bytes(header.block_shape(), header.slot_capacity);
        let launch = Launch::blocks(gpu, GaacKernel::Decode(dim), blocks, warp_bytes)?;
        let decoder = CacheDecoder {
            header,
            dim,
            layout,
            launch,
            bytes: bytes.to_vec(),
            device: gpu.upload(bytes)?,
            listed: raw_list.len() as u32,
            raw_list: gpu.upload(&raw_list)?,
            counters: gpu.zeros(2)?,
            status: DeviceStatus::new(gpu)?,
            sums: if header.checksum.is_some() { Some(AdlerSums::new(gpu, 1)?) } else { None },
            end: gpu.upload(&[sections.end as u64])?,
        };
        gpu.synchronize()?;
        Ok(decoder)
    }

    /// The container's header.
    pub fn header(&self) -> &CacheHeader {
        &self.header
    }

    /// Enqueues the decoding into `out` (`2 L T H D` words, layer-major, 16-byte
    /// aligned) on the context's stream, without synchronising; [`CacheDecoder::finish`]
    /// reads the verdict.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Buffer`] for a short or misaligned `out`;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn decode(&mut self, gpu: &GpuContext, out: &mut CudaViewMut<'_, u16>) -> Result<(), GpuError> {
        let shape = self.header.shape;
        let n = shape.total_values();
        check_len("out", out.len(), n, "values")?;
        let stream = gpu.stream();
        check_aligned("out", device_address(out, stream))?;
        let mut out = out.slice_mut(..n);
        self.status.clear(gpu)?;
        stream.memset_zeros(&mut self.counters)?;
        let src = self.device.slice(..self.bytes.len());
        let g = self.layout;
        if g.blocks > 0 {
            let f = gpu.function(GaacKernel::Decode(self.dim))?;
            let mut builder = stream.launch_builder(&f);
            builder.arg(&src).arg(&g).arg(&mut out).arg(&mut self.counters).arg(self.status.word());
            // SAFETY: the signature matches gaac_decode_d<D>; the host checked that the
            // container is exactly the length its header gives, so every slot, status
            // and base lies inside `src`; the kernel restores a block only after its tags
            // size it within its slot; `out` holds the cache's n words; `counters` holds
            // the two words the kernel counts in (raw blocks, its work counter), zeroed
            // above; the shared memory is decode_warp_bytes per warp.
            unsafe { builder.launch(self.launch.config()) }?;
        }
        let head_dim = shape.head_dim as u32;
        let f = gpu.function(GaacKernel::DecodeFinish)?;
        let mut builder = stream.launch_builder(&f);
        builder.arg(&src).arg(&g).arg(&head_dim).arg(&self.raw_list).arg(&self.listed);
        builder.arg(&self.counters).arg(&mut out).arg(self.status.word());
        // SAFETY: the signature matches gaac_decode_finish; raw_list holds `listed` <= R
        // block indices < B, so every raw block read lies in the overflow section; the
        // tails and the checked sections lie inside `src`; `out` holds n words.
        unsafe { builder.launch(gpu.grid_stride_config(self.bytes.len().min(1 << 24) / 16, 256)) }?;
        if let Some(sums) = &mut self.sums {
            sums.clear(gpu)?;
            if self.header.version == VERSION_1 {
                add_record_sums(gpu, &out.slice(..n), &RecordRuns::contiguous(n), sums)?;
            } else {
                super::launch_body_sums(gpu, &self.device, self.bytes.len(), &self.end, sums)?;
            }
        }
        Ok(())
    }

    /// Waits for the last [`CacheDecoder::decode`] (synchronises) and checks its status
    /// and checksum: a flagged container gets the CPU decoder's exact error.
    ///
    /// # Errors
    /// [`GpuError::Codec`]; [`GpuError::Disagreement`]; [`kvcodec_gpu::Error::Cuda`].
    pub fn finish(&self, gpu: &GpuContext) -> Result<(), GpuError> {
        let summed_bytes = if self.header.version == VERSION_1 {
            2 * self.header.shape.total_values() as u64
        } else {
            (self.bytes.len() - HEADER_LEN) as u64
        };
        let status = status_with_checksum(
            gpu,
            &self.status,
            self.header.checksum,
            self.sums.as_ref(),
            summed_bytes,
            CHECKSUM_STATUS,
        )?;
        if status == 0 {
            return Ok(());
        }
        Err(cpu_verdict(status, &DECODE_STATUS, || crate::decode_cache(&self.bytes)))
    }
}
