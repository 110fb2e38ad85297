//! Decoding a container that lives in host memory into a device cache, with the
//! host-to-device transfer of later records overlapped with the decoding of earlier ones
//! (the offload use case of the ExANS paper: a KV cache kept compressed in host memory).
//!
//! The records are cut into chunks of about [`HostDecodeOptions::chunk_bytes`]
//! ([`plan_chunks`]; [`HostDecodeOptions::staging_chunk_bytes`] for a staged container). Chunk `i` is copied on the decoder's copy stream into a device copy
//! of the container, an event is recorded, and one of [`HostDecodeOptions::streams`]
//! decode streams (the context's stream first) waits on it and launches
//! `exans_decode_records` on the chunk's records; the kernel joins each symbol with its
//! sign+mantissa byte and writes the cache, so the copy engine (transfer) and the SMs
//! (ANS decode and BF16 reconstruction, fused in one kernel) work at the same time.
//! Successive chunks go to successive decode streams so that a chunk whose few records
//! decode slowly (one CTA a record) does not hold back the next one. The host issues
//! everything without waiting; the decode streams are joined back into the context's
//! stream, so device work queued
//! on it afterwards sees the decoded cache, and [`PendingDecode::finish`] is the one host
//! synchronisation (it reads the status word).
//!
//! Two sources:
//! - [`HostContainer::Pinned`]: the container is already in page-locked memory
//!   (an offloaded KV cache lives there: [`GpuContext::pinned_copy`], cudarc's
//!   `PinnedHostSlice::as_slice`, or `cuMemHostRegister`ed memory). The copy engine
//!   reads it directly; the borrow lasts until the [`PendingDecode`] is finished or
//!   dropped.
//! - [`HostContainer::Staged`]: any `&[u8]`, cut into chunks of
//!   [`HostDecodeOptions::staging_chunk_bytes`]. Each chunk is first copied by the host
//!   into one of three reusable page-locked slots, whose previous transfer the host
//!   waits for, while the copy engine moves the chunks staged before it. The host copy
//!   runs on the current rayon pool's threads, about two pieces per thread
//!   (`staging_piece`): one thread's copy, not the link, bounds this path otherwise
//!   (docs/perf/host-staging.md). Its cost is that copy of the
//!   compressed bytes and `3 x` the largest chunk of page-locked memory, allocated on
//!   first use and kept.
//!
//! Validation is that of [`super::decode_device`]: the caller's [`DeviceIndex`] ran the
//! CPU parser over the container; a nonzero device status gets the CPU decoder's exact
//! error for the same bytes.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, CudaViewMut, PinnedHostSlice};
use kvcodec_gpu::GpuContext;
use rayon::prelude::*;

use super::decode::{check_buffers, launch_records};
use super::{DecodeChecks, DeviceIndex, GpuError};

/// Default [`HostDecodeOptions::chunk_bytes`]: 8 MiB. Large enough that the per-chunk
/// driver work (a copy, an event record and wait, a launch: some microseconds) is a
/// small part of a chunk's transfer over PCIe (well over 100 us), and that a
/// chunk of 16-token records of a small model (about 250 KB each) holds some 30
/// records; small enough that the pipeline fills quickly and the tail (the last chunk's
/// decode, after the last copy) is short. The bench times 2, 8 and 32 MiB side by side
/// (docs/PERF.md).
pub const DEFAULT_CHUNK_BYTES: usize = 8 << 20;
/// Default [`HostDecodeOptions::streams`]: 2 decode streams, so a chunk can start
/// decoding while the previous chunk's last records still run.
pub const DEFAULT_STREAMS: usize = 2;
/// The most decode streams a [`HostDecoder`] uses.
pub const MAX_STREAMS: usize = 8;
/// Default [`HostDecodeOptions::staging_chunk_bytes`]: 32 MiB. A staged chunk also pays
/// the host copy's fork and join (waking the pool's threads, the slowest piece), which
/// 8 MiB chunks do not amortise (docs/perf/host-staging.md); three slots of it are 96 MiB
/// of page-locked memory.
pub const DEFAULT_STAGING_CHUNK_BYTES: usize = 32 << 20;
/// Page-locked staging slots of [`HostContainer::Staged`] decodes: the host fills one while
/// the copy engine reads another, with one spare against jitter.
const STAGING_SLOTS: usize = 3;
/// The smallest piece of a staged chunk's host copy (bytes), so that a small chunk is not
/// cut into pieces shorter than rayon's per-task cost.
const STAGING_MIN_PIECE: usize = 256 << 10;

