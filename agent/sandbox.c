/* SPDX-License-Identifier: MIT */
/*
 * The task's sandbox, planned before fork (docs/sandbox.md): which namespaces the child
 * unshares and the mounts it applies, in order, from the agent's [sandbox] defaults and the
 * spec's "sandbox" object. The child only applies (isolation/launch.c apply_namespaces).
 */
#include "common/error.h"
#include "agent/sandbox.h"
#include "agent/agent.h"
#include "agent/state.h"
#include "common/macro.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *keep(struct sandbox_plan *p, const char *s)
{
	char *d;

	if (!s || p->nstrs == SANDBOX_STRS_MAX)
		return NULL;
	d = strdup(s);
	if (d)
		p->strs[p->nstrs++] = d;
	return d;
}

/* dir itself or below one of the hidden ones (hiding it again would fail: it is gone). */
static bool under_hidden(const struct sandbox_plan *p, const char *path)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct launch_mount *m = &p->m[i];
		size_t n;

		if (m->op != LAUNCH_MOUNT_HIDE)
			continue;
		n = strlen(m->path);
		if (strncmp(path, m->path, n) == 0 && (path[n] == 0 || path[n] == '/'))
			return true;
	}
	return false;
}

static int add(struct sandbox_plan *p, enum launch_mount_op op, const char *path, const char *src,
	       const char *data, bool optional)
{
	struct launch_mount *m;

	if (op == LAUNCH_MOUNT_HIDE && under_hidden(p, path))
		return 0;
	if (p->n == LAUNCH_MOUNTS_MAX)
		return -E2BIG;
	m = &p->m[p->n];
	*m = (struct launch_mount){.op = op, .optional = optional};
	m->path = keep(p, path);
	if (!m->path)
		return -ENOMEM;
	if (src && !(m->src = keep(p, src)))
		return -ENOMEM;
	if (data && !(m->data = keep(p, data)))
		return -ENOMEM;
	p->n++;
	return 0;
}

static const char *landlock_why(int abi)
{
	switch (-abi) {
	case ENOSYS:
		return "the kernel has no Landlock (CONFIG_SECURITY_LANDLOCK)";
	case EOPNOTSUPP:
		return "Landlock is not enabled at boot (lsm=...,landlock)";
	default:
		return abi > 0 ? "available" : strerror(-abi);
	}
}

/* path equal to or below dir */
static bool path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && (path[n] == 0 || path[n] == '/');
}

/*
 * Landlock: every read-only path (but procfs's, whose per-process entries come and go) and
 * every hidden one also protected by inode. A bind of a directory below one of them is
 * protected like it: its source becomes a target of its own (the child finds the bind by its
 * inode). docs/sandbox.md says what the rules cost.
 */
static int plan_landlock(struct sandbox_plan *p)
{
	size_t n = p->n;
	int r;

	p->ns_flags |= LAUNCH_NS_LANDLOCK;
	for (size_t i = 0; i < n; i++) {
		struct launch_mount *m = &p->m[i];

		if (m->op == LAUNCH_MOUNT_READ_ONLY && !path_under(m->path, "/proc"))
			m->landlock = LAUNCH_LANDLOCK_READ_ONLY;
		else if (m->op == LAUNCH_MOUNT_HIDE)
			m->landlock = LAUNCH_LANDLOCK_DENY;
	}
	for (size_t i = 0; i < n; i++) {
		const struct launch_mount *b = &p->m[i];

		if (b->op != LAUNCH_MOUNT_BIND)
			continue;
		for (size_t j = 0; j < n; j++) {
			const struct launch_mount *t = &p->m[j];

			if (t->landlock == LAUNCH_LANDLOCK_NONE || strcmp(b->src, t->path) == 0 ||
			    !path_under(b->src, t->path))
				continue;
			if ((r = add(p, LAUNCH_MOUNT_NONE, b->src, NULL, NULL, true)) < 0)
				return r;
			p->m[p->n - 1].landlock = t->landlock;
			break;
		}
	}
	return 0;
}

