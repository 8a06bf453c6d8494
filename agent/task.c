/* SPDX-License-Identifier: MIT */
/* Task lifecycle: authorize, prepare, launch, enforce limits, collect usage, end. */
#include "agent/agent.h"
#include "agent/admission.h"
#include "agent/users.h"
#include "agent/sandbox.h"
#include "agent/log.h"
#include "agent/meters.h"
#include "agent/node_energy.h"
#include "agent/plan.h"
#include "agent/profiles.h"
#include "agent/spawner.h"
#include "agent/loop.h"
#include "agent/task.h"
#include "agent/task_index.h"
#include "agent/usage.h"
#include "agent/state.h"
#include "agent/supervise.h"
#include "agent/emit.h"
#include "agent/cgpool.h"
#include "agent/scope.h"
#include "agent/taskstats_glue.h"
#include "agent/budget.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/growbuf.h"
#include "common/parse.h"
#include "common/proc.h"
#include "isolation/cgroup.h"
#include "isolation/seccomp.h"
#include "bpf/meter.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void on_status_fd(void *data, int fd, uint32_t events);
static void on_exec_fd(void *data, int fd, uint32_t events);
static void on_cpu_timer_fd(void *data, int fd, uint32_t events);
static void oom_watch_start(struct agent *a, struct task *t);
static void cpu_limit_check(struct agent *a, struct task *t);
static void meters_limit(struct agent *a, struct task *t, uint64_t now);

/* A launch in progress (TASK_STARTING). */
struct task_start {
	struct launch_handle h;
	char *workdir;		/* as the child uses it, for messages */
	struct sandbox_plan sb; /* the mounts the child applies (and names in its errors) */
	bool announced;		/* state file and task.start written (at go) */
	bool pid_wait;		/* counted in a->n_pid_wait: the child's pid is not known yet */
};

static void pid_wait_end(struct agent *a, struct task_start *st)
{
	if (!st->pid_wait)
		return;
	st->pid_wait = false;
	a->n_pid_wait--;
}

#define START_PID_MAX_NS  (10 * NSEC_PER_SEC) /* the shim reports the child's pid */
#define START_EXEC_MAX_NS (30 * NSEC_PER_SEC) /* the child gets to execve */

/* Close what is left of the launch (closing the sync pipe ends a child still waiting). */
static void task_start_free(struct task *t)
{
	launch_handle_close(&t->start->h);
	sandbox_plan_free(&t->start->sb);
	free(t->start->workdir);
	free(t->start);
	t->start = NULL;
}

struct task *task_find(struct agent *a, const char *id)
{
	for (struct task *t = a->tasks; t; t = t->next)
		if (strcmp(t->id, id) == 0)
			return t;
	for (struct task *t = a->ended; t; t = t->next)
		if (strcmp(t->id, id) == 0)
			return t;
	return NULL;
}

/*
 * tasks_alive kept as tasks leave (agent.h alive_n, alive_digest, alive_visit): a statement
 * looks at the tasks not alive and at the alive ones that may have changed since the last
 * one (the meters' marks, a state change), not at every task.
 */
static bool alive_in(const struct task *t)
{
	return t->anchor_listed && t->alive;
}

/* The next statement looks at t (each task once in the list). */
static void alive_visit_push(struct agent *a, struct task *t)
{
	if (t->alive_visit)
		return;
	if (grow_array((void **)&a->alive_visit, &a->cap_alive_visit, a->n_alive_visit,
		       sizeof(*a->alive_visit)) < 0) {
		a->alive_visit_lost = true; /* the next statement walks every task */
		return;
	}
	a->alive_visit[a->n_alive_visit++] = t->key;
	t->alive_visit = true;
}

/* t is no longer alive (a change, a sample, its end): out of the count and digest. */
static void alive_leave(struct agent *a, struct task *t)
{
	if (alive_in(t)) {
		a->alive_n--;
		a->alive_digest = acct_alive_digest(a->alive_digest, t->id); /* xor: removed */
	}
	t->alive = false;
	alive_visit_push(a, t);
}

void task_lists_free(struct agent *a)
{
	free(a->alive_visit);
	a->alive_visit = NULL;
	a->n_alive_visit = a->cap_alive_visit = 0;
	free(a->ebpf_noted);
	a->ebpf_noted = NULL;
	a->n_ebpf_noted = a->cap_ebpf_noted = 0;
	task_index_free(a);
}

/* A change of t's state the meters do not mark (it ends): the next statement looks at it. */
static void alive_touch(struct agent *a, struct task *t)
{
	alive_visit_push(a, t);
}

void task_slim(struct task *t)
{
	char *txt;

	if (!t->final_record)
		return;
	txt = json_dumps(t->final_record, JSON_COMPACT);
	if (!txt)
		return; /* keep the tree */
	free(t->final_txt);
	t->final_txt = txt;
	free(t->ps_exit_txt);
	t->ps_exit_txt = json_object_get(t->final_record, "exit")
			     ? json_dumps(json_object_get(t->final_record, "exit"), JSON_COMPACT)
			     : NULL;
	spec_slim(&t->spec);
	json_decref(t->final_record);
	t->final_record = NULL;
	json_decref(t->usage_detail);
	t->usage_detail = NULL;
}

json_t *task_final_record(const struct task *t)
{
	if (t->final_record)
		return json_incref(t->final_record);
	return t->final_txt ? json_loads(t->final_txt, 0, NULL) : NULL;
}

/* Room for one more in the ring (its order kept, the oldest moved to index 0). */
static int ended_ring_reserve(struct agent *a, size_t n)
{
	struct task **v;
	size_t cap = a->ended_ring_cap ? a->ended_ring_cap : 64;

	if (n <= a->ended_ring_cap)
		return 0;
	while (cap < n)
		cap *= 2;
	v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < a->n_ended && a->ended_ring; i++)
		v[i] = a->ended_ring[(a->ended_ring_head + i) % a->ended_ring_cap];
	free(a->ended_ring);
	a->ended_ring = v;
	a->ended_ring_cap = cap;
	a->ended_ring_head = 0;
	return 0;
}

/* The ring made again from the list (its positions from ended_first_pos on). */
static int ended_ring_rebuild(struct agent *a)
{
	size_t i = 0;

	free(a->ended_ring);
	a->ended_ring = NULL;
	a->ended_ring_cap = a->ended_ring_head = 0;
	if (ended_ring_reserve(a, a->n_ended + 1) < 0)
		return -ENOMEM;
	for (struct task *t = a->ended; t && i < a->n_ended; t = t->next)
		a->ended_ring[i++] = t;
	a->ended_ring_stale = false;
	return 0;
}

struct task *task_ended_at(struct agent *a, uint64_t pos)
{
	if (a->ended_ring_stale && ended_ring_rebuild(a) < 0)
		return NULL;
	if (pos < a->ended_first_pos || pos - a->ended_first_pos >= a->n_ended || !a->ended_ring)
		return NULL;
	return a->ended_ring[(a->ended_ring_head + (pos - a->ended_first_pos)) % a->ended_ring_cap];
}

void task_ended_ring_free(struct agent *a)
{
	free(a->ended_ring);
	a->ended_ring = NULL;
	a->ended_ring_cap = a->ended_ring_head = 0;
}

void task_add_ended(struct agent *a, struct task *t)
{
	struct task **pp = &a->ended;

	t->next = NULL;
	if (!a->ended_tail || a->ended_tail->end_ns <= t->end_ns) {
		/* the common case: it ended last */
		if (a->ended_tail)
			a->ended_tail->next = t;
		else
			a->ended = t;
		a->ended_tail = t;
		if (!a->ended_ring_stale && ended_ring_reserve(a, a->n_ended + 1) == 0)
			a->ended_ring[(a->ended_ring_head + a->n_ended) % a->ended_ring_cap] = t;
		else
			a->ended_ring_stale = true;
		a->n_ended++;
		return;
	}
	/* loaded at start in directory order: insert by end time */
	while (*pp && (*pp)->end_ns <= t->end_ns)
		pp = &(*pp)->next;
	t->next = *pp;
	*pp = t;
	a->n_ended++;
	a->ended_ring_stale = true;
}

void task_free(struct task *t)
{
	if (!t)
		return;
	budget_untouch(t);
	spec_clear(&t->spec);
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->release)
			(*m)->release(t);
	free(t->user);
	free(t->cg_name);
	cg_task_free(t->cg);
	if (t->start) {
		launch_abort(&t->start->h);
		task_start_free(t);
	}
	closep(&t->shim_pidfd);
	closep(&t->status_fd);
	if (t->have_cpu_timer)
		closep(&t->cpu_timer_fd);
	if (t->have_oom_fd)
		closep(&t->oom_fd);
	free(t->exit_message);
	json_decref(t->usage_detail);
	json_decref(t->gpu_alloc);
	json_decref(t->gpu_meter_saved);
	json_decref(t->final_record);
	free(t->final_txt);
	free(t->ps_exit_txt);
	while (t->waiters) {
		struct waiter *w = t->waiters;

		t->waiters = w->next;
		free(w);
	}
	free(t);
}

