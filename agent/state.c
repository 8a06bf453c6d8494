/* SPDX-License-Identifier: MIT */
/*
 * Agent state on disk. state_dir (durable):
 *   counters.json      the instance id and the task and record sequence numbers (record ids
 *                      are reserved in blocks, so a crash never reuses one); lost or
 *                      unreadable, a new instance id is drawn (docs/pipeline.md "Record ids")
 *   spool/             the accounting spool
 * runtime_dir (live-task files: survive agent restarts, not reboots; state_dir when unset;
 * tasks an older agent started keep theirs in state_dir: task->legacy_files, state_task_path):
 *   tasks/<id>.json    one file per live task, written atomically (tmp + rename)
 *   tasks/<id>.exit    written by the task's shim when the main process ends
 *   tasks/<id>.syscalls  the calls its seccomp profile denied, appended by the shim (audit)
 *   ended/<id>.json    the final record of recently ended tasks (for show/wait after restart),
 *                      the newest ended_keep of them
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/state.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/proc.h"
#include "isolation/cgroup.h"
#include "accounting/spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RECORD_SEQ_BLOCK 4096

/* ---- full state filesystem ---------------------------------------------------------------- */

/*
 * state_dir/reserve: STATE_RESERVE_BYTES held while there is room, given up when a write that
 * must not fail (counters, the audit chain head, the spool's ack) finds the filesystem full.
 * Those writes then go through, the agent runs degraded (no new task; records it cannot store
 * are refused and counted), and state_tick makes the reserve again once space is back.
 */
static void reserve_path(const struct agent *a, char *buf, size_t len, const char *suffix)
{
	snprintf(buf, len, "%s/reserve%s", a->cfg.state_dir, suffix);
}

static int reserve_make(struct agent *a)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	int fd, r = 0;

	reserve_path(a, path, sizeof(path), "");
	if (access(path, F_OK) == 0)
		return 0;
	reserve_path(a, tmp, sizeof(tmp), ".tmp");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if ((r = posix_fallocate(fd, 0, STATE_RESERVE_BYTES)) != 0 || fsync(fd) < 0) {
		r = r ? -r : -errno;
		close(fd);
		(void)unlink(tmp);
		return r;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		r = -errno;
		(void)unlink(tmp);
	}
	return r;
}

void state_set_degraded(struct agent *a, int err, const char *what)
{
	if (a->degraded)
		return;
	a->degraded = true;
	snprintf(a->degraded_why, sizeof(a->degraded_why), "state filesystem full (%s: %s)", what,
		 strerror(-err));
	log_error("%s at %s: running degraded: tasks are kept and the spool is uploaded and "
		  "trimmed, no new task is started, records that cannot be stored are refused "
		  "and counted; back to normal by itself when space returns",
		  a->degraded_why, a->cfg.state_dir);
}

int state_free_space(void *ud)
{
	struct agent *a = ud;
	char path[PATH_MAX];

	state_set_degraded(a, -ENOSPC, "spool ack");
	reserve_path(a, path, sizeof(path), "");
	if (unlink(path) < 0)
		return -errno;
	log_warning("state filesystem full: the reserve %s (%u KiB) given up", path,
		    STATE_RESERVE_BYTES >> 10);
	return 0;
}

/* write_file_replace/_atomic, giving up the reserve once if the filesystem is full */
static int state_write(struct agent *a, const char *path, const char *buf, bool atomic)
{
	size_t len = strlen(buf);
	int r = atomic ? write_file_atomic(path, buf, len, 0600)
		       : write_file_replace(path, buf, len, 0600);

	if (r != -ENOSPC && r != -EDQUOT)
		return r;
	state_set_degraded(a, r, path);
	if (state_free_space(a) < 0)
		return r;
	return atomic ? write_file_atomic(path, buf, len, 0600)
		      : write_file_replace(path, buf, len, 0600);
}

static int save_counters(struct agent *a);

void state_tick(struct agent *a, uint64_t now)
{
	int r;

	if (!a->degraded || now < a->degraded_retry_mono)
		return;
	a->degraded_retry_mono = now + 2 * NSEC_PER_SEC;
	r = reserve_make(a);
	if (r < 0)
		return;
	a->record_seq_reserved = a->next_record_seq + RECORD_SEQ_BLOCK;
	a->task_seq_reserved = a->next_task_seq + RECORD_SEQ_BLOCK;
	r = save_counters(a);
	if (r == 0)
		r = state_sync_audit_head(a);
	if (r < 0) {
		a->record_seq_reserved = a->next_record_seq;
		return;
	}
	a->degraded = false;
	a->degraded_why[0] = 0;
	log_notice("state filesystem %s has space again (reserve of %u KiB made): leaving "
		   "degraded mode",
		   a->cfg.state_dir, STATE_RESERVE_BYTES >> 10);
}

