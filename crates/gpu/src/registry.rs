//! The typed kernel registry: every crate declares its PTX modules once (and registers
//! them, so the probe can load them all) and names its kernels by an enum that
//! implements [`Kernel`], never by a string at the call site (candle-kernels' `Module`
//! and `Id`).

/// A PTX module embedded in the crate that owns its kernels: the compiled form of
/// `kernels/<crate>/<file>.cu`, written to `crates/<crate>/ptx/<file>.ptx` by
/// `cargo xtask kernels`.
#[derive(Debug)]
pub struct Module {
    name: &'static str,
    ptx: &'static str,
}

impl Module {
    /// A module named `name` (unique in the workspace; the key of each context's module
    /// cache) with PTX text `ptx` (usually `include_str!` of the committed file).
    pub const fn new(name: &'static str, ptx: &'static str) -> Self {
        Module { name, ptx }
    }

    /// The workspace-unique name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The PTX text.
    pub const fn ptx(&self) -> &'static str {
        self.ptx
    }
}

/// A module registered with [`crate::register_module!`]: [`crate::GpuContext::new`]
/// loads every registered module of the binary, so a PTX that does not load (a newer
/// PTX ISA than the driver's, say) fails the probe, not the first launch.
#[derive(Debug)]
pub struct Registered(pub &'static Module);

inventory::collect!(Registered);

/// Registers a `static` [`Module`] so that the probe loads it:
/// `kvcodec_gpu::register_module!(DECODE_MODULE);`.
#[macro_export]
macro_rules! register_module {
    ($module:path) => {
        $crate::__inventory::submit! { $crate::Registered(&$module) }
    };
}

/// Every registered module of this binary, in no particular order.
pub fn registered_modules() -> impl Iterator<Item = &'static Module> {
    inventory::iter::<Registered>.into_iter().map(|r| r.0)
}

/// A kernel: the module that holds it and its `extern "C"` name. Each crate names its
/// kernels by a `Copy` enum implementing this, so a misspelt kernel is a compile error
/// and every launch site says which module it loads.
pub trait Kernel: Copy + std::fmt::Debug + Send + Sync + 'static {
    /// The module holding the kernel.
    fn module(self) -> &'static Module;
    /// The kernel's symbol in the PTX.
    fn symbol(self) -> &'static str;
}
