//! Local Python virtual environments under `target/xtask/`, for the pinned nvcc and the
//! fixture generator. Kept out of the default build and test path.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// A venv at `target/xtask/<name>` with `packages` pip-installed (each `pip install`
/// argument list run in order), created on first use. A marker file records the
/// package lists, so a changed pin reinstalls.
pub(crate) fn ensure(name: &str, installs: &[&[&str]]) -> anyhow::Result<PathBuf> {
    let dir = crate::project_root().join("target").join("xtask").join(name);
    let marker = dir.join(".kvcodec-installed");
    let wanted = format!("{installs:?}");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(dir);
    }
    if !dir.join("bin").join("python").exists() {
        eprintln!("[xtask] creating venv {}", dir.display());
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir))?;
    }
    for args in installs {
        eprintln!("[xtask] pip install {}", args.join(" "));
        run(Command::new(dir.join("bin").join("pip"))
            .args(["install", "--disable-pip-version-check"])
            .args(*args))?;
    }
    std::fs::write(&marker, wanted)?;
    Ok(dir)
}

/// Runs a command with inherited output, failing on a non-zero exit.
pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// The site-packages folder of a venv (`lib/python3.X/site-packages`).
pub(crate) fn site_packages(venv: &Path) -> anyhow::Result<PathBuf> {
    for entry in std::fs::read_dir(venv.join("lib"))? {
        let p = entry?.path().join("site-packages");
        if p.is_dir() {
            return Ok(p);
        }
    }
    bail!("no site-packages under {}", venv.display())
}
