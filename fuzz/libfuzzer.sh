#!/usr/bin/env bash
# Runs kvcodec's libFuzzer targets (docs/fuzzing.md), each for a number of executions or
# seconds, with the per-target input size limit below, and prints one line per target.
#
#   fuzz/libfuzzer.sh runs 10000000 [target...]     10M executions of each target
#   fuzz/libfuzzer.sh seconds 20 [target...]        20 s of each target
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`). Builds
# without a sanitizer (the decoders' unsafe is a few SIMD loops; `FUZZ_SANITIZER=address`
# turns ASan on) and with debug assertions, so integer overflow panics. The round trips
# and the quantizer are built without compare tracing (it costs them 3x and they have no
# magic numbers to guess). New corpus entries go to fuzz/corpus/<target>/ (not committed), crashes to
# fuzz/artifacts/<target>/. Exits 1 if any target crashed or hung.
set -euo pipefail
cd "$(dirname "$0")"

mode=${1:?runs|seconds}
amount=${2:?count}
shift 2
case $mode in
  runs) limit="-runs=$amount" ;;
  seconds) limit="-max_total_time=$amount" ;;
  *) echo "mode is runs or seconds" >&2; exit 2 ;;
esac

# target:max_len. A decoder reads what its header promises, so a few KiB reach every check.
all=(
  splitzip_header:512 splitzip_payload:4096 splitzip_codebook_json:1024 splitzip_cache:4096
  splitzip_roundtrip:4096 exans_record_parse:4096 exans_record_decode:4096 exans_container:8192
  exans_model_table:1024 exans_quantize:1026 exans_roundtrip:4096 zipfusion_page:8192
  zipfusion_cache:8192 zipfusion_roundtrip:8192 gaac_cache:8192 gaac_bases_json:4096 gaac_roundtrip:8192
  field_split_merge:1024 field_safetensors:4096
)
no_trace_compares=" splitzip_roundtrip exans_quantize exans_roundtrip zipfusion_roundtrip gaac_roundtrip "
if [ $# -gt 0 ]; then
  chosen=()
  for t in "$@"; do
    found=""
    for spec in "${all[@]}"; do [ "${spec%%:*}" = "$t" ] && found=$spec; done
    [ -n "$found" ] || { echo "unknown target $t" >&2; exit 2; }
    chosen+=("$found")
  done
else
  chosen=("${all[@]}")
fi

sanitizer=${FUZZ_SANITIZER:-none}
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
cargo +nightly fuzz build --fuzz-dir . -s "$sanitizer" -a
for t in $no_trace_compares; do
  cargo +nightly fuzz build --fuzz-dir . -s "$sanitizer" -a --no-trace-compares --target-dir target-notc "$t"
done

failed=0
for spec in "${chosen[@]}"; do
  t=${spec%%:*}
  len=${spec##*:}
  dir=target
  [[ $no_trace_compares == *" $t "* ]] && dir=target-notc
  mkdir -p "corpus/$t" "artifacts/$t"
  log=artifacts/$t/last-run.log
  start=$(date +%s.%N)
  # One thread for the codecs' rayon pools: one core per fuzzer.
  if RAYON_NUM_THREADS=1 "$dir/$triple/release/$t" "corpus/$t" "seeds/$t" "$limit" -max_len="$len" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="artifacts/$t/" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
  fi
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  printf '%-24s %-6s %12s execs %8.1f s  max_len %s\n' "$t" "$status" "${execs:-?}" "$wall" "$len"
done
exit $failed
