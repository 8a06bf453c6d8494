/* SPDX-License-Identifier: MIT */
#include "agent/spec.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/macro.h"
#include "common/parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void spec_init(struct task_spec *s)
{
	memset(s, 0, sizeof(*s));
	s->swap_max = UINT64_MAX;
	s->sb_mount_ns = s->sb_private_tmp = s->sb_protect_system = -1;
	s->sb_ipc_ns = s->sb_uts_ns = s->sb_pid_ns = s->sb_landlock = s->sb_private_dev = -1;
}

void spec_close_stdio(struct task_spec *s)
{
	for (int i = 0; i < 3; i++)
		if (s->stdio_fds & 1u << i)
			close(s->stdio_fd[i]);
	s->stdio_fds = 0;
}

static void strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void spec_clear(struct task_spec *s)
{
	strv_free(s->argv, s->argc);
	strv_free(s->env, s->envc);
	strv_free(s->label_keys, s->n_labels);
	strv_free(s->label_values, s->n_labels);
	strv_free(s->net_allow, s->n_net_allow);
	strv_free(s->net_deny, s->n_net_deny);
	strv_free(s->sb_read_only, s->n_sb_read_only);
	strv_free(s->sb_inaccessible, s->n_sb_inaccessible);
	strv_free(s->sb_bind, s->n_sb_bind);
	free(s->sb_tmp_size);
	free(s->workdir);
	free(s->user);
	free(s->account);
	free(s->job);
	free(s->stdout_path);
	free(s->stderr_path);
	free(s->stdin_path);
	spec_close_stdio(s);
	free(s->seccomp);
	free(s->seccomp_profile);
	free(s->gpu_list);
	for (size_t i = 0; i < s->n_io; i++)
		free(s->io[i].device);
	spec_init(s);
}

void spec_slim(struct task_spec *s)
{
	for (size_t i = 1; i < s->argc; i++) {
		free(s->argv[i]);
		s->argv[i] = NULL;
	}
	if (s->argc > 1)
		s->argc = 1;
	strv_free(s->env, s->envc);
	s->env = NULL;
	s->envc = 0;
	strv_free(s->sb_read_only, s->n_sb_read_only);
	strv_free(s->sb_inaccessible, s->n_sb_inaccessible);
	strv_free(s->sb_bind, s->n_sb_bind);
	s->sb_read_only = s->sb_inaccessible = s->sb_bind = NULL;
	s->n_sb_read_only = s->n_sb_inaccessible = s->n_sb_bind = 0;
	free(s->seccomp_profile);
	s->seccomp_profile = NULL;
}

/* Append to a NULL-terminated vector with a count. */
static int strv_push(char ***v, size_t *n, char *take)
{
	char **nv = realloc(*v, (*n + 2) * sizeof(char *));

	if (!nv) {
		free(take);
		return -ENOMEM;
	}
	nv[*n] = take;
	nv[*n + 1] = NULL;
	*v = nv;
	(*n)++;
	return 0;
}

int spec_set_argv(struct task_spec *s, char *const *argv, size_t argc)
{
	strv_free(s->argv, s->argc);
	s->argv = NULL;
	s->argc = 0;
	for (size_t i = 0; i < argc; i++) {
		char *d = strdup(argv[i]);

		if (!d || strv_push(&s->argv, &s->argc, d) < 0)
			return -ENOMEM;
	}
	return 0;
}

