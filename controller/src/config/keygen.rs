//! Settings of in-cluster key generation: the labels and annotations of generated key
//! Secrets (`--privatekey-labels`, `--privatekey-annotations`) and the renewal policy
//! (`--key-renew-period`, `--key-cutoff-time` and Bitnami's cutoff variable), each checked
//! with an error that names the flag, plus the warnings for settings that will not apply.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_api::validation;

use super::{Args, ConfigError};
use crate::env;
use crate::keys::renewal::{self, Renewal};

/// Labels or annotations.
type Metadata = BTreeMap<String, String>;

/// The labels and annotations of generated key Secrets (`--privatekey-labels`,
/// `--privatekey-annotations`); the sealing-key label is reserved, with a warning.
pub(super) fn key_metadata(
    args: &Args,
    warnings: &mut Vec<String>,
) -> Result<(Metadata, Metadata), ConfigError> {
    let key_labels = parse_key_metadata("--privatekey-labels", &args.privatekey_labels, true)?
        .into_iter()
        .filter(|(k, _)| {
            let reserved = k == SEALING_KEY_LABEL;
            if reserved {
                warnings.push(format!(
                    "--privatekey-labels: {SEALING_KEY_LABEL} is ignored: generated keys are always labelled {SEALING_KEY_LABEL_ACTIVE}"
                ));
            }
            !reserved
        })
        .collect();
    let key_annotations = parse_key_metadata(
        "--privatekey-annotations",
        &args.privatekey_annotations,
        false,
    )?;
    Ok((key_labels, key_annotations))
}

/// Parses `k1=v1,k2=v2` (Bitnami's format; empty items are skipped) into a map, checking keys
/// as Kubernetes qualified names and, for labels, values as label values
/// (`kseal_api::validation`, apimachinery's rules and messages).
fn parse_key_metadata(
    flag: &'static str,
    text: &str,
    label: bool,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut map = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |problem: String| ConfigError::KeyMetadata {
            flag,
            item: item.to_owned(),
            problem,
        };
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| bad("expected key=value".to_owned()))?;
        let (key, value) = (key.trim(), value.trim());
        let key_check = if label {
            validation::is_qualified_name(key)
        } else {
            validation::validate_annotation_key(key)
        };
        key_check.map_err(|e| bad(format!("key {key:?}: {e}")))?;
        if label {
            validation::is_valid_label_value(value)
                .map_err(|e| bad(format!("value {value:?}: {e}")))?;
        }
        if map.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(bad(format!("{key} is given twice")));
        }
    }
    Ok(map)
}

