//! perf's tools that record: `perf sched record` (and `lock`, `kmem`,
//! `kwork`, `trace`, `timechart`) runs perf record with its own words
//! before the user's, as
//! perf's builtin passes them on, so `shardrec TOOL record ARGS` is
//! `shardrec record WORDS ARGS`, read by the one parser of record's
//! options. Only what a tool records is shardrec's: perf's own reports
//! (`perf sched latency`, `perf lock report` ...) read the file.

use clap::{Args, Subcommand};
use shardrec_sys::tracefs;

use super::memory::{self, MemoryEvents};

/// A perf tool whose `record` shardrec takes, with the tool's own options
/// (given before `record`, as perf's tool reads them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tool {
    /// `perf sched record`.
    Sched,
    /// `perf lock record`.
    Lock,
    /// `perf kmem [--slab] [--page] record`.
    Kmem { slab: bool, page: bool },
    /// `perf kwork [-k CLASSES] record`: the classes' tracepoints, in the
    /// order given (every class without `-k`).
    Kwork { classes: Vec<KworkClass> },
    /// `perf trace record`: the system calls.
    Trace,
    /// `perf mem [-t load,store] [-p] [--data-page-size] [-C CPUS]
    /// record [--ldlat N] [-U] [-K]`.
    Mem(MemRecord),
    /// `perf c2c record [--ldlat N] [-u] [-k]`.
    C2c(MemRecord),
    /// `perf timechart record [-P|-T] [-g]`.
    Timechart {
        /// `-P`: the power events only.
        power_only: bool,
        /// `-T`: the tasks' events only.
        tasks_only: bool,
        /// `-g`: callchains.
        callchain: bool,
        /// `-I`: the I/O system calls only (perf takes neither `-P`, `-T`
        /// nor `-g` with it).
        io_only: bool,
    },
}

/// The tools by name, as typed.
pub const NAMES: &[&str] = &[
    "sched",
    "lock",
    "kmem",
    "kwork",
    "trace",
    "mem",
    "c2c",
    "timechart",
];

/// What `perf mem record` and `perf c2c record` are asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemRecord {
    /// `-t`: the operations sampled (c2c: both).
    pub operations: memory::Operations,
    /// `-p`: physical addresses too (c2c: always).
    pub phys_data: bool,
    /// `--data-page-size`.
    pub data_page_size: bool,
    /// `-C`: the CPUs.
    pub cpus: Option<String>,
    /// `--ldlat`: the least latency of a load sampled, in cycles.
    pub ldlat: u32,
    /// `-U` (c2c: `-u`): user space only.
    pub all_user: bool,
    /// `-K` (c2c: `-k`): the kernel only.
    pub all_kernel: bool,
    /// `-e`: the events by perf's tags (`ldlat-loads`, `mem-ldst`), in
    /// place of the operations.
    pub events: Option<String>,
}

/// A class of kernel work `perf kwork` follows (perf 6.1's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KworkClass {
    Irq,
    Softirq,
    Workqueue,
}

impl KworkClass {
    const ALL: [KworkClass; 3] = [KworkClass::Irq, KworkClass::Softirq, KworkClass::Workqueue];

    fn name(self) -> &'static str {
        match self {
            KworkClass::Irq => "irq",
            KworkClass::Softirq => "softirq",
            KworkClass::Workqueue => "workqueue",
        }
    }

    fn tracepoints(self) -> &'static [&'static str] {
        match self {
            KworkClass::Irq => &["irq:irq_handler_entry", "irq:irq_handler_exit"],
            KworkClass::Softirq => &["irq:softirq_raise", "irq:softirq_entry", "irq:softirq_exit"],
            KworkClass::Workqueue => &[
                "workqueue:workqueue_activate_work",
                "workqueue:workqueue_execute_start",
                "workqueue:workqueue_execute_end",
            ],
        }
    }
}

