/* SPDX-License-Identifier: MIT */
#include "agent/users.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define USERS_MAX  64
#define WATCH_MAX  4
#define GROUPS_MAX 65536

struct file_id {
	bool exists;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

struct users {
	struct user_info **e; /* grows during a request; dropped at refresh beyond USERS_MAX */
	size_t n, cap;
	char *watch[WATCH_MAX];
	struct file_id seen[WATCH_MAX];
	size_t n_watch;
	uint64_t filled_ns; /* when the first entry of this generation was made (0: none) */
	uint64_t now_ns;    /* of the last refresh */
	uint64_t generation;
};

static void info_free(struct user_info *u)
{
	if (!u)
		return;
	free(u->name);
	free(u->dir);
	free(u->shell);
	free(u->groups);
	free(u);
}

static void drop_all(struct users *c)
{
	for (size_t i = 0; i < c->n; i++)
		info_free(c->e[i]);
	c->n = 0;
	c->filled_ns = 0;
	c->generation++;
}

static struct file_id file_id_of(const char *path)
{
	struct file_id f = {0};
	struct stat st;

	if (stat(path, &st) == 0)
		f = (struct file_id){.exists = true,
				     .dev = st.st_dev,
				     .ino = st.st_ino,
				     .size = st.st_size,
				     .mtime = st.st_mtim};
	return f;
}

static bool same_file(const struct file_id *a, const struct file_id *b)
{
	return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino &&
	       a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
	       a->mtime.tv_nsec == b->mtime.tv_nsec;
}

struct users *users_new(const char *const *watch)
{
	static const char *const def[] = {"/etc/passwd", "/etc/group", NULL};
	struct users *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	for (const char *const *w = watch ? watch : def; *w && c->n_watch < WATCH_MAX; w++) {
		c->watch[c->n_watch] = strdup(*w);
		if (!c->watch[c->n_watch]) {
			users_free(c);
			return NULL;
		}
		c->seen[c->n_watch] = file_id_of(*w);
		c->n_watch++;
	}
	return c;
}

void users_free(struct users *c)
{
	if (!c)
		return;
	drop_all(c);
	for (size_t i = 0; i < c->n_watch; i++)
		free(c->watch[i]);
	free(c->e);
	free(c);
}

void users_refresh(struct users *c, uint64_t now_mono_ns)
{
	bool changed = false;

	c->now_ns = now_mono_ns;
	for (size_t i = 0; i < c->n_watch; i++) {
		struct file_id f = file_id_of(c->watch[i]);

		if (!same_file(&f, &c->seen[i])) {
			c->seen[i] = f;
			changed = true;
		}
	}
	if (c->n && (changed || c->n > USERS_MAX || now_mono_ns - c->filled_ns >= USERS_TTL_NS))
		drop_all(c);
}

uint64_t users_generation(const struct users *c)
{
	return c->generation;
}

static struct user_info *from_passwd(const struct passwd *pw)
{
	struct user_info *u = calloc(1, sizeof(*u));
	int n = 32;

	if (!u)
		return NULL;
	u->name = strdup(pw->pw_name);
	u->dir = strdup(pw->pw_dir ? pw->pw_dir : "/");
	u->shell = strdup(pw->pw_shell ? pw->pw_shell : "");
	u->uid = pw->pw_uid;
	u->gid = pw->pw_gid;
	if (!u->name || !u->dir || !u->shell)
		goto fail;
	for (;;) {
		gid_t *g = realloc(u->groups, (size_t)n * sizeof(gid_t));
		int want = n;

		if (!g)
			goto fail;
		u->groups = g;
		if (getgrouplist(u->name, u->gid, u->groups, &want) >= 0) {
			u->n_groups = want;
			break;
		}
		/* want: the number needed (glibc); grow once more than that, within reason */
		if (want <= n || want > GROUPS_MAX) {
			u->n_groups = 0;
			break;
		}
		n = want;
	}
	return u;
fail:
	info_free(u);
	errno = ENOMEM;
	return NULL;
}

/* Cache what NSS returned; pw NULL (no such user): errno as NSS left it, else ENOENT. */
static const struct user_info *add(struct users *c, const struct passwd *pw)
{
	struct user_info *u;

	if (!pw) {
		errno = errno ? errno : ENOENT;
		return NULL;
	}
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 16;
		struct user_info **ne = realloc(c->e, nc * sizeof(*ne));

		if (!ne) {
			errno = ENOMEM;
			return NULL;
		}
		c->e = ne;
		c->cap = nc;
	}
	u = from_passwd(pw);
	if (!u)
		return NULL;
	if (c->n == 0)
		c->filled_ns = c->now_ns;
	c->e[c->n++] = u;
	return u;
}

const struct user_info *users_by_uid(struct users *c, uid_t uid)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->e[i]->uid == uid)
			return c->e[i];
	errno = 0;
	return add(c, getpwuid(uid));
}

const struct user_info *users_by_name(struct users *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->e[i]->name, name) == 0)
			return c->e[i];
	errno = 0;
	return add(c, getpwnam(name));
}
