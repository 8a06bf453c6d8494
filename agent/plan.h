/* SPDX-License-Identifier: MIT */
/*
 * The launch's stages before anything is made (agent/plan.c), in the bubblewrap spirit of
 * parse -> plan -> run: each checks or computes from the spec, the user and the agent's
 * configuration; what a client may not do is refused with a message that names it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct agent;
struct task;
struct task_spec;
struct user_info;
struct users;
struct cg_limits;
struct sbx_filter;
struct launch_plan;

/* The passwd/group cache, made on first use and refreshed once per control request
 * (NULL when out of memory). */
struct users *agent_users(struct agent *a);
bool agent_is_privileged(struct agent *a, uid_t uid, gid_t gid);
int agent_may_act_as(struct agent *a, uid_t uid, bool privileged, uid_t target_uid,
		     const char *target_name, char *err, size_t errlen);

/* Admission (agent/admission.h): a slot, the user, the client's right, the record budget,
 * the node reserve. *ret_pw is the task's user. -EINVAL or -EPERM, err says why. */
int plan_admit(struct agent *a, const struct task_spec *spec, uid_t submitter, bool privileged,
	       const struct user_info **ret_pw, char *err, size_t errlen);
/* The cgroup limits of a spec (IO devices resolved with the client's view). */
int plan_limits(struct agent *a, const struct task_spec *spec, uid_t submitter,
		struct cg_limits *lim, char *err, size_t errlen);
/* The compiled seccomp filter (cached, agent/profiles.h); with sc_flags the variant that
 * notifies the shim of denied calls, or the plain one when that cannot be built (logged). */
int plan_filter(struct agent *a, const struct task_spec *spec, uid_t submitter,
		unsigned int sc_flags, const struct sbx_filter **filter, char *err, size_t errlen);
/* The task's environment (defaults, extra, then the spec's variables over them), and where
 * its argv[0] is looked for; NULL-terminated, NULL when out of memory. */
char **plan_env(const struct task_spec *s, const struct user_info *pw, const char *id,
		const char *const *extra);
char **plan_exec_paths(const char *argv0, char *const *env);
void plan_strv_free(char **v);

/* The launch's files: where the shim writes the exit status and the denied calls. */
struct launch_files {
	char exit_file[512], sc_file[512];
};
/* What the shim and the child do (isolation/launch.h): argv, env, user, files, filter; the
 * task audits its denied calls into syscalls_file (the audit meter's, NULL or "": none) when
 * its filter notifies. */
void plan_fill(struct agent *a, struct task *t, const struct user_info *pw, char **env,
	       char **paths, const struct sbx_filter *filter, const char *syscalls_file,
	       struct launch_files *f, struct launch_plan *plan);
