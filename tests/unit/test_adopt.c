/* SPDX-License-Identifier: MIT */
/*
 * Persistence and re-adoption at start (agent/adopt.c, task_adopt) without root: state files
 * written as a running agent writes them, then what a new agent makes of them. A task of an
 * earlier boot is lost; one whose supervisor is gone ends with its exit file's status (or is
 * lost without one); a launch that had failed ends as launch_failed; a supervisor that still
 * runs is watched and its exit ends the task; the audit position comes from the spool when it
 * is ahead of the file; bad files are set aside; ended tasks come back in order, pruned. No
 * cgroup root: the cgroup part is the integration tests' (agent_launch.sh restarts).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "accounting/spool.h"
#include "agent/adopt.h"
#include "agent/agent.h"
#include "agent/emit.h"
#include "agent/loop.h"
#include "agent/state.h"
#include "agent/task.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/macro.h"
#include "common/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BOOT  "0123456789abcdef0123456789abcdef0123"
#define OTHER "fedcba9876543210fedcba9876543210fedc"

struct fixture {
	char dir[64];
	struct agent a;
	pid_t child;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char spool_dir[128];
	struct spool_opts so = {.no_fsync = true};

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/corral-test-adopt.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	f->a.cfg.node = "n1";
	f->a.cfg.state_dir = f->dir;
	f->a.cfg.ended_keep = 2;
	f->a.cfg.sample_interval_ns = NSEC_PER_SEC;
	snprintf(f->a.boot_id, sizeof(f->a.boot_id), BOOT);
	assert_int_equal(state_init_counters(&f->a), 0);
	snprintf(spool_dir, sizeof(spool_dir), "%s/spool", f->dir);
	so.dir = spool_dir;
	assert_int_equal(spool_open(&so, &f->a.spool), 0);
	assert_int_equal(loop_new(&f->a.loop), 0);
	f->child = -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	if (f->child > 0) {
		kill(f->child, SIGKILL);
		waitpid(f->child, NULL, 0);
	}
	while (f->a.tasks) {
		struct task *t = f->a.tasks;

		f->a.tasks = t->next;
		task_free(t);
	}
	while (f->a.ended) {
		struct task *t = f->a.ended;

		f->a.ended = t->next;
		task_free(t);
	}
	task_ended_ring_free(&f->a);
	task_lists_free(&f->a);
	task_flush_records(&f->a);
	spool_close(f->a.spool);
	loop_free(f->a.loop);
	free(f->a.pend);
	free(f->a.unlink_stems);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* A state file as a running agent writes it (state_task_encode), with these changes. */
static void write_state(struct fixture *f, const char *id, const char *boot, pid_t shim_pid,
			uint64_t shim_start, json_t *extra)
{
	static char *argv[] = {"/bin/sleep", "100", NULL};
	struct task t = {.shim_pidfd = -1, .status_fd = -1};
	char path[256];
	json_t *j;
	char *txt;

	spec_init(&t.spec);
	assert_int_equal(spec_set_argv(&t.spec, argv, 2), 0);
	snprintf(t.id, sizeof(t.id), "%s", id);
	t.key = 42;
	t.user = "alice";
	t.uid = 1000;
	t.gid = 1000;
	t.cg_name = t.id;
	t.shim_pid = shim_pid;
	t.shim_start = shim_start;
	t.pid = shim_pid;
	t.start_ns = now_ns(CLOCK_REALTIME) - NSEC_PER_SEC;
	t.syscall_audit = true;
	t.syscalls_seq_saved = 7;
	t.syscalls_max = 100;
	j = state_task_encode(&f->a, &t);
	assert_non_null(j);
	json_object_set_new(j, "boot_id", json_string(boot));
	if (extra)
		assert_int_equal(json_object_update(j, extra), 0);
	json_decref(extra);
	txt = json_dumps(j, JSON_COMPACT);
	snprintf(path, sizeof(path), "%s/tasks/%s.json", f->dir, id);
	assert_int_equal(write_file_replace(path, txt, strlen(txt), 0600), 0);
	free(txt);
	json_decref(j);
	spec_clear(&t.spec);
}

