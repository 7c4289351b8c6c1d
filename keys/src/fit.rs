//! Which keys' moduli fit tightly above a set of ciphertexts: a guess, from public data only,
//! at which key sealed values that name none.
//!
//! An RSA block sealed with a key is a number below that key's modulus, spread evenly over
//! `[0, n)` (RSA-OAEP's output is indistinguishable from random). So the largest block among
//! many values sealed with one key lies just below its modulus: with `m` such values it
//! falls within `n / (m + 1)` of `n` on average, and the key whose modulus is the smallest
//! one above that largest block is, with high odds, the key that sealed them. Kubeseal's
//! values name no key; after a migration a namespace's values were mostly sealed with one
//! legacy key, so this guess finds it with one or two RSA operations where a walk through the
//! ring newest first reaches a legacy key last (see `docs/benchmarks.md`, "A walk from the
//! ciphertexts' ceiling").
//!
//! Only the order of attempts depends on it: a value opens with the key that sealed it
//! whatever is tried first, and a wrong guess costs one RSA operation per key guessed.
//! Ciphertexts and moduli are public, so nothing here needs to be constant-time. Only the
//! leading 64 bits of each number are kept ([`BlockTop`]): moduli of equal length differ
//! there but with odds of about `2^-64`, and a tie only puts the guess in the wrong order.

use std::num::NonZeroU16;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::envelope::PREFIX_LEN;

/// The length and leading 64 bits of an RSA block or modulus (big-endian, without the
/// leading zeros a modulus never has), ordered by length, then by value.
///
/// An RSA block sealed with a key is a number spread evenly below that key's modulus, so
/// the largest block among many values sealed with one key lies just below its modulus, and
/// the key whose modulus is the smallest above that block most likely sealed them
/// ([`crate::KeyRing::tightest_above`]). Only the order of attempts may depend on it: a value
/// opens with the key that sealed it whatever is tried first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockTop {
    /// Never 0, so that `Option<BlockTop>` takes no more room than a `BlockTop`.
    len: NonZeroU16,
    top: u64,
}

/// Base64 characters that hold the envelope's length prefix and the RSA block's first 8
/// bytes: 10 bytes, rounded up to whole 3-byte groups (12 bytes, 16 characters).
const TOP_BASE64_CHARS: usize = 16;

impl BlockTop {
    /// The RSA block's top of a sealed value as `spec.encryptedData` holds it (standard
    /// base64); `None` when its first characters are not base64 or the block is shorter than
    /// 8 bytes. Decodes 16 characters only, whatever the value's length.
    pub fn of_base64_value(value: &str) -> Option<Self> {
        let head = value.as_bytes().get(..TOP_BASE64_CHARS)?;
        let mut bytes = [0u8; TOP_BASE64_CHARS / 4 * 3];
        let written = STANDARD.decode_slice(head, &mut bytes).ok()?;
        let (prefix, rest) = bytes.get(..written)?.split_first_chunk::<PREFIX_LEN>()?;
        let len = u16::from_be_bytes(*prefix);
        let top = u64::from_be_bytes(*rest.first_chunk::<8>()?);
        (len >= 8).then_some(Self {
            len: NonZeroU16::new(len)?,
            top,
        })
    }

    /// The top of a modulus (big-endian, without leading zeros); `None` below 8 bytes or
    /// above 65,535.
    pub fn of_modulus(modulus: &[u8]) -> Option<Self> {
        Some(Self {
            len: NonZeroU16::new(u16::try_from(modulus.len()).ok()?)?,
            top: u64::from_be_bytes(*modulus.first_chunk::<8>()?),
        })
    }

    /// The length in bytes of the block or modulus.
    pub fn byte_len(self) -> u16 {
        self.len.get()
    }

    /// Whether a key whose modulus has this top may sit above a block with the top `block`:
    /// same length, and not certainly below it.
    pub fn may_cover(self, block: Self) -> bool {
        self.len == block.len && self.top >= block.top
    }
}

#[cfg(feature = "aws-lc")]
impl crate::KeyRing {
    /// At most `count` keys among those `eligible` accepts whose modulus may lie above the
    /// block topped by `ceiling` (the largest RSA block seen among values that name no key),
    /// the smallest modulus first: the likeliest to have sealed those values (see
    /// [`BlockTop`]).
    pub fn tightest_above(
        &self,
        ceiling: BlockTop,
        count: usize,
        eligible: impl Fn(&crate::KeyId) -> bool,
    ) -> Vec<crate::KeyId> {
        let mut fits: Vec<(BlockTop, &crate::KeyId)> = self
            .keys()
            .filter_map(|pair| {
                let top = BlockTop::of_modulus(pair.public_key().modulus())?;
                (top.may_cover(ceiling) && eligible(pair.id())).then_some((top, pair.id()))
            })
            .collect();
        fits.sort_unstable_by_key(|(top, _)| *top);
        fits.into_iter()
            .take(count)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(len: u16, block: &[u8]) -> String {
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(block);
        STANDARD.encode(bytes)
    }

    #[test]
    fn the_top_is_read_from_the_first_characters_only() {
        let mut block = vec![0xab; 8];
        block.extend_from_slice(&[1; 600]);
        let full = value(512, &block);
        let top = BlockTop::of_base64_value(&full).unwrap();
        assert_eq!(top, BlockTop::of_base64_value(&full[..16]).unwrap());
        assert_eq!(
            top,
            BlockTop {
                len: NonZeroU16::new(512).unwrap(),
                top: 0xabab_abab_abab_abab
            }
        );
        // The rest need not even be base64.
        assert_eq!(
            BlockTop::of_base64_value(&format!("{}!!!!", &full[..16])),
            Some(top)
        );
    }

    #[test]
    fn malformed_values_have_no_top() {
        assert_eq!(BlockTop::of_base64_value(""), None);
        assert_eq!(BlockTop::of_base64_value("short"), None);
        assert_eq!(BlockTop::of_base64_value("****************"), None);
        // A block announced shorter than the 8 bytes kept.
        assert_eq!(BlockTop::of_base64_value(&value(4, &[9; 20])), None);
        assert_eq!(BlockTop::of_modulus(&[1; 7]), None);
    }

    #[test]
    fn an_absent_top_takes_no_room() {
        assert_eq!(
            std::mem::size_of::<Option<BlockTop>>(),
            std::mem::size_of::<BlockTop>()
        );
    }

    #[test]
    fn a_modulus_covers_smaller_blocks_of_its_length_only() {
        let modulus = BlockTop::of_modulus(&[0x80; 512]).unwrap();
        let below = BlockTop::of_base64_value(&value(512, &[0x7f; 8])).unwrap();
        let above = BlockTop::of_base64_value(&value(512, &[0x81; 8])).unwrap();
        let other_len = BlockTop::of_base64_value(&value(256, &[0x10; 8])).unwrap();
        assert!(modulus.may_cover(below));
        assert!(!modulus.may_cover(above));
        assert!(!modulus.may_cover(other_len));
    }
}
