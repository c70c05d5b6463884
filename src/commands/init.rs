//! `herd init`: a starter config written where asked, never over an existing file unless
//! `--force`.

use crate::cli::InitArgs;
use crate::error::{exit, Error};

/// The starter `herd init` writes: the reference example, which a test keeps valid.
const STARTER: &str = include_str!("../../cluster.example.toml");

pub(super) fn init_command(args: InitArgs) -> Result<u8, Error> {
    use std::io::Write;
    let path = &args.config;
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = match options.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::Usage(format!(
                "{} already exists; not overwriting it (--force does)",
                path.display()
            )));
        }
        other => other.map_err(Error::io(format!("cannot create {}", path.display())))?,
    };
    file.write_all(STARTER.as_bytes()).map_err(Error::io(format!("cannot write {}", path.display())))?;
    eprintln!(
        "herd: wrote {}: edit [[nodes]] and [job], then `herd plan -c {0}` shows what will run where",
        path.display()
    );
    Ok(exit::OK)
}
