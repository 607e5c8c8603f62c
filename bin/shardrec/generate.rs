//! `shardrec generate`: the man pages and shell completions, made from the
//! same clap definitions the command line is read with, so they say what
//! shardrec takes, no more and no less (packaging/build-deb installs them).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use clap_complete::Shell;

use crate::flags::{self, Generated};

/// What each page refers its reader to.
const SEE_ALSO: &[(&str, &str)] = &[
    (
        "shardrec",
        "shardrec-record(1), shardrec-sched(1), shardrec-lock(1), shardrec-kmem(1), shardrec-kwork(1), shardrec-trace(1), shardrec-mem(1), shardrec-c2c(1), shardrec-timechart(1), shardrec-merge(1), shardrec-archive(1), perf(1)",
    ),
    (
        "shardrec-sched",
        "shardrec-record(1), perf-sched(1), perf-record(1)",
    ),
    ("shardrec-lock", "shardrec-record(1), perf-lock(1), perf-record(1)"),
    ("shardrec-kmem", "shardrec-record(1), perf-kmem(1), perf-record(1)"),
    ("shardrec-kwork", "shardrec-record(1), perf-kwork(1), perf-record(1)"),
    ("shardrec-trace", "shardrec-record(1), perf-trace(1), perf-record(1)"),
    ("shardrec-mem", "shardrec-record(1), perf-mem(1), perf-record(1)"),
    ("shardrec-c2c", "shardrec-record(1), perf-c2c(1), perf-record(1)"),
    ("shardrec-timechart", "shardrec-record(1), perf-timechart(1), perf-record(1)"),
    (
        "shardrec-record",
        "shardrec-merge(1), perf-record(1), perf-report(1), perf-script(1)",
    ),
    ("shardrec-merge", "shardrec-record(1), perf-report(1)"),
    ("shardrec-archive", "perf-archive(1), perf-buildid-cache(1)"),
];

/// Writes `what`: the man pages into `dir`, or a shell's completions to
/// standard output.
pub fn generate(what: Generated, dir: Option<&Path>) -> io::Result<()> {
    let mut command = flags::command();
    let shell = match what {
        Generated::Man => {
            let dir = dir.ok_or_else(|| io::Error::other("man pages need a directory"))?;
            return man_pages(command, dir);
        }
        Generated::Bash => Shell::Bash,
        Generated::Zsh => Shell::Zsh,
        Generated::Fish => Shell::Fish,
    };
    // Written whole, then sent: clap_complete panics on a write error.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "shardrec", &mut script);
    io::stdout().lock().write_all(&script)
}

/// `shardrec.1` and one page for each command shown in `shardrec -h`
/// (`shardrec-record.1`, ...).
fn man_pages(mut command: clap::Command, dir: &Path) -> io::Result<()> {
    // Built, each subcommand is named for its page: `shardrec-record`,
    // invoked as `shardrec record`.
    command.build();
    let subcommands = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help");
    let pages: Vec<clap::Command> = subcommands.cloned().collect();
    for page in std::iter::once(command).chain(pages) {
        let name = page
            .get_display_name()
            .unwrap_or(page.get_name())
            .to_string();
        let mut out = File::create(dir.join(format!("{name}.1")))?;
        clap_mangen::Man::new(page)
            .source(format!("shardrec {}", env!("CARGO_PKG_VERSION")))
            .manual("shardrec manual")
            .render(&mut out)?;
        if let Some((_, refs)) = SEE_ALSO.iter().find(|(page, _)| *page == name) {
            writeln!(out, ".SH \"SEE ALSO\"\n{refs}")?;
        }
    }
    Ok(())
}