/// A tool's command line, as `shardrec TOOL ...` reads it.
#[derive(Subcommand)]
pub enum ToolAction {
    /// Record as perf sched record does (shardrec sched record [options] [-- cmd]), for perf sched latency, map and timehist to read.
    ///
    /// The events and options of perf 6.1's perf sched record (every CPU, raw samples, 4 MiB rings, each scheduler event counted: sched_switch, sched_stat_runtime, sched_process_fork, sched_wakeup_new, sched_migrate_task, sched_waking or sched_wakeup, and the schedstat events where the kernel has them), then perf record's options and the command given, as perf passes them on.
    Sched(ToolArgs),
    /// Record as perf lock record does (shardrec lock record [options] [-- cmd]), for perf lock report and perf lock contention to read.
    ///
    /// The events and options of perf 6.1's perf lock record (raw samples, 4 MiB rings, each event counted, only the tasks synthesized; lockdep's lock events where the kernel has them all, else lock:contention_begin and lock:contention_end), then perf record's options and the command given, as perf passes them on.
    Lock(ToolArgs),
    /// Record as perf kmem record does (shardrec kmem [--slab] [--page] record [options] [-- cmd]), for perf kmem stat to read.
    ///
    /// The events and options of perf 6.1's perf kmem record (every CPU, raw samples, each event counted; the slab allocator's events, and the page allocator's with --page), then perf record's options and the command given, as perf passes them on.
    Kmem(KmemArgs),
    /// Record as perf kwork record does (shardrec kwork [-k irq,softirq,workqueue] record [options] [-- cmd]), for perf kwork report, latency and timehist to read.
    ///
    /// The events and options of perf 6.1's perf kwork record (every CPU, raw samples, 4 MiB rings, each event counted; the tracepoints of each class of kernel work asked for, in that order), then perf record's options and the command given, as perf passes them on.
    Kwork(KworkArgs),
    /// Record as perf trace record does (shardrec trace record [options] [-- cmd]), for perf trace -i to read.
    ///
    /// The events and options of perf 6.1's perf trace record (raw samples, 4 MiB rings, each event counted, every system call's entry and exit), then perf record's options and the command given, as perf passes them on.
    Trace(ToolArgs),
    /// Record as perf mem record does (shardrec mem [-t load,store] [-p] [--data-page-size] [-C CPUS] record [--ldlat N] [-U] [-K] [options] [-- cmd]), for perf mem report to read.
    ///
    /// The events and options of perf 6.1's perf mem record: the memory-sampling events of this CPU (AMD's ibs_op//, Intel's cpu/mem-loads,ldlat=30/P and cpu/mem-stores/P), each sample's weight and data address; then perf record's options and the command given, as perf passes them on. Where the CPU has none, it fails as perf does: memory events not supported.
    Mem(MemArgs),
    /// Record as perf c2c record does (shardrec c2c record [--ldlat N] [-u] [-k] [options] [-- cmd]), for perf c2c report to read.
    ///
    /// The events and options of perf 6.1's perf c2c record: loads and stores sampled by this CPU's memory-sampling events, with weights, data and physical addresses and the CPU of each sample; then perf record's options and the command given, as perf passes them on. Where the CPU has none, it fails as perf does: memory events not supported.
    C2c(C2cArgs),
    /// Record as perf timechart record does (shardrec timechart record [-P|-T] [-g] [-- cmd]), for perf timechart to read.
    ///
    /// The events and options of perf 6.1's perf timechart record (every CPU, raw samples, each event counted; the scheduler's wakeups and switches unless -P, the CPUs' frequency and idle states unless -T, callchains with -g). As perf's, it takes no other option of perf record.
    Timechart(TimechartArgs),
}

impl ToolAction {
    /// `mem|c2c record -e list`: the memory events perf would list, or
    /// its refusal; `None` for anything else.
    pub fn listing(&self) -> Option<Result<String, String>> {
        let memory = match self {
            ToolAction::Mem(MemArgs {
                command: MemCommand::Record { memory, .. },
                ..
            }) => memory,
            ToolAction::C2c(C2cArgs {
                command: C2cCommand::Record { memory, .. },
            }) => memory,
            _ => return None,
        };
        (memory.event.as_deref() == Some("list")).then(|| MemoryEvents::here().listing())
    }

    /// The tool, with its own options, and what follows its `record` as
    /// `shardrec record` takes it; or why the tool's options are refused.
    pub fn tool(&self) -> Result<(Tool, Vec<String>), String> {
        let plain = |tool, args: &ToolArgs| Ok((tool, args.command.record_args().to_vec()));
        match self {
            ToolAction::Sched(args) => plain(Tool::Sched, args),
            ToolAction::Lock(args) => plain(Tool::Lock, args),
            ToolAction::Trace(args) => plain(Tool::Trace, args),
            ToolAction::Kmem(args) => Ok((args.tool(), args.command.record_args().to_vec())),
            ToolAction::Kwork(args) => Ok((args.tool(), args.command.record_args().to_vec())),
            ToolAction::Mem(args) => args.tool(),
            ToolAction::C2c(args) => Ok(args.tool()),
            ToolAction::Timechart(args) => args.tool(),
        }
    }
}

