//! The bench's rows, its table with a legend, and its JSON record of a run.

use kvcodec_gpu::timing::CopyRoofline;

/// One line of the table.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Row {
    pub(crate) input: String,
    pub(crate) codec: String,
    pub(crate) backend: String,
    /// CPU threads (rayon's pool) of a CPU row; `None` on the GPU.
    pub(crate) threads: Option<usize>,
    pub(crate) values: usize,
    pub(crate) raw_bytes: usize,
    pub(crate) encoded_bytes: usize,
    pub(crate) ratio: f64,
    /// GB/s of uncompressed BF16; `None` for the host-to-device rows, which only decode.
    pub(crate) encode_gb_s: Option<f64>,
    /// GB/s of uncompressed BF16 delivered (host-to-device rows: into device memory).
    pub(crate) decode_gb_s: f64,
    /// Measured device-to-device copy, read+write GB/s (device-resident GPU rows).
    pub(crate) copy_gb_s: Option<f64>,
    /// Measured copy from page-locked host memory to the device, GB/s of the bytes the
    /// link moved (host-to-device rows only).
    pub(crate) h2d_gb_s: Option<f64>,
    /// encode GB/s over `copy_bw / (1 + 1/ratio)` (GPU rows only).
    pub(crate) encode_roofline: Option<f64>,
    /// decode GB/s over `copy_bw / (1 + 1/ratio)` (device-resident GPU rows), or over
    /// `h2d_bw x ratio` (host-to-device rows: the link carrying compressed bytes).
    pub(crate) decode_roofline: Option<f64>,
    pub(crate) runs: usize,
    /// Where a calibrated codec's tables came from (SplitZip rows).
    pub(crate) calibrated_on: Option<String>,
}

/// What one measurement found; [`Row::cpu`] and [`Row::gpu`] derive the rest.
pub(crate) struct Measured {
    /// The input's name (with `xN` when tiled for the GPU).
    pub(crate) input: String,
    /// The codec's name.
    pub(crate) codec: String,
    /// BF16 values encoded.
    pub(crate) values: usize,
    /// Encoded bytes, all metadata counted.
    pub(crate) encoded_bytes: usize,
    /// Seconds per encode (median); `None` for decode-only rows.
    pub(crate) encode_secs: Option<f64>,
    /// Seconds per decode (median).
    pub(crate) decode_secs: f64,
    /// Timed runs.
    pub(crate) runs: usize,
}

impl Row {
    fn new(m: Measured, backend: &str, threads: Option<usize>) -> Row {
        let raw_bytes = 2 * m.values;
        Row {
            input: m.input,
            codec: m.codec,
            backend: backend.into(),
            threads,
            values: m.values,
            raw_bytes,
            encoded_bytes: m.encoded_bytes,
            ratio: raw_bytes as f64 / m.encoded_bytes as f64,
            encode_gb_s: m.encode_secs.map(|s| raw_bytes as f64 / s / 1e9),
            decode_gb_s: raw_bytes as f64 / m.decode_secs / 1e9,
            copy_gb_s: None,
            h2d_gb_s: None,
            encode_roofline: None,
            decode_roofline: None,
            runs: m.runs,
            calibrated_on: None,
        }
    }

    /// A CPU row, timed on rayon's pool of the current thread count.
    pub(crate) fn cpu(m: Measured) -> Row {
        Row::new(m, "cpu", Some(rayon::current_num_threads()))
    }

    /// A device-resident GPU row with its roofline from `copy`, measured in the same run.
    pub(crate) fn gpu(m: Measured, copy: &CopyRoofline) -> Row {
        let mut row = Row::new(m, "cuda", None);
        let bound = copy.bound_gb_per_s(row.ratio);
        row.copy_gb_s = Some(copy.gb_per_s);
        row.encode_roofline = row.encode_gb_s.map(|e| e / bound);
        row.decode_roofline = Some(row.decode_gb_s / bound);
        row
    }

    /// A host-to-device row: BF16 values delivered into device memory from page-locked
    /// host memory while the link moved `m.encoded_bytes`; `h2d_gb_s` is the page-locked
    /// copy bandwidth of the same run, which with the ratio gives the roofline
    /// `h2d_gb_s x ratio`.
    pub(crate) fn host_to_device(m: Measured, h2d_gb_s: f64) -> Row {
        let mut row = Row::new(m, "cuda", None);
        row.h2d_gb_s = Some(h2d_gb_s);
        row.decode_roofline = Some(row.decode_gb_s / (h2d_gb_s * row.ratio));
        row
    }
}

