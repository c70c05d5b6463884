//! `herd man`: the man pages, generated from the command line's definition: herd.1 on stdout,
//! or one page per subcommand written to a folder.

use std::path::Path;

use crate::cli::Cli;
use crate::error::{exit, Error};

pub(super) fn man_command(out_dir: Option<&Path>) -> Result<u8, Error> {
    let cmd = <Cli as clap::CommandFactory>::command();
    match out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .and_then(|_| clap_mangen::generate_to(cmd, dir))
                .map_err(Error::io(format!("cannot write man pages to {}", dir.display())))?;
            eprintln!("herd: wrote herd.1 and one page per subcommand to {}", dir.display());
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out).map_err(Error::io("cannot render the man page"))?;
            super::out(&String::from_utf8_lossy(&out))?;
        }
    }
    Ok(exit::OK)
}
