//! Git URL rules: which URLs are SSH, and the Secret name a repository URL gives.

pub(super) fn is_ssh_url(url: &str) -> bool {
    url.starts_with("ssh://") || (url.contains('@') && !url.contains("://"))
}

/// A Secret name derived from a repository URL: `repo-github-com-acme-fleet`.
pub(crate) fn name_from_url(prefix: &str, url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    let mut name = String::from(prefix);
    for c in rest.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    name.truncate(63);
    name.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_derive_from_repository_urls() {
        assert_eq!(
            name_from_url("repo-", "git@github.com:acme/fleet.git"),
            "repo-github-com-acme-fleet"
        );
        assert_eq!(
            name_from_url("creds-", "https://github.com/acme"),
            "creds-github-com-acme"
        );
        assert!(name_from_url("repo-", &"a".repeat(200)).len() <= 63);
    }
}