/// How a [`HostDecoder`] pipelines a decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostDecodeOptions {
    /// Record bytes per chunk of a [`HostContainer::Pinned`] decode, at least 1
    /// ([`plan_chunks`]); a record larger than this is a chunk of its own.
    pub chunk_bytes: usize,
    /// Decode streams, `1..=MAX_STREAMS`: the context's stream and `streams - 1` more.
    pub streams: usize,
    /// Record bytes per chunk of a [`HostContainer::Staged`] decode, at least 1 (as
    /// `chunk_bytes` is for page-locked containers); the staging slots are this large.
    pub staging_chunk_bytes: usize,
}

impl Default for HostDecodeOptions {
    fn default() -> Self {
        HostDecodeOptions {
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            streams: DEFAULT_STREAMS,
            staging_chunk_bytes: DEFAULT_STAGING_CHUNK_BYTES,
        }
    }
}

/// One step of a pipelined decode: the records it decodes and the container bytes it
/// copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Record indices `first..end`.
    pub records: Range<usize>,
    /// Byte range of the container, from its start. The first chunk also carries the
    /// container header and index, the last one ends at the container's end, so the
    /// chunks tile the container.
    pub bytes: Range<usize>,
}

/// Cuts a container into chunks by bytes: `offsets` are its `blocks + 1` record offsets
/// ([`crate::ContainerInfo::offsets`], the last one the container length). Records are
/// taken greedily in order while the chunk's records span at most `chunk_bytes` (0 is
/// taken as 1); every chunk holds at least one record, so a record larger than
/// `chunk_bytes` is a chunk of its own. A container without records is one chunk of no
/// records; no offsets give no chunks. Never panics: decreasing offsets (which a
/// validated index cannot have) give empty byte ranges rather than inverted ones.
pub fn plan_chunks(offsets: &[usize], chunk_bytes: usize) -> Vec<Chunk> {
    let Some((&container_len, starts)) = offsets.split_last() else { return Vec::new() };
    let blocks = starts.len();
    if blocks == 0 {
        return vec![Chunk { records: 0..0, bytes: 0..container_len }];
    }
    let chunk_bytes = chunk_bytes.max(1);
    let mut chunks = Vec::new();
    let (mut first, mut byte_start) = (0, 0);
    while first < blocks {
        let mut end = first + 1;
        while end < blocks && offsets[end + 1].saturating_sub(offsets[first]) <= chunk_bytes {
            end += 1;
        }
        let byte_end = offsets[end].max(byte_start);
        chunks.push(Chunk { records: first..end, bytes: byte_start..byte_end });
        (first, byte_start) = (end, byte_end);
    }
    chunks
}

