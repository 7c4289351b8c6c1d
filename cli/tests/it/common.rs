//! Helpers shared by the CLI test binaries.
#![allow(dead_code, unreachable_pub)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn snapshot(&self) -> String {
        format!(
            "exit: {}\n----- stdout -----\n{}\n----- stderr -----\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .canonicalize()
        .expect("fixtures exist")
}

/// Escapes a literal for use in an insta filter regex.
pub fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

pub fn kseal(args: &[&str], stdin: Option<&str>, cwd: &Path) -> Run {
    kseal_env(args, stdin, cwd, &[])
}

/// Runs `kseal` with a clean environment plus `envs`.
pub fn kseal_env(args: &[&str], stdin: Option<&str>, cwd: &Path, envs: &[(&str, &str)]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kseal"))
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("COLUMNS", "100")
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kseal");
    if let Some(text) = stdin {
        // kseal may fail (and exit) before reading its input: a closed pipe is fine.
        match child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
        {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.expect("write stdin"),
        }
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("kseal runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

macro_rules! snap {
    ($name:expr, $run:expr) => {
        let fixtures_re = regex_escape(&fixtures().display().to_string());
        insta::with_settings!({filters => vec![
            (fixtures_re.as_str(), "[FIXTURES]"),
            (r"SHA256:[A-Za-z0-9+/]{43}", "SHA256:[FINGERPRINT]"),
            (r"in \d+\.\d s", "in [TIME] s"),
            (r"/tmp/\.tmp[A-Za-z0-9]+", "[TMP]"),
            (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
            (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "[DATE]"),
        ]}, {
            insta::assert_snapshot!($name, $run.snapshot());
        });
    };
}

/// Every request a [`fake_http`] server answered, as `METHOD PATH BODY`.
pub type Requests = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// An HTTP/1.1 stand-in on 127.0.0.1 for an API server and its service proxy: one request per
/// connection, answered by `answer(method, path, body)` with a status and a body, each request
/// recorded. Returns its port and the record.
pub fn fake_http<F>(answer: F) -> (u16, Requests)
where
    F: Fn(&str, &str, &str) -> (u16, String) + Send + 'static,
{
    use std::io::{BufRead as _, Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local address").port();
    let seen = Requests::default();
    let log = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = std::io::BufReader::new(stream);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let body = String::from_utf8_lossy(&body).into_owned();
            let mut words = head.split_whitespace();
            let method = words.next().unwrap_or("").to_owned();
            let path = words.next().unwrap_or("").to_owned();
            let (status, reply) = answer(&method, &path, &body);
            log.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(format!("{method} {path} {body}"));
            let stream = reader.get_mut();
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
            let _ = stream.flush();
        }
    });
    (port, seen)
}
