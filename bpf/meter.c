/* SPDX-License-Identifier: MIT */
/*
 * Loader of bpf/meter.bpf.c (generated skeleton meter.skel.h). Lifecycle: open, size maps from
 * meter_opts, choose program variants (tp_btf first, raw_tp when tp_btf cannot be loaded or
 * attached), load, attach. Every failure path destroys the skeleton. See docs/metering.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "bpf/meter.h"
#include "bpf/track.h"
#include "bpf/meter_types.h"
#include "common/macro.h"
#include "meter.skel.h"

#define METER_DEFAULT_TASKS 1024u
#define METER_MAX_TASKS	    (1u << 20)
#define METER_MAX_PIDS	    (1u << 22)

struct tracked {
	struct track_slot s;
	uint64_t cgroup_id;
	struct bpf_link *ingress, *egress;
};

/*
 * meter_prefetch: the maps "tasks", "slots" and "net" read whole, one batched system call per
 * map and chunk, for the meter_read calls of one batch (say the change check of every running
 * task at a node.sample): per slot the task's entry and its counters summed over the CPUs, the
 * network counters sorted by cgroup id. serial tells this batch's entries from older ones.
 */
struct meter_net_entry {
	uint64_t cgroup_id;
	struct meter_net n;
};
struct meter_cache {
	uint32_t serial;	 /* of the batch the cache holds; 0: none */
	uint32_t *seen;		 /* per slot: serial of the batch that read its task entry */
	struct meter_task *task; /* per slot */
	struct meter_slot *sum;	 /* per slot, summed over the CPUs */
	struct meter_net_entry *net;
	size_t n_net;
	void *keys, *vals; /* buffers of one batch call */
};

struct meter {
	struct meter_bpf *skel;
	struct ring_buffer *rb;
	const char *mode;
	/* Index in tasks = the task's slot in the per-CPU map "slots". */
	struct tracked *tasks;
	struct track_index ix;	 /* task key -> index in tasks */
	uint32_t *gen;		 /* per slot: generation of its last owner */
	struct meter_slot *pcpu; /* ncpus values: one element of "slots" */
	int ncpus;		 /* libbpf_num_possible_cpus() */
	uint32_t next_slot; /* round-robin cursor: a freed slot is reused as late as possible */
	uint32_t max_tasks, max_pids, ntracked, max_dying;
	uint64_t sweeps; /* map sweeps done by meter_forget */

	bool io_from_syscalls;
	bool walk;	 /* the live read runs meter_walk (not the meter_live iterator) */
	uint64_t *dirty; /* the map "dirty", mapped (NULL: not mapped, every read reads) */
	size_t dirty_len;
	enum meter_oom oom;	   /* which program reports OOM victims (meter_oom_mode) */
	bool at_exit;		   /* cpu_at_exit: no sched_switch program */
	bool drain;		   /* METER_BPF_EV_DRAIN seen: run the drain */
	bool no_drain;		   /* meter_opts.no_drain (tests) */
	uint64_t drains;	   /* drains run (meter_poll) */
	uint64_t live_read_ns;	   /* last run of the live-read iterator (CLOCK_MONOTONIC) */
	bool live_batch;	   /* meter_batch: one live read serves the reads until its end */
	bool live_batch_read;	   /* ... and it ran */
	struct meter_cache *cache; /* meter_prefetch: the maps read whole for one batch */
	/* meter_set_cpu_source: its reading before the last walk (cpu_valid: there is one) */
	int (*cpu_fn)(void *ctx, uint64_t *ret_ns);
	void *cpu_ctx;
	uint64_t cpu_ns;
	bool cpu_valid;
	uint64_t walks, walks_skipped;
	struct bpf_link *root_ingress, *root_egress; /* meter_attach_cgroup_root */
	meter_event_fn fn;			     /* set during meter_poll only */
	void *userdata;
};

static void set_variant(struct meter_bpf *s, bool btf, bool sys_exit, bool at_exit, bool walk,
			enum meter_oom oom)
{
	bpf_program__set_autoload(s->progs.btf_mark_victim, oom == METER_OOM_TP_BTF);
	bpf_program__set_autoload(s->progs.raw_mark_victim, oom == METER_OOM_RAW_TP);
	/* Accounting at exit: the exit program with the task reference, the settle program and
	 * the live-read iterator instead of sched_switch (tp_btf only). */
	bpf_program__set_autoload(s->progs.btf_exit_final, btf && at_exit);
	bpf_program__set_autoload(s->progs.meter_settle_prog, btf && at_exit);
	bpf_program__set_autoload(s->progs.meter_live, btf && at_exit && !walk);
	bpf_program__set_autoload(s->progs.meter_walk, btf && at_exit && walk);
	struct bpf_program *b[] = {s->progs.btf_sched_switch, s->progs.btf_sched_fork,
				   s->progs.btf_sched_exit,   s->progs.btf_rss_stat,
				   s->progs.btf_sys_exit,     s->progs.btf_rq_issue};
	struct bpf_program *r[] = {s->progs.raw_sched_switch, s->progs.raw_sched_fork,
				   s->progs.raw_sched_exit,   s->progs.raw_rss_stat,
				   s->progs.raw_sys_exit,     s->progs.raw_rq_issue};

	for (size_t i = 0; i < ARRAY_SIZE(b); i++) {
		bool on = sys_exit || (b[i] != s->progs.btf_sys_exit);
		bool btf_on = on && !(at_exit && (b[i] == s->progs.btf_sched_switch ||
						  b[i] == s->progs.btf_sched_exit));

		bpf_program__set_autoload(b[i], btf && btf_on);
		bpf_program__set_autoload(r[i], !btf && on);
	}
}

/* Size of "dying": 8192, or 2 per task where max_tasks is larger (a few hundred KiB). */
#define METER_DYING_MIN 8192u
static uint32_t dying_entries(const struct meter *m)
{
	if (m->max_dying)
		return m->max_dying;
	return m->max_tasks * 2 > METER_DYING_MIN ? m->max_tasks * 2 : METER_DYING_MIN;
}

/*
 * Which program can report OOM victims on this kernel: tp_btf where oom:mark_victim passes the
 * task_struct (its event has the "uid" field that came with it), raw_tp where it passes a pid,
 * none where the kernel has no such tracepoint (or no BTF to tell).
 */