/* A live task's requests into or out of the node's sums (sign 1 or -1). */
static void live_requests_add(struct agent *a, const struct task *t, int sign)
{
	a->live_cpus_micro += sign * (int64_t)(t->spec.cpus * 1e6 + 0.5);
	a->live_memory_bytes += (uint64_t)sign * t->spec.memory_max;
	a->live_gpus += (uint64_t)sign * t->spec.gpus;
}

static void task_link(struct agent *a, struct task *t)
{
	t->next = a->tasks;
	a->tasks = t;
	task_index_put(a, t);
	live_requests_add(a, t, 1);
	alive_visit_push(a, t); /* not listed by an anchor yet */
}

/* A record of the task (agent/emit.c), task.end with its audit figures. */
static void fill_record(struct agent *a, struct task *t, enum acct_type type, struct acct_record *r)
{
	task_fill_record(a, t, type, r);
	if (type == ACCT_TASK_END && a->audit)
		json_object_set_new(r->extra, "audit", budget_end_json(t));
}

static void emit(struct agent *a, struct task *t, enum acct_type type);

void task_emit(struct agent *a, struct task *t, enum acct_type type)
{
	emit(a, t, type);
}

static void emit(struct agent *a, struct task *t, enum acct_type type)
{
	struct acct_record r;

	fill_record(a, t, type, &r);
	(void)agent_emit_record(a, &r);
	if (type == ACCT_TASK_END) {
		json_t *j = NULL;

		if (acct_record_to_json(&r, &j) == 0) {
			json_decref(t->final_record);
			t->final_record = j;
		}
	}
	acct_record_clear(&r);
}

static void free_strvp(char ***p)
{
	plan_strv_free(*p);
}

/*
 * A new task for an admitted launch: the spec's contents are moved into it (spec is left
 * empty), its id from a ready cgroup that fits lim (then *pool_cg) or a new one.
 */
static struct task *launch_task_new(struct agent *a, struct task_spec *spec,
				    const struct user_info *pw, uid_t submitter,
				    const struct cg_limits *lim, struct cg_task **pool_cg)
{
	struct task *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->agent = a;
	t->shim_pidfd = t->status_fd = -1;
	t->spec = *spec;
	spec_init(spec);
	budget_init(a, t);
	/* a cgroup made ahead comes with the task id it was made for (agent/cgpool.c) */
	if (!agent_cg_pool_take(a, lim, &t->key, t->id, sizeof(t->id), pool_cg))
		t->key = state_next_task_id(a, t->id, sizeof(t->id));
	t->user = strdup(pw->name);
	t->uid = pw->uid;
	t->gid = pw->gid;
	t->submitter_uid = submitter;
	t->cg_name = strdup(t->id);
	t->start_ns = now_ns(CLOCK_REALTIME);
	t->start_mono_ns = now_ns(CLOCK_MONOTONIC);
	t->next_sample_mono = task_first_sample(a, t->start_mono_ns);
	t->last_mem_sample_mono = t->start_mono_ns;
	/* its energy share counts from its start: no CPU time, no memory then */
	t->energy = (struct task_energy){.based = true, .at_mono = t->start_mono_ns};
	task_tick_soon(a);
	return t;
}

/* The task's cgroup: the ready one (limits written now) or a new one. */
static int launch_cgroup(struct agent *a, struct task *t, const struct cg_limits *lim,
			 struct cg_task *pool_cg, char *err, size_t errlen)
{
	int r;

	if (pool_cg) {
		r = cg_task_apply(pool_cg, lim);
		if (r < 0)
			agent_cg_release(a, pool_cg);
		else
			t->cg = pool_cg;
	} else
		r = cg_task_create(a->cg, t->cg_name, lim, &t->cg);
	if (r < 0)
		return err_set(err, errlen, -EINVAL, "creating the task's cgroup failed: %s",
			       strerror(-r));
	return 0;
}

static void meter_launch_clear(struct meter_launch *ml)
{
	plan_strv_free(ml->env);
	ml->env = NULL;
}

static struct task_start *task_start_new(const char *workdir)
{
	struct task_start *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->h = (struct launch_handle){.shim_pid = -1,
				       .shim_pidfd = -1,
				       .task_pid = -1,
				       .status_fd = -1,
				       .err_fd = -1,
				       .sync_fd = -1};
	st->workdir = strdup(workdir);
	if (!st->workdir) {
		free(st);
		return NULL;
	}
	return st;
}

int task_launch(struct agent *a, struct task_spec *spec, uid_t submitter, gid_t sub_gid,
		bool privileged, struct task **ret, char *err, size_t errlen)
{
	_cleanup_(free_strvp) char **env = NULL;
	_cleanup_(free_strvp) char **paths = NULL;
	_cleanup_(meter_launch_clear) struct meter_launch ml = {0};
	const struct sbx_filter *filter = NULL;
	struct launch_plan plan = {0};
	struct launch_files files;
	struct cg_limits lim;
	struct cg_task *pool_cg = NULL;
	const struct user_info *pw;
	struct task *t;
	char msg[512];
	int r;

	(void)sub_gid;
	r = plan_admit(a, spec, submitter, privileged, &pw, err, errlen);
	if (r < 0)
		return r;
	r = plan_limits(a, spec, submitter, &lim, err, errlen);
	if (r < 0)
		return r;

	t = launch_task_new(a, spec, pw, submitter, &lim, &pool_cg);
	if (!t)
		return -ENOMEM;
	r = launch_cgroup(a, t, &lim, pool_cg, err, errlen);
	if (r < 0) {
		task_free(t);
		return r;
	}
	/* The meters' part (agent/meters.h): the network policy checked, GPUs allocated and
	 * their device policy attached, what the filter, the env and the private /dev need. */
	r = meters_prepare(a, t, &ml, msg, sizeof(msg));
	if (r < 0) {
		if (ml.refused)
			a->stats.refused++;
		goto out_cg;
	}
	/* Seccomp, compiled before fork (cached per profile, agent/profiles.h). With audit,
	 * the variant that notifies the shim of denied calls. A profile path is read by the
	 * client, with its own rights, and sent as seccomp_profile (corralctl does): the agent
	 * opens a path only for root, so it never reads, quotes or waits on a file for a user. */
	r = plan_filter(a, &t->spec, submitter, ml.filter_flags, &filter, msg, sizeof(msg));
	if (r < 0)
		goto out_unprepare;
	env = plan_env(&t->spec, pw, t->id, (const char *const *)ml.env);
	paths = env ? plan_exec_paths(t->spec.argv[0], env) : NULL;
	if (!env || !paths) {
		r = -ENOMEM;
		goto out_unprepare;
	}
	plan_fill(a, t, pw, env, paths, filter, ml.syscalls_file, &files, &plan);
	t->start = task_start_new(plan.workdir);
	if (!t->start) {
		r = -ENOMEM;
		goto out_unprepare;
	}
	r = sandbox_plan_build(a, &t->spec, submitter, pw->uid, ml.dev_names, &t->start->sb, msg,
			       sizeof(msg));
	if (r < 0)
		goto out_unprepare;
	plan.ns_flags = t->start->sb.ns_flags;
	plan.n_mounts = t->start->sb.n;
	plan.mounts = t->start->sb.m;
	r = agent_spawn_shim(a, &plan, &t->start->h);
	spec_close_stdio(&t->spec); /* the shim holds them now (or the launch failed) */
	if (r < 0) {
		snprintf(msg, sizeof(msg), "starting the task failed: %s", strerror(-r));
		goto out_unprepare;
	}
	/* From here on the task exists: whatever happens ends in its record. */
	t->shim_pid = t->start->h.shim_pid;
	t->state = TASK_STARTING;
	t->starting_since_mono = now_ns(CLOCK_MONOTONIC);
	task_link(a, t);
	a->n_live++;
	t->start->pid_wait = true;
	a->n_pid_wait++;
	loop_add(a->loop, t->start->h.status_fd, EPOLLIN, on_status_fd, t);
	*ret = t;
	return 0;

out_unprepare:
	meters_unprepare(a, t);
out_cg:
	(void)cg_task_kill(t->cg, SIGKILL);
	(void)cg_task_destroy(t->cg);
	task_free(t);
	return err_set(err, errlen, -EINVAL, "%s", r == -ENOMEM ? "out of memory" : msg);
}

/*
 * The launch's outcome: r 1 the child exec'd, < 0 it did not (msg says why). The task leaves
 * TASK_STARTING: running, or ending as launch_failed (the shim still reports the child's
 * exit, ignored for the status; if the shim is gone, the status pipe's EOF ends it).
 */