/// Where a [`HostDecoder::decode`] finds its container, and so how it is copied.
#[derive(Clone, Copy, Debug)]
pub enum HostContainer<'a> {
    /// In page-locked memory ([`GpuContext::pinned_copy`], cudarc's
    /// `PinnedHostSlice::as_slice`, `cuMemHostRegister`): the copy engine reads it
    /// directly, and the host issues every chunk without waiting. Pageable bytes here
    /// still decode correctly, but the driver then stages each copy with the host
    /// blocked in it.
    Pinned(&'a [u8]),
    /// In ordinary (pageable) memory: each chunk is copied into a page-locked staging
    /// slot first, by the current rayon pool's threads (the global pool unless the
    /// decode runs inside `rayon::ThreadPool::install`), once the slot's previous
    /// transfer is done (costs in the module docs).
    Staged(&'a [u8]),
}

/// Reusable state for pipelined decodes from host memory: the decode streams, a device
/// buffer for the container (grown to the largest container seen), the status word, an
/// event, and the staging slots of [`HostContainer::Staged`] decodes. One decode at a time
/// (each borrows the decoder until its [`PendingDecode`] ends); build one per serving
/// thread and reuse it.
pub struct HostDecoder {
    options: HostDecodeOptions,
    /// The stream the chunks are copied on (this decoder's own, so that decoders on one
    /// device never share a stream, nor pull one into another caller's graph capture).
    copy: Arc<CudaStream>,
    /// Decode streams besides the context's stream (`streams - 1`).
    decode_streams: Vec<Arc<CudaStream>>,
    /// The device copy of the container being decoded (16-byte aligned: a fresh
    /// allocation); `None` until the first decode.
    container: Option<CudaSlice<u8>>,
    checks: DecodeChecks,
    /// Every cross-stream edge (fork, chunk ready, join) records this event and
    /// immediately waits on it: `cuStreamWaitEvent` waits for the record that precedes
    /// it, and a later record does not change an earlier wait, so one event serves all.
    edge: CudaEvent,
    /// Page-locked slots of [`HostContainer::Staged`] decodes, each with the event of its
    /// last transfer; empty until the first staged decode.
    staging: Vec<(PinnedHostSlice<u8>, CudaEvent)>,
}

impl std::fmt::Debug for HostDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDecoder")
            .field("options", &self.options)
            .field("container_capacity", &self.container.as_ref().map_or(0, |c| c.len()))
            .field("staging_slot_bytes", &self.staging.first().map_or(0, |(s, _)| s.len()))
            .finish_non_exhaustive()
    }
}