static int save_counters(struct agent *a)
{
	_cleanup_free_ char *path = NULL, *txt = NULL;
	json_t *j;

	if (asprintf(&path, "%s/counters.json", a->cfg.state_dir) < 0)
		return -ENOMEM;
	j = json_pack("{s:s,s:I,s:I,s:I}", "instance", a->instance_id, "task_seq",
		      (json_int_t)a->next_task_seq, "task_seq_reserved",
		      (json_int_t)a->task_seq_reserved, "record_seq_reserved",
		      (json_int_t)a->record_seq_reserved);
	if (!j)
		return -ENOMEM;
	txt = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!txt)
		return -ENOMEM;
	return state_write(a, path, txt, false);
}

static bool valid_instance(const char *s)
{
	if (!s || strlen(s) != STATE_INSTANCE_HEX)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

static int new_instance(struct agent *a)
{
	unsigned char b[STATE_INSTANCE_HEX / 2];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -errno ? -errno : -EIO;
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(a->instance_id + 2 * i, 3, "%02x", b[i]);
	return 0;
}

int state_init_counters(struct agent *a)
{
	_cleanup_free_ char *path = NULL, *dir = NULL;
	json_t *j, *v;
	json_error_t e;
	bool loaded;
	int r;

	if (asprintf(&dir, "%s/tasks", agent_runtime_dir(a)) < 0 || mkdir_p(dir, 0700) < 0)
		return -errno ? -errno : -ENOMEM;
	free(dir);
	if (asprintf(&dir, "%s/ended", agent_runtime_dir(a)) < 0 || mkdir_p(dir, 0700) < 0)
		return -errno ? -errno : -ENOMEM;
	if (asprintf(&path, "%s/counters.json", a->cfg.state_dir) < 0)
		return -ENOMEM;
	j = json_load_file(path, 0, &e);
	loaded = j != NULL;
	if (j) {
		v = json_object_get(j, "task_seq");
		if (json_is_integer(v) && json_integer_value(v) > 0)
			a->next_task_seq = (uint64_t)json_integer_value(v);
		v = json_object_get(j, "task_seq_reserved");
		if (json_is_integer(v) && json_integer_value(v) > 0)
			a->next_task_seq = (uint64_t)json_integer_value(v);
		v = json_object_get(j, "record_seq_reserved");
		/* Skip the whole reserved block: ids of it may have been used before a crash. */
		if (json_is_integer(v) && json_integer_value(v) > 0)
			a->next_record_seq = (uint64_t)json_integer_value(v);
		v = json_object_get(j, "instance");
		if (valid_instance(json_string_value(v)))
			memcpy(a->instance_id, json_string_value(v), STATE_INSTANCE_HEX + 1);
		json_decref(j);
	} else if (access(path, F_OK) == 0) {
		log_error("%s: unreadable (%s); record ids continue under a new instance id", path,
			  e.text);
		a->next_record_seq = now_ns(CLOCK_REALTIME) / 1000;
	}
	/* No instance id (a new or wiped state directory, lost or older counters): a new one,
	 * so no record id of an earlier life of this node can come again. */
	if (!a->instance_id[0]) {
		r = new_instance(a);
		if (r < 0)
			return r;
		/* Task ids (t-<seconds>-<sequence>, and so the ids of task.start/task.end records)
		 * must not repeat either: counters lost, the task sequence starts at the clock in
		 * microseconds, above any earlier instance's (each took more than a microsecond
		 * per task it launched). */
		if (!loaded)
			a->next_task_seq = now_ns(CLOCK_REALTIME) / 1000;
		log_info("record ids: new instance %s (state directory %s)", a->instance_id,
			 a->cfg.state_dir);
	}
	/* Task ids embed the time, the sequence only disambiguates within a second. */
	a->record_seq_reserved = a->next_record_seq + RECORD_SEQ_BLOCK;
	a->task_seq_reserved = a->next_task_seq + RECORD_SEQ_BLOCK;
	r = reserve_make(a);
	if (r == -ENOSPC || r == -EDQUOT)
		state_set_degraded(a, r, "reserve");
	r = save_counters(a);
	if (r == -ENOSPC || r == -EDQUOT) {
		/* not even the reserve: no record id may be handed out (none is persisted), the
		 * agent starts degraded anyway so that the spool can drain */
		a->record_seq_reserved = a->next_record_seq;
		state_set_degraded(a, r, "counters.json");
		return 0;
	}
	return r;
}

uint64_t state_next_task_seq(struct agent *a)
{
	if (a->next_task_seq + 1 >= a->task_seq_reserved) {
		a->task_seq_reserved = a->next_task_seq + 1 + RECORD_SEQ_BLOCK;
		(void)save_counters(a);
	}
	return ++a->next_task_seq;
}

uint64_t state_next_task_id(struct agent *a, char *id, size_t len)
{
	uint64_t seq = state_next_task_seq(a);

	snprintf(id, len, "t-%llx-%llx",
		 (unsigned long long)(now_ns(CLOCK_REALTIME) / NSEC_PER_SEC),
		 (unsigned long long)seq);
	return seq;
}

int state_next_record_id(struct agent *a, char *buf, size_t len)
{
	if (a->next_record_seq >= a->record_seq_reserved) {
		int r;

		a->record_seq_reserved = a->next_record_seq + RECORD_SEQ_BLOCK;
		r = save_counters(a);
		if (r < 0) { /* not persisted: no id of the block may be used */
			a->record_seq_reserved = a->next_record_seq;
			return r;
		}
	}
	/* at most 80 + 1 + 12 + 1 + 12 + 1 + 20 = 127 bytes: fits ACCT_ID_MAX */
	snprintf(buf, len, "%.80s/%.12s/%s-%llu", a->cfg.node, a->boot_id, a->instance_id,
		 (unsigned long long)a->next_record_seq++);
	return 0;
}

const char *agent_runtime_dir(const struct agent *a)
{
	return a->cfg.runtime_dir ? a->cfg.runtime_dir : a->cfg.state_dir;
}

/* Live-task files of tasks started before runtime_dir was set stay in state_dir. */
bool state_have_legacy_dir(const struct agent *a)
{
	return strcmp(agent_runtime_dir(a), a->cfg.state_dir) != 0;
}

static const char *task_base(const struct agent *a, const struct task *t)
{
	return t->legacy_files ? a->cfg.state_dir : agent_runtime_dir(a);
}

void state_task_path(const struct agent *a, const struct task *t, const char *sub, const char *ext,
		     char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s/%s%s", task_base(a, t), sub, t->id, ext);
}

json_t *state_task_encode(struct agent *a, struct task *t)
{
	json_t *j;

	j = json_pack(
	    "{s:i,s:s,s:I,s:o,s:s,s:I,s:I,s:I,s:s,s:i,s:I,s:i,s:I,s:I,s:s,s:s,s:I,s:I}", "version",
	    1, "id", t->id, "key", (json_int_t)t->key, "spec", spec_to_json(&t->spec), "user",
	    t->user, "uid", (json_int_t)t->uid, "gid", (json_int_t)t->gid, "submitter_uid",
	    (json_int_t)t->submitter_uid, "cgroup", t->cg_name, "shim_pid", (int)t->shim_pid,
	    "shim_start", (json_int_t)t->shim_start, "pid", (int)t->pid, "pid_start",
	    (json_int_t)t->pid_start, "start_ns", (json_int_t)t->start_ns, "boot_id", a->boot_id,
	    "limit_reason", acct_exit_status_to_string(t->limit_reason), "limit_value",
	    (json_int_t)t->limit_value, "limit_observed", (json_int_t)t->limit_observed);
	if (!j)
		return NULL;
	if (t->limit_reason != ACCT_EXIT_NONE)
		json_object_set_new(
		    j, "term_sent_ago_ns",
		    json_integer((json_int_t)(now_ns(CLOCK_MONOTONIC) - t->term_sent_mono)));
	/* exit.by and the pending end of a task whose run --wait client went away
	 * (agent/control.c): kept across a restart */
	if (t->end_by != ACCT_BY_NONE)
		json_object_set_new(j, "ended_by", json_string(acct_exit_by_to_string(t->end_by)));
	if (t->client_term_sent && !t->client_kill_sent)
		json_object_set_new(
		    j, "client_term_ago_ns",
		    json_integer((json_int_t)(now_ns(CLOCK_MONOTONIC) - t->client_term_mono)));
	if (t->status == ACCT_EXIT_LAUNCH_FAILED) {
		json_object_set_new(j, "launch_failed", json_true());
		json_object_set_new(j, "exit_code", json_integer(t->exit_code));
	}
	if (t->exit_message)
		json_object_set_new(j, "exit_message", json_string(t->exit_message));
	if (t->gpu_alloc)
		json_object_set(j, "gpu_alloc", t->gpu_alloc);
	if (t->syscall_audit) {
		/* Only what is spooled: a record still pending must be re-read after a crash. */
		json_object_set_new(j, "syscall_audit", json_true());
		json_object_set_new(j, "syscalls_seq",
				    json_integer((json_int_t)t->syscalls_seq_saved));
		json_object_set_new(j, "syscalls_max", json_integer((json_int_t)t->syscalls_max));
	}
	json_object_set_new(j, "mem_byte_seconds_cg", json_real(t->mem_byte_seconds_cg));
	/* at the agent's stop: the task's energy baseline and shares (agent/node_sample.c) */
	if (a->energy_save_token && t->energy.based && !t->energy.done)
		json_object_set_new(j, "energy",
				    json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "token",
					      (json_int_t)a->energy_save_token, "cpu_ns",
					      (json_int_t)t->energy.cpu_ns, "mem_bytes",
					      (json_int_t)t->energy.mem_bytes, "at_mono",
					      (json_int_t)t->energy.at_mono, "cpu_uj",
					      (json_int_t)t->energy.cpu_uj, "dram_uj",
					      (json_int_t)t->energy.dram_uj));
	if (a->energy_save_token && t->energy.based && !t->energy.done && t->spec.gpus)
		json_object_set_new(json_object_get(j, "energy"), "gpu_given_mj",
				    json_integer((json_int_t)t->energy.gpu_given_mj));
	return j;
}