static void start_done(struct agent *a, struct task *t, int r, const char *msg)
{
	struct task_start *st = t->start;
	bool announced = st->announced;

	pid_wait_end(a, st);
	loop_del(a->loop, st->h.err_fd);
	loop_del(a->loop, st->h.status_fd);
	t->shim_pidfd = TAKE_FD(st->h.shim_pidfd);
	t->status_fd = TAKE_FD(st->h.status_fd);
	task_start_free(t);
	task_tick_soon(a);
	if (r < 0) {
		t->status = ACCT_EXIT_LAUNCH_FAILED;
		t->exit_code = r == -ENOENT ? 127 : 126;
		free(t->exit_message);
		t->exit_message = strdup(msg);
		t->state = TASK_ENDING;
		t->ending_since_mono = now_ns(CLOCK_MONOTONIC);
		a->stats.launch_failed++;
		(void)task_save(a, t);
		if (t->status_fd >= 0)
			loop_add(a->loop, t->status_fd, EPOLLIN, on_status_fd, t);
		if (!announced)
			emit(a, t, ACCT_TASK_START);
		log_notice("task %s (%s, user %s): launch failed: %s", t->id, t->spec.argv[0],
			   t->user, msg);
		if (a->on_task_started)
			a->on_task_started(a, t, msg);
		return;
	}
	t->state = TASK_RUNNING;
	a->stats.tasks_started++;
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->running)
			(*m)->running(a, t);
	loop_add(a->loop, t->status_fd, EPOLLIN, on_status_fd, t);
	/*
	 * A running task keeps one descriptor here, its status pipe: the shim's pidfd (the status
	 * pipe's EOF says as much) and the cgroup's fds (reopened by name when used) are closed.
	 */
	closep(&t->shim_pidfd);
	t->shim_pidfd = -1;
	cg_task_park(t->cg);
	cpu_limit_check(a, t);
	oom_watch_start(a, t);
	log_info("task %s started: pid %d user %s cgroup %s cmd %s", t->id, (int)t->pid, t->user,
		 cg_task_path(t->cg), t->spec.argv[0]);
	if (a->on_task_started)
		a->on_task_started(a, t, NULL);
}

/* Abort a launch that cannot go on (before the child exec'd). */
static void start_fail(struct agent *a, struct task *t, int err, const char *msg)
{
	if (t->start->h.task_pid <= 0 && t->start->h.shim_pid > 0)
		(void)kill(t->start->h.shim_pid, SIGKILL); /* no child yet: the shim is stuck */
	launch_abort(&t->start->h);
	start_done(a, t, err < 0 ? err : -EIO, msg);
}

/* The shim reported the child's pid: track it everywhere, then let it go. */
static void start_on_pid(struct agent *a, struct task *t)
{
	struct task_start *st = t->start;
	char perr[512];
	int r = launch_poll_pid(&st->h);

	if (r == 0)
		return;
	if (r < 0) {
		snprintf(perr, sizeof(perr), "starting the task failed: %s", strerror(-r));
		start_fail(a, t, r, perr);
		return;
	}
	pid_wait_end(a, st);
	/* The status pipe says nothing more before the exec result (and is read after it). */
	loop_del(a->loop, st->h.status_fd);
	t->pid = st->h.task_pid;
	t->shim_pid = st->h.shim_pid; /* a spawner's shim said it on the status pipe */
	r = scope_adopt_shim(a, t->shim_pid);
	if (r < 0)
		log_warning("task %s: moving its supervisor into the tasks' scope failed: %s",
			    t->id, strerror(-r));
	for (const struct meter_ops *const *m = agent_meters; *m; m++) {
		r = (*m)->started ? (*m)->started(a, t, perr, sizeof(perr)) : 0;
		if (r < 0) {
			start_fail(a, t, r, perr);
			return;
		}
	}
	r = launch_go(&st->h);
	if (r < 0) {
		snprintf(perr, sizeof(perr), "starting the task failed: %s", strerror(-r));
		start_fail(a, t, r, perr);
		return;
	}
	/*
	 * The start times guard a re-adoption against pid reuse. They are read after the go,
	 * off the child's path. The child can be gone only after its exec and exit (the shim
	 * reaps it), the shim only after that; a start time that cannot be read stays 0.
	 */
	(void)proc_start_time(t->shim_pid, &t->shim_start);
	(void)proc_start_time(t->pid, &t->pid_start);
	/*
	 * The child is on its way to execve: from now on a restarted agent must know the task
	 * (re-adopted from this file, its exit from the shim's) and task.start is out. A child
	 * that then fails before execve ends launch_failed (or, after a restart, with the code
	 * 126/127 it exited with).
	 */
	r = task_save(a, t);
	if (r < 0)
		log_error("task %s: saving state failed: %s (it will not survive an agent restart)",
			  t->id, strerror(-r));
	emit(a, t, ACCT_TASK_START);
	st->announced = true;
	loop_add(a->loop, st->h.err_fd, EPOLLIN, on_exec_fd, t);
}

/* A starting task's close-on-exec error pipe: the child exec'd, or says why it did not. */
static void on_exec_fd(void *data, int fd, uint32_t events)
{
	struct task *t = data;
	struct agent *a = t->agent;
	enum launch_step step = LAUNCH_STEP_NONE;
	struct launch_plan plan = {0};
	char msg[512];
	int r;

	if (t->state != TASK_STARTING || !t->start)
		return;
	r = launch_poll_exec(&t->start->h, &step);
	if (r == 0)
		return;
	if (r > 0) {
		start_done(a, t, 1, NULL);
		return;
	}
	/* The child reported a failing step: the task ends as launch_failed. */
	plan.argv = t->spec.argv;
	plan.workdir = t->start->workdir;
	plan.stdout_path = t->spec.stdout_path;
	plan.stderr_path = t->spec.stderr_path;
	plan.stdin_path = t->spec.stdin_path;
	plan.ns_flags = t->start->sb.ns_flags;
	plan.n_mounts = t->start->sb.n;
	plan.mounts = t->start->sb.m;
	launch_format_error(&plan, step, -r, msg, sizeof(msg));
	start_done(a, t, step == LAUNCH_STEP_EXEC && r == -ENOENT ? -ENOENT : -EIO, msg);
}

/* A launch past its deadline: the shim never reported a pid, or the child never exec'd. */
static void start_tick(struct agent *a, struct task *t, uint64_t now)
{
	bool have_pid = t->start->h.task_pid > 0;

	if (!have_pid && now - t->starting_since_mono > START_PID_MAX_NS)
		start_fail(a, t, -ETIMEDOUT,
			   "starting the task failed: the supervisor did not report the task's "
			   "pid within 10s");
	else if (have_pid && now - t->starting_since_mono > START_EXEC_MAX_NS)
		start_fail(a, t, -ETIMEDOUT,
			   "starting the task failed: the task did not reach execve within 30s "
			   "(its working directory, output files or sandbox paths may be on a "
			   "filesystem that does not answer)");
}

/*
 * OOM kills the kernel made in the task's cgroup since the last report: one audit.limit record
 * ("oom_kill") per increment observed (at a tick, or at the task's end), with the total and the
 * new kills. A task's processes may be OOM-killed while the task goes on (a parent that
 * restarts its workers): these records and exit.oom_kills say so.
 */
static void report_oom_kills(struct agent *a, struct task *t, const struct cg_stats *st)
{
	struct acct_record r;
	uint64_t n = sv_oom_new_kills(t, st->oom_kills);

	if (!n)
		return;
	task_fill_record(a, t, ACCT_AUDIT_LIMIT, &r);
	r.event = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:s}", "limit", "oom_kill", "action",
			    "kernel OOM kill", "limit_value", (json_int_t)t->spec.memory_max,
			    "observed", (json_int_t)st->memory_peak, "oom_kills",
			    (json_int_t)t->oom_kills, "new_kills", (json_int_t)n, "detected_by",
			    t->oom_victims_seen >= n ? "ebpf" : "cgroup");
	if (r.event && t->oom_victims_seen) {
		json_t *pids = json_array();
		uint32_t k =
		    t->oom_victims_seen < TASK_OOM_PIDS ? t->oom_victims_seen : TASK_OOM_PIDS;

		for (uint32_t i = 0; pids && i < k; i++)
			(void)json_array_append_new(pids, json_integer(t->oom_victim_pids[i]));
		(void)json_object_set_new(r.event, "victim_pids", pids);
	}
	t->oom_victims_seen = 0;
	(void)agent_emit_record(a, &r);
	acct_record_clear(&r);
	log_notice("task %s: %llu process(es) OOM-killed inside the task (%llu in all)", t->id,
		   (unsigned long long)n, (unsigned long long)t->oom_kills);
}

