//! GPU timing for benchmarks: CUDA events (created with `CU_EVENT_DEFAULT`, since the
//! default flags disable timing), warm-up, the median of many runs, each run queued behind
//! a hold kernel (`kernels/gpu/timing.cu`) so that the host's launch latency is not
//! timed, the device-to-device copy that gives each measurement its roofline, and the
//! read floor of a read-only kernel (`GpuContext::read_floor`).

use cudarc::driver::{CudaSlice, PushKernelArg, sys};

use crate::registry::{Kernel, Module};
use crate::{GpuContext, Result, launch_config};

/// The timing module (`kernels/gpu/timing.cu`): the hold kernel and the read floor.
pub static TIMING_MODULE: Module = Module::new("kvcodec_timing", include_str!("../ptx/timing.ptx"));
crate::register_module!(TIMING_MODULE);

/// The kernels of [`TIMING_MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingKernel {
    /// `kvcodec_hold(ns)`: one thread that returns after `ns` nanoseconds of the GPU's
    /// global timer.
    Hold,
    /// `kvcodec_read_floor(in, n16, sink)`: reads `n16` 16-byte words once and writes
    /// nothing (the sink is only written for one XOR value of the data).
    ReadFloor,
}

impl Kernel for TimingKernel {
    fn module(self) -> &'static Module {
        &TIMING_MODULE
    }
    fn symbol(self) -> &'static str {
        match self {
            TimingKernel::Hold => "kvcodec_hold",
            TimingKernel::ReadFloor => "kvcodec_read_floor",
        }
    }
}

/// How long the hold kernel keeps the stream busy before each timed run, in
/// nanoseconds: far longer than the host takes to enqueue any operation benchmarked in
/// this workspace (a few launches, tens of microseconds).
const HOLD_NS: u64 = 2_000_000;

/// Times of repeated runs of one GPU operation, in milliseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Timing {
    /// Every timed run, in run order.
    pub runs_ms: Vec<f64>,
    /// The median of `runs_ms`.
    pub median_ms: f64,
    /// The fastest run.
    pub min_ms: f64,
    /// The slowest run.
    pub max_ms: f64,
}

