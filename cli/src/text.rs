//! Small helpers for user-facing messages.

/// `n` and `noun`, plural unless `n` is 1: "1 byte", "0 bytes", "3 SealedSecrets". Every noun
/// kseal counts takes a plain `s`.
pub(crate) fn count<N: std::fmt::Display + PartialEq + From<u8>>(n: N, noun: &str) -> String {
    if n == N::from(1) {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_everything_else_plural() {
        assert_eq!(count(0, "byte"), "0 bytes");
        assert_eq!(count(1, "byte"), "1 byte");
        assert_eq!(count(2_u64, "SealedSecret"), "2 SealedSecrets");
        assert_eq!(count(1_u32, "day"), "1 day");
    }
}
