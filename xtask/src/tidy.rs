//! Tidy checks run as tests (rust-analyzer's `tidy.rs`): comments in `crates/` and
//! `kernels/` state decisions and their reasons; measured figures (GB/s, TB/s), the
//! commits they were measured at and the names of measurement series belong in
//! `docs/PERF.md`, `docs/perf/` and the bench JSON, which record where they came from.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs`, `.cu` and `.cuh` file under `dir`.
    fn sources(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "rs" || e == "cu" || e == "cuh") {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Why `line` states a measurement rather than a reason, if it does.
    fn measurement(line: &str) -> Option<&'static str> {
        let lower = line.to_ascii_lowercase();
        let bytes = lower.as_bytes();
        // A number followed by GB/s or TB/s.
        for unit in ["gb/s", "tb/s"] {
            let mut from = 0;
            while let Some(at) = lower[from..].find(unit) {
                let before = lower[..from + at].trim_end();
                if before.ends_with(|c: char| c.is_ascii_digit()) {
                    return Some("a throughput figure");
                }
                from += at + unit.len();
            }
        }
        // "eighth series", "series 8", "(8) rows".
        const ORDINALS: [&str; 12] = [
            "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth",
        ];
        if ORDINALS.iter().any(|o| lower.contains(&format!("{o} series"))) {
            return Some("a measurement series name");
        }
        // A commit hash: 7 to 40 hex digits with both a digit and a letter, not a 0x literal.
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_hexdigit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
                let end = (i..bytes.len()).find(|&j| !bytes[j].is_ascii_hexdigit()).unwrap_or(bytes.len());
                let word = &lower[i..end];
                let bounded = end == bytes.len() || !bytes[end].is_ascii_alphanumeric() && bytes[end] != b'_';
                let prefixed = i >= 2 && &bytes[i - 2..i] == b"0x";
                if bounded
                    && !prefixed
                    && (7..=40).contains(&word.len())
                    && word.bytes().any(|b| b.is_ascii_digit())
                    && word.bytes().any(|b| b.is_ascii_alphabetic())
                {
                    return Some("a commit hash");
                }
                i = end;
            } else {
                i += 1;
            }
        }
        None
    }

    #[test]
    fn comments_state_reasons_not_measurements() {
        let root = crate::project_root();
        let mut found = Vec::new();
        for dir in ["crates", "kernels"] {
            for file in sources(&root.join(dir)) {
                let text = std::fs::read_to_string(&file).unwrap();
                for (n, line) in text.lines().enumerate() {
                    if let Some(what) = measurement(line) {
                        let path = file.strip_prefix(&root).unwrap_or(&file).display();
                        found.push(format!("{path}:{}: {what}: {}", n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "move these to docs/PERF.md or docs/perf/ and say why instead:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn the_checker_finds_what_it_should() {
        assert!(measurement("// measured 1540 GB/s on an H200").is_some());
        assert!(measurement("// 2.1 TB/s").is_some());
        assert!(measurement("// (PERF.md, eighth series)").is_some());
        assert!(measurement("// since 679a7b0 the decoder").is_some());
        assert!(measurement("/// Throughput in GB/s at the median.").is_none());
        assert!(measurement("const MAGIC: u32 = 0x4158564b;").is_none());
        assert!(measurement("// bytes 0xdeadbeef and words like accepted or decade").is_none());
    }
}
