#![no_main]
// Envelope parsing and base64 decoding must never panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kseal_keys::envelope::Envelope::parse(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = kseal_keys::envelope::decode_base64(text);
    }
});
