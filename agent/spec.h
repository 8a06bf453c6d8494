/* SPDX-License-Identifier: MIT */
/*
 * Job spec: what a client asks the agent to run. The same JSON object is the body of the
 * control API's "run" request and the content of `corralctl run --spec FILE`.
 * Parsing is strict: unknown keys, wrong types, out-of-range values fail with a message that
 * names the field ("limits.memory: invalid size \"12Q\"").
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define SPEC_ARGS_MAX	 4096
#define SPEC_ENV_MAX	 1024
#define SPEC_LABELS_MAX	 64
#define SPEC_STR_MAX	 4096
#define SPEC_IO_MAX	 8
#define SPEC_PROFILE_MAX (256 * 1024)

struct spec_io {
	char *device; /* path ("/dev/sda") or "MAJ:MIN" */
	uint64_t rbps, wbps;
};

struct task_spec {
	char **argv; /* NULL-terminated */
	size_t argc;
	char **env; /* "K=V", NULL-terminated */
	size_t envc;
	char *workdir; /* NULL: the user's home, else "/" */
	char *user;    /* NULL: the requesting user */
	char *account;
	char *job;
	char **label_keys, **label_values;
	size_t n_labels;
	char *stdout_path, *stderr_path; /* NULL: /dev/null */
	char *stdin_path;		 /* NULL: /dev/null */
	/* Not part of the JSON: descriptors the client passed with the run request (agent/
	 * control.c), bit i of stdio_fds set: stdio_fd[i] (owned, closed by spec_clear) is the
	 * task's fd i; stdio_tty: fd 0 becomes its controlling terminal (--pty). */
	unsigned int stdio_fds;
	int stdio_fd[3];
	bool stdio_tty;
	char *seccomp;	       /* profile name or path; NULL: agent default */
	char *seccomp_profile; /* the profile's JSON as the client read it (then seccomp only
				* names it); at most SPEC_PROFILE_MAX bytes */

	uint64_t memory_max; /* 0 = none */
	uint64_t memory_high;
	uint64_t swap_max;   /* UINT64_MAX = unset */
	double cpus;	     /* 0 = unlimited */
	uint32_t cpu_weight; /* 0 = default */
	uint64_t pids_max;
	size_t n_io;
	struct spec_io io[SPEC_IO_MAX];
	uint64_t time_limit_ns;	    /* wall, 0 = none */
	uint64_t cpu_time_limit_ns; /* 0 = none */
	uint32_t gpus;		    /* count (0 = none) */
	char *gpu_list;		    /* explicit "0,2", NULL if by count */
	uint64_t gpu_memory_max;
	uint64_t audit_rate;  /* audit records/s before summarizing, 0 = [audit] task_rate */
	uint64_t audit_bytes; /* audit bytes before summarizing, 0 = [audit] task_bytes */
	/* allow/deny network CIDR rules, raw strings (validated by the policy module) */
	char **net_allow;
	size_t n_net_allow;
	char **net_deny;
	size_t n_net_deny;
	/* "sandbox": each layer -1 = the agent's [sandbox] default, 0 off, 1 on */
	int8_t sb_mount_ns, sb_private_tmp, sb_protect_system, sb_ipc_ns, sb_uts_ns, sb_pid_ns;
	int8_t sb_landlock, sb_private_dev;
	char *sb_tmp_size;
	char **sb_read_only, **sb_inaccessible, **sb_bind; /* absolute paths; "SRC:DST[:ro]" */
	size_t n_sb_read_only, n_sb_inaccessible, n_sb_bind;
};

#define SPEC_SANDBOX_PATHS_MAX 16

void spec_init(struct task_spec *s);
void spec_clear(struct task_spec *s);
/* Close the passed stdio descriptors (stdio_fds), if any. */
void spec_close_stdio(struct task_spec *s);
/* An ended task's spec: what its records and ps rows use stays (argv[0], the task's fields,
 * requests, labels); the environment, the other arguments, the sandbox's path lists and a
 * seccomp profile's text are freed. */
void spec_slim(struct task_spec *s);
/* Parse a job spec object. err gets "field: problem". */
int spec_from_json(json_t *obj, struct task_spec *ret, char *err, size_t errlen);
int spec_parse(const char *text, size_t len, struct task_spec *ret, char *err, size_t errlen);
/* Canonical JSON (sizes in bytes, durations in seconds). New reference. */
json_t *spec_to_json(const struct task_spec *s);

/* Helpers shared with corralctl's flag parsing. */
int spec_set_label(struct task_spec *s, const char *kv, char *err, size_t errlen);
int spec_set_env(struct task_spec *s, const char *kv, char *err, size_t errlen);
int spec_set_io(struct task_spec *s, const char *dev_eq_bps, bool write, char *err, size_t errlen);
int spec_set_argv(struct task_spec *s, char *const *argv, size_t argc);
/* A tmpfs size ([sandbox] tmp_size, sandbox.tmp_size): bytes with K/M/G/T or "N%" of RAM. */
int spec_tmp_size_check(const char *v);
/* [sandbox] dev_paths: names under /dev, space-separated; -EINVAL for "..", "/x", > 32. */
int spec_dev_paths_check(const char *v);
int spec_sandbox_path_check(const char *p, const char *field, char *err, size_t errlen);
int spec_sandbox_bind_check(const char *b, const char *field, char *err, size_t errlen);