int state_write_task(struct agent *a, const struct task *t, json_t *j)
{
	char path[512];
	_cleanup_free_ char *txt = NULL;

	txt = json_dumps(j, JSON_COMPACT);
	if (!txt)
		return -ENOMEM;
	state_task_path(a, t, "tasks", ".json", path, sizeof(path));
	return write_file_replace(path, txt, strlen(txt), 0600);
}

void state_remove_task_after_flush(struct agent *a, struct task *t)
{
	char stem[512], **nv;

	state_task_path(a, t, "tasks", "", stem, sizeof(stem));
	if (a->n_unlink == a->cap_unlink) {
		size_t nc = a->cap_unlink ? a->cap_unlink * 2 : 32;

		nv = realloc(a->unlink_stems, nc * sizeof(char *));
		if (!nv) {
			state_remove_task_files(stem);
			return;
		}
		a->unlink_stems = nv;
		a->cap_unlink = nc;
	}
	a->unlink_stems[a->n_unlink] = strdup(stem);
	if (a->unlink_stems[a->n_unlink])
		a->n_unlink++;
}

void state_remove_task_files(const char *stem)
{
	static const char *const ext[] = {".json", ".exit", ".syscalls"};
	char path[600];

	for (size_t i = 0; i < ARRAY_SIZE(ext); i++) {
		snprintf(path, sizeof(path), "%s%s", stem, ext[i]);
		(void)unlink(path);
	}
}

