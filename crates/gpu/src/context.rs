//! The backend probe and the device context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PinnedHostSlice,
    ValidAsZeroBits, sys,
};

use crate::registry::{Kernel, Module, registered_modules};
use crate::{Error, Result};

/// What `KVCODEC_BACKEND` (or xtask's `--backend`) asks for: `auto` (or empty), `cpu`,
/// or `cuda` (alias `gpu`), case-insensitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The GPU when the probe succeeds, else the CPU.
    Auto,
    /// Always the CPU.
    Cpu,
    /// The GPU or an error.
    Cuda,
}

impl BackendChoice {
    /// Reads `KVCODEC_BACKEND`; unset or empty means [`BackendChoice::Auto`].
    ///
    /// # Errors
    /// [`Error::UnknownBackend`] naming the bad value.
    pub fn from_env() -> Result<Self> {
        match std::env::var("KVCODEC_BACKEND") {
            Err(_) => Ok(BackendChoice::Auto),
            Ok(s) => s.parse(),
        }
    }
}

impl std::str::FromStr for BackendChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "cuda" | "gpu" => Ok(BackendChoice::Cuda),
            other => Err(Error::UnknownBackend(other.to_string())),
        }
    }
}

/// The backend a run uses.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The CPU reference path, with why the GPU is not used.
    Cpu {
        /// Human-readable reason ("the CPU backend was asked for", "libcuda not found", ...).
        reason: String,
    },
    /// A probed CUDA device.
    Cuda(GpuContext),
}

impl Backend {
    /// Probes once with the choice from `KVCODEC_BACKEND`, on device 0.
    ///
    /// # Errors
    /// A bad `KVCODEC_BACKEND` value, or `cuda` asked for but the probe failed.
    pub fn detect() -> Result<Self> {
        Self::probe(BackendChoice::from_env()?, 0)
    }

    /// Probes with an explicit choice on the device of `ordinal`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when `choice` is [`BackendChoice::Cuda`] and the probe
    /// failed; [`BackendChoice::Auto`] never fails.
    pub fn probe(choice: BackendChoice, ordinal: usize) -> Result<Self> {
        match choice {
            BackendChoice::Cpu => Ok(Backend::Cpu { reason: "the CPU backend was asked for".into() }),
            BackendChoice::Cuda => Ok(Backend::Cuda(GpuContext::new(ordinal)?)),
            BackendChoice::Auto => Ok(match GpuContext::new(ordinal) {
                Ok(gpu) => Backend::Cuda(gpu),
                Err(e) => Backend::Cpu { reason: e.to_string() },
            }),
        }
    }

    /// The GPU context, if this is the CUDA backend.
    pub fn gpu(&self) -> Option<&GpuContext> {
        match self {
            Backend::Cuda(gpu) => Some(gpu),
            Backend::Cpu { .. } => None,
        }
    }

    /// `"cpu"` or `"cuda"`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Cpu { .. } => "cpu",
            Backend::Cuda(_) => "cuda",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Cpu { reason } => write!(f, "cpu ({reason})"),
            Backend::Cuda(gpu) => write!(f, "cuda ({})", gpu.info()),
        }
    }
}

/// What the probe learnt about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// The CUDA device ordinal.
    pub ordinal: usize,
    /// The device's name as the driver reports it.
    pub name: String,
    /// `(major, minor)` compute capability.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors, for sizing grids to whole waves.
    pub multiprocessors: u32,
    /// The most shared memory one CTA may use, in bytes, once a kernel opts in (227 KiB on
    /// sm_90, 163 KiB on sm_80, 99 KiB on sm_86 and sm_89).
    pub max_shared_per_cta: usize,
    /// The driver's CUDA version as `major * 1000 + minor * 10` (13000 for 13.0).
    pub driver_version: i32,
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor) = self.compute_capability;
        let (d_major, d_minor) = (self.driver_version / 1000, self.driver_version % 1000 / 10);
        write!(
            f,
            "{}, sm_{major}{minor}, device {}, CUDA driver {d_major}.{d_minor}",
            self.name, self.ordinal
        )
    }
}

