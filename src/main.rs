use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = herd::cli::Cli::parse();
    herd::init_tracing(cli.verbose, cli.quiet);
    match herd::commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("herd: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
