//! The fleet key rings: `--key-source` (one or more rings, each checked and named), each
//! ring's `--ring-anchor` pin, and the `--ring-namespaces` / `--ring-namespace-selector`
//! bindings by ring name, validated into [`KeySourceConfig`]s and
//! [`RingBinding`]s with errors that name the flag and the ring.

use std::collections::BTreeMap;
use std::time::Duration;

use kseal_api::validation;

use super::{Args, ConfigError, KeySourceConfig};
use crate::keys::binding::{MAX_RINGS, NamespaceSelector, RingBinding};

/// The `--key-source` rings (the first, then the others) with their interval, grace, AWS
/// options and `--ring-anchor`, and the bindings by ring name.
#[allow(clippy::type_complexity)]
pub(super) fn key_sources(
    args: &Args,
) -> Result<
    (
        Option<KeySourceConfig>,
        Vec<KeySourceConfig>,
        BTreeMap<String, RingBinding>,
    ),
    ConfigError,
> {
    let urls: Vec<&str> = args
        .key_source
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .collect();
    let given_bindings =
        !args.ring_namespaces.is_empty() || !args.ring_namespace_selector.is_empty();
    if urls.is_empty() {
        if given_bindings {
            return Err(ConfigError::KeySource(
                "--ring-namespaces and --ring-namespace-selector bind --key-source rings, and none is given".into(),
            ));
        }
        return Ok((None, Vec::new(), BTreeMap::new()));
    }
    if args.generate_key_if_missing {
        return Err(ConfigError::KeySourceWithGeneration);
    }
    if args.key_source_interval < Duration::from_secs(1) {
        return Err(ConfigError::KeySourceInterval);
    }
    if urls.len() > MAX_RINGS {
        return Err(ConfigError::KeySource(format!(
            "{} rings given; one controller mirrors at most {MAX_RINGS}",
            urls.len()
        )));
    }
    let (mut sources, names) = ring_sources(args, urls)?;
    ring_anchors(args, &mut sources, &names)?;
    let bindings = ring_bindings(args, &names)?;
    let mut sources = sources.into_iter();
    let first = sources.next();
    Ok((first, sources.collect(), bindings))
}

/// One [`KeySourceConfig`] per `--key-source` URL (no anchor yet), and the rings' names in
/// the same order; two rings of one name are refused.
fn ring_sources(
    args: &Args,
    urls: Vec<&str>,
) -> Result<(Vec<KeySourceConfig>, Vec<String>), ConfigError> {
    let mut sources = Vec::with_capacity(urls.len());
    let mut names: Vec<String> = Vec::with_capacity(urls.len());
    for url in urls {
        let location = kseal_keystore::Location::parse(url)
            .map_err(|e| ConfigError::KeySource(e.to_string()))?;
        let name = location.ring_name().to_owned();
        if names.contains(&name) {
            return Err(ConfigError::KeySource(format!(
                "two --key-source rings are named {name:?} (a ring's name is its Secrets Manager prefix; every directory ring is named {:?}, so at most one directory ring per controller)",
                kseal_keystore::DEFAULT_RING
            )));
        }
        names.push(name);
        sources.push(KeySourceConfig {
            location,
            interval: args.key_source_interval,
            retire_grace: args.key_source_retire_grace,
            refresh_spacing: args.key_source_refresh_spacing,
            aws: kseal_keystore::AwsOptions {
                region: args.aws_region.clone().filter(|r| !r.is_empty()),
                endpoint_url: args.aws_endpoint_url.clone().filter(|u| !u.is_empty()),
                assume_role: args.aws_assume_role.clone().filter(|r| !r.is_empty()),
                ..kseal_keystore::AwsOptions::default()
            },
            anchor: None,
        });
    }
    Ok((sources, names))
}