static enum meter_oom oom_probe(bool btf)
{
	enum meter_oom r = METER_OOM_NONE;
	struct btf *vb = btf__load_vmlinux_btf();
	const struct btf_type *t;
	int id;

	if (!vb)
		return METER_OOM_NONE;
	if (btf__find_by_name_kind(vb, "btf_trace_mark_victim", BTF_KIND_TYPEDEF) < 0)
		goto out;
	r = METER_OOM_RAW_TP;
	id = btf__find_by_name_kind(vb, "trace_event_raw_mark_victim", BTF_KIND_STRUCT);
	t = id < 0 ? NULL : btf__type_by_id(vb, (uint32_t)id);
	if (!btf || !t)
		goto out;
	for (uint16_t i = 0; i < btf_vlen(t); i++)
		if (strcmp(btf__name_by_offset(vb, btf_members(t)[i].name_off), "uid") == 0)
			r = METER_OOM_TP_BTF;
out:
	btf__free(vb);
	return r;
}

/* Opens, sizes, loads and attaches one variant. On failure nothing is left behind. */
static int load_variant(struct meter *m, bool btf, bool at_exit, bool walk, struct meter_bpf **ret)
{
	struct meter_bpf *s;
	long ps = sysconf(_SC_PAGESIZE);
	int r;

	s = meter_bpf__open();
	if (!s)
		return errno ? -errno : -ENOMEM;
	r = bpf_map__set_max_entries(s->maps.tasks, m->max_tasks);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.net, m->max_tasks);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.slots, m->max_tasks);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.dirty, m->max_tasks);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.procs, m->max_pids);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.mms, m->max_pids);
	/* tp_btf keeps threads in task storage: the hash map is then a 1-entry placeholder. */
	if (!r)
		r = bpf_map__set_max_entries(s->maps.threads, btf ? 1 : m->max_pids * 2);
	/* Threads between their exit and the next drain (meter_poll) or meter_settle: the exit
	 * program asks for a drain at a quarter full. A thread that finds it full keeps its
	 * figures at exit and counts in its task's threads_lost. */
	if (!r)
		r = bpf_map__set_max_entries(s->maps.dying, at_exit ? dying_entries(m) : 1);
	if (!r && !btf)
		r = bpf_map__set_autocreate(s->maps.tstore, false);
	/* Only accounting at exit uses "dying" (a map of task references, which older kernels
	 * may not create): the other modes' programs never reference it. */
	if (!r && !at_exit)
		r = bpf_map__set_autocreate(s->maps.dying, false);
	/* One "recent" slot per possible CPU (the exit program's index), likewise only then. */
	if (!r && at_exit) {
		int ncpu = libbpf_num_possible_cpus();

		r = ncpu > 0 ? bpf_map__set_max_entries(s->maps.recent, (uint32_t)ncpu) : ncpu;
	}
	if (!r && !at_exit)
		r = bpf_map__set_autocreate(s->maps.recent, false);
	if (r)
		goto out_destroy;
	s->rodata->page_size = ps > 0 ? (uint64_t)ps : 4096;
	s->rodata->io_from_ioac = !m->io_from_syscalls;
	s->rodata->cpu_at_exit = at_exit;
	s->rodata->dying_max = m->no_drain ? UINT32_MAX : dying_entries(m);
	s->rodata->self_drain = !m->no_drain;
	set_variant(s, btf, m->io_from_syscalls, at_exit, walk, m->oom);
	r = meter_bpf__load(s);
	if (r)
		goto out_destroy;
	r = meter_bpf__attach(s);
	if (r)
		goto out_destroy;
	*ret = s;
	return 0;

out_destroy:
	meter_bpf__destroy(s);
	return r < 0 ? r : -EINVAL;
}

/* One variant with the OOM victim program the kernel allows, then without it: the program is
 * an extra, the meter loads without it rather than not at all. */
static int load_with_oom(struct meter *m, const struct meter_opts *opts, bool btf, bool at_exit)
{
	int r;

	m->oom = opts && opts->no_oom ? METER_OOM_NONE : oom_probe(btf);
	/* accounting at exit: the live read's walk where the kernel has the task iterator
	 * kfuncs (Linux 6.7), else the iter/task program */
	m->walk = at_exit;
	r = load_variant(m, btf, at_exit, m->walk, &m->skel);
	if (r && m->walk) {
		m->walk = false;
		r = load_variant(m, btf, at_exit, false, &m->skel);
	}
	if (r && m->oom != METER_OOM_NONE) {
		m->oom = METER_OOM_NONE;
		m->walk = at_exit;
		r = load_variant(m, btf, at_exit, m->walk, &m->skel);
		if (r && m->walk) {
			m->walk = false;
			r = load_variant(m, btf, at_exit, false, &m->skel);
		}
	}
	return r;
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct meter *m = ctx;
	const struct meter_bpf_event *e = data;
	struct meter_event ev = {};

	if (size < sizeof(*e))
		return 0;
	if (e->type == METER_BPF_EV_DRAIN) {
		m->drain = true;
		return 0;
	}
	if (!m->fn)
		return 0;
	if (e->type == METER_BPF_EV_SETTLED)
		ev.type = METER_EV_SETTLED;
	else if (e->type == METER_BPF_EV_EXIT)
		ev.type = METER_EV_EXIT;
	else if (e->type == METER_BPF_EV_OOM_VICTIM)
		ev.type = METER_EV_OOM_VICTIM;
	else
		return 0;
	ev.task_key = e->task_key;
	ev.pid = e->pid;
	if (ev.type == METER_EV_OOM_VICTIM)
		ev.tid = (uint32_t)e->exit_code;
	else
		ev.exit_code = e->exit_code;
	m->fn(&ev, m->userdata);
	return 0;
}