/// The renewal policy from `--key-renew-period` (`None`: not given), `--key-cutoff-time`
/// and Bitnami's cutoff variable (read only when the flag is unset or empty), plus a warning
/// when renewal was asked for but generation is off, or the cutoff lies in the future.
pub(super) fn key_renewal(
    period: Option<Duration>,
    cutoff_flag: Option<String>,
    cutoff_bitnami: Option<String>,
    generate: bool,
    now: SystemTime,
) -> Result<(Renewal, Vec<String>), ConfigError> {
    let nonempty = |v: Option<String>| v.filter(|t| !t.trim().is_empty());
    let cutoff_text = match (nonempty(cutoff_flag), nonempty(cutoff_bitnami)) {
        (Some(text), _) => Some(("--key-cutoff-time", text)),
        (None, Some(text)) => Some((env::SEALED_SECRETS_KEY_CUTOFF_TIME, text)),
        (None, None) => None,
    };
    let cutoff = match cutoff_text {
        Some((origin, value)) => {
            Some(parse_cutoff_time(&value).ok_or(ConfigError::KeyCutoffTime { origin, value })?)
        }
        None => None,
    };
    let explicit_period = period.is_some_and(|p| !p.is_zero());
    let period = period.unwrap_or(renewal::DEFAULT_PERIOD);
    let renewal = Renewal {
        period: (!period.is_zero()).then_some(period),
        cutoff,
    };
    let mut warnings = Vec::new();
    if !generate {
        let ignored: Vec<&str> = [
            explicit_period.then_some("--key-renew-period"),
            cutoff.is_some().then_some("--key-cutoff-time"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !ignored.is_empty() {
            warnings.push(format!(
                "{} ignored: key renewal needs --generate-key-if-missing=true (in-cluster key generation is off, so the controller never creates a key)",
                ignored.join(" and ")
            ));
        }
    } else if cutoff.is_some_and(|c| c > now) {
        warnings.push(
            "--key-cutoff-time is in the future: every controller start generates one new key until then"
                .to_owned(),
        );
    }
    Ok((renewal, warnings))
}

/// Parses a `--key-cutoff-time`: RFC 1123 with a numeric zone (Go's `RFC1123Z`, the format
/// of `date -R`); RFC 2822's other forms are accepted too. As in Go, the weekday must be a
/// weekday name but need not match the date.
pub fn parse_cutoff_time(text: &str) -> Option<SystemTime> {
    static PARSER: jiff::fmt::rfc2822::DateTimeParser =
        jiff::fmt::rfc2822::DateTimeParser::new().relaxed_weekday(true);
    PARSER
        .parse_timestamp(text.trim())
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::tests::args;

    #[test]
    fn renewal_defaults_to_bitnamis_period_and_no_cutoff() {
        let c = Config::from_args(args(&[]), None).unwrap();
        assert_eq!(
            c.key_renewal,
            Renewal {
                period: Some(Duration::from_secs(720 * 3600)),
                cutoff: None,
            }
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = Config::from_args(args(&["--key-renew-period", "0"]), None).unwrap();
        assert_eq!(c.key_renewal.period, None);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn rotate_period_is_a_hidden_alias_of_key_renew_period() {
        let c = Config::from_args(
            args(&["--generate-key-if-missing=true", "--rotate-period", "1h"]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_renewal.period, Some(Duration::from_secs(3600)));
        let mut command = <Args as clap::CommandFactory>::command();
        let help = command.render_long_help().to_string();
        assert!(help.contains("--key-renew-period"));
        assert!(!help.contains("rotate-period"));
    }

    #[test]
    fn cutoff_time_reads_date_r_output() {
        let expected = SystemTime::UNIX_EPOCH + Duration::from_secs(1_728_935_130);
        assert_eq!(
            parse_cutoff_time("Mon, 14 Oct 2024 21:45:30 +0200"),
            Some(expected)
        );
        // Go does not check the weekday against the date.
        assert_eq!(
            parse_cutoff_time("Tue, 14 Oct 2024 21:45:30 +0200"),
            Some(expected)
        );
        assert_eq!(parse_cutoff_time("2024-10-14T19:45:30Z"), None);
        assert_eq!(parse_cutoff_time("yesterday"), None);
        let c = Config::from_args(
            args(&[
                "--generate-key-if-missing=true",
                "--key-cutoff-time",
                "Mon, 14 Oct 2024 21:45:30 +0200",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_renewal.cutoff, Some(expected));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn an_invalid_cutoff_time_names_the_flag_and_the_format() {
        let e = Config::from_args(args(&["--key-cutoff-time", "2024-10-14"]), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --key-cutoff-time \"2024-10-14\": use RFC 1123 with a numeric zone, as `date -R` prints it, e.g. \"Mon, 14 Oct 2024 21:45:30 +0200\""
        );
        let e = key_renewal(None, None, Some("soon".into()), true, SystemTime::now()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid SEALED_SECRETS_KEY_CUTOFF_TIME \"soon\""),
            "{e}"
        );
    }

    #[test]
    fn bitnamis_cutoff_variable_is_a_fallback() {
        let now = SystemTime::now();
        let bitnami = Some("Mon, 14 Oct 2024 21:45:30 +0200".to_owned());
        let (r, _) = key_renewal(None, None, bitnami.clone(), true, now).unwrap();
        assert_eq!(
            r.cutoff,
            parse_cutoff_time("Mon, 14 Oct 2024 21:45:30 +0200")
        );
        let ours = Some("Tue, 15 Oct 2024 00:00:00 +0000".to_owned());
        let (r, _) = key_renewal(None, ours, bitnami.clone(), true, now).unwrap();
        assert_eq!(
            r.cutoff,
            parse_cutoff_time("Tue, 15 Oct 2024 00:00:00 +0000")
        );
        let (r, _) = key_renewal(None, Some(String::new()), bitnami, true, now).unwrap();
        assert_eq!(
            r.cutoff,
            parse_cutoff_time("Mon, 14 Oct 2024 21:45:30 +0200")
        );
    }

    #[test]
    fn renewal_without_generation_warns_once_and_does_not_fail() {
        let c = Config::from_args(
            args(&[
                "--key-renew-period",
                "24h",
                "--key-cutoff-time",
                "Mon, 14 Oct 2024 21:45:30 +0200",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].starts_with(
                "--key-renew-period and --key-cutoff-time ignored: key renewal needs --generate-key-if-missing=true"
            ),
            "{:?}",
            c.warnings
        );
        let c = Config::from_args(args(&["--rotate-period", "24h"]), None).unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    }

    #[test]
    fn a_future_cutoff_warns() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let (_, warnings) = key_renewal(
            None,
            Some("Mon, 14 Oct 2024 21:45:30 +0200".into()),
            None,
            true,
            now,
        )
        .unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("in the future"));
    }

    #[test]
    fn private_key_labels_and_annotations_parse_bitnamis_format() {
        let c = Config::from_args(
            args(&[
                "--privatekey-labels",
                "team=platform, example.com/tier=keys,,",
                "--privatekey-annotations",
                "owner=Platform team <platform@example.com>,example.com/ticket=SEC-1",
            ]),
            None,
        )
        .unwrap();
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            c.key_labels,
            map(&[("team", "platform"), ("example.com/tier", "keys")])
        );
        assert_eq!(
            c.key_annotations,
            map(&[
                ("owner", "Platform team <platform@example.com>"),
                ("example.com/ticket", "SEC-1")
            ])
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = Config::from_args(args(&[]), None).unwrap();
        assert!(c.key_labels.is_empty() && c.key_annotations.is_empty());
    }

    #[test]
    fn the_key_label_cannot_be_overridden() {
        let c = Config::from_args(
            args(&[
                "--privatekey-labels",
                "sealedsecrets.bitnami.com/sealed-secrets-key=compromised,a=b",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_labels.len(), 1);
        assert_eq!(c.key_labels["a"], "b");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("is ignored"), "{:?}", c.warnings);
    }

    #[test]
    fn private_key_metadata_keys_follow_apimachinery_not_a_stricter_rule() {
        // apimachinery limits a key's prefix to 253 characters in all, not each of its
        // dot-separated parts to 63: the apiserver takes this key, so the flag must too.
        let key = format!("{}.example.com/tier", "p".repeat(70));
        for flag in ["--privatekey-labels", "--privatekey-annotations"] {
            let c = Config::from_args(args(&[flag, &format!("{key}=keys")]), None).unwrap();
            let map = if flag == "--privatekey-labels" {
                &c.key_labels
            } else {
                &c.key_annotations
            };
            assert_eq!(map[&key], "keys", "{flag}");
        }
        // Annotation keys are checked lower-cased, label keys as they are.
        let c = Config::from_args(
            args(&["--privatekey-annotations", "Example.com/Ticket=SEC-1"]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_annotations["Example.com/Ticket"], "SEC-1");
        assert!(
            Config::from_args(args(&["--privatekey-labels", "Example.com/team=a"]), None).is_err()
        );
        // ... and a prefix over 253 characters is refused with apimachinery's words.
        let key = format!("{}/tier", "p".repeat(254));
        let e = Config::from_args(args(&["--privatekey-labels", &format!("{key}=a")]), None)
            .unwrap_err();
        assert!(
            e.to_string()
                .ends_with(": prefix part must be no more than 253 characters"),
            "{e}"
        );
    }

    #[test]
    fn bad_private_key_metadata_is_named_not_a_crash() {
        // Bitnami's controller crashes on an item without '=' (its issue #1386).
        let cases = [
            (
                "--privatekey-labels",
                "team",
                "invalid --privatekey-labels item \"team\": expected key=value",
            ),
            (
                "--privatekey-labels",
                "team=a b",
                "invalid --privatekey-labels item \"team=a b\": value \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ),
            (
                "--privatekey-labels",
                "=x",
                "invalid --privatekey-labels item \"=x\": key \"\": name part must be non-empty; name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            (
                "--privatekey-annotations",
                "Bad_Prefix.com/x=1",
                "invalid --privatekey-annotations item \"Bad_Prefix.com/x=1\": key \"Bad_Prefix.com/x\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ),
            (
                "--privatekey-annotations",
                "a/b/c=1",
                "invalid --privatekey-annotations item \"a/b/c=1\": key \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            ),
            (
                "--privatekey-annotations",
                "a=1,a=2",
                "invalid --privatekey-annotations item \"a=2\": a is given twice",
            ),
        ];
        for (flag, value, message) in cases {
            let e = Config::from_args(args(&[flag, value]), None).unwrap_err();
            assert_eq!(e.to_string(), message);
        }
        let long = format!("k={}", "v".repeat(64));
        let e = Config::from_args(args(&["--privatekey-labels", &long]), None).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("value \"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\": must be no more than 63 characters"),
            "{e}"
        );
        // Annotation values are free text.
        let long = format!("k={}", "v ".repeat(100));
        assert!(Config::from_args(args(&["--privatekey-annotations", &long]), None).is_ok());
    }
}
