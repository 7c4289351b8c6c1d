//! The same build information as the CLI's (`KSEAL_BUILD_COMMIT`, `KSEAL_BUILD_TARGET`,
//! `KSEAL_BUILD_DATE`), from the same script: see `cli/build.rs`.

#[path = "../cli/build.rs"]
mod build_info;

fn main() -> std::process::ExitCode {
    // Cargo reads a build script's directives from its stdout.
    #[allow(clippy::print_stdout)]
    {
        println!("cargo:rerun-if-changed=../cli/build.rs");
    }
    build_info::main()
}
