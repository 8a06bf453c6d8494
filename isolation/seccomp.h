/* SPDX-License-Identifier: MIT */
/*
 * Seccomp profiles in the OCI/Docker JSON format, compiled with libseccomp in the parent
 * (before fork) to a classic-BPF program that the child only installs.
 * Library code: never prints, returns 0 or -errno; parse errors are described in err.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_filter;

/*
 * Compile a profile given as JSON text. -EINVAL with err naming the field or syscall. On
 * success err is empty, or holds a notice for the log (allowed syscall names that this
 * libseccomp does not know, skipped; see docs/seccomp.md).
 */
int sbx_profile_compile(const char *json, size_t len, struct sbx_filter **ret, char *err,
			size_t errlen);
/*
 * name_or_path: a built-in name ("default", "strict", "unconfined" = no filter, *ret NULL and
 * return 0), a profile name looked up as "<dir>/<name>.json" (dir may be NULL), or a path
 * containing '/'.
 */
int sbx_profile_load(const char *name_or_path, const char *dir, struct sbx_filter **ret, char *err,
		     size_t errlen);
/* Built-in profile JSON text, NULL if unknown. */
const char *sbx_builtin_profile(const char *name);

/*
 * Compile flags. SBX_COMPILE_NOTIFY: also build the program for the audit of denied calls, in
 * which errno actions (except ENOSYS) and kill-process actions (and the bad-architecture
 * action) return SECCOMP_RET_USER_NOTIF, so a supervisor holding the listener learns of each
 * such call and answers it as the profile says (see sbx_notifier_*). The profile's own program
 * is kept as the reference that decides every notification.
 */
#define SBX_COMPILE_NOTIFY (1U << 0)

int sbx_profile_compile_flags(const char *json, size_t len, unsigned int flags,
			      struct sbx_filter **ret, char *err, size_t errlen);
int sbx_profile_load_flags(const char *name_or_path, const char *dir, unsigned int flags,
			   struct sbx_filter **ret, char *err, size_t errlen);

/*
 * Child side: install the filter (seccomp(2) SECCOMP_SET_MODE_FILTER; the caller has set
 * no_new_privs). Async-signal-safe: no allocation. NULL filter: no-op. For a filter compiled
 * with SBX_COMPILE_NOTIFY this installs the profile's own program (no listener, no audit).
 */
int sbx_filter_apply(const struct sbx_filter *f);
void sbx_filter_free(struct sbx_filter *f);
/*
 * A compiled filter as bytes, for another process of the same build (the launch spawner):
 * sbx_filter_pack returns the size needed and writes it if len allows; sbx_filter_unpack
 * checks the layout (-EINVAL when it does not hold).
 */
size_t sbx_filter_pack(const struct sbx_filter *f, void *buf, size_t len);
int sbx_filter_unpack(const void *buf, size_t len, struct sbx_filter **ret);
/* Number of BPF instructions (for logs and tests). */
size_t sbx_filter_len(const struct sbx_filter *f);
/* Compiled with SBX_COMPILE_NOTIFY. */
bool sbx_filter_notifies(const struct sbx_filter *f);

/*
 * Child side, notifying filter: install the notifying program with
 * SECCOMP_FILTER_FLAG_NEW_LISTENER, send the listener over the unix socket sock (SCM_RIGHTS),
 * wait for the supervisor's one-byte ack, close the listener. Returns 1 when the listener was
 * handed over; 0 when the profile would not allow the handoff itself (sendmsg/read on sock:
 * under the new filter they would wait for an answer nobody can give yet), in which case the
 * profile's own program is installed instead; -errno on failure. Async-signal-safe.
 *
 * SBX_HANDOFF_NO_ACK: send without waiting for an ack and leave the listener open (it is
 * close-on-exec, so execve drops the child's copy). For a child whose supervisor is suspended
 * until the child execs (CLONE_VFORK): the ack could never come. Only sendmsg is checked then;
 * the caller checks whatever else it calls before execve.
 */
#define SBX_HANDOFF_NO_ACK 1U
/* Would this native call (first three arguments) wait for the supervisor under the installed
 * notifying program? false for a filter without notification. Pure computation. */
bool sbx_filter_call_notified(const struct sbx_filter *f, int nr, uint64_t a0, uint64_t a1,
			      uint64_t a2);
int sbx_filter_apply_handoff(const struct sbx_filter *f, int sock, unsigned int flags);
/* Supervisor side: receive the listener (close-on-exec) sent by sbx_filter_apply_handoff and,
 * if ack, ack it. -EPIPE when the child closed the socket without sending one. */
int sbx_listener_receive(int sock, int *ret_fd, bool ack);

/*
 * Run a program on a call as the kernel would: the SECCOMP_RET_* word (action | data).
 * installed: the program the child loads (the notifying one for SBX_COMPILE_NOTIFY filters),
 * else the profile's own. NULL filter: SECCOMP_RET_ALLOW. Pure computation.
 */
struct seccomp_data;
uint32_t sbx_filter_eval(const struct sbx_filter *f, const struct seccomp_data *d, bool installed);

/* ---- supervisor side of the audit of denied calls ----------------------------------------- */

struct sbx_notify_event {
	uint64_t id;	  /* the kernel's cookie for this notification */
	int32_t tid;	  /* calling thread, in the supervisor's pid namespace */
	uint32_t arch;	  /* AUDIT_ARCH_* (= SCMP_ARCH_*) */
	int32_t nr;	  /* syscall number of that ABI */
	uint64_t args[6]; /* raw register values (the kernel does not know the arity) */
	uint32_t action;  /* what the profile decides: SECCOMP_RET_* word of the reference */
};

struct sbx_notifier;
int sbx_notifier_new(int listener_fd, const struct sbx_filter *f, struct sbx_notifier **ret);
void sbx_notifier_free(struct sbx_notifier *n);
/* Receive one pending notification (blocks if none) and decide it with the profile's program.
 * -ENOENT: the caller went away before it could be read. */
int sbx_notifier_receive(struct sbx_notifier *n, struct sbx_notify_event *ret);
/* Is the notification still pending (its thread alive and waiting)? */
bool sbx_notifier_pending(struct sbx_notifier *n, const struct sbx_notify_event *ev);
/*
 * Answer as the profile decided: errno actions return that errno from the call; kill actions
 * SIGKILL the calling process (the kernel's own kill cannot be requested by a supervisor)
 * and set *ret_killed; allow/log let the call run; trap/trace fail it with ENOSYS (what the
 * kernel does for RET_TRACE without a tracer). -ENOENT when the caller is already gone.
 */
int sbx_notifier_answer(struct sbx_notifier *n, const struct sbx_notify_event *ev,
			bool *ret_killed);

/* "errno", "kill" (process), "kill_thread", "trap", "trace", "log", "allow", "notify". */
const char *sbx_action_name(uint32_t action);
/*
 * Name of syscall nr of ABI arch into buf ("ptrace"); x32 numbers on x86_64 are looked up as
 * x32. *ret_arch (may be NULL): the ABI's short name ("x86_64", "x32", "x86", "aarch64"...).
 * -ENOENT for a number libseccomp does not know (buf then holds "nr_<n>").
 */
int sbx_syscall_name(uint32_t arch, int32_t nr, char *buf, size_t len, const char **ret_arch);
