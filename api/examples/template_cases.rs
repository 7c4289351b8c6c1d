//! Renders a JSON list of templates (stdin) against a fixed data set and prints a JSON list
//! of `{"ok", "out", "err"}` results (stdout). `tools/template-diff` runs Go's
//! text/template with Sprig on the same input to compare the two.

use std::collections::BTreeMap;
use std::io::Read as _;

use k8s_openapi::ByteString;
use kseal_api::template::Template;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let cases: Vec<String> = serde_json::from_str(&input)?;
    // Keep in sync with the data in tools/template-diff/main.go.
    let data: BTreeMap<String, ByteString> = [
        ("a", "A"),
        ("b", ""),
        ("n", "42"),
        ("pw", "p<&>\"\\"),
        ("multi", "l1\nl2"),
        ("db-pass", "dashed"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    let results: Vec<serde_json::Value> = cases
        .iter()
        .map(
            |src| match Template::parse("t", src).and_then(|t| t.render(&data)) {
                Ok(out) => {
                    serde_json::json!({"ok": true, "out": String::from_utf8_lossy(&out), "err": ""})
                }
                Err(e) => serde_json::json!({"ok": false, "out": "", "err": e.message()}),
            },
        )
        .collect();
    serde_json::to_writer(std::io::stdout().lock(), &results)?;
    Ok(())
}
