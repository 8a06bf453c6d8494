/* SPDX-License-Identifier: MIT */
/*
 * Under systemd with cgroup v2, tasks live in a delegated transient scope of their own,
 * corral.slice/corral-tasks.scope, not in corrald.service's cgroup:
 *
 *   corral.slice/corral-tasks.scope/keeper     a placeholder process that keeps the scope alive
 *   corral.slice/corral-tasks.scope/shims      the per-task supervisors
 *   corral.slice/corral-tasks.scope/tasks/<id> one cgroup per task (limits, CLONE_INTO_CGROUP)
 *
 * Why: systemd before 254 (no DelegateSubgroup=) puts a restarted unit's new main process into
 * the unit's root cgroup, which fails (status 219/CGROUP) once the agent has enabled controllers
 * there and task cgroups exist below it ("no internal processes"). In a separate scope the
 * agent's unit stays a plain cgroup: restart, kill -9 and stop of corrald never touch tasks,
 * whatever KillMode says. The scope is created once over D-Bus (StartTransientUnit, Delegate=yes)
 * and reused by later agent starts while its keeper lives.
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/scope.h"
#include "common/macro.h"
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#define SCOPE_UNIT "corral-tasks.scope"
#define SCOPE_BASE "/corral.slice/" SCOPE_UNIT
#define CG_ROOT	   "/sys/fs/cgroup"

int scope_setup(struct agent *a, const char **ret_base);
int scope_adopt_shim(struct agent *a, pid_t pid);

static bool keeper_alive(void)
{
	_cleanup_free_ char *s = NULL;

	if (read_file(CG_ROOT SCOPE_BASE "/keeper/cgroup.procs", 4096, &s, NULL) < 0)
		return false;
	return s[0] >= '0' && s[0] <= '9';
}

static int move_pid(const char *dir, pid_t pid)
{
	char path[256], buf[DECIMAL_STR_MAX(pid_t)];

	snprintf(path, sizeof(path), CG_ROOT SCOPE_BASE "/%s", dir);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	snprintf(buf, sizeof(buf), "%d", (int)pid);
	return write_file_at(AT_FDCWD, strcat(path, "/cgroup.procs"), buf);
}

_noreturn_ static void keeper_main(void)
{
	sigset_t all;

	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	(void)setsid();
	(void)prctl(PR_SET_NAME, "corral-keeper", 0, 0, 0);
	syscall(SYS_close_range, 0U, ~0U, 0);
	for (;;)
		pause();
}

static int start_scope(pid_t keeper, char *err, size_t errlen)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	sd_bus *bus = NULL;
	int r;

	r = sd_bus_open_system(&bus);
	if (r < 0) {
		snprintf(err, errlen, "connecting to the system bus: %s", strerror(-r));
		return r;
	}
	r = sd_bus_message_new_method_call(
	    bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
	    "org.freedesktop.systemd1.Manager", "StartTransientUnit");
	if (r >= 0)
		r = sd_bus_message_append(m, "ss", SCOPE_UNIT, "fail");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "(sv)");
	if (r >= 0)
		r = sd_bus_message_append(m, "(sv)(sv)(sv)(sv)", "PIDs", "au", 1, (uint32_t)keeper,
					  "Delegate", "b", 1, "Slice", "s", "corral.slice",
					  "Description", "s",
					  "Corral tasks (delegated to corrald)");
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_append(m, "a(sa(sv))", 0);
	if (r >= 0)
		r = sd_bus_call(bus, m, 10 * USEC_PER_SEC, &e, &reply);
	if (r < 0)
		snprintf(err, errlen, "StartTransientUnit %s: %s", SCOPE_UNIT,
			 e.message ? e.message : strerror(-r));
	sd_bus_error_free(&e);
	sd_bus_message_unref(m);
	sd_bus_message_unref(reply);
	sd_bus_flush_close_unref(bus);
	return r < 0 ? r : 0;
}

static bool pid_in_scope(pid_t pid)
{
	char path[64];
	_cleanup_free_ char *s = NULL;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if (read_file(path, 4096, &s, NULL) < 0)
		return false;
	return strstr(s, "0::" SCOPE_BASE) != NULL;
}

int scope_setup(struct agent *a, const char **ret_base)
{
	char err[512];
	pid_t keeper;
	int r;

	*ret_base = NULL;
	if (!getenv("INVOCATION_ID") || access(CG_ROOT "/cgroup.controllers", F_OK) < 0)
		return 0; /* not a systemd service on a unified hierarchy */
	if (!keeper_alive()) {
		keeper = fork();
		if (keeper < 0)
			return -errno;
		if (keeper == 0)
			keeper_main();
		r = start_scope(keeper, err, sizeof(err));
		if (r < 0) {
			kill(keeper, SIGKILL);
			log_warning("tasks stay in the agent's own cgroup: %s", err);
			return 0;
		}
		for (int i = 0; i < 500 && !pid_in_scope(keeper); i++)
			usleep(10000);
		r = move_pid("keeper", keeper);
		if (r < 0) {
			log_error("moving the scope keeper into %s/keeper: %s", SCOPE_BASE,
				  strerror(-r));
			return r;
		}
		log_info("created %s for tasks (keeper pid %d)", SCOPE_UNIT, (int)keeper);
	}
	a->scope_base = SCOPE_BASE;
	*ret_base = SCOPE_BASE;
	return 0;
}

/* Move a task's shim out of the agent's unit into the scope (so no KillMode can reach it). */
int scope_adopt_shim(struct agent *a, pid_t pid)
{
	if (!a->scope_base)
		return 0;
	return move_pid("shims", pid);
}
