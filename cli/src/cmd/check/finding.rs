//! What `kseal check` reports: a finding, the rule it is about (its SARIF rule id) and its
//! level. A leaf: the scanner, the rules and the reports all use it.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Level {
    Error,
    Warning,
}

impl Level {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
        }
    }
}

/// What a finding is about; its id is the SARIF rule id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Rule {
    Parse,
    Scope,
    Malformed,
    RsaLength,
    UnknownKey,
    Template,
    DoesNotOpen,
    Stale,
    ClusterWide,
    HelmTemplate,
    WrongRing,
    RulesRefused,
    NotRead,
}

pub(super) const RULES: [Rule; 13] = [
    Rule::Parse,
    Rule::Scope,
    Rule::Malformed,
    Rule::RsaLength,
    Rule::UnknownKey,
    Rule::Template,
    Rule::DoesNotOpen,
    Rule::Stale,
    Rule::ClusterWide,
    Rule::HelmTemplate,
    Rule::WrongRing,
    Rule::RulesRefused,
    Rule::NotRead,
];

impl Rule {
    pub(super) fn id(self) -> &'static str {
        match self {
            Rule::Parse => "does-not-parse",
            Rule::Scope => "scope-inconsistent",
            Rule::Malformed => "malformed-item",
            Rule::RsaLength => "rsa-length-mismatch",
            Rule::UnknownKey => "unknown-sealing-key",
            Rule::Template => "template-does-not-render",
            Rule::DoesNotOpen => "item-does-not-open",
            Rule::Stale => "stale-sealing-key",
            Rule::ClusterWide => "cluster-wide-forbidden",
            Rule::HelmTemplate => "helm-template-not-checked",
            Rule::WrongRing => "wrong-ring-for-path",
            Rule::RulesRefused => "creation-rule-refused",
            Rule::NotRead => "file-not-read",
        }
    }

    pub(super) fn level(self) -> Level {
        match self {
            Rule::Stale | Rule::ClusterWide | Rule::HelmTemplate => Level::Warning,
            _ => Level::Error,
        }
    }

    pub(super) fn description(self) -> &'static str {
        match self {
            Rule::Parse => "The document is not a valid SealedSecret",
            Rule::Scope => "The scope annotations contradict the object's metadata",
            Rule::Malformed => "An encryptedData item is not a sealed value",
            Rule::RsaLength => "An item's RSA block fits no key of the ring",
            Rule::UnknownKey => {
                "The kseal.dev/sealing-key hint names a key the ring does not hold (or retired)"
            }
            Rule::Template => "spec.template.data does not render",
            Rule::DoesNotOpen => "An item does not open with the ring's private keys",
            Rule::Stale => "Sealed with a key that is not the ring's active key",
            Rule::ClusterWide => "Cluster-wide scope where the repository's rules forbid it",
            Rule::HelmTemplate => {
                "A Helm template holds a SealedSecret: it is not checked until rendered (exclude \
                 it with --exclude or `excludes:` in .kseal.yaml)"
            }
            Rule::WrongRing => {
                "Sealed to another group's ring than the one the path's creation rule in \
                 .kseal.yaml names"
            }
            Rule::RulesRefused => {
                "The path's .kseal.yaml creation rule cannot be used (a link that leads it under \
                 another rule, a nested or linked-out .kseal.yaml, an unpinned ring)"
            }
            Rule::NotRead => {
                "A file kseal check does not read: a link out of the repository, not a regular \
                 file, or larger than the size cap"
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Finding {
    pub(super) rule: Rule,
    pub(super) line: usize,
    pub(super) item: Option<String>,
    pub(super) message: String,
}
