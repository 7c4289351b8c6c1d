//! The controller's integration tests, one binary (each file was a binary of its own: every
//! one linked kube, the test kit and the AWS SDK again).
//!
//! Each module runs against kseal's in-process test API server and, where it says so, the
//! reference kube-apiserver (`KSEAL_REFAPI_KUBECONFIG`) and the Secrets Manager emulator.

#[path = "../common/mod.rs"]
mod common;

mod affinity;
mod binary;
mod bitnami;
mod bound_template;
#[cfg(target_os = "linux")]
mod connections;
mod fleet_readyz;
#[cfg(target_os = "linux")]
mod flood;
mod flow;
mod http;
mod key_source;
mod leader;
mod loading;
mod log_lines;
mod outage;
mod reconcile;
mod renewal;
mod scrub;
mod store_recovery;
mod value_budget;