static bool valid_label_key(const char *k)
{
	size_t n = strlen(k);

	if (n == 0 || n > 63)
		return false;
	for (const char *p = k; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._-/", *p))
			return false;
	return true;
}

/* Valid UTF-8 without C0, DEL or C1 controls (U+0080..U+009F), at most max bytes. */
static bool printable(const char *s, size_t max)
{
	return strlen(s) <= max && text_printable(s);
}

static int add_label(struct task_spec *s, const char *k, const char *v, const char *field,
		     char *err, size_t errlen)
{
	char *dk, *dv;
	size_t n;

	if (!valid_label_key(k))
		return err_set(err, errlen, -EINVAL,
			       "%s: invalid label key \"%.64s\" (1-63 of [A-Za-z0-9._-/])", field,
			       k);
	if (!printable(v, 256))
		return err_set(err, errlen, -EINVAL,
			       "%s.%s: label value must be printable, at most 256 bytes", field, k);
	for (size_t i = 0; i < s->n_labels; i++)
		if (strcmp(s->label_keys[i], k) == 0) {
			dv = strdup(v);
			if (!dv)
				return -ENOMEM;
			free(s->label_values[i]);
			s->label_values[i] = dv;
			return 0;
		}
	if (s->n_labels >= SPEC_LABELS_MAX)
		return err_set(err, errlen, -EINVAL, "%s: at most %d labels", field,
			       SPEC_LABELS_MAX);
	dk = strdup(k);
	dv = strdup(v);
	if (!dk || !dv) {
		free(dk);
		free(dv);
		return -ENOMEM;
	}
	n = s->n_labels;
	if (strv_push(&s->label_keys, &n, dk) < 0) {
		free(dv);
		return -ENOMEM;
	}
	n = s->n_labels;
	if (strv_push(&s->label_values, &n, dv) < 0)
		return -ENOMEM;
	s->n_labels = n;
	return 0;
}

int spec_set_label(struct task_spec *s, const char *kv, char *err, size_t errlen)
{
	_cleanup_free_ char *k = NULL;
	const char *eq = strchr(kv, '=');

	if (!eq)
		return err_set(err, errlen, -EINVAL, "label: expected KEY=VALUE, got \"%.64s\"",
			       kv);
	k = strndup(kv, (size_t)(eq - kv));
	if (!k)
		return -ENOMEM;
	return add_label(s, k, eq + 1, "labels", err, errlen);
}

static int add_env(struct task_spec *s, const char *k, const char *v, char *err, size_t errlen)
{
	char *e;
	size_t kl = strlen(k);

	if (kl == 0 || strchr(k, '=') || !printable(k, 256))
		return err_set(err, errlen, -EINVAL, "env: invalid variable name \"%.64s\"", k);
	if (strlen(v) > 65536)
		return err_set(err, errlen, -EINVAL, "env.%.64s: value longer than 64 KiB", k);
	if (asprintf(&e, "%s=%s", k, v) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < s->envc; i++)
		if (strncmp(s->env[i], e, kl + 1) == 0) {
			free(s->env[i]);
			s->env[i] = e;
			return 0;
		}
	if (s->envc >= SPEC_ENV_MAX) {
		free(e);
		return err_set(err, errlen, -EINVAL, "env: at most %d variables", SPEC_ENV_MAX);
	}
	return strv_push(&s->env, &s->envc, e);
}

int spec_set_env(struct task_spec *s, const char *kv, char *err, size_t errlen)
{
	_cleanup_free_ char *k = NULL;
	const char *eq = strchr(kv, '=');

	if (!eq)
		return err_set(err, errlen, -EINVAL, "env: expected KEY=VALUE, got \"%.64s\"", kv);
	k = strndup(kv, (size_t)(eq - kv));
	if (!k)
		return -ENOMEM;
	return add_env(s, k, eq + 1, err, errlen);
}

static int add_io(struct task_spec *s, const char *dev, uint64_t bps, bool write, const char *field,
		  char *err, size_t errlen)
{
	struct spec_io *io = NULL;

	if (!*dev || !printable(dev, 256))
		return err_set(err, errlen, -EINVAL, "%s: invalid device \"%.64s\"", field, dev);
	if (bps == 0)
		return err_set(err, errlen, -EINVAL, "%s: bytes per second must be > 0", field);
	for (size_t i = 0; i < s->n_io; i++)
		if (strcmp(s->io[i].device, dev) == 0)
			io = &s->io[i];
	if (!io) {
		if (s->n_io >= SPEC_IO_MAX)
			return err_set(err, errlen, -EINVAL, "%s: at most %d devices", field,
				       SPEC_IO_MAX);
		io = &s->io[s->n_io];
		io->device = strdup(dev);
		if (!io->device)
			return -ENOMEM;
		s->n_io++;
	}
	if (write)
		io->wbps = bps;
	else
		io->rbps = bps;
	return 0;
}

int spec_set_io(struct task_spec *s, const char *dev_eq_bps, bool write, char *err, size_t errlen)
{
	const char *field = write ? "io_write_bps" : "io_read_bps";
	_cleanup_free_ char *dev = NULL;
	const char *eq = strrchr(dev_eq_bps, '=');
	uint64_t bps;

	if (!eq)
		return err_set(err, errlen, -EINVAL,
			       "%s: expected DEVICE=BYTES_PER_SECOND, got \"%.64s\"", field,
			       dev_eq_bps);
	if (parse_size(eq + 1, &bps) < 0)
		return err_set(err, errlen, -EINVAL, "%s: invalid rate \"%.32s\"", field, eq + 1);
	dev = strndup(dev_eq_bps, (size_t)(eq - dev_eq_bps));
	if (!dev)
		return -ENOMEM;
	return add_io(s, dev, bps, write, field, err, errlen);
}

/* ---- JSON ---------------------------------------------------------------------------------- */

/* Arguments may hold any byte but NUL (scripts have newlines); other fields must be printable. */
static int get_string_any(json_t *v, const char *field, bool any, char **ret, char *err,
			  size_t errlen)
{
	const char *s;

	if (!json_is_string(v))
		return err_set(err, errlen, -EINVAL, "%s: expected a string", field);
	s = json_string_value(v);
	if (strlen(s) != json_string_length(v))
		return err_set(err, errlen, -EINVAL, "%s: contains a NUL byte", field);
	if (any && json_string_length(v) > 256 * 1024)
		return err_set(err, errlen, -EINVAL, "%s: longer than 256 KiB", field);
	if (!any && !printable(s, SPEC_STR_MAX))
		return err_set(err, errlen, -EINVAL, "%s: must be printable and at most %d bytes",
			       field, SPEC_STR_MAX);
	free(*ret);
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

static int get_string(json_t *v, const char *field, char **ret, char *err, size_t errlen)
{
	return get_string_any(v, field, false, ret, err, errlen);
}

/*
 * A command argument or environment value: a JSON string (UTF-8 text), or {"b64": "..."} for
 * bytes that are not UTF-8 (docs/api.md, "Bytes that are not UTF-8"). Any byte but NUL, at
 * most max bytes.
 */
static int get_bytes(json_t *v, const char *field, size_t max, char **ret, char *err, size_t errlen)
{
	json_t *b = json_object_get(v, "b64");
	char *d = NULL;
	size_t n = 0;
	int r;

	if (json_is_string(v)) {
		if (json_string_length(v) > max)
			return err_set(err, errlen, -EINVAL, "%s: longer than %zu bytes", field,
				       max);
		return get_string_any(v, field, true, ret, err, errlen);
	}
	if (!json_is_object(v) || json_object_size(v) != 1 || !json_is_string(b))
		return err_set(err, errlen, -EINVAL,
			       "%s: expected a string, or {\"b64\": \"...\"} for bytes that are "
			       "not UTF-8",
			       field);
	r = b64_decode(json_string_value(b), &d, &n);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return err_set(err, errlen, -EINVAL, "%s.b64: not base64 (RFC 4648, with padding)",
			       field);
	if (strlen(d) != n) {
		free(d);
		return err_set(err, errlen, -EINVAL, "%s.b64: contains a NUL byte", field);
	}
	if (n > max) {
		free(d);
		return err_set(err, errlen, -EINVAL, "%s: longer than %zu bytes", field, max);
	}
	free(*ret);
	*ret = d;
	return 0;
}

/* The other way: a string when s is UTF-8, else {"b64": ...}. */
static json_t *bytes_json(const char *s)
{
	_cleanup_free_ char *b = NULL;
	json_t *j = json_string(s);

	if (j || !s)
		return j;
	b = b64_encode(s, strlen(s));
	return b ? json_pack("{s:s}", "b64", b) : NULL;
}

/* Sizes: non-negative integer (bytes) or a string with a unit ("2G"). */
static int get_size(json_t *v, const char *field, uint64_t *ret, char *err, size_t errlen)
{
	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0)
			return err_set(err, errlen, -EINVAL, "%s: must not be negative", field);
		*ret = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		int r = parse_size(json_string_value(v), ret);

		if (r == -ERANGE)
			return err_set(err, errlen, -EINVAL,
				       "%s: size \"%.32s\" too large (at most 8 EiB)", field,
				       json_string_value(v));
		if (r < 0)
			return err_set(err, errlen, -EINVAL,
				       "%s: invalid size \"%.32s\" (e.g. 512M, 2G)", field,
				       json_string_value(v));
		return 0;
	}
	return err_set(err, errlen, -EINVAL, "%s: expected a size (bytes, or a string like \"2G\")",
		       field);
}

