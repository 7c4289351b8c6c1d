//! `kseal unseal`: recovery with local private keys (prints plaintext).

use anyhow::Result;

use crate::args::UnsealArgs;
use crate::keysource::keys::load_ring;
use crate::manifest::Input;
use crate::opening::unseal_input;

pub(crate) fn run(args: UnsealArgs) -> Result<()> {
    let ring = load_ring(&args.keys.keys)?;
    let inputs = Input::read_all(&args.files.all())?;
    let format = args.format.unwrap_or_else(|| inputs[0].format());
    // Everything is unsealed before anything is printed.
    let out = inputs
        .iter()
        .map(|input| unseal_input(input, &ring, format))
        .collect::<Result<String>>()?;
    crate::output::stdout(&out)
}