impl Timing {
    /// Summarises run times given in milliseconds.
    pub fn from_runs(runs_ms: Vec<f64>) -> Self {
        let mut sorted = runs_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let median_ms = if sorted.is_empty() {
            f64::NAN
        } else if sorted.len() % 2 == 1 {
            sorted[sorted.len() / 2]
        } else {
            (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
        };
        Timing {
            median_ms,
            min_ms: sorted.first().copied().unwrap_or(f64::NAN),
            max_ms: sorted.last().copied().unwrap_or(f64::NAN),
            runs_ms,
        }
    }

    /// Throughput in GB/s (10^9 bytes per second) for `bytes` moved per run, at the median.
    pub fn gb_per_s(&self, bytes: usize) -> f64 {
        bytes as f64 / (self.median_ms * 1e-3) / 1e9
    }
}

impl GpuContext {
    /// Runs `op(i)` `warmup` times untimed, then `runs` times between two CUDA events on
    /// this context's stream, synchronising after each run. `i` counts every call from 0
    /// so the caller can rotate among several inputs and keep L2 from serving them.
    ///
    /// Each timed run is queued behind a kernel that holds the stream for 2 ms
    /// ([`TimingKernel::Hold`]), as nvbench's blocking kernel does: the start event fires once
    /// the GPU reaches it, with `op`'s work already queued, so the time is the GPU's,
    /// without the host's launch latency (otherwise the start event fires on an idle GPU
    /// that then waits for the first launch). Host work that `op` does after the hold
    /// ends, or any synchronisation inside `op`, is still timed.
    ///
    /// # Errors
    /// The first error of `op`, or of the driver (converted into `op`'s error type).
    pub fn time_runs<E: From<crate::Error>>(
        &self,
        warmup: usize,
        runs: usize,
        mut op: impl FnMut(usize) -> std::result::Result<(), E>,
    ) -> std::result::Result<Timing, E> {
        let driver = |e: cudarc::driver::DriverError| E::from(crate::Error::Cuda(e));
        let start = self.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver)?;
        let end = self.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver)?;
        for i in 0..warmup {
            op(i)?;
        }
        self.stream().synchronize().map_err(driver)?;
        let mut times = Vec::with_capacity(runs);
        for i in 0..runs {
            self.hold(HOLD_NS)?;
            start.record(self.stream()).map_err(driver)?;
            op(warmup + i)?;
            end.record(self.stream()).map_err(driver)?;
            end.synchronize().map_err(driver)?;
            times.push(f64::from(start.elapsed_ms(&end).map_err(driver)?));
        }
        Ok(Timing::from_runs(times))
    }

    /// Queues a kernel that keeps this context's stream busy for `ns` nanoseconds of the
    /// GPU's global timer ([`TimingKernel::Hold`]): work queued after it waits, which is
    /// what timing and stream-ordering tests need.
    ///
    /// # Errors
    /// [`crate::Error::Cuda`].
    pub fn hold(&self, ns: u64) -> Result<()> {
        let hold = self.function(TimingKernel::Hold)?;
        let mut launch = self.stream().launch_builder(&hold);
        launch.arg(&ns);
        // SAFETY: kvcodec_hold(ns: u64) touches no memory and returns after `ns`
        // nanoseconds of the GPU's global timer (or as many loop iterations).
        unsafe { launch.launch(launch_config(1, 1, 0)) }?;
        Ok(())
    }

    /// Queues the plainest kernel that reads the first `bytes` bytes of `data` once
    /// ([`TimingKernel::ReadFloor`]: four independent 16-byte streaming loads in flight per
    /// thread, 4 CTAs of 512 threads per SM, nothing written). Timed like a memory-bound
    /// kernel of the same bytes, it is that kernel's floor at this size, launch and ramp
    /// included (a short read does not reach the large-copy bandwidth). `sink` is a 4-byte
    /// scratch word.
    ///
    /// # Errors
    /// [`crate::Error::Buffer`] (nothing queued) when `bytes` is not a multiple of 16 or
    /// runs past `data`, or `sink` is empty; [`crate::Error::Cuda`].
    pub fn read_floor<T: cudarc::driver::DeviceRepr>(
        &self,
        data: &CudaSlice<T>,
        bytes: usize,
        sink: &mut CudaSlice<u32>,
    ) -> Result<()> {
        if !bytes.is_multiple_of(16) || bytes > data.num_bytes() {
            let why =
                format!("{bytes} bytes to read from {}: needs a multiple of 16 within it", data.num_bytes());
            return Err(crate::Error::Buffer { what: "data", why });
        }
        if sink.is_empty() {
            return Err(crate::Error::Buffer { what: "sink", why: "empty; needs one u32".into() });
        }
        let read = self.function(TimingKernel::ReadFloor)?;
        let words = (bytes / 16) as u64;
        let mut launch = self.stream().launch_builder(&read);
        launch.arg(data).arg(&words).arg(sink);
        // SAFETY: the kernel reads words [0, bytes / 16) of `data`, checked above to lie in
        // it, and may write the first word of `sink` (not empty).
        unsafe { launch.launch(launch_config(4 * self.multiprocessors(), 512, 0)) }?;
        Ok(())
    }

    /// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written,
    /// over `copies` rotating source buffers of `bytes` each (median of `runs`).
    ///
    /// # Errors
    /// Allocation or copy failures.
    pub fn copy_bandwidth(&self, bytes: usize, copies: usize, runs: usize) -> Result<CopyRoofline> {
        let stream = self.stream();
        let sources = (0..copies.max(1))
            .map(|i| {
                let mut s: CudaSlice<u8> = stream.alloc_zeros(bytes)?;
                // Non-zero contents, different per buffer, so nothing is special-cased.
                let fill = vec![(i as u8).wrapping_mul(37) | 1; bytes];
                stream.memcpy_htod(&fill, &mut s)?;
                Ok(s)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut dst: CudaSlice<u8> = stream.alloc_zeros(bytes)?;
        let timing = self.time_runs(3, runs, |i| -> Result<()> {
            stream.memcpy_dtod(&sources[i % sources.len()], &mut dst)?;
            Ok(())
        })?;
        Ok(CopyRoofline { gb_per_s: timing.gb_per_s(2 * bytes), timing })
    }
}

/// The measured device-to-device copy that bounds a memory-bound codec.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CopyRoofline {
    /// Bytes read plus bytes written per second, in GB/s.
    pub gb_per_s: f64,
    /// The copy's run times.
    pub timing: Timing,
}

impl CopyRoofline {
    /// The best possible throughput, in GB/s of uncompressed bytes, of a codec that reads
    /// (or writes) `1 / ratio` bytes of payload per uncompressed byte and writes (or
    /// reads) the uncompressed byte: `copy_bw / (1 + 1 / ratio)`. A plain split or merge
    /// is `ratio = 1`.
    pub fn bound_gb_per_s(&self, ratio: f64) -> f64 {
        self.gb_per_s / (1.0 + 1.0 / ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(Timing::from_runs(vec![3.0, 1.0, 2.0]).median_ms, 2.0);
        let t = Timing::from_runs(vec![4.0, 1.0, 2.0, 3.0]);
        assert_eq!((t.median_ms, t.min_ms, t.max_ms), (2.5, 1.0, 4.0));
        assert!((t.gb_per_s(2_500_000) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn roofline_formula() {
        let r = CopyRoofline { gb_per_s: 4000.0, timing: Timing::from_runs(vec![1.0]) };
        assert_eq!(r.bound_gb_per_s(1.0), 2000.0);
        assert!((r.bound_gb_per_s(1.5) - 2400.0).abs() < 1e-9);
    }
}