/// Prints the table and the legend that explains it.
pub(crate) fn print_table(rows: &[Row], warmup: usize) -> std::io::Result<()> {
    outln!(
        "{:<26} {:<18} {:<9} {:>8} {:>10} {:>10} {:>9} {:>9}",
        "input",
        "codec",
        "backend",
        "ratio",
        "enc GB/s",
        "dec GB/s",
        "enc roof",
        "dec roof"
    )?;
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
    for r in rows {
        let backend = match r.threads {
            Some(t) => format!("{}/{t}t", r.backend),
            None => r.backend.clone(),
        };
        outln!(
            "{:<26} {:<18} {:<9} {:>8.4} {:>10} {:>10.2} {:>9} {:>9}",
            r.input,
            r.codec,
            backend,
            r.ratio,
            r.encode_gb_s.map_or("-".to_string(), |e| format!("{e:.2}")),
            r.decode_gb_s,
            pct(r.encode_roofline),
            pct(r.decode_roofline)
        )?;
    }
    let runs = rows.first().map_or(0, |r| r.runs);
    let warmups = if warmup == 1 { "warm-up" } else { "warm-ups" };
    outln!()?;
    outln!("ratio        BF16 bytes / encoded bytes, every header, table and index counted")?;
    outln!("GB/s         10^9 bytes of uncompressed BF16 per second, encode and decode alike;")?;
    outln!(
        "             median of {runs} runs after {warmup} {warmups}; every round trip checked bit for bit"
    )?;
    outln!(
        "field-split  no compression: the exponent / sign+mantissa split and merge every codec builds on"
    )?;
    if rows.iter().any(|r| r.codec.ends_with("-checksum")) {
        outln!("*-checksum   the codec with its optional Adler-32 of the values, written and verified")?;
    }
    outln!("cpu/Nt       the CPU reference on N threads (rayon; --threads or RAYON_NUM_THREADS)")?;
    outln!("roof         GB/s over copy_bw / (1 + 1/ratio): the rate of a codec that reads and writes each")?;
    if let Some(c) = rows.iter().find_map(|r| r.copy_gb_s) {
        outln!(
            "             byte once; copy_bw = {c:.0} GB/s, a device-to-device copy (read + write) of this run"
        )?;
        outln!(
            "cuda         the input tiled to >= 1 GiB (xN), two copies alternated so L2 cannot serve them,"
        )?;
        outln!(
            "             CUDA events, each run queued behind a 2 ms hold kernel; GPU bytes equal to the CPU's"
        )?;
    } else {
        outln!("             byte once; measured on a GPU only, so '-' here (--backend cuda)")?;
    }
    if rows.iter().any(|r| r.h2d_gb_s.is_some()) {
        outln!(
            "h2d-raw      a page-locked host-to-device copy of the uncompressed cache; h2d-exans: of the container"
        )?;
        outln!(
            "             h2d-exans-pageable: the container from pageable memory (the driver stages it), no hold"
        )?;
        outln!(
            "exans-h2d-*  the container decoded into device memory while it arrives from page-locked host memory,"
        )?;
        outln!(
            "             in 2, 8 or 32 MiB chunks, or staged from pageable memory (32 MiB chunks; -8M: 8 MiB) by"
        )?;
        outln!("             the rayon pool's threads; GB/s of BF16 landed, timed")?;
        outln!(
            "             without the hold (the host drives these); roof: h2d_bw x ratio, the link's bound"
        )?;
    }
    Ok(())
}

/// The run's JSON record.
#[derive(serde::Serialize)]
pub(crate) struct Report {
    pub(crate) date: String,
    /// `git rev-parse HEAD` of the build, and whether its tree had uncommitted changes.
    pub(crate) commit: String,
    pub(crate) dirty: bool,
    /// SHA-256 of `kernels/kernels.lock` as compiled into this binary: which PTX ran.
    pub(crate) kernels_lock_sha256: String,
    pub(crate) host_cpu: String,
    pub(crate) backend: String,
    /// The GPU, its compute capability and the driver's CUDA version (GPU runs).
    pub(crate) device: Option<String>,
    pub(crate) command: String,
    pub(crate) rows: Vec<Row>,
}

/// The host CPU's model name, its hardware threads, and the threads the CPU rows used.
pub(crate) fn host_cpu() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{}, {cores} hardware threads, {} used by the CPU rows",
        cpu_model(),
        rayon::current_num_threads()
    )
}

/// The CPU's model name from `/proc/cpuinfo`, or "unknown".
pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Today's UTC date as YYYY-MM-DD (civil-from-days, no date crate needed for one line).
pub(crate) fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