/*
 * OOM kills reported as they happen, not at the next sample: on v1 an eventfd registered on the
 * task's memory.oom_control, which the kernel signals when the cgroup runs out of memory,
 * just before its OOM killer picks a victim; on v2 an inotify watch on memory.events (one
 * inotify descriptor for all tasks), which changes at the kill. At the event the kill count is
 * read (one file); where it has not moved yet (v1: the event comes before the kill), it is read
 * again every OOM_RETRY_NS (the agent's one OOM timerfd) for up to OOM_RECHECK_NS. An event
 * costs a few reads of one file, whatever the task count.
 */
#define OOM_RECHECK_NS (1 * NSEC_PER_SEC)
#define OOM_RETRY_NS   (10 * 1000 * 1000ULL)

static void oom_retry_arm(struct agent *a);

/*
 * With the meter's OOM program (meter_oom_mode), every OOM kill of a task's process, node-wide
 * or its cgroup's, comes as a METER_EV_OOM_VICTIM just after the kernel counted it: the record
 * waits for the victims (at most OOM_RECHECK_NS, say a full ring buffer) so that it names them.
 */
static bool oom_victims_from_bpf(const struct agent *a)
{
	return a->meter && meter_oom_mode(a->meter);
}

static void oom_check(struct agent *a, struct task *t, uint64_t now)
{
	struct cg_stats st;
	uint64_t kills;
	bool moved, wait_victims;

	if (t->state != TASK_RUNNING || !t->cg || cg_task_oom_kills(t->cg, &kills) < 0) {
		t->oom_recheck_until = 0;
		return;
	}
	moved = kills > t->oom_kills_reported;
	wait_victims =
	    moved && oom_victims_from_bpf(a) && t->oom_victims_seen < kills - t->oom_kills_reported;
	if (moved && !wait_victims && cg_task_stats(t->cg, &st) == 0) {
		report_oom_kills(a, t, &st);
		t->oom_recheck_until = 0;
	} else if (!t->oom_recheck_until) {
		t->oom_recheck_until = now + OOM_RECHECK_NS;
		oom_retry_arm(a);
	} else if (now >= t->oom_recheck_until) {
		t->oom_recheck_until = 0;
		/* the victims' events did not come: the kills as the cgroup counts them */
		if (moved && cg_task_stats(t->cg, &st) == 0)
			report_oom_kills(a, t, &st);
	} else {
		oom_retry_arm(a);
	}
}

void task_on_oom_victim(struct agent *a, uint64_t task_key, uint32_t pid)
{
	struct task *t = task_live(a, task_key);
	uint64_t kills;

	if (!t || t->state != TASK_RUNNING)
		return; /* its end reports the kills (exit.status, audit.limit) */
	if (t->oom_victims_seen < TASK_OOM_PIDS)
		t->oom_victim_pids[t->oom_victims_seen] = pid;
	t->oom_victims_seen++;
	log_info("task %s: process %u chosen by the kernel's OOM killer", t->id, pid);
	oom_check(a, t, now_ns(CLOCK_MONOTONIC));
	/* The kill is counted before the victim is named: a count that has not moved means a
	 * report (a sample's) took this kill already. */
	if (t->cg && cg_task_oom_kills(t->cg, &kills) == 0 && kills <= t->oom_kills_reported)
		t->oom_victims_seen = 0;
}

/* The retries: the tasks whose event came before its kill was counted (rare: a walk). */
static void on_oom_retry(void *data, int fd, uint32_t events)
{
	struct agent *a = data;
	uint64_t exp, now = now_ns(CLOCK_MONOTONIC);

	(void)events;
	(void)!read(fd, &exp, sizeof(exp));
	for (struct task *t = a->tasks; t; t = t->next)
		if (t->oom_recheck_until)
			oom_check(a, t, now);
}

static void oom_retry_arm(struct agent *a)
{
	struct itimerspec its = {.it_value = {.tv_nsec = OOM_RETRY_NS}};

	if (!a->have_oom_timer) {
		int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

		if (fd < 0)
			return; /* the sample reports it */
		if (loop_add(a->loop, fd, EPOLLIN, on_oom_retry, a) < 0) {
			close(fd);
			return;
		}
		a->oom_timer_fd = fd;
		a->have_oom_timer = true;
	}
	(void)timerfd_settime(a->oom_timer_fd, 0, &its, NULL);
}

static void on_oom_fd(void *data, int fd, uint32_t events)
{
	struct task *t = data;
	uint64_t n;

	(void)events;
	(void)!read(fd, &n, sizeof(n));
	oom_check(t->agent, t, now_ns(CLOCK_MONOTONIC));
}

static void on_oom_inotify(void *data, int fd, uint32_t events)
{
	struct agent *a = data;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	uint64_t now = now_ns(CLOCK_MONOTONIC);
	ssize_t n;

	(void)events;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			/* rare (an OOM event): the walk finds its task */
			for (struct task *t = a->tasks; t; t = t->next)
				if (t->have_oom_wd && t->oom_wd == ev->wd)
					oom_check(a, t, now);
			p += sizeof(*ev) + ev->len;
		}
	}
}

static void oom_watch_start(struct agent *a, struct task *t)
{
	char path[PATH_MAX];
	int fd, r;

	if (!t->cg)
		return;
	/* Tests only: no cgroup notification, as for a node-wide OOM kill on v1, so that only
	 * the meter's OOM victim program can report a kill before the next sample. */
	if (getenv("CORRAL_TEST_NO_OOM_NOTIFY"))
		return;
	if (cg_root_mode(a->cg) != CG_MODE_V2) {
		fd = cg_task_oom_eventfd(t->cg);
		if (fd < 0) {
			if (fd != -EOPNOTSUPP)
				log_warning("task %s: no OOM notification (%s): OOM kills are "
					    "reported at its samples",
					    t->id, strerror(-fd));
			return;
		}
		r = loop_add(a->loop, fd, EPOLLIN, on_oom_fd, t);
		if (r < 0) {
			close(fd);
			return;
		}
		t->oom_fd = fd;
		t->have_oom_fd = true;
		return;
	}
	if (!a->have_oom_inotify) {
		fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		if (fd < 0)
			return;
		if (loop_add(a->loop, fd, EPOLLIN, on_oom_inotify, a) < 0) {
			close(fd);
			return;
		}
		a->oom_inotify_fd = fd;
		a->have_oom_inotify = true;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/memory.events", cg_task_path(t->cg)) >=
	    sizeof(path))
		return;
	r = inotify_add_watch(a->oom_inotify_fd, path, IN_MODIFY);
	if (r < 0) {
		if (errno != ENOENT) /* no memory controller in the task's cgroup */
			log_warning("task %s: no watch on %s (%m): OOM kills are reported at "
				    "its samples",
				    t->id, path);
		return;
	}
	t->oom_wd = r;
	t->have_oom_wd = true;
}

static void oom_watch_stop(struct agent *a, struct task *t)
{
	if (t->have_oom_fd) {
		loop_del(a->loop, t->oom_fd);
		closep(&t->oom_fd);
		t->have_oom_fd = false;
	}
	if (t->have_oom_wd) {
		if (a->have_oom_inotify)
			(void)inotify_rm_watch(a->oom_inotify_fd, t->oom_wd);
		t->have_oom_wd = false;
	}
	t->oom_recheck_until = 0;
}

void task_oom_watch_fini(struct agent *a)
{
	if (a->have_oom_timer) {
		loop_del(a->loop, a->oom_timer_fd);
		closep(&a->oom_timer_fd);
		a->have_oom_timer = false;
	}
	if (!a->have_oom_inotify)
		return;
	loop_del(a->loop, a->oom_inotify_fd);
	closep(&a->oom_inotify_fd);
	a->have_oom_inotify = false;
}

void task_prune_ended(struct agent *a)
{
	/* Ended tasks have no waiters (a wait on one is answered at once): drop the oldest. */
	while (a->n_ended > a->cfg.ended_keep && a->ended) {
		struct task *oldest = a->ended;

		a->ended = oldest->next;
		if (!a->ended)
			a->ended_tail = NULL;
		a->n_ended--;
		a->ended_first_pos++;
		if (!a->ended_ring_stale && a->ended_ring)
			a->ended_ring_head = (a->ended_ring_head + 1) % a->ended_ring_cap;
		state_remove_ended(a, oldest);
		task_free(oldest);
	}
}

/* Are every meter's final figures in (agent/meters.h)? */
static bool meters_settled(struct agent *a, struct task *t, bool give_up)
{
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->settled && !(*m)->settled(a, t, give_up))
			return false;
	return true;
}

/* What the task's leftover processes do before they are killed is measured. */
static void meters_leftovers(struct agent *a, struct task *t)
{
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->leftovers)
			(*m)->leftovers(a, t);
}