/// The state one device's contexts share: the driver context and the loaded modules and
/// kernels.
struct Device {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    kernels: Mutex<HashMap<(&'static str, &'static str), CudaFunction>>,
}

/// A CUDA device and the stream kvcodec's work goes to.
///
/// Every codec launches on [`GpuContext::stream`]. By default that is a stream the
/// context created; [`GpuContext::with_stream`] and [`GpuContext::with_raw_stream`] give
/// a context for the same device whose launches go on a caller's stream instead (for
/// example PyTorch's current stream), so kvcodec's work is ordered with the caller's
/// without any synchronisation. Alternatively a caller orders its own stream against
/// [`GpuContext::stream`] with events (cudarc's `CudaStream::join`). Cheap to clone:
/// clones share the modules and the stream.
///
/// cudarc's automatic per-buffer event tracking is off for this context: kvcodec orders
/// its own work, on one stream or by explicit events that fork from it and join back
/// into it, so that every launch sequence can be captured in a CUDA graph. The same holds
/// for buffers: device memory is allocated and freed in stream order on the stream of the
/// context that made it. Every kvcodec constructor that allocates (workspaces, decoders,
/// status words) waits for its allocations before it returns, so a buffer can be used
/// on any stream of the device; dropping one is ordered on its own stream, so drop it
/// only once the stream of its last use has passed that use (synchronise it, or order
/// the streams with an event).
#[derive(Clone)]
pub struct GpuContext {
    device: Arc<Device>,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext").field("info", &self.device.info).finish_non_exhaustive()
    }
}

