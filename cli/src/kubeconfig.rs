//! A minimal kubeconfig reader: enough to reach the API server the way kubectl does (server,
//! CA, client certificate, bearer token or token file, basic auth, exec credential plugins).
//! Not the kube client crate: the CLI stays a small synchronous program.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use serde_json::Value;

use crate::http::Tls;

/// How to authenticate to the API server.
pub(crate) enum Auth {
    None,
    Bearer(String),
    Basic(String, String),
}

/// Everything needed to talk to one cluster.
pub(crate) struct Connection {
    pub(crate) context: String,
    pub(crate) server: String,
    pub(crate) tls: Tls,
    pub(crate) auth: Auth,
}

/// One entry of `clusters`, `users` or `contexts`, with the directory of the file it came from
/// (relative paths inside are relative to it, as in kubectl).
struct Entry {
    value: Value,
    dir: PathBuf,
    file: PathBuf,
}

#[derive(Default)]
struct Merged {
    clusters: BTreeMap<String, Entry>,
    users: BTreeMap<String, Entry>,
    contexts: BTreeMap<String, Entry>,
    current_context: Option<String>,
    files: Vec<PathBuf>,
}

/// The kubeconfig files to read: `explicit`, else `$KUBECONFIG` (a path list), else
/// `~/.kube/config`.
fn paths(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_owned()];
    }
    if let Some(list) = std::env::var_os(crate::env::KUBECONFIG).filter(|v| !v.is_empty()) {
        return std::env::split_paths(&list).collect();
    }
    home_dir()
        .map(|h| vec![h.join(".kube").join("config")])
        .unwrap_or_default()
}

pub(crate) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn load(explicit: Option<&Path>) -> Result<Merged> {
    let mut merged = Merged::default();
    for path in paths(explicit) {
        if explicit.is_none() && !path.exists() {
            continue;
        }
        let text = fs_err::read_to_string(&path).context("failed to read the kubeconfig")?;
        let doc: Value = crate::yaml::from_str(&text)
            .with_context(|| format!("failed to parse kubeconfig `{}`", path.display()))?;
        let dir = path
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("."));
        for (field, inner, map) in [
            ("clusters", "cluster", &mut merged.clusters),
            ("users", "user", &mut merged.users),
            ("contexts", "context", &mut merged.contexts),
        ] {
            for item in doc
                .get(field)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(name), Some(value)) =
                    (item.get("name").and_then(Value::as_str), item.get(inner))
                else {
                    continue;
                };
                // First file to define a name wins, as in kubectl.
                map.entry(name.to_owned()).or_insert_with(|| Entry {
                    value: value.clone(),
                    dir: dir.clone(),
                    file: path.clone(),
                });
            }
        }
        if merged.current_context.is_none() {
            merged.current_context = doc
                .get("current-context")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .map(str::to_owned);
        }
        merged.files.push(path);
    }
    Ok(merged)
}

fn string<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Inline base64 `*-data` or a file (relative to the kubeconfig's directory).
fn bytes(entry: &Entry, data_key: &str, file_key: &str, what: &str) -> Result<Option<Vec<u8>>> {
    if let Some(data) = string(&entry.value, data_key) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .with_context(|| format!("kubeconfig `{data_key}` ({what}) is not base64"))?;
        return Ok(Some(decoded));
    }
    if let Some(file) = string(&entry.value, file_key) {
        let path = entry.dir.join(file);
        let data = fs_err::read(&path).with_context(|| format!("failed to read the {what}"))?;
        return Ok(Some(data));
    }
    Ok(None)
}

/// A kubeconfig context's namespace, and where it was found (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContextNamespace {
    pub(crate) namespace: String,
    pub(crate) context: String,
    pub(crate) file: PathBuf,
}

/// The namespace of the current (or named) context, if any kubeconfig can be read. Never
/// fails: sealing offline must not depend on a kubeconfig.
pub(crate) fn context_namespace(
    explicit: Option<&Path>,
    context: Option<&str>,
) -> Option<ContextNamespace> {
    let merged = load(explicit).ok()?;
    let name = context
        .map(str::to_owned)
        .or(merged.current_context.clone())?;
    let entry = merged.contexts.get(&name)?;
    let namespace = string(&entry.value, "namespace")?.to_owned();
    Some(ContextNamespace {
        namespace,
        context: name,
        file: entry.file.clone(),
    })
}