static void cpu_timer_stop(struct agent *a, struct task *t)
{
	if (!t->have_cpu_timer)
		return;
	loop_del(a->loop, t->cpu_timer_fd);
	closep(&t->cpu_timer_fd);
	t->have_cpu_timer = false;
}

static void task_finalize(struct agent *a, struct task *t, const struct cg_stats *pre)
{
	usage_collect(a, t, pre);
	node_energy_task_end(a, t);
	cpu_timer_stop(a, t);
	oom_watch_stop(a, t);
	/* How far past its CPU-time limit a task killed for it ran (exact: the final figures). */
	if (t->status == ACCT_EXIT_CPU_TIME_LIMIT && t->usage_detail) {
		uint64_t used = t->usage.cpu_user_ns + t->usage.cpu_system_ns;

		json_object_set_new(
		    t->usage_detail, "cpu_time_limit_overshoot_ns",
		    json_integer(used > t->spec.cpu_time_limit_ns
				     ? (json_int_t)(used - t->spec.cpu_time_limit_ns)
				     : 0));
	}
	if (t->status_fd >= 0) {
		loop_del(a->loop, t->status_fd);
		closep(&t->status_fd);
		t->status_fd = -1;
	}
	if (t->shim_pidfd >= 0) {
		if (t->adopted)
			loop_del(a->loop, t->shim_pidfd);
		closep(&t->shim_pidfd);
		t->shim_pidfd = -1;
	}
	if (!t->adopted)
		(void)waitpid(t->shim_pid, NULL, WNOHANG);
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->end)
			(*m)->end(a, t);
	emit(a, t, ACCT_TASK_END);
	t->state = TASK_ENDED;
	a->n_live--;
	alive_leave(a, t); /* no statement counts it now */
	task_index_del(a, t);
	live_requests_add(a, t, -1);
	for (struct task **pp = &a->tasks; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	task_add_ended(a, t);
	a->stats.tasks_ended++;
	/* Waiters hear of the end as soon as the record is spooled; cleanup follows. */
	if (a->on_task_ended)
		a->on_task_ended(a, t);
	/* the record is final: the (empty) cgroup goes when the loop is idle */
	agent_cg_release(a, t->cg);
	t->cg = NULL;
	(void)state_save_ended(a, t);
	state_remove_task_after_flush(a, t);
	if (t->status == ACCT_EXIT_EXITED)
		log_info("task %s ended: exited with code %d after %.3fs", t->id, t->exit_code,
			 (double)t->usage.wall_ns / 1e9);
	else
		log_notice("task %s ended: %s (code %d, signal %d) after %.3fs%s%s", t->id,
			   acct_exit_status_to_string(t->status), t->exit_code, t->exit_signal,
			   (double)t->usage.wall_ns / 1e9, t->exit_message ? ": " : "",
			   t->exit_message ? t->exit_message : "");
	task_slim(t);
	task_prune_ended(a);
}

/* The main process is gone: kill leftovers, finalize once the cgroup is empty. */
static void task_main_exited(struct agent *a, struct task *t)
{
	struct cg_stats st = {0};
	bool empty, have_st = false;

	if (t->state == TASK_ENDED)
		return;
	task_tick_soon(a);
	t->end_ns = t->exit.end_realtime_ns ? t->exit.end_realtime_ns : now_ns(CLOCK_REALTIME);
	/* Empty first: then the stats read next are final, and the record uses them too. */
	empty = !t->cg || cg_task_is_empty(t->cg) != 0;
	if (t->cg && cg_task_stats(t->cg, &st) == 0)
		have_st = true;
	meters_limit(a, t, now_ns(CLOCK_MONOTONIC)); /* the libcuda uprobe's kill, say */
	sv_decide_status(t, st.oom_kills);
	if (t->state == TASK_RUNNING) {
		t->state = TASK_ENDING;
		t->ending_since_mono = now_ns(CLOCK_MONOTONIC);
		alive_touch(a, t);
	}
	if (have_st && st.oom_kills > t->oom_kills)
		t->oom_kills = st.oom_kills;
	if (t->status == ACCT_EXIT_OOM_KILLED) {
		struct acct_record r;

		/* audit.limit for the kernel's action too, with the values at the time. */
		task_fill_record(a, t, ACCT_AUDIT_LIMIT, &r);
		r.event = json_pack(
		    "{s:s,s:s,s:I,s:I,s:I}", "limit", "oom_killed", "action", "kernel OOM kill",
		    "limit_value", (json_int_t)t->spec.memory_max, "observed",
		    (json_int_t)st.memory_peak, "oom_kills", (json_int_t)st.oom_kills);
		(void)agent_emit_record(a, &r);
		acct_record_clear(&r);
		t->oom_kills_reported = t->oom_kills;
	} else if (have_st) {
		report_oom_kills(a, t, &st); /* kills since the last tick, the task survived them */
	}
	if (!empty) {
		meters_leftovers(a, t); /* leftovers' exit records must find their task */
		(void)cg_task_kill(t->cg, SIGKILL);
		/* gone already: the stats read before are not final, finalize reads them */
		if (cg_task_is_empty(t->cg) != 0) {
			empty = true;
			have_st = false;
		}
	}
	/* The cgroup was read once: an empty one's stats are final, the record takes them. */
	if (empty && meters_settled(a, t, false))
		task_finalize(a, t, have_st ? &st : NULL);
	else
		usage_collect(a, t, empty && have_st ? &st : NULL);
}

/* The shim's status pipe: the child's pid while starting, then its exit (or EOF). */
static void on_status_fd(void *data, int fd, uint32_t events)
{
	struct task *t = data;
	struct agent *a = t->agent;
	struct launch_exit ex;
	char path[512];
	int r;

	if (t->state == TASK_STARTING) {
		if (t->start)
			start_on_pid(a, t);
		return;
	}
	r = launch_read_status(t->status_fd, &ex);
	if (r == 0)
		return;
	loop_del(a->loop, t->status_fd);
	closep(&t->status_fd);
	t->status_fd = -1;
	if (r == 1) {
		t->exit = ex;
		t->have_exit = true;
	} else {
		state_task_path(a, t, "tasks", ".exit", path, sizeof(path));
		if (launch_read_exit_file(path, &ex) == 0) {
			t->exit = ex;
			t->have_exit = true;
		} else if (t->status != ACCT_EXIT_LAUNCH_FAILED) {
			t->status = ACCT_EXIT_LOST;
			free(t->exit_message);
			t->exit_message = strdup("the task's supervisor ended without reporting");
		}
	}
	task_main_exited(a, t);
}

/* Adopted tasks: the shim's pidfd became readable (it exited), or the shim was found gone:
 * read its exit file. */
static void shim_exited(struct agent *a, struct task *t)
{
	struct launch_exit ex;
	char path[512];

	loop_del(a->loop, t->shim_pidfd);
	closep(&t->shim_pidfd);
	t->shim_pidfd = -1;
	state_task_path(a, t, "tasks", ".exit", path, sizeof(path));
	if (launch_read_exit_file(path, &ex) == 0) {
		t->exit = ex;
		t->have_exit = true;
	} else {
		t->status = ACCT_EXIT_LOST;
		free(t->exit_message);
		t->exit_message = strdup("the task's supervisor ended without reporting");
		a->stats.tasks_lost++;
	}
	task_main_exited(a, t);
}

static void on_pidfd(void *data, int fd, uint32_t events)
{
	struct task *t = data;

	shim_exited(t->agent, t);
}

static void meters_adopted(struct agent *a, struct task *t, bool live)
{
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->adopted)
			(*m)->adopted(a, t, live);
}

int task_adopt(struct agent *a, struct task *t, const struct task_adopt_info *info)
{
	uint64_t start;
	int r;

	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->restore)
			(*m)->restore(a, t, info->state);
	t->state = TASK_RUNNING;
	task_link(a, t);
	a->n_live++;
	task_tick_soon(a);
	a->stats.tasks_adopted++;
	/* Its task.start may not have reached the spool before the crash: emit it again (fixed
	 * record id, so the collector keeps one copy). */
	emit(a, t, ACCT_TASK_START);

	if (!info->same_boot) {
		t->status = ACCT_EXIT_LOST;
		free(t->exit_message);
		t->exit_message = strdup("the node rebooted while the task ran");
		a->stats.tasks_lost++;
		t->state = TASK_ENDING;
		t->ending_since_mono = 0;
		return 0;
	}
	r = cg_task_open(a->cg, t->cg_name, &t->cg);
	if (r < 0)
		log_warning("task %s: its cgroup %s is gone (%s); usage will be partial", t->id,
			    t->cg_name, strerror(-r));
	if (info->launch_failed) {
		meters_adopted(a, t, false);
		t->status = ACCT_EXIT_LAUNCH_FAILED;
		t->exit_code = info->exit_code;
		t->state = TASK_ENDING;
		t->ending_since_mono = now_ns(CLOCK_MONOTONIC);
		return 0;
	}
	t->shim_pidfd = (int)syscall(SYS_pidfd_open, t->shim_pid, 0);
	if (t->shim_pidfd >= 0 &&
	    (proc_start_time(t->shim_pid, &start) < 0 || start != t->shim_start)) {
		closep(&t->shim_pidfd);
		t->shim_pidfd = -1;
	}
	if (t->shim_pidfd >= 0) {
		r = loop_add(a->loop, t->shim_pidfd, EPOLLIN, on_pidfd, t);
		if (r < 0)
			return r;
		meters_adopted(a, t, true);
		cg_task_park(t->cg);
		cpu_limit_check(a, t);
		oom_watch_start(a, t);
		log_info("task %s re-adopted: pid %d (supervisor %d)", t->id, (int)t->pid,
			 (int)t->shim_pid);
		return 0;
	}
	/* The supervisor is gone: the exit file says how the task ended. */
	meters_adopted(a, t, false);
	shim_exited(a, t);
	return 0;
}

