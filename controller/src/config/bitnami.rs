//! Compatibility with Bitnami's controller settings: the table of Bitnami's flags
//! ([`BITNAMI_FLAGS`]), its `SEALED_SECRETS_*` variables turned into flags below the command
//! line and kseal's own `KSEAL_*` variables ([`BitnamiEnv`]), and the warnings for Bitnami
//! flags and variables that change nothing in kseal.

use clap::Parser as _;

use super::{Args, ConfigError};
use crate::env;

/// Bitnami's controller flags, each with the `KSEAL_*` variable of kseal's flag of the same
/// name (`None`: a compatibility flag kseal accepts and ignores with a warning). Bitnami reads
/// each from `SEALED_SECRETS_<NAME>` (upper case, `-` as `_`) unless given on the command
/// line; so does kseal, below its own `KSEAL_*` variable (docs/bitnami.md has the table).
/// `--version` has a variable too (`SEALED_SECRETS_VERSION`), ignored with a warning.
pub const BITNAMI_FLAGS: &[(&str, Option<&str>)] = &[
    ("key-prefix", Some(env::KSEAL_KEY_PREFIX)),
    ("key-size", Some(env::KSEAL_KEY_SIZE)),
    ("key-ttl", Some(env::KSEAL_KEY_TTL)),
    ("my-cn", Some(env::KSEAL_MY_CN)),
    ("key-renew-period", Some(env::KSEAL_KEY_RENEW_PERIOD)),
    ("rotate-period", Some(env::KSEAL_KEY_RENEW_PERIOD)),
    ("key-order-priority", Some(env::KSEAL_KEY_ORDER_PRIORITY)),
    (
        "accept-deprecated-v1-data",
        Some(env::KSEAL_ACCEPT_DEPRECATED_V1_DATA),
    ),
    // Read through `Host::key_cutoff_time` (its errors name the variable).
    ("key-cutoff-time", Some(env::KSEAL_KEY_CUTOFF_TIME)),
    ("all-namespaces", Some(env::KSEAL_ALL_NAMESPACES)),
    (
        "additional-namespaces",
        Some(env::KSEAL_ADDITIONAL_NAMESPACES),
    ),
    ("label-selector", Some(env::KSEAL_LABEL_SELECTOR)),
    ("rate-limit", Some(env::KSEAL_RATE_LIMIT)),
    ("rate-limit-burst", Some(env::KSEAL_RATE_LIMIT_BURST)),
    (
        "privatekey-annotations",
        Some(env::KSEAL_PRIVATEKEY_ANNOTATIONS),
    ),
    ("privatekey-labels", Some(env::KSEAL_PRIVATEKEY_LABELS)),
    ("old-gc-behavior", None),
    ("update-status", Some(env::KSEAL_UPDATE_STATUS)),
    ("watch-for-secrets", None),
    ("skip-recreate", Some(env::KSEAL_SKIP_RECREATE)),
    ("log-info-stdout", None),
    ("log-level", Some(env::KSEAL_LOG_LEVEL)),
    ("log-format", Some(env::KSEAL_LOG_FORMAT)),
    ("max-unseal-retries", None),
    ("kubeclient-qps", None),
    ("kubeclient-burst", None),
    ("listen-addr", Some(env::KSEAL_LISTEN_ADDR)),
    ("listen-metrics-addr", Some(env::KSEAL_LISTEN_METRICS_ADDR)),
    ("read-timeout", None),
    ("write-timeout", None),
];

/// The prefix of Bitnami's variables.
pub const BITNAMI_ENV_PREFIX: &str = "SEALED_SECRETS_";

/// The Bitnami variable of `flag`: `key-size` → `SEALED_SECRETS_KEY_SIZE`.
#[must_use]
pub fn bitnami_variable(flag: &str) -> String {
    format!(
        "{BITNAMI_ENV_PREFIX}{}",
        flag.to_uppercase().replace('-', "_")
    )
}

