//! `abrq`: durable fan-out delivery.

mod cli;
mod commands;
mod logging;
mod report;
mod server;

use clap::Parser;

/// Every runtime thread's stack: a 20,000-level JSON value needs a few MB.
const THREAD_STACK: usize = 64 << 20;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let default_filter = match cli.command {
        // abrq's own events only: the checklist gives each root cause
        cli::Command::Check { .. } => "abrq=info,abrq::kafka=off",
        _ => "info",
    };
    logging::init(cli.log_format, default_filter);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // a database value nested thousands of levels deep is encoded,
        // compared and freed by recursion: room for it (reserved, not
        // used, until a value needs it)
        .thread_stack_size(THREAD_STACK)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(commands::dispatch(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