/// `shardrec sched|lock ...`: the tool's one subcommand shardrec takes.
#[derive(Args)]
pub struct ToolArgs {
    #[command(subcommand)]
    pub command: ToolCommand,
}

/// `shardrec kmem [--slab] [--page] record ...`.
#[derive(Args)]
pub struct KmemArgs {
    /// Record the slab allocator's events (the default)
    #[arg(long = "slab")]
    pub slab: bool,
    /// Record the page allocator's events
    #[arg(long = "page")]
    pub page: bool,
    #[command(subcommand)]
    pub command: ToolCommand,
}

/// `-k`'s classes, in the order given.
#[derive(Clone, Debug)]
pub struct KworkList(Vec<KworkClass>);

/// `shardrec kwork [-k CLASSES] record ...`.
#[derive(Args)]
pub struct KworkArgs {
    /// The kernel work to record: irq, softirq, workqueue (comma-separated; default: all)
    #[arg(short = 'k', long = "kwork", value_name = "kwork", value_parser = kwork_classes)]
    pub kwork: Option<KworkList>,
    #[command(subcommand)]
    pub command: ToolCommand,
}

/// `shardrec mem [-t TYPES] [-p] [--data-page-size] [-C CPUS] record ...`.
#[derive(Args)]
pub struct MemArgs {
    /// The memory operations to sample: load, store (comma-separated; default: both)
    #[arg(short = 't', long = "type", value_name = "type", value_parser = memory::operations)]
    pub operations: Option<memory::Operations>,
    /// Record each sample's physical data address too
    #[arg(short = 'p', long = "phys-data")]
    pub phys_data: bool,
    /// Record the page size of each sample's data address
    #[arg(long = "data-page-size")]
    pub data_page_size: bool,
    /// The CPUs to record on (perf's list: 0-3,7)
    #[arg(short = 'C', long = "cpu", value_name = "cpu")]
    pub cpus: Option<String>,
    #[command(subcommand)]
    pub command: MemCommand,
}

/// `shardrec c2c record ...`.
#[derive(Args)]
pub struct C2cArgs {
    #[command(subcommand)]
    pub command: C2cCommand,
}

/// What `shardrec mem` is asked to do.
#[derive(Subcommand)]
pub enum MemCommand {
    /// Record as perf mem record does: this CPU's memory-sampling events, each sample's weight and data address, then perf record's options and the command (shardrec record -h lists them). perf mem report reads the file.
    Record {
        #[command(flatten)]
        memory: MemoryRecordArgs,
        /// Sample user space only (perf 6.1 takes -U here but drops it: shardrec does what it says)
        #[arg(short = 'U', long = "all-user")]
        all_user: bool,
        /// Sample the kernel only
        #[arg(short = 'K', long = "all-kernel")]
        all_kernel: bool,
    },
}

/// What `shardrec c2c` is asked to do.
#[derive(Subcommand)]
pub enum C2cCommand {
    /// Record as perf c2c record does: loads and stores by this CPU's memory-sampling events, with weights, data and physical addresses and each sample's CPU, then perf record's options and the command (shardrec record -h lists them). perf c2c report reads the file.
    Record {
        #[command(flatten)]
        memory: MemoryRecordArgs,
        /// Sample user space only
        #[arg(short = 'u', long = "all-user")]
        all_user: bool,
        /// Sample the kernel only
        #[arg(short = 'k', long = "all-kernel")]
        all_kernel: bool,
    },
}

/// What `mem record` and `c2c record` both take.
#[derive(Args)]
pub struct MemoryRecordArgs {
    /// The memory events by perf's tags (-e list lists them): ldlat-loads, ldlat-stores (Intel), mem-ldst (AMD)
    #[arg(short = 'e', long = "event", value_name = "event")]
    event: Option<String>,
    /// The least latency of a load sampled, in cycles (Intel's mem-loads)
    #[arg(long = "ldlat", value_name = "n", default_value_t = memory::LDLAT)]
    ldlat: u32,
    /// perf record's options and the command, as shardrec record takes them
    #[arg(
        value_name = "RECORD OPTIONS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<String>,
}

