// SPDX-License-Identifier: GPL-2.0
/*
 * Off-CPU time, written as each wait ends.
 *
 * At sched_switch, a followed task that goes to sleep (interruptible or
 * not; a preempted task is runnable, not waiting) gets its wait started
 * in its task storage: the time, its state, its cgroup, and its kernel
 * and user stacks as they are at that moment (where it waits). When the
 * task is switched in again, the wait is complete: it is written, with
 * its length, to the BPF output event of the CPU it resumes on, whose
 * ring that CPU's writer streams like any other. Nothing is gathered in a
 * map that could fill, unless a threshold is set (--off-cpu-thresh, as
 * perf 6.16 has it): waits shorter than it are summed by thread, state,
 * cgroup and stacks, and the VIP writes the sums at the end.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
/* Frames kept of each stack: the kernel's PERF_MAX_STACK_DEPTH. */
#define MAX_FRAMES 127
/* The most user stack copied for --call-graph dwarf (a record is 64 KiB). */
#define MAX_USER_STACK 32768
/* perf's x86-64 user registers: AX..SS, R8..R15 (PERF_REGS_MASK). */
#define USER_REGS 20
/* In kernel_skip: user registers and stack follow all frames. */
#define WITH_USER_STACK 0x8000

/*
 * One wait, as it is written: the header, then the kernel's frames, then
 * the user's (nr_kernel + nr_user of them, the rest not written).
 * shardrec_bpf::off_cpu::Wait reads it; keep the two alike.
 */
struct wait {
	__u32 pid;
	__u32 tid;
	/* When it began, ns of the perf clock (bpf_ktime_get_ns). */
	__u64 start;
	/* How long it lasted, ns. */
	__u64 period;
	__u64 cgroup;
	__u16 state;
	/* Kernel frames before __schedule's: this program's, the tracing's. */
	__u16 kernel_skip;
	__u16 nr_kernel;
	__u16 nr_user;
	__u64 frames[2 * MAX_FRAMES];
};

#define HEADER_BYTES (sizeof(struct wait) - sizeof(((struct wait *)0)->frames))

/* A task's wait in progress, and its stacks' ids when waits are summed. */
struct stored {
	struct wait wait;
	__s32 kernel_stack;
	__s32 user_stack;
};

/*
 * With --call-graph dwarf: a wait written whole, then the task's user
 * registers as the system call that waits entered the kernel, and the
 * top of its user stack, for perf to unwind as it unwinds a sample's
 * (PERF_SAMPLE_REGS_USER and STACK_USER): through code without frame
 * pointers, glibc's included.
 */
struct dwarf_wait {
	struct wait wait;
	__u64 regs[USER_REGS];
	__u64 stack_size;
	__u8 stack[MAX_USER_STACK];
	__s32 kernel_stack;
	__s32 user_stack;
};

#define DWARF_HEADER_BYTES (sizeof(struct wait) + (USER_REGS + 1) * sizeof(__u64))

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stored);
} waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct dwarf_wait);
} dwarf_waits SEC(".maps");

/* What short waits are summed by; shardrec_bpf::off_cpu reads it. */
struct sum_key {
	__u32 pid;
	__u32 tid;
	__u16 state;
	__u16 kernel_skip;
	__s32 kernel_stack;
	__s32 user_stack;
	__u32 pad;
	__u64 cgroup;
};