/// The environment as Bitnami's flags see it: every `SEALED_SECRETS_*` variable, and which
/// `KSEAL_*` variables are set (they win over Bitnami's).
#[derive(Debug, Clone, Default)]
pub struct BitnamiEnv {
    /// `SEALED_SECRETS_*` variables (name, value), sorted by name.
    pub vars: Vec<(String, String)>,
    /// The names of the `KSEAL_*` variables that are set and not empty.
    pub kseal_set: std::collections::BTreeSet<String>,
}

impl BitnamiEnv {
    /// This process's (variables that are not UTF-8 are left out).
    pub fn current() -> Self {
        let mut this = Self::default();
        for (name, value) in std::env::vars_os() {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
                continue;
            };
            if name.starts_with(BITNAMI_ENV_PREFIX) {
                this.vars.push((name.to_owned(), value.to_owned()));
            } else if name.starts_with("KSEAL_") && !value.is_empty() {
                this.kseal_set.insert(name.to_owned());
            }
        }
        this.vars.sort();
        this
    }

    /// The flags Bitnami's variables add to `argv`: `--name=value` for each
    /// `SEALED_SECRETS_<NAME>` that is not empty, whose flag (or its alias) is not on the
    /// command line and whose `KSEAL_*` variable is not set. Each value is checked alone, so
    /// a bad one is named by its variable.
    pub fn flags(&self, argv: &[std::ffi::OsString]) -> Result<Vec<String>, ConfigError> {
        let given = |flag: &str| {
            let names = match flag {
                "key-renew-period" | "rotate-period" => vec!["key-renew-period", "rotate-period"],
                other => vec![other],
            };
            argv.iter().skip(1).any(|a| {
                a.to_str()
                    .and_then(|a| a.strip_prefix("--"))
                    .is_some_and(|a| {
                        names.iter().any(|n| {
                            a == *n || a.strip_prefix(n).is_some_and(|r| r.starts_with('='))
                        })
                    })
            })
        };
        let mut flags = Vec::new();
        for &(flag, kseal) in BITNAMI_FLAGS {
            if flag == "key-cutoff-time" {
                continue;
            }
            let var = bitnami_variable(flag);
            let Some(value) = self.value(&var) else {
                continue;
            };
            if given(flag) || kseal.is_some_and(|k| self.kseal_set.contains(k)) {
                continue;
            }
            let arg = format!("--{flag}={value}");
            if let Err(e) = Args::try_parse_from(["kseal-controller", arg.as_str()]) {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                return Err(ConfigError::BitnamiVariable {
                    var,
                    problem: first.trim_start_matches("error: ").to_owned(),
                });
            }
            flags.push(arg);
        }
        Ok(flags)
    }

    /// The value of `var`, when set and not empty.
    fn value(&self, var: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(n, v)| n == var && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// One line per Bitnami variable that has no effect: unknown to Bitnami's controller,
    /// overridden by a `KSEAL_*` variable, or `SEALED_SECRETS_VERSION`.
    pub(super) fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (var, value) in &self.vars {
            if value.is_empty() {
                continue;
            }
            let known = BITNAMI_FLAGS
                .iter()
                .find(|(flag, _)| bitnami_variable(flag) == *var);
            match known {
                Some((_, Some(kseal))) if self.kseal_set.contains(*kseal) => warnings
                    .push(format!("{var} ignored: {kseal} is set and wins")),
                Some(_) => {}
                None if var == "SEALED_SECRETS_VERSION" => warnings.push(format!(
                    "{var} ignored: run `kseal-controller --version` to print the version"
                )),
                None => warnings.push(format!(
                    "{var} ignored: Bitnami's controller has no flag --{} (docs/bitnami.md lists those kseal reads)",
                    var[BITNAMI_ENV_PREFIX.len()..].to_lowercase().replace('_', "-")
                )),
            }
        }
        warnings
    }
}

impl Args {
    /// This process's arguments, with Bitnami's `SEALED_SECRETS_*` variables applied
    /// ([`BitnamiEnv::flags`]); prints help or version, or a flag error, and exits, as clap
    /// does.
    pub fn from_process() -> Result<Self, ConfigError> {
        let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let extra = BitnamiEnv::current().flags(&argv)?;
        argv.extend(extra.into_iter().map(Into::into));
        Ok(Self::parse_from(argv))
    }
}

