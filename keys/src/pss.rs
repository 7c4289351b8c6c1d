//! RSASSA-PSS verification (SHA-256, MGF1-SHA-256) that accepts any salt length, as RFC 8017
//! §9.1.2 allows a verifier to: the salt length is recovered from the encoded message.
//!
//! kseal's own signatures use a 32-byte salt (AWS-LC); AWS KMS signs `RSASSA_PSS_SHA_256` with
//! a 32-byte salt too, but emulators (moto, on Python's `cryptography`) use the longest salt
//! the key allows, and AWS-LC's verifier only accepts a salt as long as the hash. This is a
//! public-key operation on public data (the signature, the message and the key are all public),
//! so it needs no constant-time arithmetic; RUSTSEC-2023-0071 concerns private-key operations.

use num_bigint::BigUint;
use sha2::{Digest as _, Sha256};

use crate::{Error, Result};

const H_LEN: usize = 32;

/// MGF1 with SHA-256: `len` bytes from `seed`.
fn mgf1(seed: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + H_LEN);
    let mut counter: u32 = 0;
    while out.len() < len {
        let mut h = Sha256::new();
        h.update(seed);
        h.update(counter.to_be_bytes());
        out.extend_from_slice(&h.finalize());
        counter += 1;
    }
    out.truncate(len);
    out
}