/// Resolves the connection for `context` (or the current context).
pub(crate) fn connect(explicit: Option<&Path>, context: Option<&str>) -> Result<Connection> {
    let merged = load(explicit)?;
    if merged.files.is_empty() {
        bail!(
            "no kubeconfig found (looked at $KUBECONFIG and ~/.kube/config): pass --kubeconfig, \
             or seal offline with --cert FILE"
        );
    }
    let name = match context {
        Some(c) => c.to_owned(),
        None => merged.current_context.clone().with_context(|| {
            "the kubeconfig has no current context: pass --context NAME".to_owned()
        })?,
    };
    let ctx = merged
        .contexts
        .get(&name)
        .with_context(|| format!("context `{name}` not found in the kubeconfig"))?;
    let cluster_name = string(&ctx.value, "cluster")
        .with_context(|| format!("context `{name}` names no cluster"))?;
    let cluster = merged.clusters.get(cluster_name).with_context(|| {
        format!("cluster `{cluster_name}` (context `{name}`) not found in the kubeconfig")
    })?;
    let server = string(&cluster.value, "server")
        .with_context(|| format!("cluster `{cluster_name}` has no server"))?
        .trim_end_matches('/')
        .to_owned();
    let mut tls = Tls {
        ca_pem: bytes(
            cluster,
            "certificate-authority-data",
            "certificate-authority",
            "cluster CA certificate",
        )?,
        client: None,
        insecure: cluster
            .value
            .get("insecure-skip-tls-verify")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    let mut auth = Auth::None;
    if let Some(user_name) = string(&ctx.value, "user") {
        let user = merged.users.get(user_name).with_context(|| {
            format!("user `{user_name}` (context `{name}`) not found in the kubeconfig")
        })?;
        let cert = bytes(
            user,
            "client-certificate-data",
            "client-certificate",
            "client certificate",
        )?;
        let key = bytes(user, "client-key-data", "client-key", "client key")?;
        if let (Some(cert), Some(key)) = (cert, key) {
            tls.client = Some((cert, key));
        }
        if let Some(token) = string(&user.value, "token") {
            auth = Auth::Bearer(token.to_owned());
        } else if let Some(file) = string(&user.value, "tokenFile") {
            let token = fs_err::read_to_string(user.dir.join(file))
                .context("failed to read the kubeconfig token file")?;
            auth = Auth::Bearer(token.trim().to_owned());
        } else if let (Some(u), Some(p)) = (
            string(&user.value, "username"),
            string(&user.value, "password"),
        ) {
            auth = Auth::Basic(u.to_owned(), p.to_owned());
        } else if let Some(exec) = user.value.get("exec") {
            let (token, client) = run_exec(exec, user_name, &user.dir)?;
            if let Some(token) = token {
                auth = Auth::Bearer(token);
            }
            if client.is_some() {
                tls.client = client;
            }
        } else if let Some(provider) = user.value.get("auth-provider") {
            let config = provider.get("config");
            let token =
                config.and_then(|c| string(c, "id-token").or_else(|| string(c, "access-token")));
            match token {
                Some(t) => auth = Auth::Bearer(t.to_owned()),
                None => bail!(
                    "user `{user_name}` uses an auth-provider kseal cannot run: refresh the \
                     token with kubectl first, or seal offline with --cert FILE"
                ),
            }
        }
    }
    Ok(Connection {
        context: name,
        server,
        tls,
        auth,
    })
}

type ClientPair = Option<(Vec<u8>, Vec<u8>)>;

/// Runs a client-go credential plugin (`users[].user.exec`), e.g. `aws eks get-token`. A
/// relative command with a path separator is relative to the directory of the kubeconfig file
/// that defines the user, as client-go resolves it; a bare name is looked up in `PATH`.
fn run_exec(exec: &Value, user: &str, dir: &Path) -> Result<(Option<String>, ClientPair)> {
    let command = string(exec, "command")
        .with_context(|| format!("user `{user}`: exec plugin has no command"))?;
    let api_version = string(exec, "apiVersion").unwrap_or("client.authentication.k8s.io/v1beta1");
    let program = if command.contains(std::path::MAIN_SEPARATOR) && Path::new(command).is_relative()
    {
        dir.join(command)
    } else {
        PathBuf::from(command)
    };
    let mut cmd = std::process::Command::new(program);
    for arg in exec
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(a) = arg.as_str() {
            cmd.arg(a);
        }
    }
    for var in exec
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let (Some(n), Some(v)) = (
            string(var, "name"),
            var.get("value").and_then(Value::as_str),
        ) {
            cmd.env(n, v);
        }
    }
    cmd.env(
        "KUBERNETES_EXEC_INFO",
        format!(
            r#"{{"apiVersion":"{api_version}","kind":"ExecCredential","spec":{{"interactive":false}}}}"#
        ),
    );
    cmd.stdin(std::process::Stdio::null());
    cmd.stderr(std::process::Stdio::inherit());
    let out = cmd.output().with_context(|| {
        format!("failed to run the credential plugin `{command}` of user `{user}`")
    })?;
    if !out.status.success() {
        bail!(
            "the credential plugin `{command}` of user `{user}` failed ({})",
            out.status
        );
    }
    let cred: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!("the credential plugin `{command}` did not print an ExecCredential")
    })?;
    let status = &cred["status"];
    let token = status["token"].as_str().map(str::to_owned);
    let client = match (
        status["clientCertificateData"].as_str(),
        status["clientKeyData"].as_str(),
    ) {
        (Some(c), Some(k)) => Some((c.as_bytes().to_vec(), k.as_bytes().to_vec())),
        _ => None,
    };
    if token.is_none() && client.is_none() {
        bail!(
            "the credential plugin `{command}` returned neither a token nor a client certificate"
        );
    }
    Ok((token, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_server_token_ca_and_namespace_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        fs_err::write(dir.path().join("ca.pem"), "CA").unwrap();
        fs_err::write(dir.path().join("token"), "abc\n").unwrap();
        let config = dir.path().join("config");
        fs_err::write(
            &config,
            "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n- name: c\n  cluster:\n    server: https://k.example:6443/\n    certificate-authority: ca.pem\nusers:\n- name: u\n  user:\n    tokenFile: token\ncontexts:\n- name: dev\n  context:\n    cluster: c\n    user: u\n    namespace: team-a\n",
        )
        .unwrap();
        let conn = connect(Some(&config), None).unwrap();
        assert_eq!(conn.server, "https://k.example:6443");
        assert_eq!(conn.tls.ca_pem.as_deref(), Some(b"CA".as_slice()));
        assert!(matches!(conn.auth, Auth::Bearer(ref t) if t == "abc"));
        assert_eq!(
            context_namespace(Some(&config), None),
            Some(ContextNamespace {
                namespace: "team-a".into(),
                context: "dev".into(),
                file: config.clone(),
            })
        );
        let err = connect(Some(&config), Some("prod")).err().unwrap();
        assert_eq!(
            err.to_string(),
            "context `prod` not found in the kubeconfig"
        );
    }
}
