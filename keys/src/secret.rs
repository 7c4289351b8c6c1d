//! Secret-bearing byte buffers.

use std::fmt;

use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

/// Decrypted secret bytes.
///
/// The buffer is zeroized on drop, `Debug` prints only the length, and there is no `Display`,
/// so plaintext cannot slip into a log line by accident. Equality is constant-time.
#[derive(Clone, Default)]
pub struct Plaintext(Vec<u8>);

impl Plaintext {
    /// Wraps `bytes`; they are zeroized when the `Plaintext` is dropped.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The secret bytes. Keep the borrow short and do not copy them into unzeroized buffers.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Moves the bytes out into a buffer that still zeroizes on drop.
    pub fn into_zeroizing(mut self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(std::mem::take(&mut self.0))
    }
}

impl From<Vec<u8>> for Plaintext {
    fn from(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
}

impl From<&[u8]> for Plaintext {
    fn from(bytes: &[u8]) -> Self {
        Self(bytes.to_vec())
    }
}

impl From<&str> for Plaintext {
    fn from(text: &str) -> Self {
        Self(text.as_bytes().to_vec())
    }
}

impl PartialEq for Plaintext {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for Plaintext {}

impl fmt::Debug for Plaintext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Plaintext([REDACTED; {} bytes])", self.0.len())
    }
}

impl Drop for Plaintext {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_bytes() {
        let p = Plaintext::from("hunter2");
        let shown = format!("{p:?}");
        assert_eq!(shown, "Plaintext([REDACTED; 7 bytes])");
        assert!(!shown.contains("hunter2"));
    }

    #[test]
    fn equality_compares_contents() {
        assert_eq!(Plaintext::from("a"), Plaintext::from("a"));
        assert_ne!(Plaintext::from("a"), Plaintext::from("b"));
        assert_ne!(Plaintext::from("a"), Plaintext::from("ab"));
    }

    #[test]
    fn into_zeroizing_keeps_the_bytes() {
        let z = Plaintext::from("xyz").into_zeroizing();
        assert_eq!(&z[..], b"xyz");
    }
}