/* With a threshold: the time of the waits shorter than it (ns). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sum_key);
	__type(value, __u64);
	__uint(max_entries, 65536);
} sums SEC(".maps");

/* The stacks the sums refer to (sized by the loader: 1 without a threshold). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_FRAMES * sizeof(__u64));
	__uint(max_entries, 16384);
} stacks SEC(".maps");

/* The BPF output event of each CPU, set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} output SEC(".maps");

/*
 * With `follow_all` unset, the processes (tgids) followed, or with
 * `follow_threads` the threads (tids).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u8));
	__uint(max_entries, 65536);
} followed SEC(".maps");

/*
 * Processes never followed: the recorder's own, and the processes they
 * start while it records (a new writer, a merge).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u8));
	__uint(max_entries, 1024);
} ignored SEC(".maps");

/* What became of the waits that ended, per CPU (enum below). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u64));
	__uint(max_entries, 5);
} counts SEC(".maps");

/*
 * Written; shorter than the threshold, summed; refused by a full ring
 * (the kernel also counts it lost on the event); ended on a CPU not
 * recorded, or while the events were off (before the workload's exec,
 * after the stop); shorter than the threshold but not summed (the sums
 * were full).
 */
enum { WRITTEN, SHORT, FAILED, UNRECORDED, UNSUMMED };

#define ENOENT 2
#define EOPNOTSUPP 95

/* Every task but the ignored, rather than the followed processes. */
const volatile bool follow_all = false;
/* The children of a followed process are followed (not with -i). */
const volatile bool follow_children = true;
/* `followed` holds threads (-t), not processes. */
const volatile bool follow_threads = false;
/* Waits shorter than this are not written. */
const volatile __u64 threshold_ns = 0;
/* --call-graph dwarf's user stack bytes (0: frame pointers only). */
const volatile __u32 user_stack_bytes = 0;
/* Where __schedule's code is (from kallsyms; 0 when unknown). */
const volatile __u64 schedule_start = 0;
const volatile __u64 schedule_end = 0;
/* How far down the kernel stack __schedule is looked for. */
#define MAX_SKIP 8

static void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&counts, &which);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/*
 * How many of the first kernel frames are above __schedule, where every
 * wait begins: this program's and the tracepoint's, which perf's own
 * sched_switch callchains do not have either.
 */
static __u16 frames_above_schedule(struct wait *wait, __u32 kernel)
{
	for (__u32 i = 0; i < MAX_SKIP && i < kernel; i++) {
		__u64 frame = wait->frames[i];

		if (frame >= schedule_start && frame < schedule_end)
			return i;
	}
	return 0;
}

static bool is_followed(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	__u32 key = follow_threads ? BPF_CORE_READ(task, pid) : tgid;

	if (bpf_map_lookup_elem(&ignored, &tgid))
		return false;
	return follow_all || bpf_map_lookup_elem(&followed, &key);
}

/*
 * The user registers of `task` (the current task) as its system call
 * entered the kernel, in perf's order, and as much of its user stack
 * above their sp as `user_stack_bytes` asks and can be read: the whole,
 * else half, a quarter, an eighth (near the top of a stack, the whole
 * may cross its end).
 */
static void user_regs_and_stack(struct task_struct *task, struct dwarf_wait *dwarf)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	__u32 size = user_stack_bytes;

	dwarf->regs[0] = BPF_CORE_READ(regs, ax);
	dwarf->regs[1] = BPF_CORE_READ(regs, bx);
	dwarf->regs[2] = BPF_CORE_READ(regs, cx);
	dwarf->regs[3] = BPF_CORE_READ(regs, dx);
	dwarf->regs[4] = BPF_CORE_READ(regs, si);
	dwarf->regs[5] = BPF_CORE_READ(regs, di);
	dwarf->regs[6] = BPF_CORE_READ(regs, bp);
	dwarf->regs[7] = BPF_CORE_READ(regs, sp);
	dwarf->regs[8] = BPF_CORE_READ(regs, ip);
	dwarf->regs[9] = BPF_CORE_READ(regs, flags);
	dwarf->regs[10] = BPF_CORE_READ(regs, cs);
	dwarf->regs[11] = BPF_CORE_READ(regs, ss);
	dwarf->regs[12] = BPF_CORE_READ(regs, r8);
	dwarf->regs[13] = BPF_CORE_READ(regs, r9);
	dwarf->regs[14] = BPF_CORE_READ(regs, r10);
	dwarf->regs[15] = BPF_CORE_READ(regs, r11);
	dwarf->regs[16] = BPF_CORE_READ(regs, r12);
	dwarf->regs[17] = BPF_CORE_READ(regs, r13);
	dwarf->regs[18] = BPF_CORE_READ(regs, r14);
	dwarf->regs[19] = BPF_CORE_READ(regs, r15);
	dwarf->stack_size = 0;
	for (int i = 0; i < 4; i++) {
		barrier_var(size);
		if (size > MAX_USER_STACK)
			size = MAX_USER_STACK;
		if (size < 8)
			return;
		if (!bpf_probe_read_user(dwarf->stack, size, (void *)dwarf->regs[7])) {
			dwarf->stack_size = size;
			return;
		}
		size = (size / 2) & ~7U;
	}
}

