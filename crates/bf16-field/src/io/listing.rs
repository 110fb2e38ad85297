//! What a safetensors file holds, as errors report it: each tensor's name, dtype and
//! shape, listed in name order and cut short when long.

use std::fmt;

/// One tensor of a safetensors file, as an error names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name in the file.
    pub name: String,
    /// Its dtype as safetensors spells it (`BF16`, `F32`, ...).
    pub dtype: String,
    /// Its shape, outermost dimension first.
    pub shape: Vec<usize>,
}

/// Tensors of a file that an error is about, in name order. Displays as
/// ``3 tensors: `a` F32 [2, 3], ...``, naming at most [`TensorList::SHOWN`] of them so
/// that a file of thousands of tensors still gives a one-line error; the field holds
/// them all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorList(pub Vec<TensorInfo>);

impl TensorList {
    /// How many tensors the display names before "and N more".
    pub const SHOWN: usize = 8;
}

impl fmt::Display for TensorList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.len() {
            0 => return f.write_str("no tensors"),
            1 => f.write_str("1 tensor: ")?,
            n => write!(f, "{n} tensors: ")?,
        }
        for (i, t) in self.0.iter().take(Self::SHOWN).enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}`{}` {} {:?}", t.name, t.dtype, t.shape)?;
        }
        if self.0.len() > Self::SHOWN {
            write!(f, ", and {} more", self.0.len() - Self::SHOWN)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> TensorInfo {
        TensorInfo { name: name.into(), dtype: "F32".into(), shape: vec![2, 3] }
    }

    #[test]
    fn long_lists_are_cut_short() {
        assert_eq!(TensorList(vec![]).to_string(), "no tensors");
        assert_eq!(TensorList(vec![info("a")]).to_string(), "1 tensor: `a` F32 [2, 3]");
        let many = TensorList((0..20).map(|i| info(&format!("t{i}"))).collect());
        let shown = many.to_string();
        assert!(shown.starts_with("20 tensors: `t0` F32 [2, 3], `t1` F32 [2, 3]"), "{shown}");
        assert!(shown.ends_with("`t7` F32 [2, 3], and 12 more"), "{shown}");
    }
}
