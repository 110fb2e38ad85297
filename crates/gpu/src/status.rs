//! Device status words: how a kernel reports invalid input without a host round trip,
//! and how the host turns a nonzero status into the CPU decoder's exact error.

use cudarc::driver::CudaSlice;

use crate::{GpuContext, GpuError, Result};

/// How a kernel folds the problems it finds into its status word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusEncoding {
    /// `atomicCAS(status, 0, code)`: the first problem's code stays.
    FirstCode,
    /// `atomicOr(status, flag)`: every problem's flag is set.
    Flags,
}

/// One value a kernel can leave in its status word: a code or a flag bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusValue {
    /// The value (a code, or a single bit for [`StatusEncoding::Flags`]).
    pub value: u32,
    /// Its name in the kernel source, without the crate's prefix (`"EXHAUSTED"` is
    /// `EXANS_STATUS_EXHAUSTED` in the generated header).
    pub name: &'static str,
    /// What it means.
    pub meaning: &'static str,
}

/// The values of one kernel's status word, defined once in Rust; `cargo xtask kernels`
/// writes them into the kernel's generated header, so the two sides cannot drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusCodes {
    /// How values combine.
    pub encoding: StatusEncoding,
    /// Every value the kernel writes (0, valid, is implied).
    pub values: &'static [StatusValue],
}

impl StatusCodes {
    /// The status in words: the names of the flags set (or the code's name), with any
    /// unknown bits in hex; `"valid"` for 0.
    pub fn describe(&self, status: u32) -> String {
        if status == 0 {
            return "valid".into();
        }
        match self.encoding {
            StatusEncoding::FirstCode => match self.values.iter().find(|v| v.value == status) {
                Some(v) => v.name.to_ascii_lowercase(),
                None => format!("unknown code {status}"),
            },
            StatusEncoding::Flags => {
                let mut parts: Vec<String> = self
                    .values
                    .iter()
                    .filter(|v| status & v.value != 0)
                    .map(|v| v.name.to_ascii_lowercase())
                    .collect();
                let known = self.values.iter().fold(0, |a, v| a | v.value);
                if status & !known != 0 {
                    parts.push(format!("unknown bits {:#x}", status & !known));
                }
                parts.join(" | ")
            }
        }
    }
}

/// One `u32` status word in device memory: zeroed before a launch, left nonzero by a
/// kernel that found invalid input.
pub struct DeviceStatus {
    word: CudaSlice<u32>,
}

impl std::fmt::Debug for DeviceStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStatus").finish_non_exhaustive()
    }
}

impl DeviceStatus {
    /// A zeroed status word on `gpu`'s device.
    ///
    /// # Errors
    /// [`crate::Error::Cuda`].
    pub fn new(gpu: &GpuContext) -> Result<Self> {
        let word = gpu.zeros(1)?;
        gpu.synchronize()?;
        Ok(DeviceStatus { word })
    }

    /// Queues a zeroing of the word on `gpu`'s stream.
    ///
    /// # Errors
    /// [`crate::Error::Cuda`].
    pub fn clear(&mut self, gpu: &GpuContext) -> Result<()> {
        Ok(gpu.stream().memset_zeros(&mut self.word)?)
    }

    /// The device word, to pass to a kernel.
    pub fn word(&mut self) -> &mut CudaSlice<u32> {
        &mut self.word
    }

    /// The word's value once `gpu`'s stream has passed every queued launch
    /// (synchronises).
    ///
    /// # Errors
    /// [`crate::Error::Cuda`].
    pub fn read(&self, gpu: &GpuContext) -> Result<u32> {
        let mut v = [0u32];
        gpu.stream().memcpy_dtoh(&self.word, &mut v)?;
        Ok(v[0])
    }

    /// Reads the word (synchronises); if it is nonzero, runs the CPU decoder `cpu` on the
    /// same input and returns its error, or [`GpuError::Disagreement`] if the CPU
    /// decoder accepts what the kernel flagged.
    ///
    /// # Errors
    /// As described; [`crate::Error::Cuda`] from the read.
    pub fn check<T, E>(
        &self,
        gpu: &GpuContext,
        codes: &StatusCodes,
        cpu: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<(), GpuError<E>> {
        let status = self.read(gpu)?;
        if status == 0 { Ok(()) } else { Err(cpu_verdict(status, codes, cpu)) }
    }
}

/// The error for input a kernel flagged with `status`: the CPU decoder's error on the
/// same input, or [`GpuError::Disagreement`] if it accepts it.
pub fn cpu_verdict<T, E>(
    status: u32,
    codes: &StatusCodes,
    cpu: impl FnOnce() -> std::result::Result<T, E>,
) -> GpuError<E> {
    match cpu() {
        Err(e) => GpuError::Codec(e),
        Ok(_) => GpuError::Disagreement { status, meaning: codes.describe(status) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAGS: StatusCodes = StatusCodes {
        encoding: StatusEncoding::Flags,
        values: &[
            StatusValue { value: 1, name: "LAYOUT", meaning: "" },
            StatusValue { value: 4, name: "MODEL", meaning: "" },
        ],
    };

    #[test]
    fn describe_flags_and_codes() {
        assert_eq!(FLAGS.describe(0), "valid");
        assert_eq!(FLAGS.describe(5), "layout | model");
        assert_eq!(FLAGS.describe(0x14), "model | unknown bits 0x10");
        let codes = StatusCodes { encoding: StatusEncoding::FirstCode, ..FLAGS };
        assert_eq!(codes.describe(4), "model");
        assert_eq!(codes.describe(5), "unknown code 5");
    }

    #[test]
    fn verdict_is_the_cpu_error_or_a_disagreement() {
        let e: GpuError<&str> = cpu_verdict(4, &FLAGS, || Err::<(), _>("bad model"));
        assert!(matches!(e, GpuError::Codec("bad model")));
        let e: GpuError<&str> = cpu_verdict(4, &FLAGS, || Ok::<_, &str>(()));
        assert!(matches!(e, GpuError::Disagreement { status: 4, ref meaning } if meaning == "model"));
    }
}