/*
 * The wait `prev` begins: who, its state and cgroup, its kernel frames
 * where it sleeps, and its user frames (frame pointers) unless `dwarf`
 * takes its registers and stack instead. (Inlined: a BPF function takes
 * five arguments at most.)
 */
static __always_inline void fill_wait(void *ctx, struct task_struct *prev, __u32 state,
				      struct wait *wait, __s32 *stack_ids, struct dwarf_wait *dwarf)
{
	long bytes;
	__u32 kernel;

	if (threshold_ns) {
		stack_ids[0] = bpf_get_stackid(ctx, &stacks, 0);
		stack_ids[1] = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	}
	wait->pid = BPF_CORE_READ(prev, tgid);
	wait->tid = BPF_CORE_READ(prev, pid);
	wait->state = state;
	wait->cgroup = bpf_get_current_cgroup_id();
	/* prev is still the current task: the stacks are its own. */
	bytes = bpf_get_stack(ctx, wait->frames, MAX_FRAMES * sizeof(__u64), 0);
	kernel = bytes > 0 ? bytes / sizeof(__u64) : 0;
	/*
	 * At most MAX_FRAMES (127, all ones), and said so in a way the
	 * verifier sees on the register the next call uses: clang would
	 * otherwise test a copy, or drop the mask it knows changes nothing.
	 */
	barrier_var(kernel);
	kernel &= MAX_FRAMES;
	wait->nr_kernel = kernel;
	wait->kernel_skip = frames_above_schedule(wait, kernel);
	if (dwarf) {
		wait->kernel_skip |= WITH_USER_STACK;
		wait->nr_user = 0;
		user_regs_and_stack(prev, dwarf);
	} else {
		bytes = bpf_get_stack(ctx, &wait->frames[kernel], MAX_FRAMES * sizeof(__u64),
				      BPF_F_USER_STACK);
		wait->nr_user = bytes > 0 ? bytes / sizeof(__u64) : 0;
	}
	wait->start = bpf_ktime_get_ns();
}

