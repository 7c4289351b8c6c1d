//! OpenSSH encoding: a new Ed25519 key as an OpenSSH private key file and its public line,
//! and reading the public key of an OpenSSH private key.

use anyhow::Result;
use base64::Engine as _;
use kseal_keys::Plaintext;

use super::pem::pem_block;

/// Appends an SSH wire-format string (u32 length, bytes).
pub(super) fn ssh_string(out: &mut Vec<u8>, data: &[u8]) {
    // Lengths here are at most a few hundred bytes: the cast cannot truncate.
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// A new ed25519 key: (OpenSSH private key file, `ssh-ed25519 AAAA… comment` line).
pub(super) fn generate_ed25519(comment: &str) -> Result<(Plaintext, String)> {
    use aws_lc_rs::encoding::AsBigEndian as _;
    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
    let pair = Ed25519KeyPair::generate()
        .map_err(|_| anyhow::anyhow!("failed to generate an ed25519 key"))?;
    let public = pair.public_key().as_ref().to_vec();
    let seed = pair
        .seed()
        .and_then(|s| s.as_be_bytes())
        .map_err(|_| anyhow::anyhow!("failed to export the ed25519 key"))?;
    let seed: &[u8] = AsRef::<[u8]>::as_ref(&*seed);
    let mut public_blob = Vec::new();
    ssh_string(&mut public_blob, b"ssh-ed25519");
    ssh_string(&mut public_blob, &public);

    let mut check = [0u8; 4];
    aws_lc_rs::rand::fill(&mut check).map_err(|_| anyhow::anyhow!("no randomness"))?;
    let mut private = Plaintext::new(Vec::new()).into_zeroizing();
    private.extend_from_slice(&check);
    private.extend_from_slice(&check);
    ssh_string(&mut private, b"ssh-ed25519");
    ssh_string(&mut private, &public);
    let mut secret = Plaintext::new([seed, public.as_slice()].concat()).into_zeroizing();
    ssh_string(&mut private, &secret);
    secret.iter_mut().for_each(|b| *b = 0);
    ssh_string(&mut private, comment.as_bytes());
    let mut pad = 1u8;
    while !private.len().is_multiple_of(8) {
        private.push(pad);
        pad += 1;
    }
    let mut file = Plaintext::new(Vec::new()).into_zeroizing();
    file.extend_from_slice(b"openssh-key-v1\0");
    ssh_string(&mut file, b"none");
    ssh_string(&mut file, b"none");
    ssh_string(&mut file, b"");
    file.extend_from_slice(&1u32.to_be_bytes());
    ssh_string(&mut file, &public_blob);
    ssh_string(&mut file, &private);
    let b64 = Plaintext::new(
        base64::engine::general_purpose::STANDARD
            .encode(&*file)
            .into_bytes(),
    );
    let mut pem = Vec::with_capacity(b64.len() + 80);
    pem.extend_from_slice(b"-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for line in b64.expose().chunks(70) {
        pem.extend_from_slice(line);
        pem.push(b'\n');
    }
    pem.extend_from_slice(b"-----END OPENSSH PRIVATE KEY-----\n");
    let public_line = format!(
        "ssh-ed25519 {} {comment}",
        base64::engine::general_purpose::STANDARD.encode(&public_blob)
    );
    Ok((Plaintext::new(pem), public_line))
}

/// Reads a u32-length-prefixed SSH string at `*pos`.
pub(super) fn read_ssh_string<'a>(data: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let len_bytes: [u8; 4] = data.get(*pos..*pos + 4)?.try_into().ok()?;
    let len = u32::from_be_bytes(len_bytes) as usize;
    let start = *pos + 4;
    let out = data.get(start..start.checked_add(len)?)?;
    *pos = start + len;
    Some(out)
}

/// For an OpenSSH private key file: whether it is encrypted, and its public key line
/// (the public half is stored unencrypted in the header).
pub(super) fn openssh_public(text: &str) -> Option<(bool, String)> {
    let (_, der) = pem_block(text, &["OPENSSH PRIVATE KEY"])?;
    let rest = der.expose().strip_prefix(b"openssh-key-v1\0")?;
    let mut pos = 0;
    let cipher = read_ssh_string(rest, &mut pos)?;
    let kdf = read_ssh_string(rest, &mut pos)?;
    read_ssh_string(rest, &mut pos)?; // kdf options
    pos += 4; // number of keys
    let blob = read_ssh_string(rest, &mut pos)?;
    let mut p = 0;
    let kind = std::str::from_utf8(read_ssh_string(blob, &mut p)?).ok()?;
    Some((
        cipher != b"none" || kdf != b"none",
        format!(
            "{kind} {}",
            base64::engine::general_purpose::STANDARD.encode(blob)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_openssh_files_with_a_matching_public_line() {
        let (private, public) = generate_ed25519("test").unwrap();
        let text = std::str::from_utf8(private.expose()).unwrap();
        assert!(text.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert!(text.ends_with("-----END OPENSSH PRIVATE KEY-----\n"));
        let (encrypted, line) = openssh_public(text).unwrap();
        assert!(!encrypted);
        assert!(public.starts_with(&line));
        assert!(public.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"));
        assert!(public.ends_with(" test"));
    }
}