static void write_exit(struct fixture *f, const char *id, int wait_status)
{
	char path[256], buf[160];
	int n;

	snprintf(path, sizeof(path), "%s/tasks/%s.exit", f->dir, id);
	n = snprintf(buf, sizeof(buf),
		     "status=%d utime_us=1000 stime_us=0 maxrss_kb=100 end_ns=%llu\n", wait_status,
		     (unsigned long long)now_ns(CLOCK_REALTIME));
	assert_int_equal(write_file_replace(path, buf, (size_t)n, 0600), 0);
}

static bool file_exists(struct fixture *f, const char *rel)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
	return access(p, F_OK) == 0;
}

/* A pid that is not running (a child made and reaped). */
static pid_t dead_pid(void)
{
	pid_t p = fork();

	assert_true(p >= 0);
	if (p == 0)
		_exit(0);
	assert_int_equal(waitpid(p, NULL, 0), p);
	return p;
}

static int count_type(uint64_t seq, const void *data, size_t len, void *ud)
{
	struct acct_record r;
	char err[128];
	int *counts = ud;

	(void)seq;
	assert_int_equal(acct_record_decode(data, len, &r, err, sizeof(err)), 0);
	counts[r.type]++;
	if (r.type == ACCT_TASK_START)
		assert_true(json_is_true(json_object_get(r.extra, "adopted")));
	acct_record_clear(&r);
	return 0;
}

static void spooled_types(struct fixture *f, int counts[_ACCT_TYPE_MAX])
{
	memset(counts, 0, sizeof(int) * _ACCT_TYPE_MAX);
	task_flush_records(&f->a);
	assert_true(spool_peek(f->a.spool, 1, 100, SIZE_MAX, count_type, counts) >= 0);
}

/* Written before the node's last boot: lost (whatever its pids are now), its start again. */
static void test_lost_after_reboot(void **state)
{
	struct fixture *f = *state;
	const char *id = "t-6b14f6c3-1";
	int counts[_ACCT_TYPE_MAX];
	struct task *t;

	write_state(f, id, OTHER, getpid(), 1, NULL);
	assert_int_equal(adopt_load(&f->a), 0);
	t = task_find(&f->a, id);
	assert_non_null(t);
	assert_true(t->adopted);
	assert_int_equal(t->state, TASK_ENDING);
	assert_int_equal(t->status, ACCT_EXIT_LOST);
	assert_string_equal(t->exit_message, "the node rebooted while the task ran");
	assert_int_equal(t->shim_pidfd, -1);
	assert_int_equal(f->a.stats.tasks_adopted, 1);
	assert_int_equal(f->a.stats.tasks_lost, 1);
	assert_int_equal(f->a.n_live, 1);
	spooled_types(f, counts);
	assert_int_equal(counts[ACCT_TASK_START], 1);
	assert_int_equal(counts[ACCT_TASK_END], 0);
}

/* Same boot, the supervisor gone: the exit file says how the task ended; the task ends now,
 * its record and ended file are written, its live files go after the flush. */
static void test_shim_gone_exit_file(void **state)
{
	struct fixture *f = *state;
	const char *id = "t-6b14f6c3-2";
	int counts[_ACCT_TYPE_MAX];
	struct task *t;

	write_state(f, id, BOOT, dead_pid(), 1, NULL);
	write_exit(f, id, 3 << 8);
	assert_int_equal(adopt_load(&f->a), 0);
	t = task_find(&f->a, id);
	assert_non_null(t);
	assert_int_equal(t->state, TASK_ENDED);
	assert_int_equal(t->status, ACCT_EXIT_EXITED);
	assert_int_equal(t->exit_code, 3);
	assert_int_equal(f->a.n_live, 0);
	assert_int_equal(f->a.stats.tasks_lost, 0);
	assert_true(file_exists(f, "ended/t-6b14f6c3-2.json"));
	spooled_types(f, counts);
	assert_int_equal(counts[ACCT_TASK_START], 1);
	assert_int_equal(counts[ACCT_TASK_END], 1);
	assert_false(file_exists(f, "tasks/t-6b14f6c3-2.json"));
	assert_false(file_exists(f, "tasks/t-6b14f6c3-2.exit"));
}