/// `RING=VALUE` for a configured ring (one of `names`): the ring's index and the value; the
/// ring's name may itself hold `=`, the value of an anchor never does.
fn ring_of(
    names: &[String],
    flag: &str,
    item: &str,
    split_last: bool,
) -> Result<(usize, String), ConfigError> {
    let split = if split_last {
        item.rsplit_once('=')
    } else {
        // The configured ring names the item starts with (`NAME=`): a ring name may
        // itself hold `=`, so two may match (`kseal/a` and `kseal/a=b` for
        // `kseal/a=b=env`); which one is meant cannot be told, so that is refused.
        let matching: Vec<&String> = names
            .iter()
            .filter(|n| {
                item.strip_prefix(n.as_str())
                    .is_some_and(|r| r.starts_with('='))
            })
            .collect();
        if let [first, second, ..] = matching.as_slice() {
            return Err(ConfigError::KeySource(format!(
                "{flag} {item:?} may bind ring {first} or ring {second}: ring names that hold `=` cannot be told apart here; bind by another ring name or drop the `=` from the prefix"
            )));
        }
        matching.first().map(|n| (n.as_str(), &item[n.len() + 1..]))
    };
    let Some((ring, value)) = split else {
        return Err(ConfigError::KeySource(format!(
            "{flag} {item:?}: use RING=VALUE, RING being one of the --key-source rings ({})",
            names.join(", ")
        )));
    };
    let ring = ring.trim();
    let at = names
        .iter()
        .position(|n| n == ring || (names.len() == 1 && ring.is_empty()))
        .ok_or_else(|| {
            ConfigError::KeySource(format!(
                "{flag} names ring {ring:?}, which no --key-source gives (the rings: {})",
                names.join(", ")
            ))
        })?;
    Ok((at, value.trim().to_owned()))
}

/// Sets each ring's `--ring-anchor` (`RING=KID`, or a bare KID for the first ring); a ring
/// pinned twice is refused.
fn ring_anchors(
    args: &Args,
    sources: &mut [KeySourceConfig],
    names: &[String],
) -> Result<(), ConfigError> {
    for item in args
        .ring_anchor
        .iter()
        .map(|a| a.trim())
        .filter(|a| !a.is_empty())
    {
        let (at, text) = if item.contains('=') {
            ring_of(names, "--ring-anchor", item, true)?
        } else {
            (0, item.to_owned())
        };
        let kid = kseal_keystore::Kid::parse(&text).map_err(|_| {
            ConfigError::KeySource(format!(
                "--ring-anchor {text:?} is not a kid: 64 lowercase hex characters, as `kseal keys trust` prints it"
            ))
        })?;
        if sources[at].anchor.replace(kid).is_some() {
            return Err(ConfigError::KeySource(format!(
                "--ring-anchor is given twice for ring {}",
                names[at]
            )));
        }
    }
    Ok(())
}

