//! `herd completions`: the shell's completion script, generated from the command line's
//! definition, on stdout.

use crate::cli::Cli;
use crate::error::{exit, Error};

pub(super) fn completions_command(shell: clap_complete::Shell) -> Result<u8, Error> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "herd", &mut script);
    super::out(&String::from_utf8_lossy(&script))?;
    Ok(exit::OK)
}
