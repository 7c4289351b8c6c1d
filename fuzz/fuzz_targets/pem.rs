#![no_main]
// Key and certificate parsers must reject garbage with an error, never a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kseal_keys::Certificate::from_der(data);
    let _ = kseal_keys::PublicKey::from_spki_der(data);
    let _ = kseal_keys::PublicKey::from_pkcs1_der(data);
    let _ = kseal_keys::PrivateKey::from_pkcs8_der(data);
    let _ = kseal_keys::PrivateKey::from_pkcs1_der(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = kseal_keys::Certificate::from_pem(text);
        let _ = kseal_keys::PublicKey::from_pem(text);
        let _ = kseal_keys::PrivateKey::from_pem(text);
        let _ = kseal_keys::KeyId::parse(text);
    }
});
