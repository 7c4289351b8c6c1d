//! Sealing scopes and the OAEP labels they produce.

use std::fmt;
use std::str::FromStr;

/// Where a sealed value may be unsealed, as in Bitnami Sealed Secrets.
///
/// The scope is bound into the ciphertext through the RSA-OAEP label, so a value sealed for
/// one name or namespace does not open anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// Only under the exact namespace and name (label `"<namespace>/<name>"`). The default.
    #[default]
    Strict,
    /// Under any name in the same namespace (label `"<namespace>"`).
    Namespace,
    /// Anywhere in the cluster (empty label).
    Cluster,
}

impl Scope {
    /// All scopes, strictest first.
    pub const ALL: [Scope; 3] = [Scope::Strict, Scope::Namespace, Scope::Cluster];

    /// The OAEP label for an object with this scope, namespace and name.
    ///
    /// Strict puts a `/` between namespace and name, as Bitnami's code does (its docs say
    /// "concatenation", the code and every existing SealedSecret use the slash).
    pub fn label(self, namespace: &str, name: &str) -> Label {
        match self {
            Scope::Strict => {
                let mut bytes = Vec::with_capacity(namespace.len() + 1 + name.len());
                bytes.extend_from_slice(namespace.as_bytes());
                bytes.push(b'/');
                bytes.extend_from_slice(name.as_bytes());
                Label(bytes)
            }
            Scope::Namespace => Label(namespace.as_bytes().to_vec()),
            Scope::Cluster => Label(Vec::new()),
        }
    }

    /// The name used on the command line and in Bitnami's `--scope` flag.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Strict => "strict",
            Scope::Namespace => "namespace-wide",
            Scope::Cluster => "cluster-wide",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for a scope name that is not one of `strict`, `namespace-wide`, `cluster-wide`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope `{0}`: expected strict, namespace-wide or cluster-wide")]
pub struct ParseScopeError(String);

impl FromStr for Scope {
    type Err = ParseScopeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Scope::Strict),
            "namespace-wide" => Ok(Scope::Namespace),
            "cluster-wide" => Ok(Scope::Cluster),
            other => Err(ParseScopeError(other.to_owned())),
        }
    }
}

/// An RSA-OAEP label: public bytes that bind a sealed value to its scope.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Label(Vec<u8>);

impl Label {
    /// A label from raw bytes (for interop with labels computed elsewhere).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// The label bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Label({:?})", String::from_utf8_lossy(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_bitnami_code() {
        assert_eq!(Scope::Strict.label("ns", "name").as_bytes(), b"ns/name");
        assert_eq!(Scope::Namespace.label("ns", "name").as_bytes(), b"ns");
        assert_eq!(Scope::Cluster.label("ns", "name").as_bytes(), b"");
    }

    #[test]
    fn scope_names_round_trip() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
        }
        let err = "wide".parse::<Scope>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown scope `wide`: expected strict, namespace-wide or cluster-wide"
        );
    }
}