/// A warning per Bitnami compatibility flag that was given and changes nothing here, saying
/// what kseal does instead.
pub(super) fn compat_warnings(args: &Args) -> Vec<String> {
    let ignored = |flag: &str, instead: &str| {
        format!("--{flag} ({}) ignored: {instead}", bitnami_variable(flag))
    };
    let mut warnings = Vec::new();
    if args.old_gc_behavior == Some(true) {
        warnings.push(ignored(
            "old-gc-behavior",
            "kseal never deletes a Secret itself; Kubernetes' garbage collector deletes it with its SealedSecret through the owner reference",
        ));
    }
    if args.watch_for_secrets == Some(false) {
        warnings.push(ignored(
            "watch-for-secrets",
            "kseal always watches the key Secrets, so a key created outside the controller loads at once",
        ));
    }
    if args.max_unseal_retries.is_some() {
        warnings.push(ignored(
            "max-unseal-retries",
            "kseal never gives up on a SealedSecret: it retries with a backoff capped at 5 minutes, and again on every key change and resync",
        ));
    }
    for (flag, given) in [
        ("kubeclient-qps", args.kubeclient_qps.is_some()),
        ("kubeclient-burst", args.kubeclient_burst.is_some()),
    ] {
        if given {
            warnings.push(ignored(
                flag,
                "kseal's Kubernetes client has no client-side rate limit; --concurrency bounds the unseals in flight",
            ));
        }
    }
    for (flag, given) in [
        ("read-timeout", args.read_timeout.is_some()),
        ("write-timeout", args.write_timeout.is_some()),
    ] {
        if given {
            warnings.push(ignored(
                flag,
                "kseal bounds each connection with --header-read-timeout (default 10s) and the connection limits",
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{args, host};
    use crate::config::{Config, Host};

    #[test]
    fn every_bitnami_flag_is_accepted() {
        let sample = |flag: &str| match flag {
            "key-size" => "2048",
            "key-ttl" | "key-renew-period" | "rotate-period" | "read-timeout" | "write-timeout" => {
                "1h"
            }
            "key-order-priority" => "SecretCreationTimestamp",
            "key-cutoff-time" => "Mon, 14 Oct 2024 21:45:30 +0200",
            "rate-limit" | "rate-limit-burst" | "max-unseal-retries" | "kubeclient-qps"
            | "kubeclient-burst" => "3",
            "additional-namespaces" => "team-a",
            "privatekey-annotations" | "privatekey-labels" => "a=b",
            "log-level" => "INFO",
            "log-format" => "json",
            "listen-addr" | "listen-metrics-addr" => ":9090",
            "accept-deprecated-v1-data"
            | "all-namespaces"
            | "old-gc-behavior"
            | "update-status"
            | "watch-for-secrets"
            | "skip-recreate"
            | "log-info-stdout" => "true",
            _ => "x",
        };
        for &(flag, _) in BITNAMI_FLAGS {
            let arg = format!("--{flag}={}", sample(flag));
            let a = Args::try_parse_from(["controller", arg.as_str()])
                .unwrap_or_else(|e| panic!("{arg}: {e}"));
            Config::parse(a, None, &host()).unwrap_or_else(|e| panic!("{arg}: {e}"));
        }
        // Hidden from --help: they are documented in docs/bitnami.md.
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(!help.contains("kubeclient-qps"), "{help}");
    }

    #[test]
    fn ignored_bitnami_flags_warn_once_each_with_what_kseal_does() {
        let c = Config::parse(
            args(&[
                "--old-gc-behavior",
                "--watch-for-secrets=false",
                "--log-info-stdout",
                "--max-unseal-retries",
                "5",
                "--kubeclient-qps",
                "-1",
                "--kubeclient-burst",
                "10",
                "--read-timeout",
                "2m",
                "--write-timeout",
                "2m",
            ]),
            None,
            &host(),
        )
        .unwrap();
        assert_eq!(c.warnings.len(), 7, "{:#?}", c.warnings);
        for w in &c.warnings {
            assert!(!w.contains('\n'), "{w}");
            assert!(w.contains(" ignored: "), "{w}");
            assert!(w.starts_with("--") && w.contains("(SEALED_SECRETS_"), "{w}");
        }
        assert!(
            c.warnings[0].contains("owner reference"),
            "{:?}",
            c.warnings
        );
        // Values that are what kseal does anyway warn about nothing.
        let c = Config::parse(
            args(&[
                "--old-gc-behavior=false",
                "--watch-for-secrets",
                "--log-info-stdout=false",
            ]),
            None,
            &host(),
        )
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    fn bitnami_env(vars: &[(&str, &str)], kseal: &[&str]) -> BitnamiEnv {
        BitnamiEnv {
            vars: vars
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            kseal_set: kseal.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    fn argv(list: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("controller")
            .chain(list.iter().copied())
            .map(Into::into)
            .collect()
    }

    #[test]
    fn bitnami_variables_become_flags_below_the_command_line_and_kseals_variables() {
        let env = bitnami_env(
            &[
                ("SEALED_SECRETS_KEY_SIZE", "2048"),
                ("SEALED_SECRETS_UPDATE_STATUS", "false"),
                ("SEALED_SECRETS_KEY_PREFIX", "from-bitnami"),
                ("SEALED_SECRETS_ROTATE_PERIOD", "24h"),
                ("SEALED_SECRETS_LABEL_SELECTOR", ""),
                ("SEALED_SECRETS_LISTEN_ADDR", ":9443"),
                (
                    "SEALED_SECRETS_KEY_CUTOFF_TIME",
                    "via Host::key_cutoff_time",
                ),
            ],
            &[env::KSEAL_KEY_SIZE],
        );
        let flags = env
            .flags(&argv(&[
                "--key-prefix",
                "from-flag",
                "--key-renew-period=1h",
            ]))
            .unwrap();
        // KEY_SIZE: KSEAL_KEY_SIZE wins; KEY_PREFIX and ROTATE_PERIOD: the command line
        // (an alias counts) wins; empty and the cutoff variable: not here.
        assert_eq!(flags, ["--update-status=false", "--listen-addr=:9443"]);
        let mut list = vec!["--key-prefix", "from-flag"];
        list.extend(flags.iter().map(String::as_str));
        let c = Config::parse(
            args(&list),
            None,
            &Host {
                bitnami: env,
                ..host()
            },
        )
        .unwrap();
        assert!(!c.update_status);
        assert_eq!(c.key_prefix, "from-flag");
        assert_eq!(c.listen_addr, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(
            c.warnings,
            ["SEALED_SECRETS_KEY_SIZE ignored: KSEAL_KEY_SIZE is set and wins"]
        );
    }

    #[test]
    fn a_bad_bitnami_variable_is_named_and_unknown_ones_warn() {
        let env = bitnami_env(&[("SEALED_SECRETS_KEY_SIZE", "big")], &[]);
        let e = env.flags(&argv(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid SEALED_SECRETS_KEY_SIZE: invalid value 'big' for '--key-size <KEY_SIZE>': invalid digit found in string"
        );
        let env = bitnami_env(&[("SEALED_SECRETS_LISTEN_ADDR", "localhost:80")], &[]);
        let e = env.flags(&argv(&[])).unwrap_err().to_string();
        assert!(e.starts_with("invalid SEALED_SECRETS_LISTEN_ADDR: "), "{e}");
        let env = bitnami_env(
            &[
                ("SEALED_SECRETS_KEY_SIZ", "2048"),
                ("SEALED_SECRETS_VERSION", "true"),
            ],
            &[],
        );
        assert!(env.flags(&argv(&[])).unwrap().is_empty());
        let c = Config::parse(
            args(&[]),
            None,
            &Host {
                bitnami: env,
                ..host()
            },
        )
        .unwrap();
        assert_eq!(
            c.warnings,
            [
                "SEALED_SECRETS_KEY_SIZ ignored: Bitnami's controller has no flag --key-siz (docs/bitnami.md lists those kseal reads)",
                "SEALED_SECRETS_VERSION ignored: run `kseal-controller --version` to print the version"
            ]
        );
    }
}