/* Durations: number of seconds or a string ("90", "1.5", "2m", "1h"). */
static int get_duration(json_t *v, const char *field, uint64_t *ret_ns, char *err, size_t errlen)
{
	if (json_is_number(v)) {
		double d = json_number_value(v);

		if (!isfinite(d) || d < 0 || d > 1e10)
			return err_set(err, errlen, -EINVAL,
				       "%s: seconds must be between 0 and 1e10", field);
		*ret_ns = (uint64_t)(d * 1e9);
		return 0;
	}
	if (json_is_string(v)) {
		if (parse_duration_ns(json_string_value(v), ret_ns) < 0)
			return err_set(err, errlen, -EINVAL,
				       "%s: invalid duration \"%.32s\" (e.g. 90, 1.5, 2m, 1h)",
				       field, json_string_value(v));
		return 0;
	}
	return err_set(err, errlen, -EINVAL, "%s: expected seconds (number) or a duration string",
		       field);
}

static int get_strv(json_t *v, const char *field, size_t max, bool any, char ***ret, size_t *ret_n,
		    char *err, size_t errlen)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v))
		return err_set(err, errlen, -EINVAL, "%s: expected an array of strings", field);
	if (json_array_size(v) > max)
		return err_set(err, errlen, -EINVAL, "%s: at most %zu entries", field, max);
	json_array_foreach(v, i, e)
	{
		char f[64];
		char *d = NULL;
		int r;

		snprintf(f, sizeof(f), "%s[%zu]", field, i);
		r = any ? get_bytes(e, f, 256 * 1024, &d, err, errlen)
			: get_string_any(e, f, false, &d, err, errlen);
		if (r < 0)
			return r;
		r = strv_push(ret, ret_n, d);
		if (r < 0)
			return r;
	}
	return 0;
}

