#![no_main]
//! libFuzzer entry point of [`kvcodec_fuzz::targets::zipfusion_cache`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvcodec_fuzz::targets::zipfusion_cache(data));