void state_remove_ended(struct agent *a, const struct task *t)
{
	char path[512];

	state_task_path(a, t, "ended", ".json", path, sizeof(path));
	(void)unlink(path);
}

int state_save_ended(struct agent *a, struct task *t)
{
	char path[512];
	_cleanup_free_ char *txt = NULL;
	json_t *j;

	if (a->cfg.ended_keep == 0 || !t->final_record)
		return 0;
	j = json_pack("{s:s,s:I,s:I,s:O}", "id", t->id, "submitter_uid",
		      (json_int_t)t->submitter_uid, "end_ns", (json_int_t)t->end_ns, "record",
		      t->final_record);
	if (!j)
		return -ENOMEM;
	txt = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!txt)
		return -ENOMEM;
	state_task_path(a, t, "ended", ".json", path, sizeof(path));
	return write_file_replace(path, txt, strlen(txt), 0600);
}

bool state_valid_task_id(const char *s)
{
	if (strncmp(s, "t-", 2) != 0 || strlen(s) >= 40)
		return false;
	for (const char *p = s + 2; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == '-'))
			return false;
	return true;
}

/*
 * The highest audit.syscall line number of each task found in the unacked spool at start.
 * The state file keeps the number only after the spool append, so a crash between the two
 * leaves it behind; the spool says how far the records really went (state_load_audit_head
 * collects, the audit meter's restore uses, adopt_load frees).
 */