int spec_dev_paths_check(const char *v)
{
	size_t n = 0;

	for (const char *x = v; *x;) {
		size_t len;

		while (*x == ' ')
			x++;
		if (!*x)
			break;
		len = strcspn(x, " ");
		if (*x == '/' || len >= 64 || ++n > 32)
			return -EINVAL;
		for (size_t i = 0; i < len; i++)
			if (!(isalnum((unsigned char)x[i]) || strchr("._-+/", x[i])) ||
			    (x[i] == '.' && i + 1 < len && x[i + 1] == '.'))
				return -EINVAL;
		x += len;
	}
	return 0;
}

int spec_tmp_size_check(const char *v)
{
	uint64_t u;
	size_t n = strlen(v);

	if (n > 1 && n < 8 && v[n - 1] == '%') {
		char num[8];

		memcpy(num, v, n - 1);
		num[n - 1] = 0;
		return parse_u64(num, &u) == 0 && u >= 1 && u <= 100 ? 0 : -EINVAL;
	}
	return parse_size(v, &u) == 0 && u >= 4096 ? 0 : -EINVAL;
}

/* An absolute, normalized path: no "." or ".." component, no "//", not "/" itself. */
int spec_sandbox_path_check(const char *p, const char *field, char *err, size_t errlen)
{
	const char *c = p;

	if (p[0] != '/' || p[1] == 0)
		return err_set(err, errlen, -EINVAL,
			       "%s: \"%.64s\": expected an absolute path other than /", field, p);
	if (strlen(p) >= 4096)
		return err_set(err, errlen, -EINVAL, "%s: path too long", field);
	while (*c) {
		const char *n = strchr(c + 1, '/');
		size_t len = n ? (size_t)(n - c - 1) : strlen(c + 1);

		if (len == 0 || (len == 1 && c[1] == '.') ||
		    (len == 2 && c[1] == '.' && c[2] == '.'))
			return err_set(
			    err, errlen, -EINVAL,
			    "%s: \"%.64s\": not a normalized path (empty, . or .. component)",
			    field, p);
		c = n ? n : c + 1 + len;
	}
	return 0;
}

/* "SRC:DST" or "SRC:DST:ro", both paths as spec_sandbox_path_check wants. */
int spec_sandbox_bind_check(const char *b, const char *field, char *err, size_t errlen)
{
	char buf[8200], *dst, *mode;
	int r;

	if (strlen(b) >= sizeof(buf))
		return err_set(err, errlen, -EINVAL, "%s: too long", field);
	strcpy(buf, b);
	dst = strchr(buf, ':');
	if (!dst)
		return err_set(err, errlen, -EINVAL,
			       "%s: \"%.64s\": expected SRC:DST or SRC:DST:ro", field, b);
	*dst++ = 0;
	mode = strchr(dst, ':');
	if (mode) {
		*mode++ = 0;
		if (strcmp(mode, "ro") != 0 && strcmp(mode, "rw") != 0)
			return err_set(err, errlen, -EINVAL, "%s: \"%.64s\": mode must be ro or rw",
				       field, b);
	}
	r = spec_sandbox_path_check(buf, field, err, errlen);
	if (r < 0)
		return r;
	return spec_sandbox_path_check(dst, field, err, errlen);
}

static int get_tristate(json_t *v, const char *field, int8_t *ret, char *err, size_t errlen)
{
	if (!json_is_boolean(v))
		return err_set(err, errlen, -EINVAL, "%s: expected true or false", field);
	*ret = json_is_true(v) ? 1 : 0;
	return 0;
}

