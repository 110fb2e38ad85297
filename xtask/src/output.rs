//! What the commands write: stdout lines whose write errors are returned, not panicked
//! on, so that a closed pipe (`cargo xtask stats | head -1`) ends a command cleanly;
//! errors as one line; paths as a user reads them.

use std::path::{Component, Path, PathBuf};

/// `println!` that returns the `std::io::Result` of the write instead of panicking on a
/// failed one (`println!` panics when the reader of stdout has gone away).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)
    }};
}

/// Whether `error` comes from writing to a pipe whose reader has gone (`| head`):
/// then nobody is left to read anything, and the command ends as a success.
pub(crate) fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `error` and its causes on one line, `: `-separated, each text once: the error types of
/// the workspace write their source into their own message (`{path}: {source}`) and
/// also return it as their source, so a cause the line already holds is left out.
pub(crate) fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// A path as a user reads it: relative to the current folder when it lies below it,
/// absolute otherwise, and never with `.` or `..` steps (resolved through the file
/// system when the path exists, by hand when it does not).
pub(crate) fn shown(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let absolute = path.canonicalize().unwrap_or_else(|_| {
        without_dot_steps(&cwd.as_deref().map_or_else(|| path.to_path_buf(), |d| d.join(path)))
    });
    let cwd = cwd.and_then(|d| d.canonicalize().ok());
    match cwd.as_deref().and_then(|d| absolute.strip_prefix(d).ok()) {
        Some(relative) if relative.as_os_str().is_empty() => ".".into(),
        Some(relative) => relative.display().to_string(),
        None => absolute.display().to_string(),
    }
}

/// `path` with its `.` steps dropped and each `..` taking away the step before it (the
/// parent of `/` is `/`), without asking the file system.
fn without_dot_steps(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for step in path.components() {
        match step {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_paths_have_no_dot_steps() {
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        // Neither exists, so the file system cannot resolve them.
        assert_eq!(shown(Path::new("no-such/./dir/../file.json")), "no-such/file.json");
        let above = shown(Path::new("../../no-such-file.json"));
        assert!(!above.contains(".."), "{above}");
        assert!(Path::new(&above).is_absolute(), "{above}");
        assert_eq!(Path::new(&above).file_name().unwrap(), "no-such-file.json");
        // An existing one below the current folder, reached through `..`.
        let name = cwd.file_name().unwrap().to_str().unwrap();
        assert_eq!(shown(&Path::new("..").join(name).join("Cargo.toml")), "Cargo.toml");
        assert_eq!(shown(&cwd), ".");
        assert_eq!(without_dot_steps(Path::new("/../a/../../b")), Path::new("/b"));
    }

    #[test]
    fn one_line_says_each_cause_once() {
        // Displays "{path}: {source}" and returns the io error as its source, as the
        // workspace's thiserror types do.
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let codebook = splitzip::CodebookError::Io { path: "out/cb.json".into(), source: io() };
        assert_eq!(one_line(&anyhow::Error::new(codebook)), "out/cb.json: No such file or directory");
        let wrapped = anyhow::Error::new(io()).context("--json out.json");
        assert_eq!(one_line(&wrapped), "--json out.json: No such file or directory");
        assert!(!is_closed_pipe(&wrapped));
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context("stats");
        assert!(is_closed_pipe(&pipe));
    }
}
