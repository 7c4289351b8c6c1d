#![no_main]
// The controller's /v1/verify and /v1/rotate body parser faces the network: any bytes must
// give a SealedSecret or an error, never a panic, and an accepted body is one SealedSecret.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = kseal_api::request::parse_sealed_secret(data) {
        assert_eq!(parsed.raw["kind"], "SealedSecret");
        assert_eq!(parsed.raw["apiVersion"], "bitnami.com/v1alpha1");
    }
});