impl HostDecoder {
    /// A decoder on `gpu`; every later call must pass the same context, since the
    /// streams, event and buffers created here belong to it and are ordered only with
    /// that context's streams (not checked: with another context the order of the
    /// copies, kernels and buffer reuse is not guaranteed). Creates a copy stream,
    /// `streams - 1` decode streams, an event and the status word. The container buffer,
    /// the staging slots and the checksum sums are allocated on first use (the sums on
    /// the context's stream, without a host synchronisation).
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::InvalidArgument`] for `chunk_bytes == 0`,
    /// `staging_chunk_bytes == 0` or `streams` outside `1..=MAX_STREAMS`;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, options: HostDecodeOptions) -> Result<Self, GpuError> {
        for (what, bytes) in
            [("chunk_bytes", options.chunk_bytes), ("staging_chunk_bytes", options.staging_chunk_bytes)]
        {
            if bytes == 0 {
                let why = "must be at least 1".into();
                return Err(kvcodec_gpu::Error::InvalidArgument { what, why }.into());
            }
        }
        if !(1..=MAX_STREAMS).contains(&options.streams) {
            let why = format!("{} is outside 1..={MAX_STREAMS}", options.streams);
            return Err(kvcodec_gpu::Error::InvalidArgument { what: "streams", why }.into());
        }
        let decode_streams =
            (1..options.streams).map(|_| gpu.context().new_stream()).collect::<Result<Vec<_>, _>>()?;
        Ok(HostDecoder {
            options,
            copy: gpu.context().new_stream()?,
            decode_streams,
            container: None,
            checks: DecodeChecks::new(gpu, 0)?,
            edge: gpu.context().new_event(None)?,
            staging: Vec::new(),
        })
    }

    /// The options this decoder was built with.
    pub fn options(&self) -> HostDecodeOptions {
        self.options
    }

    /// Decodes a host container into the device cache `out` (`2L` tensors `[T, H, D]`
    /// concatenated in block order, at least `index.values()` words, as
    /// [`super::decode_device`]), copying chunk after chunk while earlier chunks decode.
    /// Returns once everything is issued ([`HostContainer::Staged`]: once the last chunk
    /// is staged); work queued on `gpu.stream()` afterwards is ordered after the decode.
    /// The returned handle holds the container borrowed while the copy engine may read
    /// it, and waits on drop.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Buffer`] for a container of another length than `index`'s, or an
    /// `out` that is too small; [`kvcodec_gpu::Error::Cuda`]. An invalid
    /// container is reported by [`PendingDecode::finish`].
    pub fn decode<'a>(
        &'a mut self,
        gpu: &'a GpuContext,
        container: HostContainer<'a>,
        index: &DeviceIndex,
        out: &mut CudaViewMut<'_, u16>,
    ) -> Result<PendingDecode<'a>, GpuError> {
        let (container, staged) = match container {
            HostContainer::Pinned(bytes) => (bytes, false),
            HostContainer::Staged(bytes) => (bytes, true),
        };
        check_buffers(index, container.len(), out.len())?;
        let chunk_bytes = if staged { self.options.staging_chunk_bytes } else { self.options.chunk_bytes };
        let chunks = plan_chunks(&index.info().offsets, chunk_bytes);
        let main = gpu.stream();
        if staged {
            let largest = chunks.iter().map(|c| c.bytes.len()).max().unwrap_or(0);
            self.ensure_staging(gpu, largest)?;
        }
        let HostDecoder { copy, decode_streams, container: device, checks, edge, staging, .. } = self;
        let device = match device {
            Some(d) if d.len() >= container.len() => d,
            // The old buffer is freed in order on the main stream, which joined every stream
            // of the previous decode: nothing still reads it.
            slot => {
                *slot = None;
                slot.insert(main.alloc_zeros(container.len().max(1))?)
            }
        };

        let issued = (|| -> Result<(), GpuError> {
            checks.prepare(gpu, index)?;
            let f = gpu.function(checks.kernel())?;
            // Fork: the copies and every decode stream start after the work already on the main
            // stream (an earlier decode still reading the device buffer, the caller's use of
            // `out`).
            edge.record(main)?;
            copy.wait(edge)?;
            for lane in decode_streams.iter() {
                lane.wait(edge)?;
            }
            for (i, chunk) in chunks.iter().enumerate() {
                let src = &container[chunk.bytes.clone()];
                let mut dst = device.slice_mut(chunk.bytes.clone());
                if staged {
                    let (slot, done) = &mut staging[i % STAGING_SLOTS];
                    done.synchronize()?;
                    // No work is recorded on the slot's own event (event tracking is off),
                    // so this waits for nothing; `done` above did the waiting.
                    let slot = &mut slot.as_mut_slice()?[..src.len()];
                    stage(slot, src);
                    copy.memcpy_htod(&*slot, &mut dst)?;
                    done.record(copy)?;
                } else {
                    copy.memcpy_htod(src, &mut dst)?;
                }
                edge.record(copy)?;
                let lane = match i % (decode_streams.len() + 1) {
                    0 => main,
                    k => &decode_streams[k - 1],
                };
                lane.wait(edge)?;
                let whole = device.slice(..container.len());
                launch_records(&f, lane, &whole, index, chunk.records.clone(), out, checks)?;
            }
            // Join: the main stream waits for every decode stream (and through them for
            // every copy).
            for lane in decode_streams.iter() {
                edge.record(lane)?;
                main.wait(edge)?;
            }
            Ok(())
        })();
        if let Err(e) = issued {
            // Copies already issued may still read `container`, whose borrow ends with
            // this return, and kernels the device buffer, which the next decode
            // overwrites after forking from a main stream that never joined them: wait
            // for both (errors here add nothing to `e`).
            let _ = copy.synchronize();
            for lane in decode_streams.iter() {
                let _ = lane.synchronize();
            }
            return Err(e);
        }
        Ok(PendingDecode { gpu, checks: &*checks, container, finished: false })
    }

    /// Makes sure there are [`STAGING_SLOTS`] page-locked slots of at least `bytes`.
    fn ensure_staging(&mut self, gpu: &GpuContext, bytes: usize) -> Result<(), GpuError> {
        if self.staging.len() == STAGING_SLOTS && self.staging.iter().all(|(s, _)| s.len() >= bytes) {
            return Ok(());
        }
        // The old slots may still feed a transfer of an earlier decode whose handle was
        // leaked; freeing page-locked memory under the copy engine must not happen.
        for (_, done) in &self.staging {
            done.synchronize()?;
        }
        self.staging.clear();
        // Rounded up so that a later container with slightly larger chunks reuses them.
        let bytes = bytes.max(1).next_multiple_of(1 << 20);
        for _ in 0..STAGING_SLOTS {
            self.staging.push((gpu.pinned_staging(bytes)?, gpu.context().new_event(None)?));
        }
        Ok(())
    }
}