int meter_open(const struct meter_opts *opts, struct meter **ret)
{
	struct track_kernel k;
	bool btf, at_exit;
	struct meter *m;
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->max_tasks = opts && opts->max_tasks ? opts->max_tasks : METER_DEFAULT_TASKS;
	if (m->max_tasks > METER_MAX_TASKS) {
		r = -EINVAL;
		goto out_free;
	}
	if (opts && opts->max_pids)
		m->max_pids = opts->max_pids;
	else
		m->max_pids = m->max_tasks * 64;
	if (m->max_pids > METER_MAX_PIDS || m->max_pids < m->max_tasks) {
		r = -EINVAL;
		goto out_free;
	}
	m->max_dying = opts ? opts->max_dying : 0;
	m->no_drain = opts && opts->no_drain;
	if (m->max_dying && m->max_dying < 4) {
		r = -EINVAL;
		goto out_free;
	}
	m->ncpus = libbpf_num_possible_cpus();
	if (m->ncpus <= 0) {
		r = m->ncpus < 0 ? m->ncpus : -EINVAL;
		goto out_free;
	}
	m->tasks = calloc(m->max_tasks, sizeof(*m->tasks));
	m->gen = calloc(m->max_tasks, sizeof(*m->gen));
	m->pcpu = calloc((size_t)m->ncpus, sizeof(*m->pcpu));
	if (!m->tasks || !m->gen || !m->pcpu) {
		r = -ENOMEM;
		goto out_free_tasks;
	}
	r = track_index_init(&m->ix, m->max_tasks);
	if (r < 0)
		goto out_free_tasks;
	m->io_from_syscalls = opts && opts->io_from_syscalls;

	/* Probe once (the kernel's BTF), then load once; the next variant only if that fails. */
	track_probe_kernel(&k);
	btf = k.tp_btf && !(opts && opts->force_raw_tp);
	at_exit = btf && k.task_kfuncs && !(opts && opts->cpu_at_switch);
	r = load_with_oom(m, opts, btf, at_exit);
	if (r && at_exit) {
		at_exit = false;
		r = load_with_oom(m, opts, btf, false);
	}
	if (r && btf) {
		btf = false;
		r = load_with_oom(m, opts, false, false);
	}
	if (r)
		goto out_free_tasks;
	m->mode = btf ? "tp_btf" : "raw_tp";
	m->at_exit = at_exit;
	/* the marks of what changed, mapped; without them every check reads the task */
	{
		long ps = sysconf(_SC_PAGESIZE);
		size_t len = (size_t)m->max_tasks * sizeof(uint64_t);
		void *p;

		if (ps > 0)
			len = (len + (size_t)ps - 1) / (size_t)ps * (size_t)ps;
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
			 bpf_map__fd(m->skel->maps.dirty), 0);
		if (p != MAP_FAILED) {
			m->dirty = p;
			m->dirty_len = len;
		}
	}
	m->rb = ring_buffer__new(bpf_map__fd(m->skel->maps.events), on_event, m, NULL);
	if (!m->rb) {
		r = errno ? -errno : -ENOMEM;
		goto out_destroy;
	}
	*ret = m;
	return 0;

out_destroy:
	meter_bpf__destroy(m->skel);
out_free_tasks:
	track_index_free(&m->ix);
	free(m->tasks);
	free(m->gen);
	free(m->pcpu);
out_free:
	free(m);
	return r;
}

static void cache_free(struct meter_cache *c)
{
	if (!c)
		return;
	free(c->seen);
	free(c->task);
	free(c->sum);
	free(c->net);
	free(c->keys);
	free(c->vals);
	free(c);
}

void meter_free(struct meter *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->max_tasks; i++) {
		bpf_link__destroy(m->tasks[i].ingress);
		bpf_link__destroy(m->tasks[i].egress);
	}
	ring_buffer__free(m->rb);
	if (m->dirty)
		munmap(m->dirty, m->dirty_len);
	bpf_link__destroy(m->root_ingress);
	bpf_link__destroy(m->root_egress);
	meter_bpf__destroy(m->skel);
	track_index_free(&m->ix);
	cache_free(m->cache);
	free(m->tasks);
	free(m->gen);
	free(m->pcpu);
	free(m);
}

int meter_attach_cgroup_root(struct meter *m, int root_fd)
{
	if (root_fd < 0)
		return -EBADF;
	if (m->root_ingress)
		return -EALREADY;
	m->root_ingress = bpf_program__attach_cgroup(m->skel->progs.meter_ingress, root_fd);
	if (!m->root_ingress)
		return -errno;
	m->root_egress = bpf_program__attach_cgroup(m->skel->progs.meter_egress, root_fd);
	if (!m->root_egress) {
		int r = -errno;

		bpf_link__destroy(m->root_ingress);
		m->root_ingress = NULL;
		return r;
	}
	return 0;
}

const char *meter_attach_mode(const struct meter *m)
{
	return m->mode;
}

const char *meter_oom_mode(const struct meter *m)
{
	switch (m->oom) {
	case METER_OOM_TP_BTF:
		return "tp_btf";
	case METER_OOM_RAW_TP:
		return "raw_tp";
	default:
		return NULL;
	}
}

const char *meter_cpu_accounting(const struct meter *m)
{
	return m->at_exit ? "exit" : "switch";
}

const char *meter_live_mode(const struct meter *m)
{
	return !m->at_exit ? NULL : m->walk ? "walk" : "iter";
}

bool meter_marks(const struct meter *m)
{
	return m->dirty != NULL;
}

int meter_members_fd(const struct meter *m)
{
	return bpf_map__fd(m->skel->maps.procs);
}

int meter_fd(const struct meter *m)
{
	return ring_buffer__epoll_fd(m->rb);
}

static int run_settle(struct meter *m, uint64_t task_key, bool force, bool all);
static int run_settle_live(struct meter *m);

/*
 * Accounting at exit: fold the final figures of every exited thread (any task) that is off its
 * CPU for good and drop its "dying" entry, so that the map holds only threads of the last
 * moments, not every exit of a long task.
 */
static void drain(struct meter *m)
{
	m->drain = false;
	m->skel->bss->drain_wanted = 0;
	if (run_settle(m, 0, false, true) == 0)
		m->drains++;
}

int meter_poll(struct meter *m, meter_event_fn fn, void *userdata)
{
	int r;

	m->fn = fn;
	m->userdata = userdata;
	r = ring_buffer__consume(m->rb);
	/* A drain request, or the periodic call with threads waiting: drain, then deliver the
	 * settled events the drain produced. */
	if (m->at_exit && !m->no_drain && (m->drain || m->skel->bss->dying_n > 0)) {
		drain(m);
		if (r >= 0) {
			int q = ring_buffer__consume(m->rb);

			r = q < 0 ? q : r + q;
		}
	}
	m->fn = NULL;
	m->userdata = NULL;
	return r < 0 ? r : 0;
}