/* Same boot, the supervisor gone without an exit file: lost, said why. */
static void test_shim_gone_no_exit_file(void **state)
{
	struct fixture *f = *state;
	const char *id = "t-6b14f6c3-3";
	struct task *t;

	write_state(f, id, BOOT, dead_pid(), 1, NULL);
	assert_int_equal(adopt_load(&f->a), 0);
	t = task_find(&f->a, id);
	assert_non_null(t);
	assert_int_equal(t->state, TASK_ENDED);
	assert_int_equal(t->status, ACCT_EXIT_LOST);
	assert_string_equal(t->exit_message, "the task's supervisor ended without reporting");
	assert_int_equal(f->a.stats.tasks_lost, 1);
}

/* A pid that runs again but is not the supervisor (another start time) is not trusted. */
static void test_pid_reused(void **state)
{
	struct fixture *f = *state;
	const char *id = "t-6b14f6c3-4";
	uint64_t start;
	struct task *t;

	assert_int_equal(proc_start_time(getpid(), &start), 0);
	write_state(f, id, BOOT, getpid(), start + 1, NULL);
	write_exit(f, id, 0);
	assert_int_equal(adopt_load(&f->a), 0);
	t = task_find(&f->a, id);
	assert_non_null(t);
	assert_int_equal(t->state, TASK_ENDED);
	assert_int_equal(t->status, ACCT_EXIT_EXITED);
	assert_int_equal(t->exit_code, 0);
}

/* The launch had failed before the restart: it ends as launch_failed with its code. */
static void test_launch_failed(void **state)
{
	struct fixture *f = *state;
	const char *id = "t-6b14f6c3-5";
	struct task *t;

	write_state(f, id, BOOT, dead_pid(), 1,
		    json_pack("{s:b,s:i}", "launch_failed", 1, "exit_code", 127));
	assert_int_equal(adopt_load(&f->a), 0);
	t = task_find(&f->a, id);
	assert_non_null(t);
	assert_int_equal(t->state, TASK_ENDING);
	assert_int_equal(t->status, ACCT_EXIT_LAUNCH_FAILED);
	assert_int_equal(t->exit_code, 127);
}

/* The supervisor still runs: the task is running again, and its supervisor's exit (the
 * pidfd, through the loop) ends it with the exit file's status. */
static void test_live_shim(void **state)
{
	struct fixture *f = *state;
	const char *id = "t-6b14f6c3-6";
	uint64_t start;
	struct task *t;

	f->child = fork();
	assert_true(f->child >= 0);
	if (f->child == 0) {
		pause();
		_exit(0);
	}
	assert_int_equal(proc_start_time(f->child, &start), 0);
	write_state(f, id, BOOT, f->child, start, NULL);
	assert_int_equal(adopt_load(&f->a), 0);
	t = task_find(&f->a, id);
	assert_non_null(t);
	assert_int_equal(t->state, TASK_RUNNING);
	assert_true(t->shim_pidfd >= 0);
	assert_int_equal(f->a.n_live, 1);
	write_exit(f, id, 9); /* killed by SIGKILL */
	kill(f->child, SIGKILL);
	assert_int_equal(waitpid(f->child, NULL, 0), f->child);
	f->child = -1;
	for (int i = 0; i < 50 && t->state != TASK_ENDED; i++)
		assert_true(loop_run_once(f->a.loop, 100) >= 0);
	assert_int_equal(t->state, TASK_ENDED);
	assert_int_equal(t->status, ACCT_EXIT_SIGNALED);
	assert_int_equal(t->exit_signal, 9);
}

/* The audit position: the spool's (seen at start) when it is ahead of the state file's, and
 * then saved at the next flush (the state file's 7 is what is saved until then). */