impl Drop for HostDecoder {
    fn drop(&mut self) {
        // Only a leaked PendingDecode can leave a staging transfer in flight; wait for it
        // before the slots are unpinned and freed. Errors cannot be returned from drop.
        for (_, done) in &self.staging {
            let _ = done.synchronize();
        }
    }
}

/// The piece (bytes) of a staged chunk of `bytes` that one task of the host copy takes, for a
/// rayon pool of `threads`: about two pieces per thread (one each leaves the threads
/// that steal late idle while the last piece is copied), at least [`STAGING_MIN_PIECE`]
/// bytes, a multiple of 4 KiB.
fn staging_piece(bytes: usize, threads: usize) -> usize {
    bytes.div_ceil(2 * threads.max(1)).max(STAGING_MIN_PIECE).next_multiple_of(4096)
}

/// `dst.copy_from_slice(src)` (equal lengths) by the current rayon pool's threads, in
/// pieces of [`staging_piece`].
fn stage(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    let piece = staging_piece(src.len(), rayon::current_num_threads());
    dst.par_chunks_mut(piece).zip(src.par_chunks(piece)).for_each(|(d, s)| d.copy_from_slice(s));
}

/// A decode issued by [`HostDecoder`]: holds the host container and the decoder until
/// the device is done with them. Finish it to learn whether the container was valid;
/// dropping it unfinished waits for the device and discards the status.
#[must_use = "finish() reports an invalid container; dropping waits for the device and ignores it"]
pub struct PendingDecode<'a> {
    gpu: &'a GpuContext,
    checks: &'a DecodeChecks,
    container: &'a [u8],
    finished: bool,
}

impl std::fmt::Debug for PendingDecode<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingDecode")
            .field("container_len", &self.container.len())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl PendingDecode<'_> {
    /// Waits for the decode (synchronises the context's main stream) and checks the
    /// status word and the records' checksums.
    ///
    /// # Errors
    /// [`GpuError::Codec`] with the CPU decoder's exact error if a record failed a
    /// decode-time check (`out` is then unspecified) or its checksum;
    /// [`GpuError::Disagreement`] if the CPU decoder accepts the bytes;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn finish(mut self) -> Result<(), GpuError> {
        let stream = self.gpu.stream();
        stream.synchronize()?;
        self.finished = true;
        self.checks.verify(self.gpu, self.container)
    }
}

