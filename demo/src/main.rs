//! `kseal-demo`: kseal's whole story on one machine, with no AWS account and no cluster.
//!
//! A local directory stands in for AWS Secrets Manager (the same fleet key ring, at
//! `dir://…` instead of `secretsmanager://kseal/fleet`), and kseal-testkit's in-process
//! Kubernetes API server stands in for each cluster. Everything else is real: the `kseal`
//! commands run in-process through [`kseal_cli::run`], and each cluster runs kseal's controller
//! (key-source mirror, key loader, reconciler) from the flags a pod would get.
//!
//! The steps: seed the ring; seal Flux's and Crossplane's credentials offline; start cluster
//! A, which unseals them; rotate, and seal a new Secret with the new key; start cluster B after
//! the rotation, which opens everything, old key and new. Secret values are never printed
//! whole.

mod capture;
mod cluster;
mod show;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser as _;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_controller::keys::source::{ACTIVE_ANNOTATION, KID_ANNOTATION};
use kseal_keystore::{AwsOptions, Index, Location, Ring};
use kube::ResourceExt as _;

use crate::cluster::{CONTROLLER_NAMESPACE, Cluster, wait_for};
use crate::show::{note, step, table};

/// `-v`: the controllers log to stderr, so the kseal commands' output is not captured.
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Walk through kseal on this machine: a fleet key ring, offline sealing, two clusters and a
/// key rotation.
///
/// Needs no AWS account and no cluster: a local directory stands in for AWS Secrets Manager
/// and an in-process Kubernetes API server for each cluster. The `kseal` commands and the
/// controller are the real ones.
#[derive(Debug, clap::Parser)]
#[command(name = "kseal-demo", version, max_term_width = 100)]
struct Cli {
    /// Directory to work in: created, or emptied when an earlier run of the demo made it
    #[arg(long, value_name = "DIR", default_value = "kseal-demo")]
    dir: PathBuf,
    /// Show the controllers' logs on stderr (filter with RUST_LOG; default `info`)
    #[arg(short, long)]
    verbose: bool,
}

const STEPS: usize = 5;
/// Marks a directory as the demo's own, so a re-run may empty it.
const MARKER: &str = ".kseal-demo";
/// GitHub's published ed25519 host key: what `ssh-keyscan github.com` prints for it.
const KNOWN_HOSTS: &str =
    "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n";
/// AWS's documented example access key (not a real one).
const AWS_ACCESS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
/// AWS's documented example secret access key (not a real one).
const AWS_SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
/// The application Secret sealed after the rotation.
const DB_SECRET: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: apps
type: Opaque
stringData:
  username: app
  password: correct-horse-battery-staple
";
/// Namespaces the SealedSecrets live in, created in each cluster.
const NAMESPACES: [&str; 3] = ["flux-system", "crossplane-system", "apps"];

/// The environment variables the in-process `kseal` commands and controllers would read
/// besides their flags: `KSEAL_*`, `AWS_*` and the controller's pod variables.
fn foreign_env() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            let name = name.to_string_lossy();
            name.starts_with("KSEAL_")
                || name.starts_with("AWS_")
                || matches!(
                    name.as_ref(),
                    "POD_NAME" | "POD_NAMESPACE" | "SEALED_SECRETS_KEY_CUTOFF_TIME"
                )
        })
        .collect()
}