impl GpuContext {
    /// Probes the device of `ordinal` and makes a context with a stream of its own, in
    /// this order, failing with the step's reason:
    ///
    /// 1. `is_culib_present()` (before any other driver call: cudarc panics without
    ///    libcuda);
    /// 2. the device's primary context (the one PyTorch uses, so its pointers are valid
    ///    here);
    /// 3. compute capability >= 8.0 (BF16; the PTX targets `compute_80`);
    /// 4. every module registered in this binary ([`crate::register_module!`]) loads
    ///    (the driver JIT-compiles the PTX).
    ///
    /// # Errors
    /// [`Error::Unavailable`] with the failed step.
    pub fn new(ordinal: usize) -> Result<Self> {
        // SAFETY: is_culib_present only tries to dlopen libcuda; it has no preconditions.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::Unavailable("libcuda not found".into()));
        }
        let unavailable =
            |step: &str, e: cudarc::driver::DriverError| Error::Unavailable(format!("{step}: {e}"));
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable(&format!("no CUDA context on device {ordinal}"), e))?;
        let compute_capability =
            ctx.compute_capability().map_err(|e| unavailable("compute capability", e))?;
        if compute_capability.0 < 8 {
            return Err(Error::Unavailable(format!(
                "compute capability {}.{} < 8.0 (BF16 kernels need sm_80+)",
                compute_capability.0, compute_capability.1
            )));
        }
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| unavailable("multiprocessor count", e))? as u32;
        let max_shared_per_cta =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                .map_err(|e| unavailable("shared memory per block", e))? as usize;
        let mut driver_version = 0;
        // SAFETY: cuDriverGetVersion writes one int through a valid pointer; libcuda is
        // loaded (checked above).
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(|e| unavailable("driver version", e))?;
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().unwrap_or_else(|_| "unknown".into()),
            compute_capability,
            multiprocessors,
            max_shared_per_cta,
            driver_version,
        };
        // SAFETY: kvcodec orders its work itself (see the type's docs), so cudarc's
        // per-slice cross-stream events are not needed; without them a launch records no
        // events, and a stream can be captured into a CUDA graph.
        unsafe { ctx.disable_event_tracking() };
        // A created stream, not the legacy default stream, which cannot be captured.
        let stream = ctx.new_stream().map_err(|e| unavailable("stream", e))?;
        let device = Arc::new(Device {
            ctx,
            info,
            modules: Mutex::new(HashMap::new()),
            kernels: Mutex::new(HashMap::new()),
        });
        let gpu = GpuContext { device, stream };
        for module in registered_modules() {
            gpu.module(module).map_err(|e| {
                Error::Unavailable(format!("PTX module `{}` does not load: {e}", module.name()))
            })?;
        }
        Ok(gpu)
    }

    /// A context for the same device whose launches go on `stream`, which must belong
    /// to this device's primary context (cudarc's `CudaStream`, e.g. from
    /// [`GpuContext::context`]`.new_stream()`).
    ///
    /// # Errors
    /// [`Error::Buffer`] if `stream` belongs to another context.
    pub fn with_stream(&self, stream: Arc<CudaStream>) -> Result<Self> {
        if stream.context().cu_ctx() != self.device.ctx.cu_ctx() {
            return Err(Error::Buffer { what: "stream", why: "belongs to another CUDA context".into() });
        }
        Ok(GpuContext { device: self.device.clone(), stream })
    }

    /// A context for the same device whose launches go on a stream another library owns
    /// (PyTorch's `torch.cuda.current_stream().cuda_stream`, say): kvcodec's work is then
    /// ordered with that library's work on the stream, with no host synchronisation. A
    /// null handle is the legacy default stream, which works but cannot be captured in a
    /// CUDA graph.
    ///
    /// # Errors
    /// [`Error::Buffer`] if the stream belongs to another CUDA context (another device);
    /// [`Error::Cuda`] if the driver does not know the handle.
    ///
    /// # Safety
    /// `stream` must be null or a live stream handle, and stay alive while the returned
    /// context (or a clone of it) is used.
    pub unsafe fn with_raw_stream(&self, stream: sys::CUstream) -> Result<Self> {
        if !stream.is_null() {
            let mut owner: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: `stream` is a live stream (the caller's promise); the call writes
            // one context handle through a valid pointer.
            unsafe { sys::cuStreamGetCtx(stream, &mut owner) }.result()?;
            if owner != self.device.ctx.cu_ctx() {
                return Err(Error::Buffer { what: "stream", why: "belongs to another CUDA context".into() });
            }
        }
        // SAFETY: forwarded to the caller; the stream belongs to this device's context.
        let stream = unsafe { self.device.ctx.wrap_borrowed_stream(stream) };
        Ok(GpuContext { device: self.device.clone(), stream })
    }

    /// The driver context (the device's primary context).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.device.ctx
    }

    /// The stream every launch through this context goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// What the probe learnt about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.device.info
    }

    /// Streaming multiprocessors of the device.
    pub fn multiprocessors(&self) -> u32 {
        self.device.info.multiprocessors
    }

    /// `module`, loaded on first use in this device's context.
    fn module(&self, module: &'static Module) -> Result<Arc<CudaModule>> {
        let mut modules = self.device.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = modules.get(module.name()) {
            return Ok(m.clone());
        }
        let loaded = self.device.ctx.load_module(cudarc::nvrtc::Ptx::from_src(module.ptx()))?;
        modules.insert(module.name(), loaded.clone());
        Ok(loaded)
    }

    /// The loaded kernel `kernel` (its module is loaded on first use).
    ///
    /// # Errors
    /// [`Error::Cuda`] if the PTX does not load or has no such kernel.
    pub fn function(&self, kernel: impl Kernel) -> Result<CudaFunction> {
        let key = (kernel.module().name(), kernel.symbol());
        if let Some(f) = self.device.kernels.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(f.clone());
        }
        let f = self.module(kernel.module())?.load_function(kernel.symbol())?;
        self.device.kernels.lock().unwrap_or_else(|p| p.into_inner()).insert(key, f.clone());
        Ok(f)
    }

    /// A grid for a grid-stride kernel: enough CTAs of `threads` to cover `work_items`,
    /// capped at 8 CTAs per multiprocessor (2048 threads: one full wave on sm_80/sm_90).
    pub fn grid_stride_config(&self, work_items: usize, threads: u32) -> LaunchConfig {
        let wanted = work_items.div_ceil(threads as usize).max(1);
        let cap = (self.multiprocessors() as usize * 8).max(1);
        launch_config(wanted.min(cap) as u32, threads, 0)
    }

    /// `values` copied to a new device buffer on [`GpuContext::stream`]; an empty slice
    /// gives a one-element buffer (the driver cannot allocate zero bytes), zeroed.
    ///
    /// # Errors
    /// [`Error::Cuda`].
    pub fn upload<T: DeviceRepr + ValidAsZeroBits>(&self, values: &[T]) -> Result<CudaSlice<T>> {
        if values.is_empty() {
            Ok(self.stream.alloc_zeros(1)?)
        } else {
            Ok(self.stream.clone_htod(values)?)
        }
    }

    /// Waits until [`GpuContext::stream`] has passed all work queued on it: what every
    /// allocating constructor calls last, so that its buffers are ready on any stream.
    ///
    /// # Errors
    /// [`Error::Cuda`].
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    /// A zeroed device buffer of `len` elements (at least one).
    ///
    /// # Errors
    /// [`Error::Cuda`].
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        Ok(self.stream.alloc_zeros(len.max(1))?)
    }

    /// The first `len` elements of a device buffer, copied to the host (synchronises
    /// with [`GpuContext::stream`]).
    ///
    /// # Errors
    /// [`Error::Buffer`] if `len` exceeds the buffer; [`Error::Cuda`].
    pub fn download<T: DeviceRepr + Clone + Default>(
        &self,
        buffer: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>> {
        crate::check_len("download source", buffer.len(), len, "elements")?;
        let mut out = vec![T::default(); len];
        if len > 0 {
            self.stream.memcpy_dtoh(&buffer.slice(..len), &mut out)?;
        }
        Ok(out)
    }

    /// A copy of `src` in fresh page-locked (pinned) host memory of this device: the
    /// source of an asynchronous host-to-device copy (`cuMemcpyHtoDAsync` from pageable
    /// memory stages through a driver buffer and blocks the host). Costs a
    /// `cuMemHostAlloc` (page-locking is slow: reuse the buffer) and one host copy.
    ///
    /// The memory is cached (flags 0), not write-combined as cudarc's `alloc_pinned`
    /// makes it: host code reads these bytes too (a codec validates a container on the
    /// host before decoding it, and decodes it on the CPU for the exact error), and
    /// reads from write-combined memory bypass the CPU caches.
    ///
    /// # Errors
    /// [`Error::Buffer`] for an empty `src` (`cuMemHostAlloc` cannot allocate zero
    /// bytes); [`Error::Cuda`] if the allocation fails.
    pub fn pinned_copy<T: DeviceRepr + ValidAsZeroBits + Copy>(
        &self,
        src: &[T],
    ) -> Result<PinnedHostSlice<T>> {
        if src.is_empty() {
            return Err(Error::Buffer { what: "pinned copy source", why: "is empty".into() });
        }
        // SAFETY: the allocation is uninitialised until the copy below overwrites all of
        // it, through a raw pointer, before any reference to it exists. The size cannot
        // overflow: `src` already occupies it.
        let mut pinned = unsafe { self.device.ctx.alloc_pinned_with_flags::<T>(src.len(), 0) }?;
        let dst = pinned.as_mut_ptr()?;
        // SAFETY: `dst` starts a live allocation of `src.len()` elements that cannot
        // overlap `src` (it was just allocated).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(pinned)
    }

    /// `bytes` of zeroed, write-combined page-locked host memory: a staging slot that the
    /// host only writes and the copy engine reads (write-combining speeds up exactly that).
    ///
    /// # Errors
    /// [`Error::Cuda`] if the allocation fails.
    pub fn pinned_staging(&self, bytes: usize) -> Result<PinnedHostSlice<u8>> {
        // SAFETY: the memory is uninitialised; it is zeroed through the raw pointer
        // before any reference to it exists.
        let mut slot = unsafe { self.device.ctx.alloc_pinned::<u8>(bytes.max(1)) }?;
        let ptr = slot.as_mut_ptr()?;
        // SAFETY: `ptr` is the start of a live allocation of `bytes.max(1)` bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes.max(1)) };
        Ok(slot)
    }
}

/// A one-dimensional launch: `grid` CTAs of `threads` threads with `shared_mem_bytes` of
/// dynamic shared memory.
pub fn launch_config(grid: u32, threads: u32, shared_mem_bytes: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes }
}