impl MemoryRecordArgs {
    /// Loads and stores (or the events named), user space or the kernel
    /// only as asked, on every CPU the user's options say.
    fn record(&self, all_user: bool, all_kernel: bool) -> MemRecord {
        MemRecord {
            operations: memory::Operations::ALL,
            phys_data: false,
            data_page_size: false,
            cpus: None,
            ldlat: self.ldlat,
            all_user,
            all_kernel,
            events: self.event.clone(),
        }
    }
}

impl MemArgs {
    /// The tool, with what follows its `record`.
    pub fn tool(&self) -> Result<(Tool, Vec<String>), String> {
        let MemCommand::Record {
            memory,
            all_user,
            all_kernel,
        } = &self.command;
        let mem = MemRecord {
            operations: self.operations.unwrap_or(memory::Operations::ALL),
            phys_data: self.phys_data,
            data_page_size: self.data_page_size,
            cpus: self.cpus.clone(),
            ..memory.record(*all_user, *all_kernel)
        };
        Ok((Tool::Mem(mem), memory.args.clone()))
    }
}

impl C2cArgs {
    /// The tool, with what follows its `record`: loads and stores, with
    /// physical addresses.
    pub fn tool(&self) -> (Tool, Vec<String>) {
        let C2cCommand::Record {
            memory,
            all_user,
            all_kernel,
        } = &self.command;
        let c2c = MemRecord {
            phys_data: true,
            ..memory.record(*all_user, *all_kernel)
        };
        (Tool::C2c(c2c), memory.args.clone())
    }
}

/// `shardrec timechart record [-P|-T] [-g] [--] [cmd]`: timechart's own
/// options after `record`, as perf reads them, then the command.
#[derive(Args)]
pub struct TimechartArgs {
    #[command(subcommand)]
    pub command: TimechartCommand,
}

/// What `shardrec timechart` is asked to do.
#[derive(Subcommand)]
pub enum TimechartCommand {
    /// Record as perf timechart record does: every CPU, raw samples, the scheduler's wakeups and switches and the CPUs' frequency and idle states; perf timechart reads the file.
    Record {
        /// Record the power events only
        #[arg(short = 'P', long = "power-only", conflicts_with = "tasks_only")]
        power_only: bool,
        /// Record the tasks' events only
        #[arg(short = 'T', long = "tasks-only")]
        tasks_only: bool,
        /// Record callchains
        #[arg(short = 'g', long = "callchain")]
        callchain: bool,
        /// Record the I/O system calls only (disk, network, poll), which perf timechart -I draws
        #[arg(short = 'I', long = "io-only")]
        io_only: bool,
        /// The command, and perf record's options after `--` only where perf takes them (none: perf timechart record takes no other)
        #[arg(value_name = "COMMAND", trailing_var_arg = true)]
        command: Vec<String>,
    },
}

impl TimechartArgs {
    /// The tool and the command (after `--`: perf timechart record takes
    /// no record option of the user's), or why `-I` is not taken.
    pub fn tool(&self) -> Result<(Tool, Vec<String>), String> {
        let TimechartCommand::Record {
            power_only,
            tasks_only,
            callchain,
            io_only,
            command,
        } = &self.command;
        let tool = Tool::Timechart {
            power_only: *power_only,
            tasks_only: *tasks_only,
            callchain: *callchain,
            io_only: *io_only,
        };
        let dashes = (!command.is_empty()).then(|| "--".to_string());
        Ok((
            tool,
            dashes.into_iter().chain(command.iter().cloned()).collect(),
        ))
    }
}

/// What a tool is asked to do.
#[derive(Subcommand)]
pub enum ToolCommand {
    /// Record as perf's tool records: its events and options, then perf record's options and the command given here (shardrec record -h lists them). perf's tool reads the file.
    #[command(disable_help_flag = true)]
    Record {
        /// perf record's options and the command, as shardrec record takes them
        #[arg(
            value_name = "RECORD OPTIONS",
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        args: Vec<String>,
    },
}

impl ToolCommand {
    /// What follows `record`.
    pub fn record_args(&self) -> &[String] {
        let ToolCommand::Record { args } = self;
        args
    }
}

impl KmemArgs {
    /// The tool, as perf's `cmd_kmem` reads its options: the slab's
    /// events when neither is asked for.
    pub fn tool(&self) -> Tool {
        Tool::Kmem {
            slab: self.slab || !self.page,
            page: self.page,
        }
    }
}

impl KworkArgs {
    /// The tool with the classes asked for, in their order.
    pub fn tool(&self) -> Tool {
        let classes = self.kwork.clone().map(|c| c.0).filter(|c| !c.is_empty());
        Tool::Kwork {
            classes: classes.unwrap_or_else(|| KworkClass::ALL.to_vec()),
        }
    }
}