/* A layer: the spec's choice, else the default; only root may turn one off for a root task. */
static int layer(int8_t spec, bool def, bool may_relax, const char *name, bool *ret, char *err,
		 size_t errlen)
{
	*ret = spec < 0 ? def : spec > 0;
	if (def && !*ret && !may_relax) {
		char m[192];

		snprintf(m, sizeof(m),
			 "sandbox.%s: only root may turn this layer off for a task that runs as "
			 "root",
			 name);
		return err_set(err, errlen, -EPERM, "%s", m);
	}
	return 0;
}

/* Steps 2 to 5 of sandbox_plan_build: the task's binds, the read-only control files and
 * system directories, the agent's own files and the task's inaccessible paths. */
static int plan_paths(struct agent *a, const struct task_spec *s, bool protect,
		      struct sandbox_plan *p)
{
	const struct agent_config *c = &a->cfg;
	int r;

	/* 2. the task's own binds (before anything is made read-only or hidden) */
	for (size_t i = 0; i < s->n_sb_bind; i++) {
		char src[4096], *dst, *mode;

		snprintf(src, sizeof(src), "%s", s->sb_bind[i]);
		dst = strchr(src, ':');
		if (!dst)
			continue; /* validated by the spec parser */
		*dst++ = 0;
		mode = strchr(dst, ':');
		if (mode)
			*mode++ = 0;
		r = add(p, LAUNCH_MOUNT_BIND, dst, src,
			mode && strcmp(mode, "ro") == 0 ? "ro" : NULL, false);
		if (r < 0)
			return r;
	}
	/* 3. the kernel's and cgroups' control files: /sys (with /sys/fs/cgroup), /proc/sys */
	if ((r = add(p, LAUNCH_MOUNT_READ_ONLY, "/sys", NULL, NULL, false)) < 0 ||
	    (r = add(p, LAUNCH_MOUNT_READ_ONLY, "/proc/sys", NULL, NULL, true)) < 0 ||
	    (r = add(p, LAUNCH_MOUNT_READ_ONLY, "/proc/sysrq-trigger", NULL, NULL, true)) < 0)
		return r;
	/* 4. protect_system */
	if (protect) {
		static const char *const sys[] = {"/usr", "/etc", "/boot", "/efi"};

		for (size_t i = 0; i < 4; i++)
			if ((r = add(p, LAUNCH_MOUNT_READ_ONLY, sys[i], NULL, NULL, true)) < 0)
				return r;
	}
	for (size_t i = 0; i < s->n_sb_read_only; i++)
		if ((r = add(p, LAUNCH_MOUNT_READ_ONLY, s->sb_read_only[i], NULL, NULL, false)) < 0)
			return r;
	/* 5. the agent's own files (its secrets: the token and TLS client key, and those a reload
	 * replaced), then the task's inaccessible paths */
	{
		const char *own[] = {c->state_dir,  agent_runtime_dir(a), c->socket_path,
				     c->token_file, c->client_key,	  a->config_path};
		size_t n = ARRAY_SIZE(own) + a->n_secrets_before;

		for (size_t i = 0; i < n; i++) {
			const char *path =
			    i < ARRAY_SIZE(own) ? own[i] : a->secrets_before[i - ARRAY_SIZE(own)];
			struct stat st;

			if (!path || path[0] != '/' || stat(path, &st) < 0)
				continue;
			/* A top-level directory ("/var", "/run") would hide far more than the
			 * agent's files: such a layout is not hidden (docs/sandbox.md). */
			if (S_ISDIR(st.st_mode) && !strchr(path + 1, '/'))
				continue;
			if ((r = add(p, LAUNCH_MOUNT_HIDE, path, NULL, NULL, true)) < 0)
				return r;
		}
	}
	for (size_t i = 0; i < s->n_sb_inaccessible; i++)
		if ((r = add(p, LAUNCH_MOUNT_HIDE, s->sb_inaccessible[i], NULL, NULL, true)) < 0)
			return r;
	return 0;
}