static void test_spooled_seq(void **state)
{
	struct fixture *f = *state;
	struct task *t;

	write_state(f, "t-6b14f6c3-7", OTHER, 1, 1, NULL);
	write_state(f, "t-6b14f6c3-8", OTHER, 1, 1, NULL);
	f->a.spooled = calloc(1, sizeof(*f->a.spooled));
	assert_non_null(f->a.spooled);
	snprintf(f->a.spooled[0].id, sizeof(f->a.spooled[0].id), "t-6b14f6c3-7");
	f->a.spooled[0].seq = 9;
	f->a.n_spooled = f->a.cap_spooled = 1;
	assert_int_equal(adopt_load(&f->a), 0);
	t = task_find(&f->a, "t-6b14f6c3-7");
	assert_non_null(t);
	assert_int_equal(t->syscalls_seq, 9);
	assert_int_equal(t->syscalls_seq_saved, 7);
	assert_true(f->a.tasks_flush_due);
	assert_int_equal(t->syscalls_max, 100);
	t = task_find(&f->a, "t-6b14f6c3-8");
	assert_non_null(t);
	assert_int_equal(t->syscalls_seq, 7);
	assert_null(f->a.spooled); /* freed once the tasks are re-adopted */
}

/* Unreadable state files are set aside (.bad), an id that is not a task's is not adopted. */
static void test_bad_files(void **state)
{
	struct fixture *f = *state;
	char path[256];

	snprintf(path, sizeof(path), "%s/tasks/t-6b14f6c3-9.json", f->dir);
	assert_int_equal(write_file_replace(path, "{\"id\":", 6, 0600), 0);
	write_state(f, "../../etc", OTHER, 1, 1, NULL);
	assert_int_equal(adopt_load(&f->a), 0);
	assert_null(f->a.tasks);
	assert_true(file_exists(f, "tasks/t-6b14f6c3-9.json.bad"));
	assert_false(file_exists(f, "tasks/t-6b14f6c3-9.json"));
}

static void write_ended(struct fixture *f, const char *id, uint64_t end_ns)
{
	char path[256];
	json_t *j = json_pack("{s:s,s:i,s:I,s:{s:s}}", "id", id, "submitter_uid", 1000, "end_ns",
			      (json_int_t)end_ns, "record", "type", "task.end");
	char *txt = json_dumps(j, JSON_COMPACT);

	snprintf(path, sizeof(path), "%s/ended/%s.json", f->dir, id);
	assert_int_equal(write_file_replace(path, txt, strlen(txt), 0600), 0);
	free(txt);
	json_decref(j);
}

/* Ended tasks come back in the order they ended, the newest ended_keep of them. */
static void test_ended(void **state)
{
	struct fixture *f = *state;
	char path[256];

	write_ended(f, "t-6b14f6c3-b", 300);
	write_ended(f, "t-6b14f6c3-a", 100);
	write_ended(f, "t-6b14f6c3-c", 200);
	snprintf(path, sizeof(path), "%s/ended/t-6b14f6c3-d.json", f->dir);
	assert_int_equal(write_file_replace(path, "[]", 2, 0600), 0);
	assert_int_equal(adopt_load(&f->a), 0);
	assert_int_equal(f->a.n_ended, 2);
	assert_string_equal(f->a.ended->id, "t-6b14f6c3-c");
	assert_string_equal(f->a.ended->next->id, "t-6b14f6c3-b");
	assert_ptr_equal(f->a.ended_tail, f->a.ended->next);
	assert_int_equal(f->a.ended->state, TASK_ENDED);
	assert_false(file_exists(f, "ended/t-6b14f6c3-a.json")); /* pruned */
	assert_false(file_exists(f, "ended/t-6b14f6c3-d.json")); /* unreadable: removed */
	assert_true(file_exists(f, "ended/t-6b14f6c3-b.json"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lost_after_reboot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shim_gone_exit_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shim_gone_no_exit_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pid_reused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_launch_failed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_live_shim, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spooled_seq, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ended, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