/// Runs this program again without `names` in its environment, and exits as it does.
fn rerun_without(names: &[OsString]) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: cannot find the kseal-demo executable to run it again: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = std::process::Command::new(exe);
    command.args(std::env::args_os().skip(1));
    for name in names {
        command.env_remove(name);
    }
    match command.status() {
        Ok(status) => status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .map_or(ExitCode::FAILURE, ExitCode::from),
        Err(e) => {
            eprintln!("error: failed to run kseal-demo again: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo runs on embedded defaults only. The real commands it runs in-process also read
    // `KSEAL_*` and `AWS_*` variables (a `KSEAL_NAMESPACE` would move its Secrets, and an
    // `AWS_SESSION_TOKEN` from an AWS login would be sealed next to the example keys), and a
    // process cannot safely unset its own variables once threads run: run again without them.
    let foreign = foreign_env();
    if !foreign.is_empty() {
        return rerun_without(&foreign);
    }
    if cli.verbose {
        VERBOSE.store(true, Ordering::Relaxed);
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli));
    runtime.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The demo's paths, and how commands show them (`$DEMO/…`).
struct Paths {
    dir: PathBuf,
    /// `dir://<dir>/ring`
    ring: String,
}

impl Paths {
    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// `args` as a command line to paste, with the demo directory written `$DEMO`.
    fn shown(&self, args: &[&str]) -> Vec<String> {
        let dir = self.dir.display().to_string();
        args.iter()
            .map(|a| {
                let quoted = show::shell_quote(a);
                match a.find(&dir) {
                    Some(_) if quoted == *a => a.replace(&dir, "$DEMO"),
                    Some(_) => format!("\"{}\"", a.replace(&dir, "$DEMO")),
                    None => quoted,
                }
            })
            .collect()
    }
}

/// Runs `kseal ARGS` in-process (on a blocking thread: ring commands start their own runtime),
/// after printing it as `shown`; what it prints comes out indented under it, with `$DEMO` for
/// the demo's directory (as it prints with `-v`, where the controllers' logs interleave).
async fn kseal(args: &[&str], shown: Vec<String>) -> Result<()> {
    note(&format!("$ kseal {}", shown.join(" ")));
    let argv: Vec<String> = std::iter::once("kseal")
        .chain(args.iter().copied())
        .map(str::to_owned)
        .collect();
    let verbose = VERBOSE.load(Ordering::Relaxed);
    let (code, output) = tokio::task::spawn_blocking(move || {
        if verbose {
            Ok((kseal_cli::run(argv), String::new()))
        } else {
            capture::run(|| kseal_cli::run(argv))
        }
    })
    .await
    .context("the kseal command panicked")?
    .context("capturing the kseal command's output")?;
    for line in output.lines() {
        note(&format!("  {}", show::with_demo_var(line)));
    }
    if code != ExitCode::SUCCESS {
        bail!(
            "`kseal {}` failed (its message is above)",
            args.iter().take(2).copied().collect::<Vec<_>>().join(" ")
        );
    }
    Ok(())
}

/// Creates `dir`, or empties it when an earlier run made it (an empty directory is taken as
/// is); refuses any other directory. Returns its absolute path.
fn prepare(dir: &Path) -> Result<PathBuf> {
    if dir.exists() {
        if !dir.is_dir() {
            bail!("`{}` exists and is not a directory", dir.display());
        }
        let empty = fs_err::read_dir(dir)?.next().is_none();
        if !empty && !dir.join(MARKER).is_file() {
            bail!(
                "`{}` exists and was not made by kseal-demo (it has no {MARKER} file): refusing \
                 to empty it; pass --dir with a new or empty directory",
                dir.display()
            );
        }
        for entry in fs_err::read_dir(dir)? {
            let entry = entry?;
            // A symbolic link is removed, never followed.
            if entry.file_type()?.is_dir() {
                fs_err::remove_dir_all(entry.path())?;
            } else {
                fs_err::remove_file(entry.path())?;
            }
        }
    } else {
        fs_err::create_dir_all(dir)?;
    }
    fs_err::write(
        dir.join(MARKER),
        "made by kseal-demo, which empties this directory when it runs again\n",
    )?;
    Ok(fs_err::canonicalize(dir)?)
}

/// The ring's index (public certificates and which key seals), as a controller reads it.
async fn ring_index(ring: &str) -> Result<Index> {
    let location = Location::parse(ring)?;
    let ring = Ring::open(&location, &AwsOptions::default())
        .await
        .with_context(|| format!("failed to open key ring `{location}`"))?;
    let snapshot = ring
        .require_snapshot()
        .await
        .context("failed to read the key ring's index")?;
    Ok(snapshot.index)
}

/// The kid of the ring's sealing key.
fn active_kid(index: &Index) -> Result<String> {
    Ok(index
        .active
        .as_ref()
        .context("the key ring has no active key")?
        .to_string())
}

/// The SealedSecret of a committed file (one document).
fn read_sealed(path: &str) -> Result<SealedSecret> {
    let text = fs_err::read_to_string(path)?;
    serde_saphyr::from_str(&text).with_context(|| format!("`{path}` is not a SealedSecret"))
}

fn describe_sealed(file: &str, sealed: &SealedSecret) {
    let items: Vec<&str> = sealed
        .spec
        .encrypted_data
        .keys()
        .map(String::as_str)
        .collect();
    let sample = sealed
        .spec
        .encrypted_data
        .values()
        .next()
        .map(|v| format!("{}…", &v[..v.len().min(12)]))
        .unwrap_or_default();
    note(&format!(
        "{file}: SealedSecret {}/{} with {} encrypted item(s) ({}), e.g. {sample}",
        sealed.namespace().unwrap_or_default(),
        sealed.name_any(),
        items.len(),
        items.join(", ")
    ));
}

/// The mirrored key Secrets of `cluster` as a table.
async fn show_mirrors(cluster: &Cluster, index: &Index) -> Result<()> {
    let mut mirrors = cluster.mirrors().await?;
    let position = |s: &Secret| {
        let kid = s.annotations().get(KID_ANNOTATION).cloned();
        index
            .keys
            .iter()
            .position(|k| Some(k.kid.as_str()) == kid.as_deref())
    };
    mirrors.sort_by_key(|s| position(s));
    let rows: Vec<Vec<String>> = mirrors
        .iter()
        .map(|s| {
            let a = s.annotations();
            let kid = a.get(KID_ANNOTATION).cloned().unwrap_or_default();
            vec![
                format!("{CONTROLLER_NAMESPACE}/{}", s.name_any()),
                s.type_.clone().unwrap_or_default(),
                kid[..kid.len().min(12)].to_owned(),
                a.get(ACTIVE_ANNOTATION).cloned().unwrap_or_default(),
            ]
        })
        .collect();
    note(&format!(
        "cluster {}: key Secrets its controller mirrored from the ring (private keys: never printed)",
        cluster.name
    ));
    table(&["KEY SECRET", "TYPE", "KID", "ACTIVE (seals)"], &rows);
    Ok(())
}

/// Applies `files` to `cluster` and waits until each is unsealed; returns the Secrets.
async fn apply_all(
    cluster: &Cluster,
    paths: &Paths,
    files: &[(String, SealedSecret)],
) -> Result<Vec<Secret>> {
    let mut shown = vec!["kubectl".to_owned(), "apply".to_owned()];
    for (file, _) in files {
        shown.push("-f".to_owned());
        shown.extend(paths.shown(&[file]));
    }
    note(&format!(
        "$ {}   # cluster {}",
        shown.join(" "),
        cluster.name
    ));
    for (_, sealed) in files {
        cluster.apply(sealed).await?;
    }
    let mut secrets = Vec::new();
    for (_, sealed) in files {
        secrets.push(cluster.wait_unsealed(sealed).await?);
    }
    Ok(secrets)
}

/// The story. Each step prints one explaining line, the commands it stands for, and what came
/// out; secret values only masked.
async fn run(cli: Cli) -> Result<()> {
    let started = Instant::now();
    let dir = prepare(&cli.dir)?;
    show::set_demo_dir(&dir);
    let paths = Paths {
        ring: format!("dir://{}", dir.join("ring").display()),
        dir,
    };
    let ring = paths.ring.as_str();
    eprintln!(
        "kseal demo: a fleet key ring, offline sealing, two clusters and a key rotation, on this \
         machine only"
    );
    note(&format!(
        "DEMO={}   # the demo's directory; commands below are what you would type",
        show::shell_quote(&paths.dir.display().to_string())
    ));

    // 1. The ring.
    step(
        1,
        STEPS,
        "Seed the fleet key ring: a key pair in a local directory that stands in for AWS \
         Secrets Manager (same layout: an index of public certificates plus one secret per key).",
    );
    note("2048-bit keys keep the demo fast; the production default is 4096");
    let args = ["keys", "push", "--ring", ring, "--key-size", "2048"];
    kseal(&args, paths.shown(&args)).await?;
    let index = ring_index(ring).await?;
    let key1 = active_kid(&index)?;
    note(&format!(
        "the ring holds key {} and it seals; sealing needs only its public certificate",
        &key1[..12]
    ));
    note(
        "$DEMO stands in for the GitOps repository: pin the ring's trust anchor there once \
         (.kseal.yaml, committed), so kseal seals only to keys of the ring's signed history",
    );
    std::env::set_current_dir(&paths.dir)
        .with_context(|| format!("cannot enter {}", paths.dir.display()))?;
    let args = ["keys", "trust", "--ring", ring];
    kseal(&args, paths.shown(&args)).await?;

    // 2. Offline sealing.
    step(
        2,
        STEPS,
        "Seal bootstrap credentials offline, with the ring's public certificate only: Flux's Git \
         deploy key and Crossplane's AWS keys. No cluster is involved.",
    );
    fs_err::create_dir_all(paths.dir.join("git"))?;
    let known_hosts = paths.file("known_hosts");
    fs_err::write(&known_hosts, KNOWN_HOSTS)?;
    note(
        "$DEMO/known_hosts: github.com's published host key, as `ssh-keyscan github.com` prints it",
    );
    let flux_file = paths.file("git/flux-system.yaml");
    let public_key = paths.file("deploy-key.pub");
    let args = [
        "create",
        "git-credentials",
        "--cert",
        ring,
        "--generate-key",
        "--known-hosts-file",
        &known_hosts,
        "--public-key-out",
        &public_key,
        "-w",
        &flux_file,
    ];
    kseal(&args, paths.shown(&args)).await?;
    let aws_file = paths.file("git/aws-credentials.yaml");
    // The secret key goes in through an owner-only file (or stdin), never on the command line
    // where `ps` and shell history would show it. The file stays outside `git/`.
    let secret_file = paths.file("aws-secret-access-key");
    write_private(Path::new(&secret_file), AWS_SECRET_ACCESS_KEY.as_bytes())?;
    let args = [
        "create",
        "aws-credentials",
        "--cert",
        ring,
        "--access-key-id",
        AWS_ACCESS_KEY_ID,
        "--secret-access-key-file",
        &secret_file,
        "-w",
        &aws_file,
    ];
    note("with AWS's documented example keys (AKIAIOSFODNN7EXAMPLE), not real ones");
    kseal(&args, paths.shown(&args)).await?;
    fs_err::remove_file(&secret_file)?;
    let mut committed = vec![
        (flux_file.clone(), read_sealed(&flux_file)?),
        (aws_file.clone(), read_sealed(&aws_file)?),
    ];
    for (file, sealed) in &committed {
        describe_sealed(&paths.shown(&[file]).concat(), sealed);
    }
    note(
        "these files are safe to commit: opening them takes a private key of the ring, which \
         never left $DEMO/ring",
    );

    // 3. Cluster A.
    step(
        3,
        STEPS,
        "Cluster A is born: an in-process Kubernetes API server stands in for it, and kseal's \
         controller starts there with the ring as its key source.",
    );
    note(&format!(
        "$ kseal-controller --controller-namespace {CONTROLLER_NAMESPACE} --leader-elect false \
         --key-source {}   # cluster A",
        paths.shown(&[ring]).concat()
    ));
    let a = Cluster::start("A", ring, &NAMESPACES).await?;
    a.wait_mirrors(1, &key1).await?;
    show_mirrors(&a, &index).await?;
    let secrets = apply_all(&a, &paths, &committed).await?;
    note("cluster A: the Secrets its controller wrote (values masked)");
    table(
        &["SECRET", "TYPE", "KEY", "VALUE"],
        &show::secret_rows(&secrets),
    );

    // 4. Rotation.
    step(
        4,
        STEPS,
        "Rotate: a new key seals from now on; the old key stays in the ring and keeps opening \
         what it sealed.",
    );
    note(
        "--now because both clusters here are known to be watching; in a fleet, rotate waits \
         66 minutes so every controller has the new key before anything is sealed with it",
    );
    let args = [
        "keys",
        "rotate",
        "--ring",
        ring,
        "--now",
        "--key-size",
        "2048",
        "--yes",
    ];
    kseal(&args, paths.shown(&args)).await?;
    let index = ring_index(ring).await?;
    let key2 = active_kid(&index)?;
    if key2 == key1 {
        bail!("the rotation did not change the ring's sealing key");
    }
    let fingerprint2 = index
        .active_entry()
        .map(|e| e.fingerprint.clone())
        .context("the key ring has no active key")?;
    note(
        "cluster A's controller checks the ring every hour; the demo asks it now, as SIGUSR1 or \
         POST /v1/refresh does (--key-source-refresh-spacing, 5 s by default, merges requests that come \
         sooner after a check; the demo sets 100 ms)",
    );
    a.state.refresh.request();
    wait_for(
        &format!(
            "cluster A serving the certificate of the new key {} on /v1/cert.pem",
            &key2[..12]
        ),
        || async {
            let cert = a.served_cert().await?;
            if cert.id().as_str() == fingerprint2 {
                Ok(Some(()))
            } else {
                Err(format!("it serves {}", cert.id()))
            }
        },
    )
    .await?;
    a.wait_mirrors(2, &key2).await?;
    note(&format!(
        "cluster A serves the new key's certificate on /v1/cert.pem ({fingerprint2})"
    ));
    show_mirrors(&a, &index).await?;

    let plaintext = paths.file("db-secret.yaml");
    fs_err::write(&plaintext, DB_SECRET)?;
    note("$DEMO/db-secret.yaml: a plaintext app Secret (apps/db), removed right after sealing");
    let db_file = paths.file("git/db.yaml");
    let args = ["seal", "--cert", ring, "-f", &plaintext, "-w", &db_file];
    let sealed_db = kseal(&args, paths.shown(&args)).await;
    fs_err::remove_file(&plaintext)?;
    sealed_db?;
    let db = (db_file.clone(), read_sealed(&db_file)?);
    describe_sealed(&paths.shown(&[&db_file]).concat(), &db.1);
    let secrets = apply_all(&a, &paths, std::slice::from_ref(&db)).await?;
    note("cluster A: the new Secret (values masked)");
    table(
        &["SECRET", "TYPE", "KEY", "VALUE"],
        &show::secret_rows(&secrets),
    );
    committed.push(db);

    // 5. Cluster B.
    step(
        5,
        STEPS,
        "Cluster B is born after the rotation, against the same ring: it opens everything in \
         git, sealed before it existed, with the old key and the new.",
    );
    note(&format!(
        "$ kseal-controller --controller-namespace {CONTROLLER_NAMESPACE} --leader-elect false \
         --key-source {}   # cluster B",
        paths.shown(&[ring]).concat()
    ));
    let b = Cluster::start("B", ring, &NAMESPACES).await?;
    b.wait_mirrors(2, &key2).await?;
    show_mirrors(&b, &index).await?;
    apply_all(&b, &paths, &committed).await?;

    let mut rows = Vec::new();
    let mut all_open = true;
    for (_, sealed) in &committed {
        let (ns, name) = (sealed.namespace().unwrap_or_default(), sealed.name_any());
        let fingerprint = sealed
            .annotations()
            .get(SEALING_KEY_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let key = match index.keys.iter().find(|k| k.fingerprint == fingerprint) {
            Some(k) if k.kid.as_str() == key1 => format!("{} (before rotation)", k.kid.short()),
            Some(k) => format!("{} (after rotation)", k.kid.short()),
            None => "not in the ring".to_owned(),
        };
        let in_a = a.secret(&ns, &name).await?;
        let in_b = b.secret(&ns, &name).await?;
        // Both clusters must have opened the same plaintext.
        let same = matches!((&in_a, &in_b), (Some(x), Some(y)) if x.data == y.data);
        let mark = |s: &Option<Secret>| {
            if s.is_some() && same {
                "✓ opened"
            } else {
                "✗ not opened"
            }
        };
        all_open &= same;
        rows.push(vec![
            format!("{ns}/{name}"),
            format!("{}…", &fingerprint[..fingerprint.len().min(19)]),
            key,
            mark(&in_a).to_owned(),
            mark(&in_b).to_owned(),
        ]);
    }
    note("summary: every SealedSecret in git, in both clusters");
    table(
        &[
            "SEALEDSECRET",
            "SEALED WITH (kseal.dev/sealing-key)",
            "RING KEY",
            "CLUSTER A",
            "CLUSTER B",
        ],
        &rows,
    );
    let (stop_a, stop_b) = tokio::join!(a.stop(), b.stop());
    stop_a?;
    stop_b?;
    if !all_open {
        bail!("not every SealedSecret opened with the same data in both clusters");
    }
    eprintln!(
        "\ndone in {:.1} s. $DEMO/git holds what you would commit; $DEMO/ring is the key ring \
         (private keys).",
        started.elapsed().as_secs_f64()
    );
    note(
        "in production the ring is in AWS Secrets Manager (`kseal keys push --ring \
         secretsmanager://kseal/fleet`) and each cluster's controller runs the same code with \
         --key-source secretsmanager://kseal/fleet",
    );
    Ok(())
}

/// Writes `bytes` to a new owner-only (0600) file.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("failed to create `{}`", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(())
}