int sandbox_plan_build(struct agent *a, const struct task_spec *s, uid_t submitter, uid_t task_uid,
		       const char *gpu_devs, struct sandbox_plan *p, char *err, size_t errlen)
{
	const struct agent_config *c = &a->cfg;
	bool may_relax = submitter == 0 || task_uid != 0;
	bool mount_ns, private_tmp, protect, ipc, uts, pid, landlock, pdev;
	char opts[96];
	int r;

	memset(p, 0, sizeof(*p));
	if ((r = layer(s->sb_mount_ns, c->sandbox_mount_ns, may_relax, "mount_namespace", &mount_ns,
		       err, errlen)) < 0 ||
	    (r = layer(s->sb_private_tmp, c->sandbox_private_tmp, may_relax, "private_tmp",
		       &private_tmp, err, errlen)) < 0 ||
	    (r = layer(s->sb_protect_system, c->sandbox_protect_system, may_relax, "protect_system",
		       &protect, err, errlen)) < 0 ||
	    (r = layer(s->sb_ipc_ns, c->sandbox_ipc_ns, may_relax, "ipc_namespace", &ipc, err,
		       errlen)) < 0 ||
	    (r = layer(s->sb_uts_ns, c->sandbox_uts_ns, may_relax, "uts_namespace", &uts, err,
		       errlen)) < 0 ||
	    (r = layer(s->sb_pid_ns, c->sandbox_pid_ns, may_relax, "pid_namespace", &pid, err,
		       errlen)) < 0 ||
	    (r = layer(s->sb_landlock, c->sandbox_landlock, may_relax, "landlock", &landlock, err,
		       errlen)) < 0 ||
	    (r = layer(s->sb_private_dev, c->sandbox_private_dev, may_relax, "private_dev", &pdev,
		       err, errlen)) < 0)
		return r;
	if (!mount_ns &&
	    (s->n_sb_read_only || s->n_sb_inaccessible || s->n_sb_bind || s->sb_private_tmp > 0 ||
	     s->sb_protect_system > 0 || pid || s->sb_landlock > 0 || s->sb_private_dev > 0)) {
		snprintf(err, errlen,
			 "sandbox: read_only_paths, inaccessible_paths, bind, private_tmp, "
			 "protect_system, pid_namespace, landlock and private_dev need "
			 "mount_namespace");
		return -EINVAL;
	}
	if (ipc)
		p->ns_flags |= LAUNCH_NS_IPC;
	if (uts)
		p->ns_flags |= LAUNCH_NS_UTS;
	if (!mount_ns)
		return 0;
	if (a->sandbox_unsupported) {
		snprintf(err, errlen, "sandbox: %s (set [sandbox] mount_namespace = no)",
			 a->sandbox_unsupported);
		return -EOPNOTSUPP;
	}
	if (landlock && a->landlock_abi <= 0) {
		snprintf(err, errlen, "sandbox.landlock: %s (set [sandbox] landlock = no)",
			 landlock_why(a->landlock_abi));
		return -EOPNOTSUPP;
	}
	p->ns_flags |= LAUNCH_NS_MOUNT;
	p->private_tmp = private_tmp;
	/* 0. a PID namespace: its own /proc first, so that what follows applies to that one */
	if (pid) {
		p->ns_flags |= LAUNCH_NS_PID;
		if ((r = add(p, LAUNCH_MOUNT_PROC, "/proc", NULL, NULL, false)) < 0)
			goto out_toomany;
	}
	p->protect_system = protect;

	/* 0b. a private /dev: the usual nodes, the task's GPUs, the site's dev_paths */
	if (pdev) {
		char names[2048];

		snprintf(names, sizeof(names), "%s %s",
			 c->sandbox_dev_paths ? c->sandbox_dev_paths : "",
			 gpu_devs ? gpu_devs : "");
		if ((r = add(p, LAUNCH_MOUNT_DEV, "/dev", NULL, names, false)) < 0)
			goto out_toomany;
	}

	/* 1. private /tmp and /dev/shm: a tmpfs each, gone with the namespace */
	if (private_tmp) {
		snprintf(opts, sizeof(opts), "size=%s,mode=1777",
			 s->sb_tmp_size ? s->sb_tmp_size : c->sandbox_tmp_size);
		if ((r = add(p, LAUNCH_MOUNT_TMPFS, "/tmp", NULL, opts, false)) < 0 ||
		    (r = add(p, LAUNCH_MOUNT_TMPFS, "/dev/shm", NULL, opts, true)) < 0)
			goto out_toomany;
	}
	/* 2.-5. binds, read-only and hidden paths */
	if ((r = plan_paths(a, s, protect, p)) < 0)
		goto out_toomany;
	if (landlock && (r = plan_landlock(p)) < 0)
		goto out_toomany;
	return 0;

out_toomany:
	if (r == -E2BIG)
		snprintf(err, errlen, "sandbox: more than %d mounts", LAUNCH_MOUNTS_MAX);
	else
		snprintf(err, errlen, "sandbox: %s", strerror(-r));
	sandbox_plan_free(p);
	return r;
}