/// The `--ring-namespaces` and `--ring-namespace-selector` bindings by ring name, each
/// namespace name and selector checked.
fn ring_bindings(
    args: &Args,
    names: &[String],
) -> Result<BTreeMap<String, RingBinding>, ConfigError> {
    let mut bindings: BTreeMap<String, RingBinding> = BTreeMap::new();
    for item in &args.ring_namespaces {
        let (at, list) = ring_of(names, "--ring-namespaces", item.trim(), false)?;
        let binding = bindings.entry(names[at].clone()).or_default();
        for namespace in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            validation::validate_namespace_name(namespace).map_err(|e| {
                ConfigError::KeySource(format!(
                    "--ring-namespaces for ring {}: {namespace:?} is not a namespace name: {e}",
                    names[at]
                ))
            })?;
            binding.namespaces.insert(namespace.to_owned());
        }
        if binding.namespaces.is_empty() && binding.selector.is_none() {
            return Err(ConfigError::KeySource(format!(
                "--ring-namespaces for ring {} names no namespace",
                names[at]
            )));
        }
    }
    for item in &args.ring_namespace_selector {
        let (at, text) = ring_of(names, "--ring-namespace-selector", item.trim(), false)?;
        let selector = NamespaceSelector::parse(&text).map_err(|e| {
            ConfigError::KeySource(format!(
                "--ring-namespace-selector for ring {}: {e}",
                names[at]
            ))
        })?;
        let binding = bindings.entry(names[at].clone()).or_default();
        if binding.selector.replace(selector).is_some() {
            return Err(ConfigError::KeySource(format!(
                "--ring-namespace-selector is given twice for ring {}",
                names[at]
            )));
        }
    }
    Ok(bindings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::tests::args;

    #[test]
    fn key_source_excludes_generation_and_must_parse() {
        let err = Config::from_args(
            args(&[
                "--key-source",
                "secretsmanager://kseal/fleet",
                "--generate-key-if-missing",
                "true",
            ]),
            None,
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::KeySourceWithGeneration);
        let err = Config::from_args(args(&["--key-source", "s3://bucket"]), None).unwrap_err();
        assert!(err.to_string().contains("unknown scheme"), "{err}");
        let err = Config::from_args(
            args(&["--key-source", "kseal/fleet", "--key-source-interval", "0"]),
            None,
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::KeySourceInterval);
        let c = Config::from_args(
            args(&[
                "--key-source",
                "secretsmanager://kseal/fleet?region=eu-west-1",
                "--key-source-interval",
                "30m",
                "--aws-assume-role",
                "arn:aws:iam::111122223333:role/kseal",
            ]),
            None,
        )
        .unwrap();
        let source = c.key_source.unwrap();
        assert_eq!(source.interval, Duration::from_secs(1800));
        assert_eq!(source.retire_grace, Duration::from_secs(168 * 3600));
        assert_eq!(
            source.location.to_string(),
            "secretsmanager://kseal/fleet?region=eu-west-1"
        );
        assert_eq!(
            source.aws.assume_role.as_deref(),
            Some("arn:aws:iam::111122223333:role/kseal")
        );
        let none = Config::from_args(args(&["--key-source", ""]), None).unwrap();
        assert!(none.key_source.is_none());
    }

    #[test]
    fn several_rings_each_with_its_pin_and_binding() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let c = Config::from_args(
            args(&[
                "--key-source",
                "secretsmanager://kseal/shared",
                "--key-source",
                "kseal/team-a",
                "--ring-anchor",
                &a,
                "--ring-anchor",
                &format!("kseal/team-a={b}"),
                "--ring-namespaces",
                "kseal/team-a=team-a, team-a-jobs",
                "--ring-namespace-selector",
                "kseal/team-a=kseal.dev/tenant=team-a",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.ring_names(), ["kseal/shared", "kseal/team-a"]);
        assert_eq!(
            c.key_source
                .as_ref()
                .unwrap()
                .anchor
                .as_ref()
                .unwrap()
                .to_string(),
            a
        );
        assert_eq!(
            c.more_key_sources[0].anchor.as_ref().unwrap().to_string(),
            b
        );
        let binding = &c.ring_bindings["kseal/team-a"];
        assert_eq!(
            binding.describe(),
            "namespaces team-a, team-a-jobs and namespaces labelled kseal.dev/tenant=team-a"
        );
        assert!(!c.ring_bindings.contains_key("kseal/shared"));
        let per_ring = std::sync::Arc::new(c).for_each_ring();
        assert_eq!(per_ring.len(), 2);
        assert_eq!(
            per_ring[1]
                .key_source
                .as_ref()
                .unwrap()
                .location
                .to_string(),
            "secretsmanager://kseal/team-a"
        );

        let refused = |flags: &[&str], needle: &str| {
            let err = Config::from_args(args(flags), None)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{flags:?}: {err}");
        };
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--key-source",
                "secretsmanager://kseal/a?region=eu-west-1",
            ],
            "two --key-source rings are named \"kseal/a\"",
        );
        refused(
            &["--key-source", "dir:///x", "--key-source", "dir:///y"],
            "at most one directory ring",
        );
        refused(
            &["--key-source", "kseal/a", "--ring-namespaces", "kseal/b=x"],
            "RING being one of the --key-source rings (kseal/a)",
        );
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--ring-namespaces",
                "kseal/a=Not_A_Namespace",
            ],
            "is not a namespace name",
        );
        refused(
            &["--key-source", "kseal/a", "--ring-namespaces", "kseal/a= ,"],
            "names no namespace",
        );
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--ring-namespace-selector",
                "kseal/a=tier in prod",
            ],
            "go in parentheses",
        );
        refused(&["--ring-namespaces", "kseal/a=x"], "none is given");
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--ring-anchor",
                &a,
                "--ring-anchor",
                &format!("kseal/a={b}"),
            ],
            "given twice for ring kseal/a",
        );
        refused(
            &["--key-source", "kseal/a", "--ring-anchor", "kseal/b=abc"],
            "names ring \"kseal/b\"",
        );
        // Ring names holding `=`: one binding text that could name either ring is refused,
        // whatever the order of the rings.
        for order in [["kseal/a", "kseal/a=b"], ["kseal/a=b", "kseal/a"]] {
            refused(
                &[
                    "--key-source",
                    order[0],
                    "--key-source",
                    order[1],
                    "--ring-namespace-selector",
                    "kseal/a=b=env",
                ],
                "cannot be told apart",
            );
        }
        let c = Config::from_args(
            args(&[
                "--key-source",
                "kseal/a=b",
                "--ring-namespaces",
                "kseal/a=b=team",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.ring_bindings["kseal/a=b"].describe(), "namespaces team");
    }
}