static int parse_sandbox(struct task_spec *s, json_t *obj, char *err, size_t errlen)
{
	const char *k;
	json_t *v;
	int r = 0;

	if (!json_is_object(obj))
		return err_set(err, errlen, -EINVAL, "sandbox: expected an object");
	json_object_foreach(obj, k, v)
	{
		if (strcmp(k, "mount_namespace") == 0)
			r = get_tristate(v, "sandbox.mount_namespace", &s->sb_mount_ns, err,
					 errlen);
		else if (strcmp(k, "private_tmp") == 0)
			r = get_tristate(v, "sandbox.private_tmp", &s->sb_private_tmp, err, errlen);
		else if (strcmp(k, "protect_system") == 0)
			r = get_tristate(v, "sandbox.protect_system", &s->sb_protect_system, err,
					 errlen);
		else if (strcmp(k, "ipc_namespace") == 0)
			r = get_tristate(v, "sandbox.ipc_namespace", &s->sb_ipc_ns, err, errlen);
		else if (strcmp(k, "uts_namespace") == 0)
			r = get_tristate(v, "sandbox.uts_namespace", &s->sb_uts_ns, err, errlen);
		else if (strcmp(k, "pid_namespace") == 0)
			r = get_tristate(v, "sandbox.pid_namespace", &s->sb_pid_ns, err, errlen);
		else if (strcmp(k, "landlock") == 0)
			r = get_tristate(v, "sandbox.landlock", &s->sb_landlock, err, errlen);
		else if (strcmp(k, "private_dev") == 0)
			r = get_tristate(v, "sandbox.private_dev", &s->sb_private_dev, err, errlen);
		else if (strcmp(k, "tmp_size") == 0) {
			free(s->sb_tmp_size);
			s->sb_tmp_size = NULL;
			r = get_string(v, "sandbox.tmp_size", &s->sb_tmp_size, err, errlen);
			if (r == 0 && spec_tmp_size_check(s->sb_tmp_size) < 0)
				r = err_set(
				    err, errlen, -EINVAL,
				    "sandbox.tmp_size: \"%.64s\": expected a size (K, M, G, T) or "
				    "a percentage of RAM",
				    s->sb_tmp_size);
		} else if (strcmp(k, "read_only_paths") == 0 ||
			   strcmp(k, "inaccessible_paths") == 0 || strcmp(k, "bind") == 0) {
			bool bind = k[0] == 'b';
			char ***vp = bind	   ? &s->sb_bind
				     : k[0] == 'r' ? &s->sb_read_only
						   : &s->sb_inaccessible;
			size_t *np = bind	   ? &s->n_sb_bind
				     : k[0] == 'r' ? &s->n_sb_read_only
						   : &s->n_sb_inaccessible;
			char field[48];

			snprintf(field, sizeof(field), "sandbox.%s", k);
			r = get_strv(v, field, SPEC_SANDBOX_PATHS_MAX, false, vp, np, err, errlen);
			for (size_t i = 0; r == 0 && i < *np; i++) {
				char fi[96];

				snprintf(fi, sizeof(fi), "%s[%zu]", field, i);
				r = bind ? spec_sandbox_bind_check((*vp)[i], fi, err, errlen)
					 : spec_sandbox_path_check((*vp)[i], fi, err, errlen);
			}
		} else
			return err_set(err, errlen, -EINVAL, "sandbox: unknown key \"%.40s\"", k);
		if (r < 0)
			return r;
	}
	return 0;
}