static void spooled_note(struct agent *a, const struct acct_record *r)
{
	json_t *seq = json_object_get(r->event, "seq");
	uint64_t v;

	if (r->type == ACCT_AUDIT_LOST &&
	    strcmp(json_string_value(json_object_get(r->event, "kind")) ?: "", "syscall") != 0)
		return;
	if (!json_is_integer(seq) || json_integer_value(seq) <= 0)
		return;
	v = (uint64_t)json_integer_value(seq);
	for (size_t i = 0; i < a->n_spooled; i++)
		if (strcmp(a->spooled[i].id, r->task.id) == 0) {
			if (v > a->spooled[i].seq)
				a->spooled[i].seq = v;
			return;
		}
	if (a->n_spooled == a->cap_spooled) {
		size_t nc = a->cap_spooled ? a->cap_spooled * 2 : 16;
		struct spooled_seq *ns = realloc(a->spooled, nc * sizeof(*ns));

		if (!ns)
			return;
		a->spooled = ns;
		a->cap_spooled = nc;
	}
	snprintf(a->spooled[a->n_spooled].id, sizeof(a->spooled[a->n_spooled].id), "%s",
		 r->task.id);
	a->spooled[a->n_spooled++].seq = v;
}

uint64_t state_spooled_seq(const struct agent *a, const char *id)
{
	for (size_t i = 0; i < a->n_spooled; i++)
		if (strcmp(a->spooled[i].id, id) == 0)
			return a->spooled[i].seq;
	return 0;
}

void state_spooled_free(struct agent *a)
{
	free(a->spooled);
	a->spooled = NULL;
	a->n_spooled = a->cap_spooled = 0;
}

/*
 * Persistence: the fields a task's state file keeps (state_task_encode), decoded into t (a
 * task as task_alloc made it). No side effects: the live part of a re-adoption (the shim's
 * pidfd, the cgroup, the meters) is adopt_one's. -EINVAL for a bad id (err empty) or spec
 * (err names the field).
 */
