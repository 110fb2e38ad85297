#![no_main]
//! libFuzzer entry point of [`kvcodec_fuzz::targets::splitzip_codebook_json`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvcodec_fuzz::targets::splitzip_codebook_json(data));