static int parse_io_obj(struct task_spec *s, json_t *v, bool write, char *err, size_t errlen)
{
	const char *field = write ? "limits.io_write_bps" : "limits.io_read_bps";
	const char *k;
	json_t *e;

	if (!json_is_object(v))
		return err_set(err, errlen, -EINVAL,
			       "%s: expected an object {\"DEVICE\": BYTES_PER_SECOND}", field);
	json_object_foreach(v, k, e)
	{
		char f[96];
		uint64_t bps;
		int r;

		snprintf(f, sizeof(f), "%s.%.40s", field, k);
		r = get_size(e, f, &bps, err, errlen);
		if (r < 0)
			return r;
		r = add_io(s, k, bps, write, f, err, errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

static int parse_limits(struct task_spec *s, json_t *lim, char *err, size_t errlen)
{
	const char *k;
	json_t *v;
	int r = 0;

	if (!json_is_object(lim))
		return err_set(err, errlen, -EINVAL, "limits: expected an object");
	json_object_foreach(lim, k, v)
	{
		char f[64];

		snprintf(f, sizeof(f), "limits.%.40s", k);
		if (strcmp(k, "memory") == 0)
			r = get_size(v, f, &s->memory_max, err, errlen);
		else if (strcmp(k, "memory_high") == 0)
			r = get_size(v, f, &s->memory_high, err, errlen);
		else if (strcmp(k, "swap") == 0)
			r = get_size(v, f, &s->swap_max, err, errlen);
		else if (strcmp(k, "cpus") == 0) {
			if (!json_is_number(v) || json_number_value(v) < 0 ||
			    json_number_value(v) > 4096)
				return err_set(err, errlen, -EINVAL,
					       "%s: expected a number of cores (0-4096)", f);
			s->cpus = json_number_value(v);
			if (s->cpus > 0 && s->cpus < 0.01)
				return err_set(err, errlen, -EINVAL, "%s: at least 0.01", f);
		} else if (strcmp(k, "cpu_weight") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 10000)
				return err_set(err, errlen, -EINVAL,
					       "%s: expected an integer 1-10000", f);
			s->cpu_weight = (uint32_t)json_integer_value(v);
		} else if (strcmp(k, "pids") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 4194304)
				return err_set(err, errlen, -EINVAL,
					       "%s: expected an integer 1-4194304", f);
			s->pids_max = (uint64_t)json_integer_value(v);
		} else if (strcmp(k, "io_read_bps") == 0)
			r = parse_io_obj(s, v, false, err, errlen);
		else if (strcmp(k, "io_write_bps") == 0)
			r = parse_io_obj(s, v, true, err, errlen);
		else if (strcmp(k, "time") == 0)
			r = get_duration(v, f, &s->time_limit_ns, err, errlen);
		else if (strcmp(k, "cpu_time") == 0)
			r = get_duration(v, f, &s->cpu_time_limit_ns, err, errlen);
		else if (strcmp(k, "gpus") == 0) {
			if (json_is_integer(v)) {
				if (json_integer_value(v) < 0 || json_integer_value(v) > 64)
					return err_set(err, errlen, -EINVAL, "%s: expected 0-64",
						       f);
				s->gpus = (uint32_t)json_integer_value(v);
			} else if (json_is_string(v)) {
				const char *g = json_string_value(v);

				for (const char *p = g; *p; p++)
					if (!isdigit((unsigned char)*p) && *p != ',')
						return err_set(
						    err, errlen, -EINVAL,
						    "%s: expected a count or a list like \"0,2\"",
						    f);
				if (!*g)
					return err_set(err, errlen, -EINVAL, "%s: empty GPU list",
						       f);
				free(s->gpu_list);
				s->gpu_list = strdup(g);
				if (!s->gpu_list)
					return -ENOMEM;
				s->gpus = 1;
				for (const char *p = g; *p; p++)
					s->gpus += *p == ',';
			} else
				return err_set(err, errlen, -EINVAL,
					       "%s: expected a count or a list like \"0,2\"", f);
		} else if (strcmp(k, "gpu_memory") == 0)
			r = get_size(v, f, &s->gpu_memory_max, err, errlen);
		else if (strcmp(k, "audit_rate") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 100000000)
				return err_set(
				    err, errlen, -EINVAL,
				    "%s: expected an integer 1-100000000 (records per second)", f);
			s->audit_rate = (uint64_t)json_integer_value(v);
		} else if (strcmp(k, "audit_bytes") == 0)
			r = get_size(v, f, &s->audit_bytes, err, errlen);
		else
			return err_set(err, errlen, -EINVAL, "limits: unknown key \"%.40s\"", k);
		if (r < 0)
			return r;
	}
	if (s->memory_high && s->memory_max && s->memory_high > s->memory_max)
		return err_set(err, errlen, -EINVAL,
			       "limits.memory_high: larger than limits.memory");
	return 0;
}