static struct tracked *find_tracked(struct meter *m, uint64_t key)
{
	return track_index_find(&m->ix, m->tasks, sizeof(*m->tasks), key);
}

static bool is_btf(const struct meter *m)
{
	return strcmp(m->mode, "tp_btf") == 0;
}

/*
 * Threads of a process: the link count of /proc/PID/task is 2 + its threads (one stat, where
 * reading /proc/PID/status was about 2% of the agent's work per launch). 1 when it cannot be
 * read: the caller's usual case.
 */
static unsigned threads_of(pid_t tgid)
{
	char p[64];
	struct stat st;

	snprintf(p, sizeof(p), "/proc/%d/task", (int)tgid);
	if (stat(p, &st) < 0 || st.st_nlink < 3)
		return 1;
	return (unsigned)(st.st_nlink - 2);
}

static uint32_t slot_of(const struct meter *m, const struct tracked *t)
{
	return (uint32_t)(t - m->tasks);
}

/* Writes the slot's element on every CPU: counters zero, generation gen (0: free). */
static int set_slot(struct meter *m, uint32_t slot, uint32_t gen)
{
	memset(m->pcpu, 0, (size_t)m->ncpus * sizeof(*m->pcpu));
	for (int i = 0; i < m->ncpus; i++)
		m->pcpu[i].gen = gen;
	if (bpf_map_update_elem(bpf_map__fd(m->skel->maps.slots), &slot, m->pcpu, BPF_ANY) < 0)
		return -errno;
	return 0;
}

/*
 * Give the process's (main) thread its entry now (task storage through a pidfd in tp_btf mode,
 * "threads" keyed by its tid in raw_tp mode). A new child (from_zero, one thread) is counted
 * from its fork: its counters started at zero then. Otherwise the entry is based at the
 * thread's next switch-in; need_base makes sched_switch look at incoming threads until then.
 * A process that already has more threads needs the lazy lookup for the others.
 */
static bool add_thread_entry(struct meter *m, uint64_t key, pid_t tgid, uint32_t slot, uint32_t gen,
			     bool from_zero)
{
	struct meter_thread th = {
	    .task_key = key, .slot = slot, .gen = gen, .flags = METER_TH_NEED_BASE};
	uint32_t tid = (uint32_t)tgid;
	int pidfd = -1, r;

	if (m->at_exit) {
		/*
		 * Accounting at exit (no sched_switch program): a new child's counters started at
		 * zero at fork, so its entry starts there too (from_zero) and counts its whole
		 * life, and so do the threads it creates: they get no entry of their own
		 * (METER_TH_BARE_KIDS, see MEMBER_BARE_THREADS); a re-adopted process's entry
		 * takes its base from the next live read.
		 */
		th.flags = from_zero ? METER_TH_BARE_KIDS : METER_TH_NEED_BASE;
		pidfd = (int)syscall(SYS_pidfd_open, tgid, 0);
		if (pidfd < 0)
			return false;
		r = bpf_map_update_elem(bpf_map__fd(m->skel->maps.tstore), &pidfd, &th, BPF_ANY);
		close(pidfd);
		return r == 0;
	}
	if (threads_of(tgid) > 1)
		m->skel->bss->lazy_threads = 1;
	else if (from_zero)
		th.flags = 0; /* counted from its fork, as with accounting at exit */
	if (is_btf(m)) {
		pidfd = (int)syscall(SYS_pidfd_open, tgid, 0);
		if (pidfd < 0) {
			m->skel->bss->lazy_threads = 1; /* found at its first switch-in instead */
			return false;
		}
	}
	if (th.flags & METER_TH_NEED_BASE)
		__atomic_fetch_add(&m->skel->bss->need_base, 1, __ATOMIC_SEQ_CST);
	if (pidfd >= 0) {
		r = bpf_map_update_elem(bpf_map__fd(m->skel->maps.tstore), &pidfd, &th, BPF_ANY);
		close(pidfd);
	} else {
		r = bpf_map_update_elem(bpf_map__fd(m->skel->maps.threads), &tid, &th, BPF_ANY);
	}
	if (r < 0) {
		if (th.flags & METER_TH_NEED_BASE)
			__atomic_fetch_sub(&m->skel->bss->need_base, 1, __ATOMIC_SEQ_CST);
		m->skel->bss->lazy_threads = 1;
		return false;
	}
	return true;
}

/* bare: MEMBER_BARE_THREADS (accounting at exit, a process whose threads all start in the
 * task: a new child, not a re-adopted process). */
static int add_proc(struct meter *m, const struct tracked *t, pid_t tgid, bool bare)
{
	uint32_t slot = slot_of(m, t), k = (uint32_t)tgid;
	struct member p = {.task_key = t->s.key,
			   .slot = slot,
			   .gen = m->gen[slot],
			   .flags = bare ? MEMBER_BARE_THREADS : 0},
		      old;
	int fd = bpf_map__fd(m->skel->maps.procs), r;

	r = track_add_proc(fd, (pid_t)k, &p);
	/* A member the audit trail added for this task (shared map): the meter takes it over. */
	if (r == -EBUSY && bpf_map_lookup_elem(fd, &k, &old) == 0 && old.task_key == t->s.key &&
	    !old.gen && bpf_map_update_elem(fd, &k, &p, BPF_EXIST) == 0)
		return 0;
	return r;
}

static void detach_net(struct tracked *t)
{
	bpf_link__destroy(t->ingress);
	bpf_link__destroy(t->egress);
	t->ingress = t->egress = NULL;
}