/// Verifies `signature` over `message` with the RSA key (`modulus`, `exponent`, big-endian,
/// `modulus` without leading zeros).
pub(crate) fn verify(
    modulus: &[u8],
    exponent: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<()> {
    let bad = || Error::BadSignature;
    let k = modulus.len();
    if k == 0 || signature.len() != k {
        return Err(bad());
    }
    let n = BigUint::from_bytes_be(modulus);
    let e = BigUint::from_bytes_be(exponent);
    let s = BigUint::from_bytes_be(signature);
    // The exponents RSA keys use: odd, 3 to 2^32 + 1 (as AWS-LC accepts). Any other (1 above
    // all) would let a key be made to fit a signature or a kid prefix.
    let e_ok = e.bit(0) && e >= BigUint::from(3u8) && e.bits() <= 33;
    if s >= n || !e_ok {
        return Err(bad());
    }
    let m = s.modpow(&e, &n);
    let mod_bits = usize::try_from(n.bits()).map_err(|_| bad())?;
    let em_bits = mod_bits - 1;
    let em_len = em_bits.div_ceil(8);
    let m_bytes = m.to_bytes_be();
    if m_bytes.len() > em_len {
        return Err(bad());
    }
    // I2OSP(m, emLen)
    let mut em = vec![0u8; em_len - m_bytes.len()];
    em.extend_from_slice(&m_bytes);
    if em_len < H_LEN + 2 || em[em_len - 1] != 0xbc {
        return Err(bad());
    }
    let db_len = em_len - H_LEN - 1;
    let (masked_db, rest) = em.split_at(db_len);
    let h = &rest[..H_LEN];
    let top_bits = 8 * em_len - em_bits;
    let top_mask: u8 = 0xff >> top_bits;
    if masked_db[0] & !top_mask != 0 {
        return Err(bad());
    }
    let mut db: Vec<u8> = masked_db
        .iter()
        .zip(mgf1(h, db_len))
        .map(|(a, b)| a ^ b)
        .collect();
    db[0] &= top_mask;
    // DB = PS (zeros) || 0x01 || salt
    let one = db.iter().position(|&b| b != 0).ok_or_else(bad)?;
    if db[one] != 0x01 {
        return Err(bad());
    }
    let salt = &db[one + 1..];
    let mut hash = Sha256::new();
    hash.update([0u8; 8]);
    hash.update(Sha256::digest(message));
    hash.update(salt);
    if hash.finalize().as_slice() != h {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use base64::Engine as _;

    use crate::PublicKey;

    /// A 2048-bit key and three signatures over [`MESSAGE`] made with Python's `cryptography`
    /// (as moto, the AWS emulator, signs): the longest salt the key allows, no salt, and a
    /// 32-byte salt.
    const SPKI: &str = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEApCymJWHWNxzGkDwYqvrRwmIRDTRxP5XfKXSPweAZj8DbrpV6eecv4X5cLyinSzM6w5DKDkaomsbfRzNixxTRYA/Ydtz1ldTUi55v4M55Bwy73MD2l4vkPQkssj/BbjKHYvV0lWQCKB85xGy1sDhtAZSAXL18GQDiyj1FsXbXXIu3cK/PS5y8IF/TXtmU/UjyT9SxHTHiBkj5h2ZTVxmBFb50VLdzNXAnu6OodiwEvBfXHeBBHizT8jkEV6HDFzsC0Fs0SKrzVEqdW65FzMZ0eUr7N0c7q6leIt8DJ4pilJGkFlwWIaALSXImNQ3kbbZZCGJm8iPQPfvtaxkjYQUeqwIDAQAB";
    const MAX_SALT: &str = "AuK/Pv+9afZrUmsbfMpn8Aq7ZkZ0QOBtiYqi5UmI7yvmtHLKTI9xA+RYlOQKb1WKT10W5nNFTrNVF9SITjQrBRhDz3SwTy/ZAuB383ZHs19xbF1jfmHB9GOBSh7+Gp/9KPhFdFd2A227zWzOwRfQKGbSxWNBxLr1qMWY8ZJ7bo0n5xykc6+lpa6yJjfIS9myXMz0oNpp3fA4Rto74ujvpgVH+A2EOfaOJ3mrFeC9g13UtW6xZBNjub6tT4zDamEW6ctsI2qr+4C6piRTwQTji8eDYOVD31xDLhlzYiEV4J0zAytXXyXgbkp5Uf5kAXbj8ssjxbThh+RQHvy+DzeaMA==";
    const NO_SALT: &str = "VzhkGsdYKkg4NDxnmsD/ohnn78iP55FPM203u4148r7qJiXgRcI7wra0XVe+P59Mlqd7lrgR79u4M3riUcKyRCX9WWeXR29lQPIvaYi+OJZpAhFcBUJkP6KgS6/zMok850LHCi912/UCVpiAD5U7hIbcxI/NKbYZJlO7R3GRYpfB66Y+5R/GP6ytdc6cF7QqQkUetqiE4CnwQ0ihI6DKJyWzbceMEe8kKUA/m6R2t9D3NLH7eDNrIES1D+3FynipwMscIdwWRWkqv6Y+NZ42x1+OsYTodGGg82OBQvA6l9Mex6k0EO3UcoTyNEr+HjcxWMZELCJQsybG8XojBXvODA==";
    const DIGEST_SALT: &str = "nL9YGiGgo3S8hjiXb+t25fVQcv+FvbJUJMlC6xNsb7IoKjkbac0ZpkErc7NJDgsghl+UFo2cLJMjV0BsuZi9JijxOvGoGw2BHHVJkE/doGntUOr0AoDBWmztRQ13tWa14qMkjR3Fc6bIz0ZE0iKpRGs2IbGuK99lq8WCZaiuxoLrdtYhc1IO/r5NlkAz5tDomSud40/MTO8fKJIOsm8WiiZa/RZ5oMmeiB4V5Em5E25Fli6zK4AHy0+f2CVw8/5uQGs1bu1kZfwr3jBS3frGhuYKhS6D6PpZ/9xncYsEaW6pQQf52IeCpBB3eYFVrWHKx1pN4yZi/yMQUOh4lF78jA==";
    const MESSAGE: &[u8] = b"kseal ring index v2\nring test\n";

    fn b64(text: &str) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    }

    #[test]
    fn any_salt_length_verifies_and_any_change_does_not() {
        let key = PublicKey::from_spki_der(&b64(SPKI)).unwrap();
        for sig in [MAX_SALT, NO_SALT, DIGEST_SALT] {
            let sig = b64(sig);
            key.verify_pss_sha256(MESSAGE, &sig).unwrap();
            super::verify(key.modulus(), key.exponent(), MESSAGE, &sig).unwrap();
            assert!(
                key.verify_pss_sha256(b"kseal ring index v2\nring tesT\n", &sig)
                    .is_err()
            );
            for i in [0, sig.len() / 2, sig.len() - 1] {
                let mut bad = sig.clone();
                bad[i] ^= 1;
                assert!(
                    key.verify_pss_sha256(MESSAGE, &bad).is_err(),
                    "byte {i} flipped"
                );
            }
            assert!(key.verify_pss_sha256(MESSAGE, &sig[1..]).is_err(), "short");
            let mut long = sig.clone();
            long.push(0);
            assert!(key.verify_pss_sha256(MESSAGE, &long).is_err(), "long");
        }
        // Not a signature at all: zeros, all ones (over the modulus), the modulus itself.
        let len = b64(MAX_SALT).len();
        assert!(key.verify_pss_sha256(MESSAGE, &vec![0; len]).is_err());
        assert!(key.verify_pss_sha256(MESSAGE, &vec![0xff; len]).is_err());
        assert!(key.verify_pss_sha256(MESSAGE, key.modulus()).is_err());
    }

    #[cfg(feature = "aws-lc")]
    #[test]
    fn kseal_own_signatures_verify() {
        let pair = crate::KeyPair::generate(
            crate::KeySize::Rsa2048,
            &crate::CertificateOptions::default(),
        )
        .unwrap();
        let sig = pair.private_key().sign_pss_sha256(MESSAGE).unwrap();
        pair.public_key().verify_pss_sha256(MESSAGE, &sig).unwrap();
        // The salt-recovering verifier alone (the public method tries AWS-LC first).
        let key = pair.public_key();
        super::verify(key.modulus(), key.exponent(), MESSAGE, &sig).unwrap();
        assert!(super::verify(key.modulus(), key.exponent(), b"other", &sig).is_err());
        let other = PublicKey::from_spki_der(&b64(SPKI)).unwrap();
        assert!(
            other.verify_pss_sha256(MESSAGE, &sig).is_err(),
            "another key"
        );
    }
}
