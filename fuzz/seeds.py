#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target (fuzz/corpus/<target>/) from the repository's
golden fixtures: the Go-made interop vectors (keys/tests/vectors), the kubeseal-shaped and
golden SealedSecrets (api/tests/fixtures, tests/fixtures) and the template cases of
api/tests. A few KB per target: valid inputs the fuzzer mutates from, instead of finding the
format from nothing in its 10 seconds in CI.

    python3 fuzz/seeds.py          # rewrite fuzz/corpus/ (commit the result)
    python3 fuzz/seeds.py --check  # exit 1 if fuzz/corpus/ differs from what it would write
"""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def pem_body(pem: str) -> bytes:
    return base64.b64decode("".join(l for l in pem.splitlines() if not l.startswith("-----")))


def seeds() -> dict[str, dict[str, bytes]]:
    go = json.loads((ROOT / "keys/tests/vectors/go-stdlib.json").read_text())
    vectors = {v["id"]: v for v in go["vectors"]}
    key = go["key"]
    out: dict[str, dict[str, bytes]] = {}

    # Envelopes: raw and base64, valid and damaged, each under 1 KB.
    env = {}
    for vid in ("strict/ascii", "negative/length-prefix-too-big", "negative/truncated-1-byte"):
        name = vid.replace("/", "-")
        env[f"{name}.b64"] = vectors[vid]["sealed_b64"].encode()
        env[f"{name}.bin"] = base64.b64decode(vectors[vid]["sealed_b64"])
    out["envelope"] = env

    # KeyRing::open: one length byte, the label, then the sealed bytes (the target's layout).
    ring = {}
    for vid in ("strict/empty", "cluster-wide/ascii", "namespace-wide/empty"):
        label = base64.b64decode(vectors[vid]["label_b64"])
        ring[vid.replace("/", "-")] = (
            bytes([len(label)]) + label + base64.b64decode(vectors[vid]["sealed_b64"])
        )
    out["keyring_open"] = ring

    # Certificates and public keys, DER and PEM (the vectors' test key; no private key).
    cert_pem = (ROOT / "tests/fixtures/keys/tls.crt").read_bytes()
    out["pem"] = {
        "fixture-cert.pem": cert_pem,
        "fixture-cert.der": pem_body(cert_pem.decode()),
        "vectors-spki.der": pem_body(key["public_key_spki_pem"]),
        "vectors-spki.pem": key["public_key_spki_pem"].encode(),
        "key-id": b"sha256:" + key["modulus_sha256_hex"].encode(),
    }

    # Go durations, as the flags take them.
    out["duration"] = {
        f"d{i}": d.encode()
        for i, d in enumerate(
            ["720h", "1h30m", "1.5s", "-300ms", "2h45m0.5s", "1us", "1µs", "0", "9223372036854775807ns"]
        )
    }

    # Templates: sources from api/tests/it/template.rs's case tables (the Go and Sprig cases).
    cases = re.findall(r'^\s*\("((?:[^"\\]|\\.)*)",', (ROOT / "api/tests/it/template.rs").read_text(), re.M)
    sources = [json.loads(f'"{c}"') for c in cases if "{{" in c]
    picked = sources[:: max(1, len(sources) // 24)][:24]
    out["template_parse"] = {f"t{i:02}": s.encode() for i, s in enumerate(picked)}
    out["template_execute"] = {
        f"t{i:02}": s.encode()
        for i, s in enumerate(
            picked[:16]
            + [
                '{{ .password | b64enc }}',
                '{{ .json | fromJson | toJson }}',
                '{{ range $k, $v := . }}{{ $k }}={{ $v }};{{ end }}',
                '{{ printf "%s:%s" .user .password | sha256sum }}',
            ]
        )
    }

    # Request bodies: SealedSecrets as kubeseal and kseal write them, JSON and YAML.
    out["request_body"] = {
        "kubeseal-strict.yaml": (ROOT / "api/tests/fixtures/kubeseal-strict.yaml").read_bytes(),
        "kubeseal-cluster-wide.json": (ROOT / "api/tests/fixtures/kubeseal-cluster-wide.json").read_bytes(),
        "golden-namespace-wide.yaml": (
            ROOT / "tests/fixtures/sealed-secret.namespace-wide.golden.yaml"
        ).read_bytes(),
    }
    return out


def main() -> int:
    check = sys.argv[1:] == ["--check"]
    stale = []
    for target, files in seeds().items():
        folder = CORPUS / target
        want = {name: data for name, data in files.items()}
        have = {p.name: p.read_bytes() for p in folder.glob("*")} if folder.is_dir() else {}
        if have == want:
            continue
        stale.append(target)
        if not check:
            folder.mkdir(parents=True, exist_ok=True)
            for name in set(have) - set(want):
                (folder / name).unlink()
            for name, data in want.items():
                (folder / name).write_bytes(data)
    if check and stale:
        print(f"fuzz/corpus is stale for {', '.join(stale)}: run python3 fuzz/seeds.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
