//! What the machine allows this process: CPUs (the cgroup quota included) and the open-file
//! limit. A leaf: it imports nothing from the crate.

/// CPUs this process may use (the cgroup quota included), at least 1.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The soft open-file limit (`RLIMIT_NOFILE`) of this process, `None` when unlimited or
/// unknown.
pub fn nofile_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Raises the soft open-file limit to the hard limit; returns the limits before and after
/// (`None`: unlimited). Containers often start with a soft limit of 1 024, far below what a
/// server that holds hundreds of connections needs.
pub fn raise_nofile_limit() -> std::io::Result<(Option<u64>, Option<u64>)> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let old = getrlimit(Resource::Nofile);
        if old.current == old.maximum {
            return Ok((old.current, old.current));
        }
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: old.maximum,
                maximum: old.maximum,
            },
        )?;
        Ok((old.current, getrlimit(Resource::Nofile).current))
    }
    #[cfg(not(unix))]
    {
        Ok((None, None))
    }
}