int spec_from_json(json_t *obj, struct task_spec *s, char *err, size_t errlen)
{
	const char *k;
	json_t *v;
	int r = 0;

	if (!json_is_object(obj))
		return err_set(err, errlen, -EINVAL, "spec: expected a JSON object");
	json_object_foreach(obj, k, v)
	{
		if (strcmp(k, "command") == 0) {
			strv_free(s->argv, s->argc);
			s->argv = NULL;
			s->argc = 0;
			r = get_strv(v, "command", SPEC_ARGS_MAX, true, &s->argv, &s->argc, err,
				     errlen);
		} else if (strcmp(k, "env") == 0) {
			const char *ek;
			json_t *ev;

			if (!json_is_object(v))
				return err_set(err, errlen, -EINVAL,
					       "env: expected an object of strings");
			json_object_foreach(v, ek, ev)
			{
				_cleanup_free_ char *val = NULL;
				char f[64];

				snprintf(f, sizeof(f), "env.%.40s", ek);
				r = get_bytes(ev, f, 65536, &val, err, errlen);
				if (r < 0)
					return r;
				r = add_env(s, ek, val, err, errlen);
				if (r < 0)
					return r;
			}
		} else if (strcmp(k, "labels") == 0) {
			const char *lk;
			json_t *lv;

			if (!json_is_object(v))
				return err_set(err, errlen, -EINVAL,
					       "labels: expected an object of strings");
			json_object_foreach(v, lk, lv)
			{
				if (!json_is_string(lv))
					return err_set(err, errlen, -EINVAL,
						       "labels.%.40s: expected a string", lk);
				r = add_label(s, lk, json_string_value(lv), "labels", err, errlen);
				if (r < 0)
					return r;
			}
		} else if (strcmp(k, "workdir") == 0)
			r = get_string(v, "workdir", &s->workdir, err, errlen);
		else if (strcmp(k, "user") == 0)
			r = get_string(v, "user", &s->user, err, errlen);
		else if (strcmp(k, "account") == 0)
			r = get_string(v, "account", &s->account, err, errlen);
		else if (strcmp(k, "job") == 0)
			r = get_string(v, "job", &s->job, err, errlen);
		else if (strcmp(k, "stdout") == 0)
			r = get_string(v, "stdout", &s->stdout_path, err, errlen);
		else if (strcmp(k, "stderr") == 0)
			r = get_string(v, "stderr", &s->stderr_path, err, errlen);
		else if (strcmp(k, "stdin") == 0)
			r = get_string(v, "stdin", &s->stdin_path, err, errlen);
		else if (strcmp(k, "seccomp") == 0)
			r = get_string(v, "seccomp", &s->seccomp, err, errlen);
		else if (strcmp(k, "seccomp_profile") == 0)
			r = get_string_any(v, "seccomp_profile", true, &s->seccomp_profile, err,
					   errlen);
		else if (strcmp(k, "limits") == 0)
			r = parse_limits(s, v, err, errlen);
		else if (strcmp(k, "allow_net") == 0)
			r = get_strv(v, "allow_net", 256, false, &s->net_allow, &s->n_net_allow,
				     err, errlen);
		else if (strcmp(k, "deny_net") == 0)
			r = get_strv(v, "deny_net", 256, false, &s->net_deny, &s->n_net_deny, err,
				     errlen);
		else if (strcmp(k, "sandbox") == 0)
			r = parse_sandbox(s, v, err, errlen);
		else
			return err_set(err, errlen, -EINVAL, "spec: unknown key \"%.40s\"", k);
		if (r < 0)
			return r;
	}
	if (s->argc == 0)
		return err_set(err, errlen, -EINVAL,
			       "command: missing or empty (the program to run)");
	if (s->argv[0][0] == 0)
		return err_set(err, errlen, -EINVAL, "command[0]: empty program name");
	if (s->workdir && s->workdir[0] != '/')
		return err_set(err, errlen, -EINVAL, "workdir: must be an absolute path");
	if (s->account && strlen(s->account) > 255)
		return err_set(err, errlen, -EINVAL, "account: at most 255 bytes");
	if (s->job && strlen(s->job) > 255)
		return err_set(err, errlen, -EINVAL, "job: at most 255 bytes");
	return 0;
}

int spec_parse(const char *text, size_t len, struct task_spec *ret, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *obj;
	int r;

	obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj)
		return err_set(err, errlen, -EINVAL, "spec: invalid JSON at line %d column %d: %s",
			       jerr.line, jerr.column, jerr.text);
	r = spec_from_json(obj, ret, err, errlen);
	json_decref(obj);
	return r;
}

static void set_str(json_t *o, const char *k, const char *v)
{
	if (v)
		json_object_set_new(o, k, json_string(v));
}

/* The spec's "limits" object. */
static json_t *limits_json(const struct task_spec *s)
{
	json_t *lim = json_object();

	if (!lim)
		return NULL;
	if (s->memory_max)
		json_object_set_new(lim, "memory", json_integer((json_int_t)s->memory_max));
	if (s->memory_high)
		json_object_set_new(lim, "memory_high", json_integer((json_int_t)s->memory_high));
	if (s->swap_max != UINT64_MAX)
		json_object_set_new(lim, "swap", json_integer((json_int_t)s->swap_max));
	if (s->cpus > 0)
		json_object_set_new(lim, "cpus", json_real(s->cpus));
	if (s->cpu_weight)
		json_object_set_new(lim, "cpu_weight", json_integer(s->cpu_weight));
	if (s->pids_max)
		json_object_set_new(lim, "pids", json_integer((json_int_t)s->pids_max));
	if (s->n_io) {
		json_t *r = json_object(), *w = json_object();

		for (size_t i = 0; i < s->n_io; i++) {
			if (s->io[i].rbps)
				json_object_set_new(r, s->io[i].device,
						    json_integer((json_int_t)s->io[i].rbps));
			if (s->io[i].wbps)
				json_object_set_new(w, s->io[i].device,
						    json_integer((json_int_t)s->io[i].wbps));
		}
		if (json_object_size(r))
			json_object_set(lim, "io_read_bps", r);
		if (json_object_size(w))
			json_object_set(lim, "io_write_bps", w);
		json_decref(r);
		json_decref(w);
	}
	if (s->time_limit_ns)
		json_object_set_new(lim, "time", json_real((double)s->time_limit_ns / 1e9));
	if (s->cpu_time_limit_ns)
		json_object_set_new(lim, "cpu_time", json_real((double)s->cpu_time_limit_ns / 1e9));
	if (s->gpu_list)
		json_object_set_new(lim, "gpus", json_string(s->gpu_list));
	else if (s->gpus)
		json_object_set_new(lim, "gpus", json_integer(s->gpus));
	if (s->gpu_memory_max)
		json_object_set_new(lim, "gpu_memory", json_integer((json_int_t)s->gpu_memory_max));
	if (s->audit_rate)
		json_object_set_new(lim, "audit_rate", json_integer((json_int_t)s->audit_rate));
	if (s->audit_bytes)
		json_object_set_new(lim, "audit_bytes", json_integer((json_int_t)s->audit_bytes));
	return lim;
}

