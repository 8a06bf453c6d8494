/* SPDX-License-Identifier: MIT */
/*
 * The launch's stages before anything is made (agent/plan.h): admission, the cgroup limits,
 * the seccomp filter, the environment and the launch plan, from the spec, the user and the
 * agent's configuration. The task table runs them in task_launch, then makes the task, its
 * cgroup and the shim.
 */
#include "agent/agent.h"
#include "agent/admission.h"
#include "agent/budget.h"
#include "agent/log.h"
#include "agent/plan.h"
#include "agent/profiles.h"
#include "agent/state.h"
#include "agent/taskstats_glue.h"
#include "agent/users.h"
#include "common/error.h"
#include "common/macro.h"
#include "isolation/cgroup.h"
#include "isolation/launch.h"
#include "isolation/seccomp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

struct users *agent_users(struct agent *a)
{
	if (!a->users)
		a->users = users_new(NULL);
	return a->users;
}

static struct admission_policy agent_policy(const struct agent *a)
{
	return (struct admission_policy){.allowed_group = a->cfg.allowed_group,
					 .allowed_users = a->cfg.allowed_users,
					 .allow_root_tasks = a->cfg.allow_root_tasks};
}

bool agent_is_privileged(struct agent *a, uid_t uid, gid_t gid)
{
	struct admission_policy p = agent_policy(a);

	return admission_is_privileged(&p, agent_users(a), uid, gid);
}

int agent_may_act_as(struct agent *a, uid_t uid, bool privileged, uid_t target_uid,
		     const char *target_name, char *err, size_t errlen)
{
	struct admission_policy p = agent_policy(a);

	return admission_may_act_as(&p, uid, privileged, target_uid, target_name, err, errlen);
}

/*
 * A device path from a client other than root must name a node under /dev (which every user
 * can list) without "..": the agent resolves it as root, so anywhere else the answer would
 * tell whether a path the client cannot see exists. corralctl sends MAJ:MIN it resolved itself.
 */
static int resolve_io_device(const char *dev, uid_t client, unsigned *maj, unsigned *min)
{
	struct stat st;

	if (sscanf(dev, "%u:%u", maj, min) == 2)
		return 0;
	if (client != 0 && (strncmp(dev, "/dev/", 5) != 0 || strstr(dev, "/../") ||
			    strcmp(dev + strlen(dev) - 3, "/..") == 0))
		return -EPERM;
	if (stat(dev, &st) < 0)
		return client != 0 ? -ENOTBLK : -errno;
	if (!S_ISBLK(st.st_mode))
		return -ENOTBLK;
	*maj = major(st.st_rdev);
	*min = minor(st.st_rdev);
	return 0;
}

char **plan_env(const struct task_spec *s, const struct user_info *pw, const char *id,
		const char *const *extra)
{
	char **env = NULL;
	size_t n = 0, cap = s->envc + 10; /* 9 defaults at most, the NULL */

	for (size_t i = 0; extra && extra[i]; i++)
		cap++;
	env = calloc(cap, sizeof(char *));
	if (!env)
		return NULL;
#define PUSH(...)                                                                                  \
	do {                                                                                       \
		if (n + 1 < cap && asprintf(&env[n], __VA_ARGS__) >= 0)                            \
			n++;                                                                       \
	} while (0)
	PUSH("PATH=%s", DEFAULT_PATH);
	PUSH("HOME=%s", pw->dir);
	PUSH("USER=%s", pw->name);
	PUSH("LOGNAME=%s", pw->name);
	PUSH("SHELL=%s", *pw->shell ? pw->shell : "/bin/sh");
	PUSH("LANG=C.UTF-8");
	PUSH("CORRAL_TASK_ID=%s", id);
	if (s->job)
		PUSH("CORRAL_JOB=%s", s->job);
	if (s->account)
		PUSH("CORRAL_ACCOUNT=%s", s->account);
	for (size_t i = 0; extra && extra[i]; i++)
		PUSH("%s", extra[i]);
#undef PUSH
	/* The spec's variables override the defaults. */
	for (size_t i = 0; i < s->envc; i++) {
		const char *eq = strchr(s->env[i], '=');
		size_t kl = (size_t)(eq - s->env[i]) + 1;
		bool replaced = false;

		for (size_t j = 0; j < n; j++)
			if (strncmp(env[j], s->env[i], kl) == 0) {
				free(env[j]);
				env[j] = strdup(s->env[i]);
				replaced = true;
				break;
			}
		if (!replaced && n + 1 < cap)
			env[n++] = strdup(s->env[i]);
	}
	env[n] = NULL;
	return env;
}