/* `prev` goes off CPU: a wait begins where it sleeps. */
static void wait_begins(void *ctx, struct task_struct *prev, __u32 state)
{
	struct dwarf_wait *dwarf;
	struct stored *stored;

	if (!(state & (TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE)) || !is_followed(prev))
		return;
	if (user_stack_bytes) {
		dwarf = bpf_task_storage_get(&dwarf_waits, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (dwarf)
			fill_wait(ctx, prev, state, &dwarf->wait, &dwarf->kernel_stack, dwarf);
		return;
	}
	stored = bpf_task_storage_get(&waits, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (stored)
		fill_wait(ctx, prev, state, &stored->wait, &stored->kernel_stack, NULL);
}

/* A wait shorter than the threshold, added to its stack's sum. */
static void sum(struct wait *wait, __s32 *stack_ids)
{
	struct sum_key key = {
		.pid = wait->pid,
		.tid = wait->tid,
		.state = wait->state,
		.kernel_skip = wait->kernel_skip & ~WITH_USER_STACK,
		.kernel_stack = stack_ids[0],
		.user_stack = stack_ids[1],
		.cgroup = wait->cgroup,
	};
	__u64 *total = bpf_map_lookup_elem(&sums, &key);

	if (!total) {
		if (!bpf_map_update_elem(&sums, &key, &wait->period, BPF_NOEXIST)) {
			count(SHORT);
			return;
		}
		/* Another CPU added the same stack first, or the sums are full. */
		total = bpf_map_lookup_elem(&sums, &key);
	}
	if (total) {
		__sync_fetch_and_add(total, wait->period);
		count(SHORT);
	} else {
		count(UNSUMMED);
	}
}

/* Counts what became of a write of a wait. */
static void written(long result)
{
	switch (result) {
	case 0:
		count(WRITTEN);
		break;
	case -ENOENT:
	case -EOPNOTSUPP:
		count(UNRECORDED);
		break;
	default:
		count(FAILED);
	}
}

/*
 * The wait ends: how long it lasted, and whether it is summed (shorter
 * than the threshold) rather than written. False if there was none.
 */
static bool wait_over(struct wait *wait, __s32 *stack_ids)
{
	if (!wait->start)
		return false;
	wait->period = bpf_ktime_get_ns() - wait->start;
	wait->start = 0;
	if (wait->period >= threshold_ns)
		return true;
	sum(wait, stack_ids);
	return false;
}

/* `next` comes back on CPU: its wait, if it had one, is over. */
static void wait_ends(void *ctx, struct task_struct *next)
{
	struct dwarf_wait *dwarf;
	struct stored *stored;
	__u64 size;

	if (user_stack_bytes) {
		dwarf = bpf_task_storage_get(&dwarf_waits, next, 0, 0);
		if (!dwarf || !wait_over(&dwarf->wait, &dwarf->kernel_stack))
			return;
		/* Every frame slot, then the registers and the stack read. */
		size = dwarf->stack_size;
		barrier_var(size);
		if (size > MAX_USER_STACK)
			size = MAX_USER_STACK;
		written(bpf_perf_event_output(ctx, &output, BPF_F_CURRENT_CPU, dwarf,
					      DWARF_HEADER_BYTES + size));
		return;
	}
	stored = bpf_task_storage_get(&waits, next, 0, 0);
	if (!stored || !wait_over(&stored->wait, &stored->kernel_stack))
		return;
	size = HEADER_BYTES + (__u64)(stored->wait.nr_kernel + stored->wait.nr_user) * sizeof(__u64);
	if (size > sizeof(stored->wait))
		size = sizeof(stored->wait);
	written(bpf_perf_event_output(ctx, &output, BPF_F_CURRENT_CPU, &stored->wait, size));
}

SEC("tp_btf/sched_switch")
int BPF_PROG(off_cpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	wait_begins(ctx, prev, prev_state);
	wait_ends(ctx, next);
	return 0;
}

/* A new process is ignored as its parent is, and followed as it is. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(off_cpu_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tgid = BPF_CORE_READ(parent, tgid);
	__u32 child_tgid = BPF_CORE_READ(child, tgid);
	__u8 yes = 1;

	if (parent_tgid == child_tgid)
		return 0;
	if (bpf_map_lookup_elem(&ignored, &parent_tgid)) {
		bpf_map_update_elem(&ignored, &child_tgid, &yes, BPF_NOEXIST);
		return 0;
	}
	if (follow_all || follow_threads || !follow_children)
		return 0;
	if (bpf_map_lookup_elem(&followed, &parent_tgid))
		bpf_map_update_elem(&followed, &child_tgid, &yes, BPF_NOEXIST);
	return 0;
}

/*
 * A process that ends leaves the sets, so they never fill (as its leader
 * thread ends: a leader that ends before its other threads takes them
 * out early; 6.1's tracepoint does not say whether the group is dead).
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(off_cpu_exit, struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);

	if (BPF_CORE_READ(task, pid) != tgid || follow_threads)
		return 0;
	bpf_map_delete_elem(&ignored, &tgid);
	bpf_map_delete_elem(&followed, &tgid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