impl Drop for PendingDecode<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // The copy engine may still be reading the borrowed container, which the
            // caller may reuse once this borrow ends. Errors cannot be returned here.
            let _ = self.gpu.stream().synchronize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record in exactly one chunk, in order; the byte ranges tile `0..len`; each
    /// chunk's bytes hold its records; no chunk but a single-record one spans more than
    /// `chunk_bytes` of records.
    fn check_plan(offsets: &[usize], chunk_bytes: usize) -> Vec<Chunk> {
        let chunks = plan_chunks(offsets, chunk_bytes);
        let blocks = offsets.len() - 1;
        let mut next_record = 0;
        let mut next_byte = 0;
        for c in &chunks {
            assert_eq!(c.records.start, next_record, "{offsets:?} / {chunk_bytes}: {chunks:?}");
            assert_eq!(c.bytes.start, next_byte, "{offsets:?} / {chunk_bytes}: {chunks:?}");
            assert!(!c.records.is_empty() || blocks == 0);
            if !c.records.is_empty() {
                assert!(c.bytes.start <= offsets[c.records.start]);
                assert_eq!(c.bytes.end, offsets[c.records.end]);
                let span = offsets[c.records.end] - offsets[c.records.start];
                assert!(span <= chunk_bytes.max(1) || c.records.len() == 1, "{c:?} spans {span}");
            }
            next_record = c.records.end;
            next_byte = c.bytes.end;
        }
        assert_eq!(next_record, blocks);
        assert_eq!(next_byte, offsets[blocks]);
        chunks
    }

    #[test]
    fn chunks_cover_the_container() {
        // A 64-byte header and records of 16, 32, 16, 48 and 16 bytes.
        let offsets = [64, 80, 112, 128, 176, 192];
        let c = check_plan(&offsets, 48);
        assert_eq!(
            c,
            vec![
                Chunk { records: 0..2, bytes: 0..112 },
                Chunk { records: 2..3, bytes: 112..128 },
                Chunk { records: 3..4, bytes: 128..176 },
                Chunk { records: 4..5, bytes: 176..192 },
            ]
        );
        // Larger than the container: one chunk. Smaller than every record (and 0): one
        // chunk per record.
        assert_eq!(check_plan(&offsets, 1 << 30), vec![Chunk { records: 0..5, bytes: 0..192 }]);
        for small in [0, 1, 15] {
            let c = check_plan(&offsets, small);
            assert_eq!(c.len(), 5);
            assert!(c.iter().all(|c| c.records.len() == 1));
        }
        for chunk_bytes in 0..=200 {
            check_plan(&offsets, chunk_bytes);
        }
    }

    #[test]
    fn a_large_record_is_a_chunk_of_its_own() {
        let offsets = [32, 48, 64, 64 + 1024, 1104, 1120];
        let c = check_plan(&offsets, 64);
        assert_eq!(c.iter().map(|c| c.records.clone()).collect::<Vec<_>>(), vec![0..2, 2..3, 3..5]);
    }

    #[test]
    fn staging_copies_every_byte() {
        let piece = STAGING_MIN_PIECE;
        let n = 40 * piece + 17;
        let src: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [0, 1, piece - 1, piece, piece + 1, 3 * piece + 5, n] {
            let mut dst = vec![0xa5; len];
            stage(&mut dst, &src[..len]);
            assert!(dst == src[..len], "{len} bytes");
        }
    }

    #[test]
    fn staging_pieces_are_two_per_thread_above_the_minimum() {
        assert_eq!(staging_piece(32 << 20, 16), 1 << 20);
        assert_eq!(staging_piece(32 << 20, 8), 2 << 20);
        assert_eq!(staging_piece(8 << 20, 16), STAGING_MIN_PIECE);
        assert_eq!(staging_piece(1, 0), STAGING_MIN_PIECE);
        assert_eq!(staging_piece((32 << 20) + 1, 16) % 4096, 0);
    }

    #[test]
    fn one_record_and_no_records() {
        assert_eq!(check_plan(&[48, 96], 1), vec![Chunk { records: 0..1, bytes: 0..96 }]);
        assert_eq!(check_plan(&[48, 96], 1000), vec![Chunk { records: 0..1, bytes: 0..96 }]);
        assert_eq!(plan_chunks(&[48], 8), vec![Chunk { records: 0..0, bytes: 0..48 }]);
        assert_eq!(plan_chunks(&[], 8), vec![]);
        // Decreasing offsets (impossible after validation) give no inverted range.
        let bad = plan_chunks(&[64, 200, 100, 300], 8);
        assert!(bad.iter().all(|c| c.bytes.start <= c.bytes.end));
    }
}
