#![no_main]
// The Go duration parser (controller and CLI flags) must reject any text with an error,
// never a panic (overflow included).
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Flag values are short; longer inputs only slow the run down.
    if data.len() > 1024 {
        return;
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = kseal_api::duration::parse(text);
    }
});
