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

/// `error` and its causes joined with `: `, as `{:#}` prints them, but each cause only once:
/// a cause whose text the message so far already holds is left out. Some libraries both
/// write their source into their own message and return it as the source, which `{:#}`
/// would print two or three times over.
pub(crate) fn chain(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that writes its source into its own message, and returns it too.
    #[derive(Debug)]
    struct Repeats(std::io::Error);

    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "failed to read kubeconfig: {}", self.0)
        }
    }

    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_chain_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(Repeats(io)).context("cannot reach the controller");
        assert_eq!(
            format!("{error:#}"),
            "cannot reach the controller: failed to read kubeconfig: no such file: no such file"
        );
        assert_eq!(
            chain(&error),
            "cannot reach the controller: failed to read kubeconfig: no such file"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(chain(&plain), "outer: inner");
    }

    #[test]
    fn one_is_singular_everything_else_plural() {
        assert_eq!(count(0, "byte"), "0 bytes");
        assert_eq!(count(1, "byte"), "1 byte");
        assert_eq!(count(2_u64, "SealedSecret"), "2 SealedSecrets");
        assert_eq!(count(1_u32, "day"), "1 day");
    }
}