/*
 * An ending task whose cgroup is empty (or given up on): its record is written once the
 * supervisor's report, the denied-syscall file and the BPF figures are all in.
 */
static void ending_try_finalize(struct agent *a, struct task *t, bool give_up)
{
	if ((t->status_fd < 0 || t->status == ACCT_EXIT_LAUNCH_FAILED) &&
	    meters_settled(a, t, give_up))
		task_finalize(a, t, NULL);
}

void task_on_meter_settled(struct agent *a, uint64_t task_key)
{
	struct task *t = task_live(a, task_key);

	if (t && t->state == TASK_ENDING && (!t->cg || cg_task_is_empty(t->cg) != 0))
		ending_try_finalize(a, t, false);
}

int task_signal(struct agent *a, struct task *t, int sig)
{
	(void)a;
	if (t->state != TASK_RUNNING || !t->cg)
		return -ESRCH;
	return cg_task_kill(t->cg, sig);
}

/* A limit fired (agent/supervise.h): its signal to the task's cgroup, the state file, the
 * audit.limit record with the action and the values at the time. */
static void fire_limit(struct agent *a, struct task *t, const struct sv_verdict *v)
{
	const char *action = v->signal == SIGKILL ? "SIGKILL" : "SIGTERM";
	struct acct_record r;
	int rr;

	task_tick_soon(a);
	rr = cg_task_kill(t->cg, v->signal);
	log_notice("task %s: %s reached (limit %llu, observed %llu): %s sent%s%s", t->id,
		   acct_exit_status_to_string(v->why), (unsigned long long)v->limit,
		   (unsigned long long)v->observed, action, rr < 0 ? ", failed: " : "",
		   rr < 0 ? strerror(-rr) : "");
	(void)task_save(a, t);
	task_fill_record(a, t, ACCT_AUDIT_LIMIT, &r);
	r.event = json_pack("{s:s,s:s,s:I,s:I}", "limit", acct_exit_status_to_string(v->why),
			    "action", action, "limit_value", (json_int_t)v->limit, "observed",
			    (json_int_t)v->observed);
	if (r.event && v->signal == SIGTERM)
		json_object_set_new(r.event, "grace_ns",
				    json_integer((json_int_t)a->cfg.kill_grace_ns));
	(void)agent_emit_record(a, &r);
	acct_record_clear(&r);
}

/* The limits the meters saw (the GPU memory limit): supervise.c decides, the first one fires. */
static void meters_limit(struct agent *a, struct task *t, uint64_t now)
{
	struct meter_limit ml;
	struct sv_verdict v;

	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->limit && (*m)->limit(a, t, &ml) &&
		    sv_meter_limit(t, ml.why, now, ml.limit, ml.observed, &v))
			fire_limit(a, t, &v);
}

/* The CPU-time timer of a running task (always armed while it has a limit: the tick walks no
 * idle task between its samples), for delay_ns from now. */
static void cpu_timer_arm(struct agent *a, struct task *t, uint64_t delay_ns)
{
	struct itimerspec its = {0};

	if (!delay_ns)
		return;
	if (!t->have_cpu_timer) {
		int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

		if (fd < 0)
			return;
		t->cpu_timer_fd = fd;
		t->have_cpu_timer = true;
		if (loop_add(a->loop, fd, EPOLLIN, on_cpu_timer_fd, t) < 0) {
			closep(&t->cpu_timer_fd);
			t->have_cpu_timer = false;
			return;
		}
	}
	its.it_value.tv_sec = (time_t)(delay_ns / NSEC_PER_SEC);
	its.it_value.tv_nsec = (long)(delay_ns % NSEC_PER_SEC);
	(void)timerfd_settime(t->cpu_timer_fd, 0, &its, NULL);
}

/* The CPU-time limit with the usage read now: fired, or the timer re-armed. Overshoot: at
 * most P * SV_CPU_CHECK_MIN_NS plus the check's latency (the idle back-off aside). */
static void cpu_time_check(struct agent *a, struct task *t, uint64_t usage, uint64_t now)
{
	struct sv_verdict v;
	uint64_t delay;

	if (sv_cpu_time(t, a->ncpus, usage, now, &v, &delay))
		fire_limit(a, t, &v);
	else
		cpu_timer_arm(a, t, delay);
}

/* The CPU-time check of a running task: the limit fired, or the timer re-armed. */
static void cpu_limit_check(struct agent *a, struct task *t)
{
	struct cg_stats st;

	if (!t->spec.cpu_time_limit_ns || t->state != TASK_RUNNING || !t->cg ||
	    t->limit_reason != ACCT_EXIT_NONE || cg_task_stats(t->cg, &st) < 0)
		return;
	cpu_time_check(a, t, st.cpu_usage_ns, now_ns(CLOCK_MONOTONIC));
}

/* The CPU-time check of a task is due. */
static void on_cpu_timer_fd(void *data, int fd, uint32_t events)
{
	struct task *t = data;
	uint64_t exp;

	if (!t->have_cpu_timer)
		return;
	(void)!read(t->cpu_timer_fd, &exp, sizeof(exp));
	cpu_limit_check(t->agent, t);
}

/* Every meter's tick of a running task; its state file written when one asks. */
static void meters_tick(struct agent *a, struct task *t, uint64_t now)
{
	bool save = false;

	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->tick && (*m)->tick(a, t, now))
			save = true;
	meters_limit(a, t, now);
	if (save)
		(void)task_save(a, t);
}

static void meters_batch(struct agent *a, bool on)
{
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->batch)
			(*m)->batch(a, on);
}

/* Whether a meter polls the task at every tick (else its tick comes with the samples). */
static bool meters_every_tick(const struct agent *a, const struct task *t)
{
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->tick_every && (*m)->tick_every(a, t))
			return true;
	return false;
}

int task_save(struct agent *a, struct task *t)
{
	json_t *j = state_task_encode(a, t);
	int r;

	if (!j)
		return -ENOMEM;
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->save)
			(*m)->save(a, t, j);
	r = state_write_task(a, t, j);
	json_decref(j);
	return r;
}

void task_flush_records(struct agent *a)
{
	bool walk = a->tasks_flush_due;

	agent_flush_records(a);
	/* no meter state changed: nothing to save (the idle loop walks no task, nor does a
	 * record that moves no task's saved position, say a node.sample); whatever changes a
	 * position a meter saves (an audit record's seq, a budget) sets tasks_flush_due */
	if (!walk)
		return;
	a->tasks_flush_due = false;
	/* the saved positions matter after an agent restart, when the written records are
	 * there whether synced or not */
	for (struct task *t = a->tasks; t; t = t->next) {
		bool save = false;

		for (const struct meter_ops *const *m = agent_meters; *m; m++)
			if ((*m)->flushed && (*m)->flushed(a, t))
				save = true;
		if (save && t->state != TASK_ENDED && task_save(a, t) < 0)
			log_error("task %s: saving its audit position failed", t->id);
	}
}

uint64_t task_first_sample(const struct agent *a, uint64_t start_mono)
{
	uint64_t iv = a->cfg.sample_interval_ns;

	/* the grid point at least one interval after the start (the tick's batches) */
	return iv ? (start_mono + iv + iv - 1) / iv * iv : start_mono;
}

void task_tick_soon(struct agent *a)
{
	a->task_due_mono = 0;
}

/*
 * The cgroup's memory integral, for the tasks whose memory_byte_seconds comes from it (no BPF
 * meter, or a task re-adopted after a restart, which the meter no longer follows): each tick
 * reads the one file memory.usage_in_bytes / memory.current. A metered task's integral is
 * the meter's (event-driven, in the kernel): its cgroup figure is updated at its samples only.
 */
static bool needs_cg_integral(const struct agent *a, const struct task *t)
{
	return t->cg && (!a->meter || t->adopted);
}

