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

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stored);
} waits SEC(".maps");

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

/* `prev` goes off CPU: a wait begins where it sleeps. */
static void wait_begins(void *ctx, struct task_struct *prev, __u32 state)
{
	struct stored *stored;
	struct wait *wait;
	long bytes;
	__u32 kernel;

	if (!(state & (TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE)) || !is_followed(prev))
		return;
	stored = bpf_task_storage_get(&waits, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!stored)
		return;
	wait = &stored->wait;
	if (threshold_ns) {
		stored->kernel_stack = bpf_get_stackid(ctx, &stacks, 0);
		stored->user_stack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
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
	bytes = bpf_get_stack(ctx, &wait->frames[kernel], MAX_FRAMES * sizeof(__u64),
			      BPF_F_USER_STACK);
	wait->nr_user = bytes > 0 ? bytes / sizeof(__u64) : 0;
	wait->start = bpf_ktime_get_ns();
}

/* A wait shorter than the threshold, added to its stack's sum. */
static void sum(struct stored *stored)
{
	struct wait *wait = &stored->wait;
	struct sum_key key = {
		.pid = wait->pid,
		.tid = wait->tid,
		.state = wait->state,
		.kernel_skip = wait->kernel_skip,
		.kernel_stack = stored->kernel_stack,
		.user_stack = stored->user_stack,
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

/* `next` comes back on CPU: its wait, if it had one, is over. */
static void wait_ends(void *ctx, struct task_struct *next)
{
	struct stored *stored = bpf_task_storage_get(&waits, next, 0, 0);
	struct wait *wait;
	__u64 size;

	if (!stored || !stored->wait.start)
		return;
	wait = &stored->wait;
	wait->period = bpf_ktime_get_ns() - wait->start;
	if (wait->period < threshold_ns) {
		wait->start = 0;
		sum(stored);
		return;
	}
	size = HEADER_BYTES + (__u64)(wait->nr_kernel + wait->nr_user) * sizeof(__u64);
	if (size > sizeof(*wait))
		size = sizeof(*wait);
	switch (bpf_perf_event_output(ctx, &output, BPF_F_CURRENT_CPU, wait, size)) {
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
	wait->start = 0;
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
