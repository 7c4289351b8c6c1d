//! Sprig's encodings and hashes: base64 and base32 (decoders that, as Sprig's, return
//! Go's error text as the result on bad input, with Go's offsets), `sha256sum`, `sha1sum`
//! and `adler32sum`, all lowercase hex or decimal as Go prints them.

use base64::Engine as _;
use sha2::Digest as _;

use super::args::{s, string};
use crate::template::ctx::Ctx;
use crate::template::value::Value;

pub(super) fn b64enc(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(
        base64::engine::general_purpose::STANDARD
            .encode(s(a, 0)?)
            .into_bytes(),
    )
}

/// Sprig's `b64dec`: Go's `StdEncoding` (padding required, `\r` and `\n` ignored, loose
/// trailing bits); on bad input the *result* is Go's error text, as in Sprig.
pub(super) fn b64dec(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let input = s(a, 0)?;
    let mut offsets = Vec::with_capacity(input.len());
    let mut cleaned = Vec::with_capacity(input.len());
    for (i, &b) in input.iter().enumerate() {
        if b != b'\r' && b != b'\n' {
            offsets.push(i);
            cleaned.push(b);
        }
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
    );
    match engine.decode(&cleaned) {
        Ok(bytes) => string(bytes),
        Err(e) => {
            let at = match e {
                // Well-formed padding followed by more data: Go reports the byte after it.
                base64::DecodeError::InvalidByte(i, b'=')
                    if i % 4 == 3 || (i % 4 == 2 && cleaned.get(i + 1) == Some(&b'=')) =>
                {
                    let after = i + if i % 4 == 3 { 1 } else { 2 };
                    offsets.get(after).copied().unwrap_or(input.len())
                }
                base64::DecodeError::InvalidByte(i, _)
                | base64::DecodeError::InvalidLastSymbol(i, _) => {
                    offsets.get(i).copied().unwrap_or(input.len())
                }
                base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => {
                    // Go reports the offset of the incomplete final quantum.
                    let whole = cleaned.len() / 4 * 4;
                    offsets.get(whole).copied().unwrap_or(input.len())
                }
            };
            string(format!("illegal base64 data at input byte {at}").into_bytes())
        }
    }
}

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// Go's `base32.StdEncoding` (RFC 4648, with padding).
pub(super) fn b32enc(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let input = s(a, 0)?;
    let mut out = Vec::with_capacity(input.len().div_ceil(5) * 8);
    for block in input.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..block.len()].copy_from_slice(block);
        let bits = buf.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        let chars = (block.len() * 8).div_ceil(5);
        for k in 0..8 {
            if k < chars {
                out.push(BASE32[((bits >> (35 - 5 * k)) & 31) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    string(out)
}

/// Sprig's `b32dec`: like `b64dec`, Go's error text is the result on bad input. Follows
/// Go's decoder step by step, including where it reports errors (offsets count the input
/// without its line breaks, as Go's do).
pub(super) fn b32dec(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let src: Vec<u8> = s(a, 0)?
        .iter()
        .copied()
        .filter(|&b| b != b'\r' && b != b'\n')
        .collect();
    let err = |at: usize| string(format!("illegal base32 data at input byte {at}").into_bytes());
    let olen = src.len();
    let mut out = Vec::with_capacity(olen / 8 * 5);
    let mut pos = 0;
    let mut end = false;
    while pos < olen && !end {
        let mut bits = 0u64;
        let mut dlen = 8;
        let mut j = 0;
        while j < 8 {
            if pos == olen {
                return err(olen - j);
            }
            let c = src[pos];
            pos += 1;
            let remaining = olen - pos;
            if c == b'=' && j >= 2 && remaining < 8 {
                if remaining + j < 7 {
                    return err(olen);
                }
                for k in 0..(7 - j) {
                    if k < remaining && src[pos + k] != b'=' {
                        return err(pos + k - 1);
                    }
                }
                dlen = j;
                end = true;
                if matches!(dlen, 1 | 3 | 6) {
                    return err(pos - 1);
                }
                break;
            }
            let Some(v) = BASE32.iter().position(|&x| x == c) else {
                return err(pos - 1);
            };
            bits |= (v as u64) << (35 - 5 * j);
            j += 1;
        }
        for k in 0..dlen * 5 / 8 {
            out.push(((bits >> (32 - 8 * k)) & 0xFF) as u8);
        }
    }
    string(out)
}

fn hex(bytes: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0xF)]);
    }
    out
}

pub(super) fn sha256sum(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(hex(&sha2::Sha256::digest(s(a, 0)?)))
}

pub(super) fn sha1sum(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(hex(&sha1::Sha1::digest(s(a, 0)?)))
}

pub(super) fn adler32sum(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    const MOD: u32 = 65521;
    let (mut x, mut y) = (1u32, 0u32);
    for &b in s(a, 0)? {
        x = (x + u32::from(b)) % MOD;
        y = (y + x) % MOD;
    }
    string(((y << 16) | x).to_string().into_bytes())
}
