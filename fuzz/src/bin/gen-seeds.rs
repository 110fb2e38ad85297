//! Writes every target's seeds (`kvcodec_fuzz::seeds::for_target`) to
//! `fuzz/seeds/<target>/<name>`, the corpus libFuzzer starts from. Other files in those
//! folders (crash reproducers) are left alone.
//!
//! `cargo run --release --no-default-features --features driver --bin gen-seeds`

use kvcodec_fuzz::{seeds, targets};

fn main() -> std::io::Result<()> {
    let mut total = 0;
    for &(name, _) in targets::TARGETS {
        let dir = seeds::seed_dir(name);
        std::fs::create_dir_all(&dir)?;
        for (seed, bytes) in seeds::for_target(name) {
            std::fs::write(dir.join(&seed), &bytes)?;
            total += bytes.len();
        }
    }
    println!("{total} bytes of seeds");
    Ok(())
}