int meter_track(struct meter *m, uint64_t task_key, pid_t tgid, int cgroup_fd)
{
	struct meter_task mt = {
	    .procs_alive = 1, .root_tgid = (uint64_t)tgid, .root_exit_code = -1};
	uint64_t *mark;
	struct tracked *t = NULL;
	int tfd = bpf_map__fd(m->skel->maps.tasks), r;
	uint32_t slot = 0;

	if (tgid <= 0)
		return -EINVAL;
	if (find_tracked(m, task_key))
		return -EEXIST;
	/* Round robin: threads of a forgotten task that still run find its old slot free (gen 0)
	 * or reused as late as possible (a new gen: they stop at their next switch-out). */
	for (uint32_t n = 0; n < m->max_tasks; n++) {
		slot = (m->next_slot + n) % m->max_tasks;
		if (!m->tasks[slot].s.used) {
			t = &m->tasks[slot];
			break;
		}
	}
	if (!t)
		return -ENOSPC;
	m->next_slot = (slot + 1) % m->max_tasks;
	*t = (struct tracked){.s.key = task_key};
	mt.slot = slot;
	/* a new task: read at its first check */
	if (m->dirty) {
		mark = &m->dirty[slot];
		__atomic_store_n(mark, 1, __ATOMIC_SEQ_CST);
	}

	if (cgroup_fd >= 0) {
		struct meter_net zero = {.slot = slot};

		r = track_cgroup_id(cgroup_fd, &t->cgroup_id);
		if (r < 0)
			return r;
		if (bpf_map_update_elem(bpf_map__fd(m->skel->maps.net), &t->cgroup_id, &zero,
					BPF_NOEXIST) < 0)
			return errno == EEXIST ? -EBUSY : -errno;
		/* Attached once at the parent: the programs key by cgroup id anyway. */
		if (!m->root_ingress) {
			t->ingress =
			    bpf_program__attach_cgroup(m->skel->progs.meter_ingress, cgroup_fd);
			if (!t->ingress) {
				r = -errno;
				goto out_net;
			}
			t->egress =
			    bpf_program__attach_cgroup(m->skel->progs.meter_egress, cgroup_fd);
			if (!t->egress) {
				r = -errno;
				goto out_detach;
			}
		}
	}
	/* The slot before anything that points to it. */
	if (++m->gen[slot] == 0)
		m->gen[slot] = 1;
	r = set_slot(m, slot, m->gen[slot]);
	if (r < 0)
		goto out_detach;
	if (bpf_map_update_elem(tfd, &task_key, &mt, BPF_NOEXIST) < 0) {
		r = errno == E2BIG ? -ENOSPC : -errno;
		goto out_detach;
	}
	r = add_proc(m, t, tgid, m->at_exit);
	if (r < 0)
		goto out_task;
	(void)add_thread_entry(m, task_key, tgid, slot, m->gen[slot], true);
	if (m->at_exit) {
		/*
		 * The child waits for us before its exec: no BPF program writes this value yet.
		 * Without its entry, its exit counts it as a bare thread (it started at zero).
		 */
		mt.threads_live = 1;
		(void)bpf_map_update_elem(tfd, &task_key, &mt, BPF_EXIST);
	}
	/* cannot fail: the index has room for every slot */
	(void)track_index_put(&m->ix, task_key, slot);
	t->s.used = true;
	m->ntracked++;
	return 0;

out_task:
	bpf_map_delete_elem(tfd, &task_key);
out_detach:
	detach_net(t);
out_net:
	if (cgroup_fd >= 0)
		bpf_map_delete_elem(bpf_map__fd(m->skel->maps.net), &t->cgroup_id);
	(void)set_slot(m, slot, 0);
	*t = (struct tracked){};
	return r;
}