static void mem_integrate(struct task *t, uint64_t current, uint64_t now)
{
	t->mem_byte_seconds_cg +=
	    (double)current * (double)(now - t->last_mem_sample_mono) / (double)NSEC_PER_SEC;
	t->last_mem_sample_mono = now;
}

/*
 * A running task's periodic work, at its sample (every sample_interval): the cgroup read
 * once for the memory integral, the OOM kills the kernel made meanwhile and the CPU-time
 * limit, then the task.sample record.
 */
static void running_sample(struct agent *a, struct task *t, uint64_t now)
{
	struct cg_stats st;
	bool have = t->cg && cg_task_stats(t->cg, &st) == 0;
	struct acct_record r;

	if (have) {
		if (!needs_cg_integral(a, t))
			mem_integrate(t, st.memory_current, now);
		report_oom_kills(a, t, &st);
		cpu_time_check(a, t, st.cpu_usage_ns, now);
	}
	/* the one read of the cgroup serves the record too */
	usage_collect(a, t, have ? &st : NULL);
	fill_record(a, t, ACCT_TASK_SAMPLE, &r);
	/* the record's time is the instant its wall time was taken (usage_collect), not a later
	 * one: the collector's open row starts at time - wall, which is then the task's start */
	if (t->usage.wall_ns)
		r.time_ns = t->start_ns + t->usage.wall_ns;
	/* the mark of tasks_unchanged: what the meter read for this record, and its time */
	t->mark_valid = agent_emit_record(a, &r) >= 0 && t->print_valid;
	alive_leave(a, t); /* a statement no longer covers it: a listing after this sample may */
	t->mark = t->print;
	t->mark_time_ns = r.time_ns;
	acct_record_clear(&r);
}

/*
 * Whether the task's samples can follow the node.sample records (its usage is then checked
 * there, each interval, and it gets a task.sample only when it changed): a running task with
 * a mark, metered by the BPF meter from its start, whose memory integral is the meter's, that
 * no meter polls at every tick and that has no RAPL energy share (which moves every period).
 */
static bool meters_every_tick(const struct agent *a, const struct task *t);
static bool samples_follow_node(const struct agent *a, const struct task *t)
{
	return a->cfg.sample_unchanged_listed && a->node_sampler && a->meter &&
	       t->state == TASK_RUNNING && !t->adopted && t->mark_valid &&
	       !needs_cg_integral(a, t) && !meters_every_tick(a, t) && !node_energy_shared(a);
}

static bool meters_unchanged(struct agent *a, struct task *t, uint64_t *rss_bytes)
{
	*rss_bytes = 0;
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->usage && (!(*m)->unchanged || !(*m)->unchanged(a, t, rss_bytes)))
			return false;
	return true;
}

/* A node.sample's entry as encoded: ["id",age,rss], and the comma after it. */
static size_t unchanged_entry_bytes(const char *id, uint64_t age_ms, uint64_t rss)
{
	return strlen(id) + (size_t)snprintf(NULL, 0, "%" PRIu64 "%" PRIu64, age_ms, rss) + 7;
}
/* A new anchor (every task unchanged listed, the statements then refer to it): at least
 * every ALIVE_ANCHOR_EVERY node.sample records, and sooner when more than a quarter of its
 * tasks were excepted or more tasks than that listed besides it by the last statement (each
 * costs an entry per record until the next anchor). */
#define ALIVE_ANCHOR_EVERY 20

static bool alive_new_anchor(const struct agent *a)
{
	uint32_t q = a->alive_anchor_n / 4;

	return !a->alive_anchor_ns || a->alive_since_anchor + 1 >= ALIVE_ANCHOR_EVERY ||
	       a->alive_last_except > q || a->alive_last_listed > q;
}

/* One node.sample's look at the tasks (task_list_unchanged). */
struct unchanged_pass {
	struct acct_node_sample *ns;
	uint64_t time_ns;
	bool anchor;
	size_t bytes, max;
	uint32_t listed;
	uint32_t n_alive; /* a statement walking every task: the alive ones it counted */
	uint64_t digest;
};

/* One task at a node.sample: counted alive, excepted, listed, or sampled at the next tick. */
static void unchanged_one(struct agent *a, struct task *t, struct unchanged_pass *p)
{
	struct acct_node_sample *ns = p->ns;
	bool unchanged;
	uint64_t rss, age;
	size_t len;

	t->anchor_next = false;
	if (t->state != TASK_RUNNING || t->next_sample_mono != UINT64_MAX) {
		if (!p->anchor && t->anchor_listed) /* ended, or sampled every interval now */
			goto except;
		return;
	}
	unchanged = samples_follow_node(a, t) && p->time_ns >= t->mark_time_ns &&
		    meters_unchanged(a, t, &rss);
	if (!p->anchor && t->anchor_listed) {
		if (unchanged && t->alive) {
			p->n_alive++;
			p->digest = acct_alive_digest(p->digest, t->id);
			return;
		}
		alive_leave(a, t);
		/* its id in except: no longer than its anchor entry, always room */
		if (acct_node_add_alive_except(ns, t->id) < 0) {
			/* no memory for the entry: no statement in this record */
			ns->alive.present = false;
		}
	}
	if (unchanged) {
		age = (p->time_ns - t->mark_time_ns + 999999) / 1000000;
		len = unchanged_entry_bytes(t->id, age, rss);
		if (p->bytes + len <= p->max && acct_node_add_unchanged(ns, t->id, age, rss) == 0) {
			p->bytes += len;
			t->anchor_next = p->anchor;
			p->listed++;
			return;
		}
	}
	/* changed, not known exactly, or no room: a task.sample at the next tick */
	t->next_sample_mono = 0;
	task_tick_soon(a);
	return;
except:
	alive_leave(a, t);
	if (acct_node_add_alive_except(ns, t->id) < 0)
		ns->alive.present = false;
}

/* The meters' changes since the last statement: each task they may answer differently for
 * (a mark) goes into the visit list. */
static void on_meter_change(struct agent *a, uint64_t task_key)
{
	struct task *t = task_live(a, task_key);

	if (t)
		alive_visit_push(a, t);
}

/*
 * Whether a statement may look at the visit list alone: the node-wide switches of
 * samples_follow_node hold (config, node sampler, meter, no RAPL share; a task's own ones do
 * not change while it runs, but for its state, which alive_touch follows: a meter that polls
 * a task at every tick may stop, never start, and the denied-call files' watch stays as it
 * was at the agent's start), and each meter that answers unchanged either answers the same for a
 * task all its life or lists the tasks it may answer differently for (its changes op: the eBPF
 * meter's marks). False: every task is asked.
 */
static bool unchanged_by_visits(struct agent *a)
{
	if (a->alive_visit_lost || !a->cfg.sample_unchanged_listed || !a->node_sampler ||
	    !a->meter || node_energy_shared(a))
		return false;
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->usage && !(*m)->unchanged_fixed && !(*m)->changes)
			return false;
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->usage && !(*m)->unchanged_fixed && !(*m)->changes(a, on_meter_change))
			return false;
	return true;
}

/* A statement from the visit list: each task in it looked at once; what stays in it, the
 * tasks not alive. The count and digest are those kept (a->alive_n, alive_digest). */
static void unchanged_visits(struct agent *a, struct unchanged_pass *p)
{
	size_t kept = 0;

	for (size_t i = 0; i < a->n_alive_visit; i++) {
		struct task *t = task_live(a, a->alive_visit[i]);

		if (!t)
			continue; /* ended since */
		unchanged_one(a, t, p);
		if (alive_in(t))
			t->alive_visit = false;
		else
			a->alive_visit[kept++] = t->key;
	}
	a->n_alive_visit = kept;
	p->ns->alive.n = a->alive_n;
	p->ns->alive.digest = a->alive_digest;
}

/* Every task looked at; then the visit list holds the tasks not alive, and a statement's
 * count and digest are the kept ones anew. */
static void unchanged_walk(struct agent *a, struct unchanged_pass *p)
{
	for (struct task *t = a->tasks; t; t = t->next)
		unchanged_one(a, t, p);
	a->n_alive_visit = 0;
	a->alive_visit_lost = false;
	for (struct task *t = a->tasks; t; t = t->next) {
		t->alive_visit = false;
		if (!alive_in(t))
			alive_visit_push(a, t);
	}
	if (p->anchor)
		return;
	p->ns->alive.n = a->alive_n = p->n_alive;
	p->ns->alive.digest = a->alive_digest = p->digest;
}