/// `-k`: class names split at commas or spaces, as perf's `strtok_r(", ")`.
fn kwork_classes(text: &str) -> Result<KworkList, String> {
    let words = text.split([',', ' ']).filter(|w| !w.is_empty());
    let classes = words.map(|word| {
        let class = KworkClass::ALL.into_iter().find(|c| c.name() == word);
        class.ok_or_else(|| format!("unknown kwork '{word}' (irq, softirq, workqueue)"))
    });
    classes.collect::<Result<_, _>>().map(KworkList)
}

impl Tool {
    /// The tool's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Tool::Sched => "sched",
            Tool::Lock => "lock",
            Tool::Kmem { .. } => "kmem",
            Tool::Kwork { .. } => "kwork",
            Tool::Trace => "trace",
            Tool::Mem(_) => "mem",
            Tool::C2c(_) => "c2c",
            Tool::Timechart { .. } => "timechart",
        }
    }

    /// The words `perf TOOL record` puts before the user's (perf 6.1's
    /// `builtin-*.c`), with the events this kernel has; or why the tool
    /// cannot record here, as perf says it.
    pub fn record_words(&self) -> Result<Vec<String>, String> {
        let exists = Tracepoints::read();
        let words = match self {
            Tool::Sched => sched_words(&exists),
            Tool::Lock => lock_words(&exists)?,
            Tool::Kmem { slab, page } => kmem_words(&exists, *slab, *page),
            Tool::Kwork { classes } => kwork_words(classes),
            Tool::Trace => trace_words(&exists)?,
            Tool::Mem(record) | Tool::C2c(record) => {
                return memory_words(record, &MemoryEvents::here())
            }
            Tool::Timechart { io_only: true, .. } => return Ok(timechart_io_words(&exists)),
            Tool::Timechart {
                power_only,
                tasks_only,
                callchain,
                ..
            } => timechart_words(!*power_only, !*tasks_only, *callchain),
        };
        Ok(words.into_iter().map(String::from).collect())
    }

    /// The command line that records as the tool does: `shardrec record`,
    /// the tool's words, then `args`.
    pub fn record_command_line(
        &self,
        program: &str,
        args: &[String],
    ) -> Result<Vec<String>, String> {
        let head = [program.to_string(), "record".to_string()];
        let words = self.record_words()?;
        Ok(head
            .into_iter()
            .chain(words)
            .chain(args.iter().cloned())
            .collect())
    }
}

/// `shardrec TOOL COMMAND` with a command of perf's tool other than
/// `record` (`perf sched latency` reads a file: shardrec only records
/// it): the one line that says so.
pub fn other_than_record(args: &[String]) -> Option<String> {
    let at = args.iter().skip(1).position(|a| !a.starts_with('-'))? + 1;
    let tool = NAMES.iter().find(|&&name| name == args[at])?;
    let shardrec = super::command();
    let tool_command = shardrec.find_subcommand(tool)?;
    // The first word after the tool's own options (`kwork -k irq`, `mem -t
    // load`, their values passed over, as its clap definition says); an
    // option it does not have is clap's to refuse.
    let mut rest = args[at + 1..].iter();
    let command = loop {
        let word = rest.next()?;
        if !word.starts_with('-') {
            break word;
        }
        let option = tool_command.get_arguments().find(|a| {
            let long = a
                .get_long()
                .is_some_and(|l| word.strip_prefix("--") == Some(l));
            let short = a.get_short().is_some_and(|c| *word == format!("-{c}"));
            long || short
        });
        match option {
            Some(option) if option.get_action().takes_values() => drop(rest.next()),
            Some(_) => {}
            None => return None,
        }
    };
    if ["record", "help"].contains(&command.as_str()) {
        return None;
    }
    Some(format!(
        "{tool} takes only 'record' here: '{command}' is perf's, to read what it records (perf {tool} {command} -i FILE)"
    ))
}

/// Which tracepoints the kernel has, for the tools that choose by them
/// as perf does (`trace_event__tp_format`, `is_valid_tracepoint`).
struct Tracepoints(Option<std::path::PathBuf>);

impl Tracepoints {
    /// tracefs, mounted if it is not; where it cannot be, no tracepoint
    /// is found (and recording them says why).
    fn read() -> Tracepoints {
        Tracepoints(tracefs::root().ok())
    }