int meter_track_more(struct meter *m, uint64_t task_key, pid_t tgid)
{
	int tfd = bpf_map__fd(m->skel->maps.tasks), r;
	struct tracked *t = find_tracked(m, task_key);
	struct meter_task mt;

	if (tgid <= 0)
		return -EINVAL;
	if (!t)
		return -ENOENT;
	if (bpf_map_lookup_elem(tfd, &task_key, &mt) < 0)
		return -errno;
	r = add_proc(m, t, tgid, false);
	if (r < 0)
		return r;
	/* A re-adopted process may have many threads: they are found at their switch-in
	 * (accounting at exit: only its main thread is followed, from now on). */
	m->skel->bss->lazy_threads = 1;
	if (m->at_exit &&
	    add_thread_entry(m, task_key, tgid, slot_of(m, t), m->gen[slot_of(m, t)], false))
		mt.threads_live++;
	/*
	 * Read-modify-write of the whole value: counters that BPF adds between the lookup and the
	 * update are lost. Only used when re-adopting (usage restarts from zero anyway).
	 */
	mt.procs_alive++;
	if (bpf_map_update_elem(tfd, &task_key, &mt, BPF_EXIST) < 0) {
		uint32_t k = (uint32_t)tgid;

		r = -errno;
		bpf_map_delete_elem(bpf_map__fd(m->skel->maps.procs), &k);
		return r;
	}
	if (m->at_exit)
		m->live_read_ns = 0; /* the next read bases the new entry */
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/*
 * Accounting at exit: a running thread's figures are folded in only at its exit, so a live
 * read first runs the task iterator, which folds every tracked thread's totals up to now
 * (one walk of all threads of the node serves every task; at most one per LIVE_READ_NS).
 */
#define LIVE_READ_NS (10 * 1000 * 1000ULL)
/*
 * Whether the live read may skip its walk (meter_set_cpu_source): the source has not moved since
 * the last walk's reading, and no entry waits for its base (a walk takes it). Else the reading
 * for the walk that follows, taken before it: what runs after it moves the source again.
 */
static bool live_quiet(struct meter *m)
{
	uint64_t ns;

	if (!m->cpu_fn || __atomic_load_n(&m->skel->bss->need_base, __ATOMIC_SEQ_CST) > 0 ||
	    m->cpu_fn(m->cpu_ctx, &ns) < 0) {
		m->cpu_valid = false;
		return false;
	}
	if (m->cpu_valid && ns == m->cpu_ns)
		return true;
	m->cpu_ns = ns;
	m->cpu_valid = true;
	return false;
}

/* One fold of every tracked thread that ran up to now: the walk, or the iter/task program. */
static int live_walk(struct meter *m)
{
	char buf[256];
	int fd;

	if (m->walk) {
		LIBBPF_OPTS(bpf_test_run_opts, o);

		return bpf_prog_test_run_opts(bpf_program__fd(m->skel->progs.meter_walk), &o) < 0
			   ? -errno
			   : 0;
	}
	fd = bpf_iter_create(bpf_link__fd(m->skel->links.meter_live));
	if (fd < 0)
		return -errno;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
	return 0;
}

static void live_read(struct meter *m)
{
	uint64_t now = mono_ns();

	if (m->live_read_ns && now - m->live_read_ns < LIVE_READ_NS)
		return;
	if (m->live_batch && m->live_batch_read && m->live_read_ns)
		return;
	if (live_quiet(m)) {
		m->walks_skipped++;
	} else if (live_walk(m) < 0) {
		m->cpu_valid = false; /* no walk followed that reading */
		return;
	} else {
		m->walks++;
	}
	/* Threads that exited since their last fold left the thread list: their settle (done
	 * ones) or a fold up to now (those still on their way out), when there are any. */
	if (!m->no_drain && m->skel->bss->dying_n > 0)
		(void)run_settle_live(m);
	m->live_read_ns = mono_ns();
	m->live_batch_read = m->live_batch;
}

void meter_batch(struct meter *m, bool on)
{
	if (!m)
		return;
	m->live_batch = on;
	m->live_batch_read = false;
	if (m->cache)
		m->cache->serial = 0;
}

/* Chunk of one batched lookup: entries per system call. */
#define CACHE_CHUNK 1024u

static int cache_alloc(struct meter *m)
{
	struct meter_cache *c;
	size_t vsz = MAX(sizeof(struct meter_task), sizeof(struct meter_net));

	if (m->cache)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->seen = calloc(m->max_tasks, sizeof(*c->seen));
	c->task = calloc(m->max_tasks, sizeof(*c->task));
	c->sum = calloc(m->max_tasks, sizeof(*c->sum));
	c->net = calloc(m->max_tasks, sizeof(*c->net));
	c->keys = calloc(CACHE_CHUNK, sizeof(uint64_t));
	c->vals = calloc(CACHE_CHUNK, MAX(vsz, (size_t)m->ncpus * sizeof(struct meter_slot)));
	if (!c->seen || !c->task || !c->sum || !c->net || !c->keys || !c->vals) {
		cache_free(c);
		return -ENOMEM;
	}
	m->cache = c;
	return 0;
}

static void cache_tasks(void *ctx, uint32_t n)
{
	struct meter *m = ctx;
	struct meter_cache *c = m->cache;
	const uint64_t *k = c->keys;
	const struct meter_task *v = c->vals;

	for (uint32_t i = 0; i < n; i++) {
		struct tracked *t = find_tracked(m, k[i]);
		uint32_t slot;

		if (!t)
			continue;
		slot = slot_of(m, t);
		c->task[slot] = v[i];
		c->seen[slot] = c->serial;
	}
}

/* A slot's switch-out counters summed over its per-CPU elements (ncpus of them at pcpu). */
static struct meter_slot slot_sum(const struct meter_slot *pcpu, int ncpus)
{
	struct meter_slot sl = {};

	for (int i = 0; i < ncpus; i++) {
		const struct meter_slot *c = &pcpu[i];

		sl.cpu_ns += c->cpu_ns;
		sl.utime_ticks_ns += c->utime_ticks_ns;
		sl.stime_ticks_ns += c->stime_ticks_ns;
		sl.io_read_bytes += c->io_read_bytes;
		sl.io_write_bytes += c->io_write_bytes;
		sl.blk_read_bytes += c->blk_read_bytes;
		sl.blk_write_bytes += c->blk_write_bytes;
		sl.blk_cancelled_bytes += c->blk_cancelled_bytes;
		sl.exiting += c->exiting;
	}
	return sl;
}

static void cache_slots(void *ctx, uint32_t n)
{
	struct meter *m = ctx;
	struct meter_cache *c = m->cache;
	const uint32_t *k = c->keys;
	const struct meter_slot *v = c->vals;

	for (uint32_t i = 0; i < n; i++)
		if (k[i] < m->max_tasks)
			c->sum[k[i]] = slot_sum(&v[(size_t)i * (size_t)m->ncpus], m->ncpus);
}

static void cache_net(void *ctx, uint32_t n)
{
	struct meter *m = ctx;
	struct meter_cache *c = m->cache;
	const uint64_t *k = c->keys;
	const struct meter_net *v = c->vals;

	for (uint32_t i = 0; i < n && c->n_net < m->max_tasks; i++)
		c->net[c->n_net++] = (struct meter_net_entry){.cgroup_id = k[i], .n = v[i]};
}

static int net_cmp(const void *x, const void *y)
{
	const struct meter_net_entry *a = x, *b = y;

	return a->cgroup_id < b->cgroup_id ? -1 : a->cgroup_id > b->cgroup_id;
}

int meter_prefetch(struct meter *m)
{
	static uint32_t serial;
	struct meter_cache *c;
	int r;

	if (!m || !m->live_batch)
		return -EINVAL;
	if ((r = cache_alloc(m)) < 0)
		return r;
	c = m->cache;
	c->serial = 0;
	/* the live read first: what it folds in is then in the entries read below */
	if (m->at_exit)
		live_read(m);
	/* with the marks, a check reads only the tasks marked (meter_dirty): no maps read whole */
	if (m->dirty)
		return 0;
	serial = serial + 1 ? serial + 1 : 1;
	c->serial = serial;
	c->n_net = 0;
	if ((r = track_map_read_all(bpf_map__fd(m->skel->maps.tasks), CACHE_CHUNK, c->keys, c->vals,
				    cache_tasks, m)) < 0 ||
	    (r = track_map_read_all(bpf_map__fd(m->skel->maps.slots), CACHE_CHUNK, c->keys, c->vals,
				    cache_slots, m)) < 0 ||
	    (r = track_map_read_all(bpf_map__fd(m->skel->maps.net), CACHE_CHUNK, c->keys, c->vals,
				    cache_net, m)) < 0) {
		c->serial = 0; /* the reads of this batch go to the maps one by one */
		return r;
	}
	qsort(c->net, c->n_net, sizeof(*c->net), net_cmp);
	return 0;
}

/*
 * Accounting at every switch: the task's threads that passed their exit tracepoint have all
 * switched out for the last time (their final slice, often the process's whole teardown, is
 * in the slot). 1: yes, 0: not yet, after a few tries.
 */
static int settle_switch(struct meter *m, uint64_t task_key)
{
	struct tracked *t = find_tracked(m, task_key);
	uint32_t slot;

	if (!t)
		return 1;
	slot = slot_of(m, t);
	for (int i = 0;; i++) {
		if (bpf_map_lookup_elem(bpf_map__fd(m->skel->maps.slots), &slot, m->pcpu) < 0)
			return -errno;
		if (slot_sum(m->pcpu, m->ncpus).exiting <= 0)
			return 1;
		if (i == 4)
			return 0;
		sched_yield();
	}
}

int meter_settle(struct meter *m, uint64_t task_key)
{
	int tfd = bpf_map__fd(m->skel->maps.tasks);
	struct meter_task mt;

	if (!m->at_exit)
		return settle_switch(m, task_key);
	for (int i = 0;; i++) {
		int r;

		if (bpf_map_lookup_elem(tfd, &task_key, &mt) < 0)
			return errno == ENOENT ? 1 : -errno;
		if (mt.threads_live <= 0)
			return 1;
		/* A thread that is not off its CPU yet is microseconds from it: a few tries. */
		if (i == 4)
			return 0;
		if (i > 0)
			sched_yield();
		r = run_settle(m, task_key, false, false);
		if (r < 0)
			return r;
	}
}

/* The task's mark in "dirty" (NULL: no marks, or not tracked). */
static uint64_t *mark_of(struct meter *m, uint64_t task_key)
{
	struct tracked *t;

	if (!m->dirty || !(t = find_tracked(m, task_key)))
		return NULL;
	return &m->dirty[slot_of(m, t)];
}

bool meter_dirty_take(struct meter *m, uint64_t task_key)
{
	uint64_t *d = mark_of(m, task_key);

	/* an exchange: a full barrier before the reads that follow (a program that marks after
	 * this reads counters the reads may have missed; one that marked before, its counters
	 * are in them) */
	return !d || __atomic_exchange_n(d, 0, __ATOMIC_SEQ_CST) != 0;
}

bool meter_dirty(struct meter *m, uint64_t task_key)
{
	uint64_t *d = mark_of(m, task_key);

	return !d || __atomic_load_n(d, __ATOMIC_SEQ_CST) != 0;
}

int meter_marked(struct meter *m, void (*fn)(void *ctx, uint64_t task_key), void *ctx)
{
	if (!m->dirty)
		return -EOPNOTSUPP;
	/* one pass over the mapped words (8 bytes a slot): the tracked slots with a mark */
	for (uint32_t slot = 0; slot < m->max_tasks; slot++)
		if (__atomic_load_n(&m->dirty[slot], __ATOMIC_ACQUIRE) && m->tasks[slot].s.used)
			fn(ctx, m->tasks[slot].s.key);
	return 0;
}

int meter_read(struct meter *m, uint64_t task_key, struct meter_usage *ret)
{
	struct tracked *t = find_tracked(m, task_key);
	struct meter_usage u = {};
	uint32_t slot;
	struct meter_slot sl = {};
	struct meter_task mt;
	double kib_s;
	bool cached;

	if (!t)
		return -ENOENT;
	slot = slot_of(m, t);
	cached = m->cache && m->cache->serial && m->cache->seen[slot] == m->cache->serial;
	if (cached) {
		mt = m->cache->task[slot];
		sl = m->cache->sum[slot];
	} else {
		if (bpf_map_lookup_elem(bpf_map__fd(m->skel->maps.tasks), &task_key, &mt) < 0)
			return -errno;
		if (m->at_exit && mt.threads_live > 0)
			live_read(m);
		/* The switch-out counters: one element per CPU. */
		if (bpf_map_lookup_elem(bpf_map__fd(m->skel->maps.slots), &slot, m->pcpu) < 0)
			return -errno;
		sl = slot_sum(m->pcpu, m->ncpus);
	}

	u.cpu_ns = sl.cpu_ns;
	u.cpu_ticks_user_ns = sl.utime_ticks_ns;
	u.cpu_ticks_system_ns = sl.stime_ticks_ns;
	if (sl.utime_ticks_ns + sl.stime_ticks_ns > 0) {
		long double f = (long double)sl.utime_ticks_ns /
				(long double)(sl.utime_ticks_ns + sl.stime_ticks_ns);

		u.cpu_user_ns = (uint64_t)(f * (long double)sl.cpu_ns);
		if (u.cpu_user_ns > sl.cpu_ns)
			u.cpu_user_ns = sl.cpu_ns;
		u.cpu_system_ns = sl.cpu_ns - u.cpu_user_ns;
		u.cpu_split_known = true;
	} else {
		u.cpu_user_ns = sl.cpu_ns;
	}
	u.rss_current_bytes = mt.rss_bytes > 0 ? (uint64_t)mt.rss_bytes : 0;
	u.rss_peak_bytes = mt.rss_peak_bytes;
	u.rss_changed_ns = mt.mem_ts;
	kib_s = (double)mt.mem_kib_s + (double)mt.mem_kib_us / 1e6;
	if (mt.procs_alive > 0 && mt.mem_ts && mt.rss_bytes > 0) {
		uint64_t now = mono_ns();

		if (now > mt.mem_ts)
			kib_s += (double)(mt.rss_bytes >> 10) * (double)(now - mt.mem_ts) / 1e9;
	}
	u.memory_byte_seconds = kib_s * 1024.0;
	/* One of the two is 0: sys_exit mode counts in the task, ioac mode in the slot. */
	u.io_read_bytes = mt.io_read_bytes + sl.io_read_bytes;
	u.io_write_bytes = mt.io_write_bytes + sl.io_write_bytes;
	u.blk_read_bytes = sl.blk_read_bytes;
	u.blk_write_bytes = sl.blk_write_bytes > sl.blk_cancelled_bytes
				? sl.blk_write_bytes - sl.blk_cancelled_bytes
				: 0;
	u.blk_measured = !m->io_from_syscalls;
	u.blk_issued_read_bytes = mt.rq_read_bytes;
	u.blk_issued_write_bytes = mt.rq_write_bytes;
	u.procs_alive = mt.procs_alive > 0 ? (uint32_t)mt.procs_alive : 0;
	u.threads_lost = mt.threads_lost;
	if (m->at_exit)
		u.threads_unsettled = mt.threads_live > 0 ? (uint64_t)mt.threads_live : 0;
	else
		u.threads_unsettled = sl.exiting > 0 ? (uint64_t)sl.exiting : 0;
	u.forks = mt.forks;
	if (t->ingress || (t->cgroup_id && m->root_ingress)) {
		struct meter_net n;
		const struct meter_net_entry key = {.cgroup_id = t->cgroup_id}, *hit = NULL;
		bool found;

		if (cached && (hit = bsearch(&key, m->cache->net, m->cache->n_net,
					     sizeof(*m->cache->net), net_cmp)))
			n = hit->n;
		found = cached ? hit != NULL
			       : bpf_map_lookup_elem(bpf_map__fd(m->skel->maps.net), &t->cgroup_id,
						     &n) == 0;
		if (found) {
			u.net_rx_bytes = n.rx_bytes;
			u.net_tx_bytes = n.tx_bytes;
			u.net_rx_packets = n.rx_packets;
			u.net_tx_packets = n.tx_packets;
		}
		u.net_metered = true;
	}
	*ret = u;
	return 0;
}

/* One run of the settle program for the task (force: drop its references, done or not; all:
 * every task's threads that are done). */
static int run_settle(struct meter *m, uint64_t task_key, bool force, bool all)
{
	struct meter_settle_ctx c = {.task_key = task_key, .force = force, .all = all};
	LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = &c, .ctx_size_in = sizeof(c));

	if (bpf_prog_test_run_opts(bpf_program__fd(m->skel->progs.meter_settle_prog), &o) < 0)
		return -errno;
	return 0;
}

