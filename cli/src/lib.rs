//! `kseal`: seal Kubernetes Secrets offline for GitOps.
//!
//! The binary is `kseal`; this library exposes only [`run`], so that other programs of the
//! workspace (the `kseal-demo` walkthrough) run real `kseal` commands in-process. Everything
//! else is private: the command line is the interface.

mod args;
mod cmd;
mod controller;
mod env;
mod http;
mod keysource;
mod kubeconfig;
mod manifest;
mod opening;
mod output;
mod project;
mod sealing;
mod text;
mod time;
mod walk;
mod yaml;

use std::ffi::OsString;
use std::process::ExitCode;

use crate::args::{Cli, Command, CreateCommand, KeysCommand};

/// The executable that does key-ring work for `kseal`, installed beside it.
pub const RING_BINARY: &str = "kseal-ring";

/// What `kseal --version` prints after the name: the package version, then the commit, the
/// release date (only with `SOURCE_DATE_EPOCH`) and the target (see `build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("KSEAL_BUILD_INFO"),
    ")"
);

/// Runs `kseal` with `args` (the first one is the program name, as in `std::env::args_os`):
/// parses them, runs the command and prints errors on stderr (`error: …`, or clap's usage
/// message). Returns the exit code `kseal` would exit with; never exits the process.
///
/// This is the whole CLI, key-ring commands included (what `kseal-ring` and the
/// `kseal-demo` walkthrough run). Commands that talk to a key ring start their own
/// single-threaded Tokio runtime, so call this outside any runtime (e.g. from
/// `tokio::task::spawn_blocking`).
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    keysource::read_rings_with(
        keysource::ring::active_certificate_pem,
        keysource::ring::read_ring_index,
    );
    let cli = match parse(args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let result = match local(cli.command) {
        Ok(result) => result,
        Err(command) => ring(*command),
    };
    finish(result)
}

/// What the `kseal` executable runs: every command that needs no key ring runs here; key-ring
/// commands (`kseal keys push|activate|rotate|list|export-cert|import|retire`, and any
/// `--cert secretsmanager://…` or `dir://…`) are handed to [`RING_BINARY`] beside it. The AWS
/// SDK is then linked only into that executable, so sealing with a local certificate does not
/// pay for loading it at every start.
pub fn run_local<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match parse(args.iter().cloned()) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // A creation rule of .kseal.yaml may seal with a key ring too.
    if names_a_ring(&args) || project::rules_name_a_ring(&args) {
        return hand_over(&args);
    }
    match local(cli.command) {
        Ok(result) => finish(result),
        Err(_) => hand_over(&args),
    }
}

fn parse<I, T>(args: I) -> Result<Cli, ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    use clap::{CommandFactory as _, FromArgMatches as _};
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // `kseal-ring --version` and its help name that executable, not `kseal`.
    let name = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .map_or("kseal", |n| {
            if n == RING_BINARY {
                RING_BINARY
            } else {
                "kseal"
            }
        });
    Cli::command()
        .name(name)
        .bin_name(name)
        .try_get_matches_from(args.iter().cloned())
        .and_then(|matches| Cli::from_arg_matches(&matches))
        .map_err(|e| {
            // What `Cli::parse` does, without exiting: help and version go to stdout with code
            // 0, usage errors to stderr with code 2. A closed pipe is not an error.
            let _ = e.print();
            if let Some(hint) = kubeseal_hint(&args) {
                eprintln!("\n{hint}");
            }
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        })
        .inspect(|_| warn_deprecated_spellings(&args))
}

/// Old flag spellings kept as hidden aliases: `(old, new)`.
const DEPRECATED_FLAGS: &[(&str, &str)] = &[
    ("--region", "--aws-region"),
    ("--assume-role", "--aws-assume-role"),
    ("--endpoint-url", "--aws-endpoint-url"),
    ("--output", "--format"),
    ("--validity-days", "--key-ttl"),
];

/// Says once per old spelling that it is deprecated (the flag still works).
fn warn_deprecated_spellings(args: &[OsString]) {
    let given: Vec<&str> = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .take_while(|a| *a != "--")
        .map(|a| a.split_once('=').map_or(a, |(flag, _)| flag))
        .collect();
    for (old, new) in DEPRECATED_FLAGS {
        if given.contains(old) {
            eprintln!(
                "warning: {old} is deprecated; use {new} (the same flag as the controller's)"
            );
        }
    }
}