    /// Whether tracepoint `system:name` exists.
    fn has(&self, event: &str) -> bool {
        let Some((system, name)) = event.split_once(':') else {
            return false;
        };
        let dir = self
            .0
            .as_ref()
            .map(|root| tracefs::event_dir(root, system, name));
        dir.is_some_and(|dir| dir.join("format").is_file())
    }
}

/// `-e EVENT` for each of `events`.
fn each_event<'a>(events: &[&'a str]) -> Vec<&'a str> {
    events.iter().flat_map(|&event| ["-e", event]).collect()
}

/// `perf sched record`: every CPU, raw samples, 4 MiB rings (1024
/// pages), every event counted; `sched_waking` where the kernel has it,
/// else `sched_wakeup`; the schedstat events only where the kernel
/// exposes them (`CONFIG_SCHEDSTATS`).
fn sched_words(tracepoints: &Tracepoints) -> Vec<&'static str> {
    let mut words = vec!["-a", "-R", "-m", "1024", "-c", "1"];
    words.extend(each_event(&[
        "sched:sched_switch",
        "sched:sched_stat_runtime",
        "sched:sched_process_fork",
        "sched:sched_wakeup_new",
        "sched:sched_migrate_task",
    ]));
    words.extend(each_event(&[match tracepoints.has("sched:sched_waking") {
        true => "sched:sched_waking",
        false => "sched:sched_wakeup",
    }]));
    if tracepoints.has("sched:sched_stat_wait") {
        words.extend(each_event(&[
            "sched:sched_stat_wait",
            "sched:sched_stat_sleep",
            "sched:sched_stat_iowait",
        ]));
    }
    words
}

/// lockdep's events (`CONFIG_LOCKDEP`, `CONFIG_LOCK_STAT`).
const LOCKDEP: [&str; 4] = [
    "lock:lock_acquire",
    "lock:lock_acquired",
    "lock:lock_contended",
    "lock:lock_release",
];

/// The contention events every kernel since 5.19 has.
const CONTENTION: [&str; 2] = ["lock:contention_begin", "lock:contention_end"];

/// `perf lock record`: raw samples, 4 MiB rings, every event counted,
/// only the tasks synthesized; lockdep's events where the kernel has all
/// of them, else the contention events with their callers (frame
/// pointers, 8 deep: perf's `CONTENTION_STACK_DEPTH`).
fn lock_words(tracepoints: &Tracepoints) -> Result<Vec<&'static str>, String> {
    let mut words = vec!["-R", "-m", "1024", "-c", "1", "--synth", "task"];
    if LOCKDEP.iter().all(|e| tracepoints.has(e)) {
        words.extend(each_event(&LOCKDEP));
        return Ok(words);
    }
    if let Some(missing) = CONTENTION.iter().find(|e| !tracepoints.has(e)) {
        return Err(format!(
            "tracepoint {missing} is not enabled (the kernel has neither lockdep's lock events nor the contention ones)"
        ));
    }
    words.extend(each_event(&CONTENTION));
    words.extend(["--call-graph", "fp,8"]);
    Ok(words)
}

/// `perf kmem record`: every CPU, raw samples, every event counted; the
/// slab's events (with the `_node` ones of kernels before 6.1 where they
/// exist), the page allocator's with `--page`, and then callchains for
/// every event (perf's `-g`, for the page allocator's callers).
fn kmem_words(tracepoints: &Tracepoints, slab: bool, page: bool) -> Vec<&'static str> {
    let mut words = vec!["-a", "-R", "-c", "1"];
    if slab {
        words.extend(each_event(&[
            "kmem:kmalloc",
            "kmem:kfree",
            "kmem:kmem_cache_alloc",
            "kmem:kmem_cache_free",
        ]));
        if tracepoints.has("kmem:kmalloc_node") {
            words.extend(each_event(&[
                "kmem:kmalloc_node",
                "kmem:kmem_cache_alloc_node",
            ]));
        }
    }
    if page {
        words.push("-g");
        words.extend(each_event(&["kmem:mm_page_alloc", "kmem:mm_page_free"]));
    }
    words
}