void sandbox_plan_free(struct sandbox_plan *p)
{
	for (size_t i = 0; i < p->nstrs; i++)
		free(p->strs[i]);
	p->nstrs = 0;
	p->n = 0;
}

json_t *sandbox_status_json(const struct agent *a)
{
	const struct agent_config *c = &a->cfg;
	char why[256];
	const char *mns;
	json_t *o = json_object();

	if (!c->sandbox_mount_ns) {
		mns = "off";
	} else if (a->sandbox_unsupported) {
		snprintf(why, sizeof(why), "unavailable: %s", a->sandbox_unsupported);
		mns = why;
	} else {
		mns = "on";
	}
	json_object_set_new(o, "mount_namespace", json_string(mns));
#define LAYER(name, on)                                                                            \
	json_object_set_new(o, name, json_string(strcmp(mns, "on") ? "off" : (on) ? "on" : "off"))
	LAYER("sys_read_only", true);
	LAYER("agent_files_hidden", true);
	LAYER("private_tmp", c->sandbox_private_tmp);
	LAYER("protect_system", c->sandbox_protect_system);
	LAYER("private_dev", c->sandbox_private_dev);
#undef LAYER
	json_object_set_new(o, "tmp_size", json_string(c->sandbox_tmp_size));
	json_object_set_new(o, "ipc_namespace", json_string(c->sandbox_ipc_ns ? "on" : "off"));
	json_object_set_new(o, "uts_namespace", json_string(c->sandbox_uts_ns ? "on" : "off"));
	json_object_set_new(o, "pid_namespace",
			    json_string(strcmp(mns, "on")   ? "off"
					: c->sandbox_pid_ns ? "on"
							    : "off"));
	/* Honest about the kernel: the ABI it offers (probed at start), or why none. */
	if (a->landlock_abi <= 0)
		snprintf(why, sizeof(why), "unavailable: %s", landlock_why(a->landlock_abi));
	else if (c->sandbox_landlock && !strcmp(mns, "on"))
		snprintf(why, sizeof(why), "on (ABI %d)", a->landlock_abi);
	else
		snprintf(why, sizeof(why), "off (kernel offers ABI %d)", a->landlock_abi);
	json_object_set_new(o, "landlock", json_string(why));
	return o;
}

/*
 * At start: can this node give a task its own mount namespace with read-only mounts? A child
 * tries what every task's child will do (unshare, slave "/", a read-only bind, mount_setattr);
 * NULL when it works, else the reason.
 */
const char *sandbox_probe(void)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return "fork failed";
	if (pid == 0) {
		struct {
			uint64_t set, clr, prop, userns;
		} attr = {.set = 1 /* MOUNT_ATTR_RDONLY */};

		if (unshare(CLONE_NEWNS) < 0)
			_exit(1);
		if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
			_exit(2);
		if (mount("/usr", "/usr", NULL, MS_BIND | MS_REC, NULL) < 0)
			_exit(3);
		if (syscall(SYS_mount_setattr, -100 /* AT_FDCWD */, "/usr",
			    0x8000 /* AT_RECURSIVE */, &attr, sizeof(attr)) < 0)
			_exit(4);
		if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=4k") < 0)
			_exit(5);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return "probe child failed";
	switch (WEXITSTATUS(st)) {
	case 0:
		return NULL;
	case 1:
		return "unshare(CLONE_NEWNS) refused (needs CAP_SYS_ADMIN and CONFIG_NAMESPACES)";
	case 2:
	case 3:
	case 5:
		return "mount refused in a new mount namespace (needs CAP_SYS_ADMIN)";
	case 4:
		return "mount_setattr(2) unavailable (read-only mounts need Linux 5.12)";
	default:
		return "probe failed";
	}
}
