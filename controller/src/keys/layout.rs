//! How key Secrets are laid out (Bitnami's layout), and the names the controller's writers
//! share. A leaf module: the key loader, the key-source mirror and the reconciler all read
//! these, and none of them imports another for them.

/// `tls.key`: the PEM private key in a key Secret.
pub const PRIVATE_KEY_ITEM: &str = "tls.key";
/// `tls.crt`: the PEM certificate in a key Secret.
pub const CERTIFICATE_ITEM: &str = "tls.crt";
/// Type of key Secrets.
pub const KEY_SECRET_TYPE: &str = "kubernetes.io/tls";
/// Reporter name of the controller's events.
pub const REPORTER: &str = "kseal-controller";
/// Label on key Secrets mirrored from a fleet key ring (`--key-source`).
pub const MIRROR_LABEL: &str = "kseal.dev/mirror";
