#![no_main]
//! libFuzzer entry point of [`kvcodec_fuzz::targets::field_split_merge`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvcodec_fuzz::targets::field_split_merge(data));
