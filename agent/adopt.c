/* SPDX-License-Identifier: MIT */
/*
 * Agent start: the tasks of the state files (agent/state.c) back in the table. Ended tasks
 * (ended/<id>.json) for show and wait; live ones (tasks/<id>.json) decoded and handed to the
 * task table's re-adoption (task_adopt: the shim's pidfd or its exit file, the cgroup, each
 * meter's restore); cgroups of ours that no task owns removed. Above the task table: nothing
 * below calls into this file.
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/task.h"
#include "agent/state.h"
#include "agent/adopt.h"
#include "common/clock.h"
#include "common/macro.h"
#include "isolation/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct task *task_alloc(struct agent *a)
{
	struct task *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->agent = a;
	t->shim_pidfd = t->status_fd = -1;
	spec_init(&t->spec);
	return t;
}

static void load_ended_dir(struct agent *a, const char *base, bool legacy)
{
	char dir[512];
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/ended", base);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[1024], id[64];
		json_error_t e;
		json_t *j, *rec;
		struct task *t;
		size_t n = strlen(de->d_name);

		if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0 || n - 5 >= sizeof(id))
			continue;
		snprintf(id, sizeof(id), "%.*s", (int)(n - 5), de->d_name);
		if (!state_valid_task_id(id) || task_find(a, id))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		j = json_load_file(path, 0, &e);
		rec = j ? json_object_get(j, "record") : NULL;
		if (!json_is_object(rec)) {
			log_warning("%s: unreadable ended-task file, removed", path);
			(void)unlink(path);
			json_decref(j);
			continue;
		}
		t = task_alloc(a);
		if (!t) {
			json_decref(j);
			return;
		}
		snprintf(t->id, sizeof(t->id), "%.39s", id);
		t->legacy_files = legacy;
		t->state = TASK_ENDED;
		t->final_record = json_incref(rec);
		t->submitter_uid = (uid_t)json_integer_value(json_object_get(j, "submitter_uid"));
		t->end_ns = (uint64_t)json_integer_value(json_object_get(j, "end_ns"));
		task_slim(t);
		task_add_ended(a, t);
		json_decref(j);
	}
}

static void load_ended(struct agent *a)
{
	load_ended_dir(a, agent_runtime_dir(a), false);
	if (state_have_legacy_dir(a))
		load_ended_dir(a, a->cfg.state_dir, true);
}

static int adopt_one(struct agent *a, json_t *j, const char *path, bool legacy)
{
	char err[256];
	struct task *t;
	struct task_adopt_info info;
	json_t *v;
	int r;

	t = task_alloc(a);
	if (!t)
		return -ENOMEM;
	t->legacy_files = legacy;
	r = state_task_decode(j, t, err, sizeof(err));
	if (r < 0) {
		if (err[0]) /* a bad spec; a bad id is said by the caller */
			log_error("%s: %s", path, err);
		task_free(t);
		return r;
	}
	t->adopted = true;
	{
		uint64_t now_r = now_ns(CLOCK_REALTIME), now_m = now_ns(CLOCK_MONOTONIC);
		uint64_t age = now_r > t->start_ns ? now_r - t->start_ns : 0;

		t->start_mono_ns = now_m > age ? now_m - age : 0;
		t->next_sample_mono = task_first_sample(a, now_m);
		t->last_mem_sample_mono = now_m;
		v = json_object_get(j, "term_sent_ago_ns");
		if (t->limit_reason != ACCT_EXIT_NONE)
			t->term_sent_mono = now_m - (uint64_t)json_integer_value(v);
		/* its run --wait client went away before the restart: SIGKILL still due */
		v = json_object_get(j, "client_term_ago_ns");
		if (json_is_integer(v)) {
			t->client_gone = t->client_term_sent = true;
			a->client_kill_due = true;
			t->client_term_mono = now_m - (uint64_t)json_integer_value(v);
		}
	}
	info = (struct task_adopt_info){
	    .state = j,
	    .same_boot =
		strcmp(json_string_value(json_object_get(j, "boot_id")) ?: "", a->boot_id) == 0,
	    .launch_failed = json_is_true(json_object_get(j, "launch_failed")),
	    .exit_code = (int)json_integer_value(json_object_get(j, "exit_code"))};
	return task_adopt(a, t, &info);
}

/* Re-adopt the live tasks of one tasks/ directory (a task already known is skipped). */
static int load_tasks_dir(struct agent *a, const char *base, bool legacy)
{
	char dir[512];
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/tasks", base);
	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[1024];
		json_error_t e;
		json_t *j;
		size_t n = strlen(de->d_name);
		int r;

		if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
			continue;
		snprintf(path, sizeof(path), "%.*s", (int)(n - 5), de->d_name);
		if (task_find(a, path))
			continue; /* the newer copy in runtime_dir was loaded first */
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		j = json_load_file(path, 0, &e);
		if (!j) {
			log_error("%s: unreadable task state (%s); moved aside as .bad", path,
				  e.text);
			char bad[1100];

			snprintf(bad, sizeof(bad), "%s.bad", path);
			(void)rename(path, bad);
			continue;
		}
		r = adopt_one(a, j, path, legacy);
		json_decref(j);
		if (r < 0)
			log_error("%s: could not re-adopt the task: %s", path, strerror(-r));
	}
	return 0;
}

int adopt_load(struct agent *a)
{
	char **names = NULL;
	size_t n_names = 0;
	int r;

	load_ended(a);
	task_prune_ended(a);
	r = load_tasks_dir(a, agent_runtime_dir(a), false);
	if (r < 0)
		return r;
	if (state_have_legacy_dir(a)) {
		r = load_tasks_dir(a, a->cfg.state_dir, true);
		if (r < 0 && r != -ENOENT)
			log_warning("%s/tasks: %s", a->cfg.state_dir, strerror(-r));
	}
	state_spooled_free(a);
	/* Cgroups of ours that no live task owns (a crash between create and state write). */
	if (cg_root_list_tasks(a->cg, &names, &n_names) == 0) {
		for (size_t i = 0; i < n_names; i++) {
			bool owned = false;

			for (struct task *t = a->tasks; t; t = t->next)
				if (t->state != TASK_ENDED && t->cg_name &&
				    strcmp(t->cg_name, names[i]) == 0)
					owned = true;
			if (!owned && state_valid_task_id(names[i])) {
				struct cg_task *cg;

				if (cg_task_open(a->cg, names[i], &cg) == 0) {
					log_warning("removing orphaned task cgroup %s", names[i]);
					(void)cg_task_kill(cg, SIGKILL);
					(void)cg_task_destroy(cg);
					cg_task_free(cg);
				}
			}
			free(names[i]);
		}
		free(names);
	}
	return 0;
}