int state_task_decode(json_t *j, struct task *t, char *err, size_t errlen)
{
	const char *s;
	json_t *v;
	int r;

	err[0] = 0;
	s = json_string_value(json_object_get(j, "id"));
	if (!s || !state_valid_task_id(s))
		return -EINVAL;
	snprintf(t->id, sizeof(t->id), "%.39s", s);
	r = spec_from_json(json_object_get(j, "spec"), &t->spec, err, errlen);
	if (r < 0)
		return r;
	t->key = (uint64_t)json_integer_value(json_object_get(j, "key"));
	t->user = strdup(json_string_value(json_object_get(j, "user")) ?: "");
	t->uid = (uid_t)json_integer_value(json_object_get(j, "uid"));
	t->gid = (gid_t)json_integer_value(json_object_get(j, "gid"));
	t->submitter_uid = (uid_t)json_integer_value(json_object_get(j, "submitter_uid"));
	t->cg_name = strdup(json_string_value(json_object_get(j, "cgroup")) ?: t->id);
	t->shim_pid = (pid_t)json_integer_value(json_object_get(j, "shim_pid"));
	t->shim_start = (uint64_t)json_integer_value(json_object_get(j, "shim_start"));
	t->pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
	t->pid_start = (uint64_t)json_integer_value(json_object_get(j, "pid_start"));
	t->start_ns = (uint64_t)json_integer_value(json_object_get(j, "start_ns"));
	t->mem_byte_seconds_cg = json_number_value(json_object_get(j, "mem_byte_seconds_cg"));
	{
		/* the energy saved at the agent's stop: used only if the node sampler's saved
		 * state of that stop matches (node_sample_start) */
		json_t *e = json_object_get(j, "energy");
		json_int_t ev[6];
		static const char *const k[6] = {"token",   "cpu_ns", "mem_bytes",
						 "at_mono", "cpu_uj", "dram_uj"};
		bool ok = json_is_object(e);

		for (int i = 0; ok && i < 6; i++) {
			json_t *x = json_object_get(e, k[i]);

			ok = json_is_integer(x) && (ev[i] = json_integer_value(x)) >= 0;
		}
		if (ok && ev[0] > 0)
			t->energy = (struct task_energy){.based = true,
							 .restore_token = (uint64_t)ev[0],
							 .cpu_ns = (uint64_t)ev[1],
							 .mem_bytes = (uint64_t)ev[2],
							 .at_mono = (uint64_t)ev[3],
							 .cpu_uj = (uint64_t)ev[4],
							 .dram_uj = (uint64_t)ev[5]};
		if (ok && ev[0] > 0 && json_integer_value(json_object_get(e, "gpu_given_mj")) > 0)
			t->energy.gpu_given_mj =
			    (uint64_t)json_integer_value(json_object_get(e, "gpu_given_mj"));
	}
	t->limit_reason = acct_exit_status_from_string(
	    json_string_value(json_object_get(j, "limit_reason")) ?: "");
	if ((int)t->limit_reason < 0)
		t->limit_reason = ACCT_EXIT_NONE;
	t->end_by = acct_exit_by_from_string(json_string_value(json_object_get(j, "ended_by")));
	if (t->end_by != ACCT_BY_CLIENT && t->end_by != ACCT_BY_OPERATOR)
		t->end_by = ACCT_BY_NONE;
	t->limit_value = (uint64_t)json_integer_value(json_object_get(j, "limit_value"));
	t->limit_observed = (uint64_t)json_integer_value(json_object_get(j, "limit_observed"));
	if ((s = json_string_value(json_object_get(j, "exit_message"))))
		t->exit_message = strdup(s);
	if ((v = json_object_get(j, "gpu_alloc")))
		t->gpu_alloc = json_incref(v);
	if ((v = json_object_get(j, "gpu_meter")))
		t->gpu_meter_saved = json_incref(v);
	t->syscall_audit = json_is_true(json_object_get(j, "syscall_audit"));
	t->syscalls_max = json_is_integer(json_object_get(j, "syscalls_max"))
			      ? (uint32_t)json_integer_value(json_object_get(j, "syscalls_max"))
			      : AUDIT_SYSCALLS_MAX; /* state written before the option existed */
	t->syscalls_seq = (uint64_t)json_integer_value(json_object_get(j, "syscalls_seq"));
	return 0;
}

/*
 * The audit hash chain's head survives restarts. Every audit record is spooled before it is
 * uploaded, and the spool deletes nothing before an ack, so the head needs to be durable only
 * before an ack (the uploader's before_ack hook, state_sync_audit_head) and at shutdown: at
 * start state_load_audit_head follows the chain from the saved head through the unacked spool
 * entries, which hold every audit record after it. (Writing it per record cost two fsyncs on
 * every launch.) Without a spool the head is saved with each record.
 */
int state_sync_audit_head(struct agent *a)
{
	int r;

	if (!a->audit_dirty)
		return 0;
	r = state_save_audit_head(a);
	if (r == 0)
		a->audit_dirty = false;
	return r;
}

int state_save_audit_head(struct agent *a)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/audit-chain", a->cfg.state_dir);
	return state_write(a, path, a->audit_head, true);
}

static int replay_cb(uint64_t seq, const void *data, size_t len, void *userdata)
{
	struct agent *a = userdata;
	struct acct_record r;
	char err[128];

	(void)seq;
	if (acct_record_decode(data, len, &r, err, sizeof(err)) < 0)
		return 0;
	if (acct_type_is_audit(r.type) && strcmp(r.prev_hash, a->audit_head) == 0)
		snprintf(a->audit_head, sizeof(a->audit_head), "%s", r.hash);
	if (r.type == ACCT_AUDIT_SYSCALL || r.type == ACCT_AUDIT_LOST)
		spooled_note(a, &r);
	acct_record_clear(&r);
	return 0;
}

void state_load_audit_head(struct agent *a)
{
	_cleanup_free_ char *s = NULL;
	char path[512];

	snprintf(path, sizeof(path), "%s/audit-chain", a->cfg.state_dir);
	if (read_file(path, 256, &s, NULL) == 0 && strlen(s) == 64)
		snprintf(a->audit_head, sizeof(a->audit_head), "%s", s);
	if (a->spool) {
		(void)spool_peek(a->spool, 1, SIZE_MAX, SIZE_MAX, replay_cb, a);
		(void)state_save_audit_head(a);
	}
}