/* The settle of a live read: every task's done threads, and the others folded up to now. */
static int run_settle_live(struct meter *m)
{
	struct meter_settle_ctx c = {.all = 1, .live = 1};
	LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = &c, .ctx_size_in = sizeof(c));

	if (bpf_prog_test_run_opts(bpf_program__fd(m->skel->progs.meter_settle_prog), &o) < 0)
		return -errno;
	return 0;
}

int meter_forget(struct meter *m, uint64_t task_key)
{
	struct tracked *t = find_tracked(m, task_key);
	struct meter_bpf *s = m->skel;
	int r = 0, q;

	if (!t)
		return -ENOENT;
	/*
	 * Task and slot first: BPF stops accounting (threads still running find gen 0 at their
	 * next switch-out and drop their entry); then the entries that point to it. The slot is
	 * handed out again only after this, the task's final read.
	 */
	/*
	 * A sweep walks every bucket of a map (get_next_key from NULL scans all of them even when
	 * the map is empty): about 0.1 ms per 64k-entry map. The task's own counts of its
	 * "procs" and "mms" entries (kept by BPF, decremented by whoever deletes an entry) say
	 * whether one is needed; normally both are 0 by now. Unreadable counts: sweep.
	 */
	struct meter_task mt;

	if (bpf_map_lookup_elem(bpf_map__fd(s->maps.tasks), &task_key, &mt) < 0)
		mt = (struct meter_task){.procs_alive = 1, .mms_alive = 1, .threads_live = 1};
	/* Accounting at exit: references still held for the task's threads go (a task given up
	 * before every thread was settled; a settled one has none left). */
	if (m->at_exit && mt.threads_live > 0)
		(void)run_settle(m, task_key, true, false);
	bpf_map_delete_elem(bpf_map__fd(s->maps.tasks), &task_key);
	r = set_slot(m, slot_of(m, t), 0);
	if (mt.procs_alive != 0) {
		m->sweeps++;
		q = track_delete_by_task(bpf_map__fd(s->maps.procs), sizeof(uint32_t),
					 sizeof(struct member), task_key, m->max_pids);
		if (q < 0 && !r)
			r = q;
	}
	q = track_delete_by_task(bpf_map__fd(s->maps.threads), sizeof(uint32_t),
				 sizeof(struct meter_thread), task_key, m->max_pids * 2);
	if (q < 0 && !r)
		r = q;
	if (mt.mms_alive != 0) {
		m->sweeps++;
		q = track_delete_by_task(bpf_map__fd(s->maps.mms), sizeof(uint64_t),
					 sizeof(struct meter_mm), task_key, m->max_pids);
		if (q < 0 && !r)
			r = q;
	}

	/* The net entry exists whether the programs are attached per task or once at the
	 * parent (then t->ingress/egress are NULL): forgetting it filled the map after
	 * max_tasks tasks and every later task lost BPF metering. */
	detach_net(t);
	if (t->cgroup_id)
		bpf_map_delete_elem(bpf_map__fd(s->maps.net), &t->cgroup_id);
	track_index_del(&m->ix, task_key);
	*t = (struct tracked){};
	m->ntracked--;
	return r;
}