/* The spec's "sandbox" object (new reference; empty when every layer is the default). */
static json_t *sandbox_json(const struct task_spec *s)
{
	json_t *a;
	json_t *sb = json_object();
	static const char *const names[] = {"mount_namespace", "private_tmp",	"protect_system",
					    "ipc_namespace",   "uts_namespace", "pid_namespace",
					    "landlock",	       "private_dev"};
	const int8_t vals[] = {s->sb_mount_ns, s->sb_private_tmp, s->sb_protect_system,
			       s->sb_ipc_ns,   s->sb_uts_ns,	  s->sb_pid_ns,
			       s->sb_landlock, s->sb_private_dev};
	struct {
		const char *name;
		char **v;
		size_t n;
	} lists[] = {{"read_only_paths", s->sb_read_only, s->n_sb_read_only},
		     {"inaccessible_paths", s->sb_inaccessible, s->n_sb_inaccessible},
		     {"bind", s->sb_bind, s->n_sb_bind}};

	for (size_t i = 0; i < ARRAY_SIZE(vals); i++)
		if (vals[i] >= 0)
			json_object_set_new(sb, names[i], json_boolean(vals[i]));
	set_str(sb, "tmp_size", s->sb_tmp_size);
	for (size_t i = 0; i < 3; i++) {
		if (!lists[i].n)
			continue;
		a = json_array();
		for (size_t k = 0; k < lists[i].n; k++)
			json_array_append_new(a, json_string(lists[i].v[k]));
		json_object_set_new(sb, lists[i].name, a);
	}
	return sb;
}

json_t *spec_to_json(const struct task_spec *s)
{
	json_t *o = json_object(), *a, *lim, *env, *labels;

	if (!o)
		return NULL;
	a = json_array();
	for (size_t i = 0; i < s->argc; i++)
		json_array_append_new(a, bytes_json(s->argv[i]));
	json_object_set_new(o, "command", a);
	env = json_object();
	for (size_t i = 0; i < s->envc; i++) {
		const char *eq = strchr(s->env[i], '=');
		char *k = strndup(s->env[i], (size_t)(eq - s->env[i]));

		if (k)
			json_object_set_new(env, k, bytes_json(eq + 1));
		free(k);
	}
	json_object_set_new(o, "env", env);
	labels = json_object();
	for (size_t i = 0; i < s->n_labels; i++)
		json_object_set_new(labels, s->label_keys[i], json_string(s->label_values[i]));
	json_object_set_new(o, "labels", labels);
	set_str(o, "workdir", s->workdir);
	set_str(o, "user", s->user);
	set_str(o, "account", s->account);
	set_str(o, "job", s->job);
	set_str(o, "stdout", s->stdout_path);
	set_str(o, "stderr", s->stderr_path);
	set_str(o, "stdin", s->stdin_path);
	set_str(o, "seccomp", s->seccomp);
	set_str(o, "seccomp_profile", s->seccomp_profile);
	lim = limits_json(s);
	json_object_set_new(o, "limits", lim);
	if (s->n_net_allow) {
		a = json_array();
		for (size_t i = 0; i < s->n_net_allow; i++)
			json_array_append_new(a, json_string(s->net_allow[i]));
		json_object_set_new(o, "allow_net", a);
	}
	if (s->n_net_deny) {
		a = json_array();
		for (size_t i = 0; i < s->n_net_deny; i++)
			json_array_append_new(a, json_string(s->net_deny[i]));
		json_object_set_new(o, "deny_net", a);
	}
	{
		json_t *sb = sandbox_json(s);

		if (json_object_size(sb))
			json_object_set_new(o, "sandbox", sb);
		else
			json_decref(sb);
	}
	return o;
}