/// `perf mem record` and `perf c2c record`: `-W` where loads are
/// sampled, `-d`, the physical address and page size where asked (c2c:
/// the physical address), the memory events, user or kernel only, and
/// the CPUs (perf 6.1's `__cmd_record` and `perf_c2c__record` order).
/// perf's c2c adds `--sample-cpu` too: shardrec's samples carry their
/// CPU always, so the attrs are the same without it (and without the
/// note that says so to whoever asks for it).
fn memory_words(mem: &MemRecord, events: &MemoryEvents) -> Result<Vec<String>, String> {
    let sampled = events.sampled(mem.operations_in(events)?, mem.ldlat)?;
    let mut words: Vec<String> = sampled.weight.then(|| "-W".into()).into_iter().collect();
    words.push("-d".into());
    words.extend(mem.phys_data.then(|| "--phys-data".into()));
    words.extend(mem.data_page_size.then(|| "--data-page-size".into()));
    words.extend(sampled.event_words());
    words.extend(privilege_words(mem));
    if let Some(cpus) = &mem.cpus {
        words.extend(["-C".into(), cpus.clone()]);
    }
    Ok(words)
}

impl MemRecord {
    /// The operations sampled: those the events named (`-e`) sample, or
    /// those asked for (`-t`).
    fn operations_in(&self, events: &MemoryEvents) -> Result<memory::Operations, String> {
        match &self.events {
            Some(tags) => events.operations_of(tags),
            None => Ok(self.operations),
        }
    }
}

/// `--all-user`, `--all-kernel`, as asked.
fn privilege_words(record: &MemRecord) -> impl Iterator<Item = String> {
    let user = record.all_user.then(|| "--all-user".to_string());
    user.into_iter()
        .chain(record.all_kernel.then(|| "--all-kernel".to_string()))
}

/// `perf kwork record`: every CPU, raw samples, 4 MiB rings, every event
/// counted; each class's tracepoints in turn.
fn kwork_words(classes: &[KworkClass]) -> Vec<&'static str> {
    let mut words = vec!["-a", "-R", "-m", "1024", "-c", "1"];
    for class in classes {
        words.extend(each_event(class.tracepoints()));
    }
    words
}

/// `perf trace record`: raw samples, 4 MiB rings, every event counted;
/// every system call's entry and exit (`raw_syscalls`, or `syscalls` on
/// kernels that name them so). perf's filter of its own pid is shardrec's
/// own: its processes are left out of tracepoints already.
fn trace_words(tracepoints: &Tracepoints) -> Result<Vec<&'static str>, String> {
    let mut words = vec!["-R", "-m", "1024", "-c", "1", "-e"];
    words.push(match () {
        () if tracepoints.has("raw_syscalls:sys_enter") => {
            "raw_syscalls:sys_enter,raw_syscalls:sys_exit"
        }
        () if tracepoints.has("syscalls:sys_enter") => "syscalls:sys_enter,syscalls:sys_exit",
        () => return Err("neither raw_syscalls nor syscalls events exist".into()),
    });
    Ok(words)
}

/// `perf timechart record`: every CPU, raw samples, every event counted;
/// callchains with `-g`; the tasks' wakeups and switches (not with
/// `-P`), the CPUs' frequency and idle states (not with `-T`).
fn timechart_words(tasks: bool, power: bool, callchain: bool) -> Vec<&'static str> {
    let mut words = vec!["-a", "-R", "-c", "1"];
    if callchain {
        words.push("-g");
    }
    if tasks {
        words.extend(each_event(&["sched:sched_wakeup", "sched:sched_switch"]));
    }
    if power {
        words.extend(each_event(&["power:cpu_frequency", "power:cpu_idle"]));
    }
    words
}

/// The system calls `perf timechart record -I` follows, each entry's
/// then each exit's, group by group: disk, network, poll (perf 6.1's
/// `timechart__io_record`).
const IO_CALLS: [&[&str]; 3] = [
    &[
        "read",
        "pread64",
        "readv",
        "preadv",
        "write",
        "pwrite64",
        "writev",
        "pwritev",
        "sync",
        "sync_file_range",
        "fsync",
        "msync",
    ],
    &[
        "recvfrom", "recvmmsg", "recvmsg", "sendto", "sendmsg", "sendmmsg",
    ],
    &[
        "epoll_pwait",
        "epoll_wait",
        "poll",
        "ppoll",
        "pselect6",
        "select",
    ],
];