/*
 * Per running task at a node.sample (time_ns): unchanged since its last task.sample (every
 * meter says so exactly) or not. With sample_unchanged = stated the record is either an
 * anchor (each unchanged task listed in tasks_unchanged, as with listed) or a statement:
 * tasks_alive covers the tasks the anchor listed that are still unchanged (n and digest),
 * names in except those the anchor listed that are not (changed, sampled since, ended), and
 * tasks_unchanged lists the unchanged tasks the anchor did not. A task once excepted stays
 * excepted until the next anchor: a statement never needs an earlier one to be exact.
 * The entries of tasks_unchanged take at most [agent] unchanged_list_max bytes of the record
 * (192 KiB of its 256 KiB at most), a quarter of that in a statement's record, whose except
 * list is never longer than its anchor's list; the unchanged tasks past it get a task.sample.
 * A statement looks only at the tasks not alive and those the meters marked or whose state
 * changed (unchanged_by_visits), an alive task that did nothing costs nothing; an anchor, or
 * a statement where that cannot be known, at every task.
 */
void task_list_unchanged(struct agent *a, struct acct_node_sample *ns, uint64_t time_ns)
{
	bool stated = a->cfg.sample_unchanged_stated, anchor = !stated || alive_new_anchor(a);
	struct unchanged_pass p = {.ns = ns, .time_ns = time_ns, .anchor = anchor};

	p.max = (size_t)a->cfg.unchanged_list_max / (anchor ? 1 : 4);
	if (!stated)
		a->alive_anchor_ns = 0; /* a later switch to stated starts from an anchor */
	/* Bounded staleness of the live walk's skip: a tracked process moved out of its task's
	 * cgroup runs unseen by the skip's CPU source, so an anchor's live read walks anyway,
	 * and so does one at least every ALIVE_ANCHOR_EVERY records in any mode. */
	if ((stated && anchor) || ++a->since_forced_walk >= ALIVE_ANCHOR_EVERY) {
		meter_walk_next(a->meter);
		a->since_forced_walk = 0;
	}
	meters_batch(a, true); /* one live read of the meter serves every task */
	for (const struct meter_ops *const *m = agent_meters; *m; m++)
		if ((*m)->prefetch)
			(*m)->prefetch(a); /* and one batched read of its maps */
	if (!anchor) {
		ns->alive.present = true;
		ns->alive.since_ns = a->alive_anchor_ns;
	}
	if (!anchor && unchanged_by_visits(a)) {
		unchanged_visits(a, &p);
		a->checks_visits++;
	} else {
		unchanged_walk(a, &p);
		if (anchor)
			a->checks_listing++;
		else
			a->checks_every_task++;
	}
	meters_batch(a, false);
	if (!anchor && !ns->alive.present) {
		/* the statement could not be made whole: the next record is an anchor */
		a->alive_anchor_ns = 0;
		for (size_t i = 0; i < ns->alive.n_except; i++)
			free(ns->alive.except[i]);
		free(ns->alive.except);
		ns->alive = (struct acct_node_alive){0};
	}
	a->alive_last_listed = anchor ? 0 : p.listed;
	a->alive_last_except = (uint32_t)ns->alive.n_except;
}

void task_list_unchanged_done(struct agent *a, const struct acct_node_sample *ns, uint64_t time_ns,
			      bool spooled)
{
	bool anchor = a->cfg.sample_unchanged_stated && !ns->alive.present;

	if (!a->cfg.sample_unchanged_stated)
		return;
	if (!anchor) {
		a->alive_since_anchor++;
		return;
	}
	/* an anchor: what it listed, when spooled, is what the next statements refer to */
	a->alive_anchor_ns = spooled ? time_ns : 0;
	a->alive_anchor_n = 0;
	a->alive_since_anchor = 0;
	a->alive_last_except = a->alive_last_listed = 0;
	a->alive_n = 0;
	a->alive_digest = 0;
	a->n_alive_visit = 0;
	a->alive_visit_lost = false;
	for (struct task *t = a->tasks; t; t = t->next) {
		t->anchor_listed = t->alive = spooled && t->anchor_next;
		t->anchor_next = false;
		a->alive_anchor_n += t->anchor_listed;
		t->alive_visit = false;
		if (alive_in(t)) {
			a->alive_n++;
			a->alive_digest = acct_alive_digest(a->alive_digest, t->id);
		} else {
			alive_visit_push(a, t);
		}
	}
}

static uint64_t min_u64(uint64_t x, uint64_t y)
{
	return x < y ? x : y;
}

/*
 * One running task at a tick where something was due; returns when it next needs the tick
 * (0: at every tick). Samples fall on a grid of sample_interval shared by all tasks, so a
 * node's samples come in one batch per interval (at most SAMPLE_BATCH per tick, the rest at
 * the following ticks) and between batches the tick walks no task.
 */
#define SAMPLE_BATCH 256
static uint64_t running_tick(struct agent *a, struct task *t, uint64_t now, unsigned *n_sampled)
{
	uint64_t due = UINT64_MAX, iv = a->cfg.sample_interval_ns;
	struct sv_verdict v;
	bool every_tick = false;

	if (needs_cg_integral(a, t)) {
		uint64_t cur;

		if (cg_task_memory_current(t->cg, &cur) == 0)
			mem_integrate(t, cur, now);
		every_tick = true;
	}
	/* the meters' ticks: at every tick where one polls the task, else with its samples */
	if (meters_every_tick(a, t)) {
		meters_tick(a, t, now);
		every_tick = true;
	} else if (now >= t->next_sample_mono && *n_sampled < SAMPLE_BATCH) {
		meters_tick(a, t, now);
	}
	if (sv_time_limit(t, now, &v, &due))
		fire_limit(a, t, &v);
	if (sv_kill_grace(t, now, a->cfg.kill_grace_ns, &due)) {
		log_notice("task %s: still running %.1fs after SIGTERM: SIGKILL", t->id,
			   (double)a->cfg.kill_grace_ns / 1e9);
		(void)cg_task_kill(t->cg, SIGKILL);
	}
	if (now >= t->next_sample_mono) {
		if (*n_sampled >= SAMPLE_BATCH)
			return 0;
		(*n_sampled)++;
		running_sample(a, t, now);
		/* the next point of the grid after now, or the next node.sample */
		t->next_sample_mono = samples_follow_node(a, t) ? UINT64_MAX
				      : iv			? (now / iv + 1) * iv
								: now;
	}
	due = min_u64(due, t->next_sample_mono);
	return every_tick ? 0 : due;
}

/*
 * Every tick, but the task table is walked only when something is due (a->task_due_mono,
 * the earliest time any task needs the tick; task_tick_soon resets it when a task starts,
 * changes state or fires a limit). Starting and ending tasks need every tick; an idle
 * running task only its sample, its time limit and its kill grace.
 */
void task_tick(struct agent *a, uint64_t now)
{
	uint64_t due = UINT64_MAX;
	unsigned n_sampled = 0;

	if (now < a->task_due_mono)
		return;
	a->task_due_mono = UINT64_MAX; /* task_tick_soon during the walk sets 0: kept */
	meters_batch(a, true);	       /* the samples of this tick share what they can */
	for (struct task *t = a->tasks, *next; t; t = next) {
		next = t->next;
		if (t->state == TASK_STARTING) {
			if (t->start)
				start_tick(a, t, now);
			due = 0;
			continue;
		}
		if (t->state == TASK_ENDING) {
			if (!t->cg || cg_task_is_empty(t->cg) != 0 ||
			    now - t->ending_since_mono > TASK_ENDING_MAX_NS) {
				ending_try_finalize(
				    a, t, now - t->ending_since_mono > TASK_ENDING_MAX_NS);
			} else {
				meters_leftovers(a, t);
				(void)cg_task_kill(t->cg, SIGKILL);
			}
			due = 0;
			continue;
		}
		if (t->state != TASK_RUNNING)
			continue;
		due = min_u64(due, running_tick(a, t, now, &n_sampled));
	}
	meters_batch(a, false);
	if (a->task_due_mono != 0)
		a->task_due_mono = due;
}

json_t *task_record_json(struct agent *a, struct task *t)
{
	struct acct_record r;
	json_t *j = NULL;

	if (t->state == TASK_ENDED && (t->final_record || t->final_txt))
		return task_final_record(t);
	if (t->state != TASK_ENDED)
		usage_collect(a, t, NULL);
	fill_record(a, t, t->state == TASK_ENDED ? ACCT_TASK_END : ACCT_TASK_SAMPLE, &r);
	snprintf(r.record_id, sizeof(r.record_id), "%s/snapshot", t->id);
	if (acct_record_to_json(&r, &j) < 0)
		j = NULL;
	acct_record_clear(&r);
	if (j) {
		json_object_set_new(j, "state",
				    json_string(t->state == TASK_STARTING  ? "starting"
						: t->state == TASK_RUNNING ? "running"
						: t->state == TASK_ENDING  ? "ending"
									   : "ended"));
		json_object_set_new(j, "pid", json_integer(t->pid));
	}
	return j;
}