/// For a kubeseal flag kseal spells differently: what to use instead.
fn kubeseal_hint(args: &[OsString]) -> Option<String> {
    const HINTS: &[(&str, &str)] = &[
        (
            "--fetch-cert",
            "kseal cert (from the cluster's controller) or kseal keys export-cert --ring R",
        ),
        (
            "--re-encrypt",
            "kseal reseal --controller FILE… (or --key FILE offline, --in-place to rewrite)",
        ),
        ("--recovery-unseal", "kseal unseal --key KEY_FILE FILE…"),
        (
            "--recovery-private-key",
            "kseal unseal --key KEY_FILE FILE…",
        ),
        (
            "--validate",
            "kseal validate --controller FILE… (or --key FILE offline)",
        ),
    ];
    // sops's commands and flags, for a repository moving from sops to SealedSecrets.
    const SOPS: &[(&str, &str)] = &[
        (
            "encrypt",
            "kseal seal --cert CERT FILE (kseal set FILE KEY adds or replaces one item)",
        ),
        (
            "decrypt",
            "kseal unseal --key KEY_FILE FILE (recovery: in a cluster the controller decrypts)",
        ),
        (
            "updatekeys",
            "kseal reseal --stale PATH… (re-seals what an older key sealed, in place)",
        ),
        (
            "-i",
            "kseal seal FILE -w FILE, or kseal set FILE KEY to change one item in place",
        ),
        (
            "--in-place",
            "kseal seal FILE -w FILE, or kseal set FILE KEY to change one item in place",
        ),
    ];
    let flags: Vec<&str> = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .map(|a| a.split_once('=').map_or(a, |(flag, _)| flag))
        .collect();
    if let Some((flag, hint)) = HINTS.iter().find(|(flag, _)| flags.contains(flag)) {
        return Some(format!(
            "hint: `{flag}` is a kubeseal flag; in kseal: {hint}"
        ));
    }
    if flags.contains(&"--secret-file") {
        return Some(
            "hint: `--secret-file` is a kubeseal flag; in kseal, name the file: kseal seal \
             --cert CERT FILE (or -f FILE)"
                .to_owned(),
        );
    }
    let first = flags.first().copied().unwrap_or_default();
    let sops = match first {
        "-e" | "--encrypt" => Some(("encrypt", first)),
        "-d" | "--decrypt" => Some(("decrypt", first)),
        "encrypt" | "decrypt" | "updatekeys" => Some((first, first)),
        _ => flags
            .iter()
            .find(|f| matches!(**f, "-i" | "--in-place"))
            .map(|f| (*f, *f)),
    };
    if let Some((what, given)) = sops {
        let hint = SOPS
            .iter()
            .find(|(name, _)| *name == what)
            .map(|(_, h)| h)?;
        let kind = if given.starts_with('-') {
            "flag"
        } else {
            "command"
        };
        return Some(format!(
            "hint: `{given}` is a sops {kind}; in kseal: {hint}"
        ));
    }
    // kubeseal takes its flags without a command (`kubeseal --cert X < in`).
    if first.starts_with('-') && !matches!(first, "-h" | "--help" | "-V" | "--version") {
        return Some(format!(
            "hint: kseal takes a command first; kubeseal's `kubeseal {first} …` is `kseal seal \
             {first} …` (reading the Secret from standard input or FILE)"
        ));
    }
    None
}

fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A command that printed its own report and errors chose its exit code.
        Err(e) if e.downcast_ref::<cmd::check::Exit>().is_some() => e
            .downcast_ref::<cmd::check::Exit>()
            .map_or(ExitCode::FAILURE, |exit| ExitCode::from(exit.0)),
        Err(e) => {
            eprintln!("error: {}", text::chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs a command that needs no key ring; gives key-ring commands back.
fn local(command: Command) -> Result<anyhow::Result<()>, Box<Command>> {
    Ok(match command {
        Command::Seal(args) => cmd::seal::run(args),
        Command::Set(args) => cmd::set::run(args),
        Command::Cert(args) => cmd::cert::run(args),
        Command::Create(CreateCommand::GitCredentials(args)) => cmd::create::git(*args),
        Command::Create(CreateCommand::AwsCredentials(args)) => cmd::create::aws(*args),
        Command::Unseal(args) => cmd::unseal::run(args),
        Command::Reseal(args) if args.stale => cmd::reseal_stale::run(&args),
        Command::Reseal(args) => cmd::recovery::reseal(args),
        Command::Validate(args) => cmd::recovery::validate(args),
        Command::Keys(KeysCommand::Generate(args)) => cmd::keys::run(args),
        Command::Keys(KeysCommand::Inspect(args)) => cmd::keys::inspect(args),
        Command::Quickstart(args) => cmd::quickstart::run(args),
        Command::Completions(args) => cmd::completions::run(args),
        Command::Config(args) => cmd::config::run(args),
        Command::Check(args) => cmd::check::run(args),
        ring @ Command::Keys(
            KeysCommand::Push(_)
            | KeysCommand::Activate(_)
            | KeysCommand::Rotate(_)
            | KeysCommand::List(_)
            | KeysCommand::ExportCert(_)
            | KeysCommand::ExportPolicy(_)
            | KeysCommand::Import(_)
            | KeysCommand::Retire(_)
            | KeysCommand::Trust(_)
            | KeysCommand::Sign(_)
            | KeysCommand::ReRoot(_)
            | KeysCommand::Refresh(_),
        ) => return Err(Box::new(ring)),
        Command::Keys(KeysCommand::NewRoot(args)) => cmd::trust::new_root(&args),
        ring @ Command::Fleet(_) => return Err(Box::new(ring)),
        Command::Keys(KeysCommand::Exposure(args)) => cmd::exposure::run(&args),
    })
}

/// Runs a key-ring command.
fn ring(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Keys(KeysCommand::Push(args)) => cmd::ring::push(args),
        Command::Keys(KeysCommand::Activate(args)) => cmd::ring::activate(args),
        Command::Keys(KeysCommand::Rotate(args)) => cmd::ring::rotate(args),
        Command::Keys(KeysCommand::List(args)) => cmd::ring::list(args),
        Command::Keys(KeysCommand::ExportCert(args)) => cmd::ring::export_cert(args),
        Command::Keys(KeysCommand::ExportPolicy(args)) => cmd::ring::export_policy(&args),
        Command::Keys(KeysCommand::Import(args)) => cmd::ring::import(args),
        Command::Keys(KeysCommand::Retire(args)) => cmd::ring::retire(args),
        Command::Keys(KeysCommand::Trust(args)) => cmd::trust::trust(args),
        Command::Keys(KeysCommand::Sign(args)) => cmd::trust::sign(args),
        Command::Keys(KeysCommand::ReRoot(args)) => cmd::trust::re_root(args),
        Command::Keys(KeysCommand::Refresh(args)) => cmd::trust::refresh(args),
        Command::Fleet(crate::args::FleetCommand::Status(args)) => cmd::fleet::status(args),
        // `local` gives back key-ring commands only; anything else runs there.
        other => local(other).unwrap_or_else(|_| Err(anyhow::anyhow!("not a key-ring command"))),
    }
}

/// Whether an argument (or `KSEAL_CERT`) names a key ring as a certificate source.
fn names_a_ring(args: &[OsString]) -> bool {
    let ring = |text: &str| {
        let lower = text.to_ascii_lowercase();
        lower.contains("secretsmanager://") || lower.contains("dir://")
    };
    args.iter().skip(1).any(|a| a.to_str().is_some_and(ring))
        || std::env::var(env::KSEAL_CERT).is_ok_and(|v| ring(&v))
}

/// Runs [`RING_BINARY`] (beside this executable, else from `PATH`) with the same arguments.
fn hand_over(args: &[OsString]) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(RING_BINARY)))
        .filter(|path| path.is_file());
    let program = beside
        .clone()
        .map_or_else(|| OsString::from(RING_BINARY), OsString::from);
    let mut command = std::process::Command::new(&program);
    command.args(args.iter().skip(1));
    let missing = |e: std::io::Error| {
        eprintln!(
            "error: this command reads or writes a fleet key ring, which `{RING_BINARY}` does; \
             it is installed beside `kseal` (cargo install and the release archives ship both), \
             but it could not be run: {e}"
        );
        ExitCode::FAILURE
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        // Replaces this process: stdin, stdout, stderr and the exit code are the ring
        // command's own.
        missing(command.arg0("kseal").exec())
    }
    #[cfg(not(unix))]
    match command.status() {
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)),
        Err(e) => missing(e),
    }
}
