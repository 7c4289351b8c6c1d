#![no_main]
// SealedSecret authors write `spec.template.data`; the controller parses it next to the
// plaintext. Any source must parse or fail with an error, never panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Budget per case: templates in practice are small; 16 KiB keeps each run fast while
    // leaving room for deep nesting (the parser's depth limit is 100).
    if data.len() > 16 << 10 {
        return;
    }
    if let Ok(source) = std::str::from_utf8(data) {
        let _ = kseal_api::template::Template::parse("k", source);
    }
});