/// `perf timechart record -I`: every CPU, raw samples, every event
/// counted; the I/O system calls' entries and exits this kernel has.
fn timechart_io_words(tracepoints: &Tracepoints) -> Vec<String> {
    let mut words: Vec<String> = ["-a", "-R", "-c", "1"].map(String::from).to_vec();
    for calls in IO_CALLS {
        for side in ["enter", "exit"] {
            let events = calls
                .iter()
                .map(|call| format!("syscalls:sys_{side}_{call}"));
            for event in events.filter(|e| tracepoints.has(e)) {
                words.extend(["-e".to_string(), event]);
            }
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tracefs of just these events, in its own directory.
    struct FakeTracefs(std::path::PathBuf);

    impl FakeTracefs {
        fn with(name: &str, events: &[&str]) -> FakeTracefs {
            let dir =
                std::env::temp_dir().join(format!("shardrec-tools-{name}-{}", std::process::id()));
            for event in events {
                let (system, name) = event.split_once(':').unwrap();
                let event = dir.join("events").join(system).join(name);
                std::fs::create_dir_all(&event).unwrap();
                std::fs::write(event.join("format"), "").unwrap();
            }
            FakeTracefs(dir)
        }

        fn tracepoints(&self) -> Tracepoints {
            Tracepoints(Some(self.0.clone()))
        }
    }

    impl Drop for FakeTracefs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn sched_takes_waking_and_the_schedstat_events_where_they_exist() {
        let words = sched_words(&Tracepoints(None));
        assert_eq!(words.last(), Some(&"sched:sched_wakeup"));
        assert_eq!(words.iter().filter(|w| **w == "-e").count(), 6);
        let both = ["sched:sched_waking", "sched:sched_stat_wait"];
        let words = sched_words(&FakeTracefs::with("sched", &both).tracepoints());
        assert!(words.contains(&"sched:sched_waking"));
        assert!(words.ends_with(&["-e", "sched:sched_stat_iowait"]));
    }

    #[test]
    fn lock_takes_lockdep_whole_else_contention_else_refuses() {
        let lockdep = FakeTracefs::with("lockdep", &[&LOCKDEP[..], &CONTENTION].concat());
        let words = lock_words(&lockdep.tracepoints()).unwrap();
        assert!(words.ends_with(&["-e", "lock:lock_release"]));
        let partial = FakeTracefs::with("partial", &[LOCKDEP[0], CONTENTION[0], CONTENTION[1]]);
        let words = lock_words(&partial.tracepoints()).unwrap();
        assert!(words.ends_with(&["-e", "lock:contention_end", "--call-graph", "fp,8"]));
        let error = lock_words(&Tracepoints(None)).unwrap_err();
        assert!(error.contains("lock:contention_begin"), "{error}");
    }

    #[test]
    fn kmem_and_kwork_take_their_options() {
        let none = Tracepoints(None);
        let slab = kmem_words(&none, true, false);
        assert_eq!(slab.iter().filter(|w| **w == "-e").count(), 4);
        let page = kmem_words(&none, false, true);
        assert!(page.ends_with(&["-e", "kmem:mm_page_free"]) && page.contains(&"-g"));
        assert_eq!(
            kwork_classes("softirq, irq").unwrap().0,
            [KworkClass::Softirq, KworkClass::Irq]
        );
        assert!(kwork_classes("irq,bogus").unwrap_err().contains("'bogus'"));
        let words = kwork_words(&[KworkClass::Workqueue]);
        assert!(words.ends_with(&["-e", "workqueue:workqueue_execute_end"]));
    }

    #[test]
    fn trace_and_timechart_take_their_events() {
        let raw = FakeTracefs::with("raw", &["raw_syscalls:sys_enter"]);
        let words = trace_words(&raw.tracepoints()).unwrap();
        assert_eq!(
            words.last(),
            Some(&"raw_syscalls:sys_enter,raw_syscalls:sys_exit")
        );
        assert!(trace_words(&Tracepoints(None)).is_err());
        let tasks = timechart_words(true, false, true);
        assert_eq!(
            tasks[4..],
            ["-g", "-e", "sched:sched_wakeup", "-e", "sched:sched_switch"]
        );
        assert!(timechart_words(true, true, false).ends_with(&["-e", "power:cpu_idle"]));
    }

    #[test]
    fn another_command_of_a_tool_is_refused_with_perfs() {
        let words = |line: &str| {
            line.split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        let said = other_than_record(&words("shardrec kwork -k irq report")).unwrap();
        assert!(said.contains("perf kwork report -i FILE"), "{said}");
        assert!(other_than_record(&words("shardrec kwork -k irq record")).is_none());
        assert!(other_than_record(&words("shardrec record -e sched:sched_switch")).is_none());
        assert!(other_than_record(&words("shardrec -q sched latency")).is_some());
    }
}