void plan_strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

char **plan_exec_paths(const char *argv0, char *const *env)
{
	const char *path = DEFAULT_PATH;
	char **v;
	size_t n = 0, cap = 2;
	_cleanup_free_ char *dup = NULL;
	char *save = NULL;

	if (strchr(argv0, '/')) {
		v = calloc(2, sizeof(char *));
		if (v)
			v[0] = strdup(argv0);
		return v;
	}
	for (char *const *e = env; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	for (const char *p = path; *p; p++)
		cap += *p == ':';
	v = calloc(cap + 1, sizeof(char *));
	dup = strdup(path);
	if (!v || !dup) {
		free(v);
		return NULL;
	}
	for (char *d = strtok_r(dup, ":", &save); d && n < cap; d = strtok_r(NULL, ":", &save))
		if (asprintf(&v[n], "%s/%s", *d ? d : ".", argv0) >= 0)
			n++;
	return v;
}

/* The live tasks' requests: the sums kept as tasks join and leave the live list (task.c,
 * CPUs in millionths), no walk of the tasks at each launch. */
static void live_requests(const struct agent *a, uint64_t *mem, double *cpus)
{
	*mem = a->live_memory_bytes;
	*cpus = (double)a->live_cpus_micro / 1e6;
}

/* The compiled seccomp filter of a launch (see task_launch). */
int plan_filter(struct agent *a, const struct task_spec *spec, uid_t submitter,
		unsigned int sc_flags, const struct sbx_filter **filter, char *err, size_t errlen)
{
	const char *pname = spec->seccomp ? spec->seccomp : a->cfg.seccomp_default;
	const char *content = spec->seccomp_profile;
	char perr[512], notice[512];
	int r;

	/* Never opened by the agent, not even for root: a file on a filesystem that does not
	 * answer (a hung FUSE or NFS mount) would stop the event loop in open(). */
	(void)submitter;
	if (!content && spec->seccomp && strchr(spec->seccomp, '/')) {
		a->stats.refused++;
		return err_set(err, errlen, -EINVAL,
			       "seccomp: a profile path is read by the client: send the "
			       "profile's JSON in seccomp_profile (corralctl --seccomp PATH does)");
	}
	if (!a->profiles && profile_cache_new(&a->profiles) < 0)
		return err_set(err, errlen, -EINVAL, "out of memory");
	r = profile_cache_get(a->profiles, a->cfg.seccomp_dir, pname, content, sc_flags, filter,
			      perr, sizeof(perr), notice, sizeof(notice));
	if (r < 0 && sc_flags) {
		char nerr[sizeof(perr)];

		snprintf(nerr, sizeof(nerr), "%s", perr[0] ? perr : strerror(-r));
		r = profile_cache_get(a->profiles, a->cfg.seccomp_dir, pname, content, 0, filter,
				      perr, sizeof(perr), notice, sizeof(notice));
		if (r == 0)
			log_warning("seccomp profile \"%s\": denied calls cannot be audited: %s",
				    pname, nerr);
	}
	if (notice[0])
		log_info("seccomp profile \"%s\": %s", pname, notice);
	if (r < 0)
		return err_set(err, errlen, -EINVAL, "seccomp profile \"%s\": %s", pname,
			       perr[0] ? perr : strerror(-r));
	return 0;
}

/* Admission (agent/admission.h): a slot, the user, the client's right, the record budget,
 * the node reserve. *ret_pw is the task's user. */
int plan_admit(struct agent *a, const struct task_spec *spec, uid_t submitter, bool privileged,
	       const struct user_info **ret_pw, char *err, size_t errlen)
{
	struct users *users = agent_users(a);
	struct admission_node node = {.max_tasks = a->cfg.max_tasks,
				      .n_live = a->n_live,
				      .mem_total = a->mem_total,
				      .reserve_memory = a->cfg.reserve_memory,
				      .ncpus = a->ncpus,
				      .reserve_cpus = a->cfg.reserve_cpus};
	char msg[512];
	int r;

	r = admission_check_slots(&node, err, errlen);
	if (r < 0) {
		a->stats.refused++;
		return -EINVAL;
	}
	/* Who runs it. */
	if (!users)
		return err_set(err, errlen, -EINVAL, "out of memory");
	r = admission_resolve_user(users, spec->user, submitter, ret_pw, err, errlen);
	if (r < 0)
		return -EINVAL;
	r = agent_may_act_as(a, submitter, privileged, (*ret_pw)->uid, (*ret_pw)->name, err,
			     errlen);
	if (r < 0) {
		a->stats.refused++;
		return r;
	}
	r = budget_check_spec(a, spec, privileged, msg, sizeof(msg));
	if (r < 0) {
		a->stats.refused++;
		return err_set(err, errlen, -EINVAL, "%s", msg);
	}
	/* Node safety: refuse what does not fit, never queue silently. */
	live_requests(a, &node.mem_used, &node.cpus_used);
	r = admission_check_reserve(&node, spec, err, errlen);
	if (r < 0) {
		a->stats.refused++;
		return -EINVAL;
	}
	/* workdir is not looked at here, as root: the child changes to it after it became the
	 * task's user, and a failure comes back as "chdir DIR: <error>" seen with the user's
	 * rights (an agent-side stat told any user whether a path it could not see exists). */
	return 0;
}

/* The cgroup limits of a spec (IO devices resolved for the client). */
int plan_limits(struct agent *a, const struct task_spec *spec, uid_t submitter,
		struct cg_limits *lim, char *err, size_t errlen)
{
	*lim = (struct cg_limits){.memory_max = spec->memory_max,
				  .memory_high = spec->memory_high,
				  .swap_max = spec->swap_max,
				  .cpus = spec->cpus,
				  .cpu_weight = spec->cpu_weight,
				  .pids_max = spec->pids_max};
	/* v1: hierarchies joined only when needed (each join costs about 0.5 ms). */
	lim->block_stats = !a->meter && !tsglue_active(a); /* the IO source then */
	lim->devices = a->gpu != NULL;			   /* GPU device policy */
	for (size_t i = 0; i < spec->n_io; i++) {
		int r = resolve_io_device(spec->io[i].device, submitter, &lim->io[i].major,
					  &lim->io[i].minor);

		if (r < 0)
			return err_set(err, errlen, -EINVAL, "io: device \"%.64s\": %s",
				       spec->io[i].device,
				       r == -EPERM     ? "give a block device under /dev or MAJ:MIN"
				       : r == -ENOTBLK ? "not a block device"
						       : strerror(-r));
		lim->io[i].rbps = spec->io[i].rbps;
		lim->io[i].wbps = spec->io[i].wbps;
		lim->n_io++;
	}
	return 0;
}

/* What the shim and the child do (isolation/launch.h): argv, env, user, files, filter. */
void plan_fill(struct agent *a, struct task *t, const struct user_info *pw, char **env,
	       char **paths, const struct sbx_filter *filter, const char *syscalls_file,
	       struct launch_files *f, struct launch_plan *plan)
{
	struct stat st;

	state_task_path(a, t, "tasks", ".exit", f->exit_file, sizeof(f->exit_file));
	snprintf(f->sc_file, sizeof(f->sc_file), "%s", syscalls_file ? syscalls_file : "");
	t->syscall_audit = f->sc_file[0] && sbx_filter_notifies(filter);
	t->syscalls_max = a->cfg.audit_syscalls_max;
	*plan = (struct launch_plan){
	    .argv = t->spec.argv,
	    .env = env,
	    .exec_paths = paths,
	    .workdir = t->spec.workdir ? t->spec.workdir : pw->dir,
	    .uid = pw->uid,
	    .gid = pw->gid,
	    .groups = pw->groups,
	    .n_groups = (size_t)pw->n_groups,
	    .switch_user = geteuid() == 0,
	    .stdout_path = t->spec.stdout_path,
	    .stderr_path = t->spec.stderr_path,
	    .stdin_path = t->spec.stdin_path,
	    .stdio_fds = t->spec.stdio_fds,
	    .stdio_fd = {t->spec.stdio_fd[0], t->spec.stdio_fd[1], t->spec.stdio_fd[2]},
	    .stdio_tty = t->spec.stdio_tty,
	    .filter = filter,
	    .exit_file = f->exit_file,
	    .syscalls_file = t->syscall_audit ? f->sc_file : NULL,
	    .syscalls_max = a->cfg.audit_syscalls_max,
	};
	launch_plan_set_cgroup(plan, t->cg);
	if (!t->spec.workdir && stat(pw->dir, &st) < 0)
		plan->workdir = "/";
}