uint64_t meter_ringbuf_drops(const struct meter *m)
{
	return m->skel->bss->ringbuf_drops;
}

uint64_t meter_map_full(const struct meter *m)
{
	return m->skel->bss->map_full;
}

uint64_t meter_tail_lost(const struct meter *m)
{
	return m->skel->bss->tail_lost;
}

void meter_set_cpu_source(struct meter *m, int (*fn)(void *ctx, uint64_t *ret_ns), void *ctx)
{
	if (!m)
		return;
	m->cpu_fn = fn;
	m->cpu_ctx = ctx;
	m->cpu_valid = false;
}

void meter_walk_next(struct meter *m)
{
	if (m)
		m->cpu_valid = false; /* no reading to compare with: live_quiet says walk */
}

uint64_t meter_walks(const struct meter *m)
{
	return m ? m->walks : 0;
}

uint64_t meter_walks_skipped(const struct meter *m)
{
	return m ? m->walks_skipped : 0;
}

uint64_t meter_drains(const struct meter *m)
{
	return m->drains;
}

uint64_t meter_sweeps(const struct meter *m)
{
	return m->sweeps;
}

uint32_t meter_tasks_tracked(const struct meter *m)
{
	return m->ntracked;
}

int meter_switch_stats(const struct meter *m, uint64_t *runs, uint64_t *run_ns)
{
	const struct bpf_program *p =
	    is_btf(m) ? m->skel->progs.btf_sched_switch : m->skel->progs.raw_sched_switch;
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);

	if (m->at_exit)
		return -ENOENT; /* no sched_switch program */
	if (bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len) < 0)
		return -errno;
	*runs = info.run_cnt;
	*run_ns = info.run_time_ns;
	return 0;
}
