#![no_main]
// Parse and execute an arbitrary template against a fixed set of items: no panic, and the
// engine's own budgets (steps, output and allocation limits in `kseal_api::template`) keep
// every case bounded in time and memory.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Budget per case: a small source still reaches every construct; the engine bounds
    // what it can make of it.
    if data.len() > 4 << 10 {
        return;
    }
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(template) = kseal_api::template::Template::parse("k", source) else {
        return;
    };
    let items: [(&str, &[u8]); 5] = [
        ("password", b"s3cr3t<&>"),
        ("user", b"admin"),
        ("json", br#"{"a":[1,2.5,"x",null,true],"b":{"c":"d"}}"#),
        ("number", b"42"),
        ("binary", &[0xff, 0x00, 0xc3, 0x28, 0x80]),
    ];
    if let Ok(out) = template.render_with(items) {
        assert!(out.len() <= kseal_api::template::MAX_OUTPUT);
    }
});
