/* SPDX-License-Identifier: MIT */
/*
 * OCI/Docker seccomp JSON -> libseccomp -> classic BPF, in the parent; the child only installs
 * the exported program with seccomp(2). See docs/seccomp.md for the supported format.
 */
#include "isolation/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/macro.h"
#include "common/error.h"
#include "common/fileio.h"

/* Bounds on everything a profile controls. */
#define SBX_PROFILE_MAX_BYTES	(1024 * 1024)
#define SBX_MAX_SYSCALL_ENTRIES 1024
#define SBX_MAX_NAMES_PER_ENTRY 1024
#define SBX_MAX_RULES		4096
#define SBX_MAX_ARCHES		16
#define SBX_MAX_ARGS		6
#define SBX_MAX_ERRNO		4095
#define SBX_NAME_MAX		64

/*
 * The compiled program(s). prog.filter and ref.filter point into insns, so the child needs
 * nothing but this one allocation made in the parent. Without SBX_COMPILE_NOTIFY both are the
 * same program; with it, prog is the notifying variant and ref the profile's own program.
 */
struct sbx_filter {
	struct sock_fprog prog; /* installed by sbx_filter_apply_handoff */
	struct sock_fprog ref;	/* the profile as written: installed by sbx_filter_apply */
	unsigned int flags;	/* SECCOMP_FILTER_FLAG_* for seccomp(2) */
	bool notify;
	uint32_t native_arch;
	struct sock_filter insns[];
};

/*
 * Built-in profiles, embedded from isolation/profiles/ with .incbin (isolation/seccomp.mk makes
 * this object depend on the JSON files). Each is NUL-terminated.
 */
__asm__(".pushsection .rodata\n"
	".global sbx_profile_default_json\n"
	".type sbx_profile_default_json, @object\n"
	"sbx_profile_default_json:\n"
	".incbin \"isolation/profiles/default.json\"\n"
	".byte 0\n"
	".size sbx_profile_default_json, . - sbx_profile_default_json\n"
	".global sbx_profile_strict_json\n"
	".type sbx_profile_strict_json, @object\n"
	"sbx_profile_strict_json:\n"
	".incbin \"isolation/profiles/strict.json\"\n"
	".byte 0\n"
	".size sbx_profile_strict_json, . - sbx_profile_strict_json\n"
	".popsection\n");
extern const char sbx_profile_default_json[];
extern const char sbx_profile_strict_json[];

/* A user string made safe to quote in a message: printable ASCII, at most SBX_NAME_MAX. */
static const char *quote_user(const char *s, char buf[static SBX_NAME_MAX + 4])
{
	size_t i;

	for (i = 0; s[i] && i < SBX_NAME_MAX; i++)
		buf[i] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? s[i] : '?';
	if (s[i]) {
		memcpy(buf + i, "...", 3);
		i += 3;
	}
	buf[i] = 0;
	return buf;
}

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		return "null";
	}
	return "?";
}

/* A member of obj; JSON null means absent, as everywhere in the OCI format. */
static json_t *jget(const json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return v && !json_is_null(v) ? v : NULL;
}

static int check_keys(const json_t *obj, const char *path, const char *const *allowed, char *err,
		      size_t errlen)
{
	const char *key;
	json_t *v;
	char q[SBX_NAME_MAX + 4];

	json_object_foreach((json_t *)obj, key, v)
	{
		bool ok = false;

		for (size_t i = 0; allowed[i]; i++)
			if (strcmp(key, allowed[i]) == 0)
				ok = true;
		if (!ok)
			return err_set(err, errlen, -EINVAL, "%s%s%s: unknown key", path,
				       *path ? "." : "", quote_user(key, q));
	}
	return 0;
}

static int want_type(const json_t *v, json_type t, const char *path, char *err, size_t errlen)
{
	static const char *const names[] = {
	    [JSON_OBJECT] = "an object",
	    [JSON_ARRAY] = "an array",
	    [JSON_STRING] = "a string",
	    [JSON_INTEGER] = "an integer",
	};

	if (json_typeof(v) == t)
		return 0;
	return err_set(err, errlen, -EINVAL, "%s: must be %s, not %s", path, names[t],
		       type_name(v));
}

static int want_array(const json_t *v, size_t max, const char *path, char *err, size_t errlen)
{
	int r = want_type(v, JSON_ARRAY, path, err, errlen);

	if (r < 0)
		return r;
	if (json_array_size(v) > max)
		return err_set(err, errlen, -EINVAL, "%s: too many entries (%zu, at most %zu)",
			       path, json_array_size(v), max);
	return 0;
}

/* ---- actions ----------------------------------------------------------------------------- */

enum sbx_act {
	SBX_ACT_ALLOW,
	SBX_ACT_ERRNO,
	SBX_ACT_KILL_THREAD,
	SBX_ACT_KILL_PROCESS,
	SBX_ACT_TRAP,
	SBX_ACT_LOG,
	SBX_ACT_TRACE,
	_SBX_ACT_MAX,
	_SBX_ACT_INVALID = -EINVAL,
};

static const struct {
	const char *name;
	enum sbx_act act;
} action_names[] = {
    {"SCMP_ACT_ALLOW", SBX_ACT_ALLOW},
    {"SCMP_ACT_ERRNO", SBX_ACT_ERRNO},
    {"SCMP_ACT_KILL", SBX_ACT_KILL_THREAD},
    {"SCMP_ACT_KILL_THREAD", SBX_ACT_KILL_THREAD},
    {"SCMP_ACT_KILL_PROCESS", SBX_ACT_KILL_PROCESS},
    {"SCMP_ACT_TRAP", SBX_ACT_TRAP},
    {"SCMP_ACT_LOG", SBX_ACT_LOG},
    {"SCMP_ACT_TRACE", SBX_ACT_TRACE},
};

/* An errno name ("EPERM", as containers-common writes "errno"/"defaultErrno") -> number. */
static int errno_by_name(const char *s)
{
	for (int e = 1; e <= SBX_MAX_ERRNO; e++) {
		const char *n = strerrorname_np(e);

		if (n && strcmp(n, s) == 0)
			return e;
	}
	return -1;
}

/* The errno of an action: a number (errnoRet, OCI) and/or a name (errno, containers-common);
 * both given must agree. *ret untouched when neither is. */
static int parse_errno(const json_t *num, const char *num_path, const json_t *name,
		       const char *name_path, json_int_t *ret, char *err, size_t errlen)
{
	char q[SBX_NAME_MAX + 4];
	json_int_t e = -1;
	int r;

	if (num) {
		r = want_type(num, JSON_INTEGER, num_path, err, errlen);
		if (r < 0)
			return r;
		e = json_integer_value(num);
		if (e < 0 || e > SBX_MAX_ERRNO)
			return err_set(err, errlen, -EINVAL, "%s: %lld out of range 0..%d",
				       num_path, (long long)e, SBX_MAX_ERRNO);
	}
	if (name) {
		int n;

		r = want_type(name, JSON_STRING, name_path, err, errlen);
		if (r < 0)
			return r;
		n = errno_by_name(json_string_value(name));
		if (n < 0)
			return err_set(err, errlen, -EINVAL, "%s: unknown errno name \"%s\"",
				       name_path, quote_user(json_string_value(name), q));
		if (num && e != n)
			return err_set(err, errlen, -EINVAL,
				       "%s: \"%s\" (%d) disagrees with %s (%lld)", name_path,
				       json_string_value(name), n, num_path, (long long)e);
		e = n;
	}
	if (num || name)
		*ret = e;
	return 0;
}

/*
 * Parse "action" (with "errnoRet"/"errno" where present) into a libseccomp action word.
 * errno_v and errname_v may be NULL; errno_path/errname_path name them in messages.
 */
static int parse_action(const json_t *v, const char *path, const json_t *errno_v,
			const char *errno_path, const json_t *errname_v, const char *errname_path,
			uint32_t *ret, char *err, size_t errlen)
{
	enum sbx_act act = _SBX_ACT_INVALID;
	json_int_t e = EPERM;
	char q[SBX_NAME_MAX + 4];
	const char *s;
	int r;

	r = want_type(v, JSON_STRING, path, err, errlen);
	if (r < 0)
		return r;
	s = json_string_value(v);
	for (size_t i = 0; i < ARRAY_SIZE(action_names); i++)
		if (strcmp(s, action_names[i].name) == 0)
			act = action_names[i].act;
	if (strcmp(s, "SCMP_ACT_NOTIFY") == 0)
		return err_set(err, errlen, -EINVAL,
			       "%s: action \"SCMP_ACT_NOTIFY\" is not supported (no listener)",
			       path);
	if (act == _SBX_ACT_INVALID)
		return err_set(err, errlen, -EINVAL, "%s: unknown action \"%s\"", path,
			       quote_user(s, q));

	if (act == SBX_ACT_TRACE)
		e = 0;
	if (errno_v || errname_v) {
		if (act != SBX_ACT_ERRNO && act != SBX_ACT_TRACE)
			return err_set(err, errlen, -EINVAL,
				       "%s: only valid with SCMP_ACT_ERRNO or SCMP_ACT_TRACE",
				       errno_v ? errno_path : errname_path);
		r = parse_errno(errno_v, errno_path, errname_v, errname_path, &e, err, errlen);
		if (r < 0)
			return r;
	}

	switch (act) {
	case SBX_ACT_ALLOW:
		*ret = SCMP_ACT_ALLOW;
		break;
	case SBX_ACT_ERRNO:
		*ret = SCMP_ACT_ERRNO((uint32_t)e);
		break;
	case SBX_ACT_KILL_THREAD:
		*ret = SCMP_ACT_KILL_THREAD;
		break;
	case SBX_ACT_KILL_PROCESS:
		*ret = SCMP_ACT_KILL_PROCESS;
		break;
	case SBX_ACT_TRAP:
		*ret = SCMP_ACT_TRAP;
		break;
	case SBX_ACT_LOG:
		*ret = SCMP_ACT_LOG;
		break;
	case SBX_ACT_TRACE:
		*ret = SCMP_ACT_TRACE((uint32_t)e);
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

/* ---- architectures ----------------------------------------------------------------------- */

/* An architecture this libseccomp cannot build a filter for: accepted, never native, skipped. */
#define SBX_ARCH_UNSUPPORTED UINT32_MAX

static const struct {
	const char *scmp;  /* OCI name */
	const char *alias; /* Go/Debian/uname name, as Docker's includes.arches use */
	const char *alias2;
	uint32_t token;
} arch_names[] = {
    {"SCMP_ARCH_X86_64", "amd64", "x86_64", SCMP_ARCH_X86_64},
    {"SCMP_ARCH_X86", "x86", "386", SCMP_ARCH_X86},
    {"SCMP_ARCH_X32", "x32", NULL, SCMP_ARCH_X32},
    {"SCMP_ARCH_AARCH64", "arm64", "aarch64", SCMP_ARCH_AARCH64},
    {"SCMP_ARCH_ARM", "arm", NULL, SCMP_ARCH_ARM},
    {"SCMP_ARCH_MIPS", "mips", NULL, SCMP_ARCH_MIPS},
    {"SCMP_ARCH_MIPSEL", "mipsle", NULL, SCMP_ARCH_MIPSEL},
    {"SCMP_ARCH_MIPS64", "mips64", NULL, SCMP_ARCH_MIPS64},
    {"SCMP_ARCH_MIPSEL64", "mips64le", NULL, SCMP_ARCH_MIPSEL64},
    {"SCMP_ARCH_MIPS64N32", "mips64n32", NULL, SCMP_ARCH_MIPS64N32},
    {"SCMP_ARCH_MIPSEL64N32", "mips64len32", NULL, SCMP_ARCH_MIPSEL64N32},
    {"SCMP_ARCH_PPC", "ppc", NULL, SCMP_ARCH_PPC},
    {"SCMP_ARCH_PPC64", "ppc64", NULL, SCMP_ARCH_PPC64},
    {"SCMP_ARCH_PPC64LE", "ppc64le", NULL, SCMP_ARCH_PPC64LE},
    {"SCMP_ARCH_S390", "s390", NULL, SCMP_ARCH_S390},
    {"SCMP_ARCH_S390X", "s390x", NULL, SCMP_ARCH_S390X},
    {"SCMP_ARCH_PARISC", "parisc", NULL, SCMP_ARCH_PARISC},
    {"SCMP_ARCH_PARISC64", "parisc64", NULL, SCMP_ARCH_PARISC64},
    {"SCMP_ARCH_RISCV64", "riscv64", NULL, SCMP_ARCH_RISCV64},
    /* In the OCI runtime spec, unknown to libseccomp 2.5: never this node's architecture. */
    {"SCMP_ARCH_LOONGARCH64", "loong64", "loongarch64", SBX_ARCH_UNSUPPORTED},
    {"SCMP_ARCH_M68K", "m68k", NULL, SBX_ARCH_UNSUPPORTED},
    {"SCMP_ARCH_SH", "sh", NULL, SBX_ARCH_UNSUPPORTED},
    {"SCMP_ARCH_SHEB", "sheb", NULL, SBX_ARCH_UNSUPPORTED},
    /* containers-common: the architecture the node runs. */
    {"SCMP_ARCH_NATIVE", "native", NULL, SCMP_ARCH_NATIVE},
};

/* aliases: also accept the short names (includes/excludes.arches). */
static int parse_arch(const json_t *v, const char *path, bool aliases, uint32_t *ret, char *err,
		      size_t errlen)
{
	char q[SBX_NAME_MAX + 4];
	const char *s;
	int r;

	r = want_type(v, JSON_STRING, path, err, errlen);
	if (r < 0)
		return r;
	s = json_string_value(v);
	for (size_t i = 0; i < ARRAY_SIZE(arch_names); i++)
		if (strcmp(s, arch_names[i].scmp) == 0 ||
		    (aliases && ((strcmp(s, arch_names[i].alias) == 0) ||
				 (arch_names[i].alias2 && strcmp(s, arch_names[i].alias2) == 0)))) {
			*ret = arch_names[i].token == SCMP_ARCH_NATIVE ? seccomp_arch_native()
								       : arch_names[i].token;
			return 0;
		}
	return err_set(err, errlen, -EINVAL, "%s: unknown architecture \"%s\"", path,
		       quote_user(s, q));
}

static int add_arch(scmp_filter_ctx ctx, uint32_t token, const char *path, char *err, size_t errlen)
{
	int r;

	if (token == SBX_ARCH_UNSUPPORTED)
		return 0; /* not this node's: no syscall can arrive through it */
	r = seccomp_arch_add(ctx, token);
	if (r < 0 && r != -EEXIST)
		return err_set(err, errlen, -EINVAL,
			       "%s: architecture not supported by libseccomp: %s", path,
			       strerror(-r));
	return 0;
}

/* ---- includes / excludes ----------------------------------------------------------------- */

/* "5.8" or "5.8.0" -> major*1000 + minor; -1 when malformed. */
static long kernel_version_code(const char *s)
{
	char *end;
	long major, minor;

	errno = 0;
	major = strtol(s, &end, 10);
	if (errno || end == s || *end != '.' || major < 0 || major > 1000)
		return -1;
	s = end + 1;
	minor = strtol(s, &end, 10);
	if (errno || end == s || minor < 0 || minor > 999)
		return -1;
	if (*end && *end != '.' && *end != '-')
		return -1;
	return major * 1000 + minor;
}

static long running_kernel_code(void)
{
	struct utsname u;

	if (uname(&u) < 0)
		return -1;
	return kernel_version_code(u.release);
}

/*
 * Evaluate an includes/excludes filter. *ret_match: the filter matches this node and task.
 * caps are evaluated against the empty set, because the launcher drops every capability
 * before seccomp is installed: includes.caps never matches, excludes.caps never excludes.
 */
static int eval_filter(const json_t *v, const char *path, bool *ret_match, bool *ret_empty,
		       char *err, size_t errlen)
{
	static const char *const keys[] = {"caps", "arches", "minKernel", NULL};
	char p[128];
	json_t *a;
	bool match = true, empty = true;
	int r;

	r = want_type(v, JSON_OBJECT, path, err, errlen);
	if (r < 0)
		return r;
	r = check_keys(v, path, keys, err, errlen);
	if (r < 0)
		return r;

	a = jget(v, "caps");
	if (a) {
		snprintf(p, sizeof(p), "%s.caps", path);
		r = want_array(a, 64, p, err, errlen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < json_array_size(a); i++) {
			char pi[160];

			snprintf(pi, sizeof(pi), "%s[%zu]", p, i);
			r = want_type(json_array_get(a, i), JSON_STRING, pi, err, errlen);
			if (r < 0)
				return r;
		}
		if (json_array_size(a) > 0) {
			empty = false;
			match = false; /* no capability is ever held */
		}
	}
	a = jget(v, "arches");
	if (a) {
		uint32_t native = seccomp_arch_native();
		bool any = false;

		snprintf(p, sizeof(p), "%s.arches", path);
		r = want_array(a, SBX_MAX_ARCHES, p, err, errlen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < json_array_size(a); i++) {
			char pi[160];
			uint32_t tok;

			snprintf(pi, sizeof(pi), "%s[%zu]", p, i);
			r = parse_arch(json_array_get(a, i), pi, true, &tok, err, errlen);
			if (r < 0)
				return r;
			if (tok == native)
				any = true;
		}
		if (json_array_size(a) > 0) {
			empty = false;
			match = match && any;
		}
	}
	a = jget(v, "minKernel");
	if (a) {
		long want, have;

		snprintf(p, sizeof(p), "%s.minKernel", path);
		r = want_type(a, JSON_STRING, p, err, errlen);
		if (r < 0)
			return r;
		want = kernel_version_code(json_string_value(a));
		if (want < 0)
			return err_set(err, errlen, -EINVAL,
				       "%s: not a kernel version like \"5.8\"", p);
		have = running_kernel_code();
		empty = false;
		match = match && have >= want;
	}
	*ret_match = match;
	*ret_empty = empty;
	return 0;
}

/* ---- syscall rules ----------------------------------------------------------------------- */

static const struct {
	const char *name;
	enum scmp_compare op;
} op_names[] = {
    {"SCMP_CMP_NE", SCMP_CMP_NE},
    {"SCMP_CMP_LT", SCMP_CMP_LT},
    {"SCMP_CMP_LE", SCMP_CMP_LE},
    {"SCMP_CMP_EQ", SCMP_CMP_EQ},
    {"SCMP_CMP_GE", SCMP_CMP_GE},
    {"SCMP_CMP_GT", SCMP_CMP_GT},
    {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ},
};

/* Argument values are uint64 as in OCI; JSON integers here are int64, so values >= 2^63 are
 * written as their (negative) two's complement. */
static int parse_arg(const json_t *v, const char *path, struct scmp_arg_cmp *ret, char *err,
		     size_t errlen)
{
	static const char *const keys[] = {"index", "value", "valueTwo", "op", NULL};
	char p[160], q[SBX_NAME_MAX + 4];
	const json_t *idx, *val, *val2, *op;
	json_int_t i;
	int r;

	r = want_type(v, JSON_OBJECT, path, err, errlen);
	if (r < 0)
		return r;
	r = check_keys(v, path, keys, err, errlen);
	if (r < 0)
		return r;
	idx = jget(v, "index");
	val = jget(v, "value");
	val2 = jget(v, "valueTwo");
	op = jget(v, "op");
	if (!idx)
		return err_set(err, errlen, -EINVAL, "%s.index: missing", path);
	if (!val)
		return err_set(err, errlen, -EINVAL, "%s.value: missing", path);
	if (!op)
		return err_set(err, errlen, -EINVAL, "%s.op: missing", path);

	snprintf(p, sizeof(p), "%s.index", path);
	r = want_type(idx, JSON_INTEGER, p, err, errlen);
	if (r < 0)
		return r;
	i = json_integer_value(idx);
	if (i < 0 || i >= SBX_MAX_ARGS)
		return err_set(err, errlen, -EINVAL, "%s: argument index %lld out of range 0..%d",
			       p, (long long)i, SBX_MAX_ARGS - 1);
	snprintf(p, sizeof(p), "%s.value", path);
	r = want_type(val, JSON_INTEGER, p, err, errlen);
	if (r < 0)
		return r;
	if (val2) {
		snprintf(p, sizeof(p), "%s.valueTwo", path);
		r = want_type(val2, JSON_INTEGER, p, err, errlen);
		if (r < 0)
			return r;
	}
	snprintf(p, sizeof(p), "%s.op", path);
	r = want_type(op, JSON_STRING, p, err, errlen);
	if (r < 0)
		return r;

	*ret = (struct scmp_arg_cmp){.arg = (unsigned int)i, .op = _SCMP_CMP_MIN};
	for (size_t k = 0; k < ARRAY_SIZE(op_names); k++)
		if (strcmp(json_string_value(op), op_names[k].name) == 0)
			ret->op = op_names[k].op;
	if (ret->op == _SCMP_CMP_MIN)
		return err_set(err, errlen, -EINVAL, "%s: unknown operator \"%s\"", p,
			       quote_user(json_string_value(op), q));
	ret->datum_a = (scmp_datum_t)json_integer_value(val);
	ret->datum_b = val2 ? (scmp_datum_t)json_integer_value(val2) : 0;
	if (ret->op != SCMP_CMP_MASKED_EQ && ret->datum_b != 0)
		return err_set(err, errlen, -EINVAL,
			       "%s.valueTwo: only used with SCMP_CMP_MASKED_EQ", path);
	return 0;
}

struct compile_state {
	scmp_filter_ctx ctx;
	uint32_t default_action;
	size_t nrules;
	scmp_filter_ctx nctx; /* the notifying variant, NULL without SBX_COMPILE_NOTIFY */
	uint32_t ndefault;
	/* Names of allow rules that this libseccomp does not know, skipped (for the notice). */
	char skipped[160];
	size_t nskipped;
};

/* A string shaped like a syscall name: [a-z0-9_], 1..SBX_NAME_MAX. */
static bool syscall_name_shaped(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > SBX_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

static void note_skipped(struct compile_state *st, const char *name)
{
	size_t used = strlen(st->skipped);

	if (st->nskipped++ < 8 && used + strlen(name) + 3 < sizeof(st->skipped))
		snprintf(st->skipped + used, sizeof(st->skipped) - used, "%s%s", used ? ", " : "",
			 name);
}

/*
 * The action of the notifying variant: denials that are audited become USER_NOTIF. ENOSYS
 * answers stay in the kernel: they say "not implemented" so that a program falls back (glibc
 * tries clone3 for every thread and fork), not that something was refused.
 */
static uint32_t notify_action(uint32_t action)
{
	if ((action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO &&
	    (action & SECCOMP_RET_DATA) != ENOSYS)
		return SCMP_ACT_NOTIFY;
	if (action == SCMP_ACT_KILL_PROCESS)
		return SCMP_ACT_NOTIFY;
	return action;
}

/* Whether an entry's includes/excludes let it apply here (*ret). Both filters are validated
 * before either decides, so errors never hide. */
static int entry_matches(const json_t *e, const char *path, bool *ret, char *err, size_t errlen)
{
	char p[96];
	const json_t *v;
	bool match, empty;
	int r;

	match = true;
	v = jget(e, "includes");
	if (v) {
		bool m;

		snprintf(p, sizeof(p), "%s.includes", path);
		r = eval_filter(v, p, &m, &empty, err, errlen);
		if (r < 0)
			return r;
		if (!empty)
			match = match && m;
	}
	v = jget(e, "excludes");
	if (v) {
		bool m;

		snprintf(p, sizeof(p), "%s.excludes", path);
		r = eval_filter(v, p, &m, &empty, err, errlen);
		if (r < 0)
			return r;
		if (!empty && m)
			match = false;
	}
	*ret = match;
	return 0;
}

/* The rule of one syscall name n (at path p) of an entry, added to the filters where the entry
 * applies here (match) and differs from the default action. */
static int add_name_rule(struct compile_state *st, const json_t *n, const char *p, uint32_t action,
			 bool match, unsigned int nargs, struct scmp_arg_cmp *cmps, char *err,
			 size_t errlen)
{
	char q[SBX_NAME_MAX + 4];
	const char *s;
	int nr, r;

	r = want_type(n, JSON_STRING, p, err, errlen);
	if (r < 0)
		return r;
	s = json_string_value(n);
	/*
	 * Names are checked even for rules that do not apply here: a typo is a typo. A
	 * name this libseccomp does not know (a call newer than its tables: moby allows
	 * "mseal", "listmount") is skipped in an allow or log rule, as runc and crun do:
	 * the call keeps the default action, which is never more permissive. A rule
	 * meant to deny it cannot be honoured, so that stays an error.
	 */
	nr = strlen(s) <= SBX_NAME_MAX ? seccomp_syscall_resolve_name(s) : __NR_SCMP_ERROR;
	if (nr == __NR_SCMP_ERROR) {
		if (syscall_name_shaped(s) &&
		    (action == SCMP_ACT_ALLOW || action == SCMP_ACT_LOG)) {
			if (match && action != st->default_action)
				note_skipped(st, s);
			return 0;
		}
		return err_set(err, errlen, -EINVAL, "%s: unknown syscall \"%s\"", p,
			       quote_user(s, q));
	}
	if (!match || action == st->default_action)
		return 0; /* OCI: a rule equal to the default is a no-op */
	if (++st->nrules > SBX_MAX_RULES)
		return err_set(err, errlen, -EINVAL, "%s: too many rules (at most %d)", p,
			       SBX_MAX_RULES);
	r = seccomp_rule_add_array(st->ctx, action, nr, nargs, cmps);
	if (r < 0)
		return err_set(err, errlen, -EINVAL,
			       "%s: rule for \"%s\" rejected by libseccomp: %s", p, s,
			       strerror(-r));
	if (st->nctx && notify_action(action) != st->ndefault) {
		r = seccomp_rule_add_array(st->nctx, notify_action(action), nr, nargs, cmps);
		if (r < 0)
			return err_set(err, errlen, -EINVAL,
				       "%s: rule for \"%s\" rejected by libseccomp (audit "
				       "variant): %s",
				       p, s, strerror(-r));
	}
	return 0;
}

static int parse_syscall_entry(struct compile_state *st, const json_t *e, size_t index, char *err,
			       size_t errlen)
{
	static const char *const keys[] = {"names", "name",    "action",   "errnoRet", "errno",
					   "args",  "comment", "includes", "excludes", NULL};
	struct scmp_arg_cmp cmps[SBX_MAX_ARGS];
	char path[48], p[96];
	const json_t *names, *name, *args, *v;
	unsigned int nargs = 0;
	uint32_t action;
	bool match;
	int r;

	snprintf(path, sizeof(path), "syscalls[%zu]", index);
	r = want_type(e, JSON_OBJECT, path, err, errlen);
	if (r < 0)
		return r;
	r = check_keys(e, path, keys, err, errlen);
	if (r < 0)
		return r;

	v = jget(e, "comment");
	if (v) {
		snprintf(p, sizeof(p), "%s.comment", path);
		r = want_type(v, JSON_STRING, p, err, errlen);
		if (r < 0)
			return r;
	}

	v = jget(e, "action");
	if (!v)
		return err_set(err, errlen, -EINVAL, "%s.action: missing", path);
	snprintf(p, sizeof(p), "%s.action", path);
	{
		char pe[96];

		snprintf(pe, sizeof(pe), "%s.errnoRet", path);
		char pn[96];

		snprintf(pn, sizeof(pn), "%s.errno", path);
		r = parse_action(v, p, jget(e, "errnoRet"), pe, jget(e, "errno"), pn, &action, err,
				 errlen);
		if (r < 0)
			return r;
	}

	args = jget(e, "args");
	if (args) {
		snprintf(p, sizeof(p), "%s.args", path);
		r = want_array(args, SBX_MAX_ARGS, p, err, errlen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < json_array_size(args); i++) {
			snprintf(p, sizeof(p), "%s.args[%zu]", path, i);
			r = parse_arg(json_array_get(args, i), p, &cmps[nargs++], err, errlen);
			if (r < 0)
				return r;
		}
	}

	r = entry_matches(e, path, &match, err, errlen);
	if (r < 0)
		return r;

	names = jget(e, "names");
	name = jget(e, "name");
	if (names && name)
		return err_set(err, errlen, -EINVAL, "%s: both \"names\" and \"name\" given", path);
	if (!names && !name)
		return err_set(err, errlen, -EINVAL, "%s.names: missing", path);
	if (names) {
		snprintf(p, sizeof(p), "%s.names", path);
		r = want_array(names, SBX_MAX_NAMES_PER_ENTRY, p, err, errlen);
		if (r < 0)
			return r;
		if (json_array_size(names) == 0)
			return err_set(err, errlen, -EINVAL, "%s: empty", p);
	}

	for (size_t i = 0; i < (names ? json_array_size(names) : 1); i++) {
		const json_t *n = names ? json_array_get(names, i) : name;

		if (names)
			snprintf(p, sizeof(p), "%s.names[%zu]", path, i);
		else
			snprintf(p, sizeof(p), "%s.name", path);
		r = add_name_rule(st, n, p, action, match, nargs, cmps, err, errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- export ------------------------------------------------------------------------------ */

/* libseccomp 2.5 exports only to an fd: write to a memfd and read it back. */
static int export_prog(scmp_filter_ctx ctx, struct sock_filter **ret, size_t *ret_n, char *err,
		       size_t errlen)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ struct sock_filter *insns = NULL;
	struct stat stb;
	size_t size, n, done = 0;
	int r;

	fd = memfd_create("corral-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = seccomp_export_bpf(ctx, fd);
	if (r < 0) {
		return err_set(err, errlen, r, "exporting the BPF program failed: %s",
			       strerror(-r));
	}
	if (fstat(fd, &stb) < 0)
		return -errno;
	size = (size_t)stb.st_size;
	if (size == 0 || size % sizeof(struct sock_filter) != 0)
		return err_set(err, errlen, -EINVAL,
			       "exported BPF program has a bad size (%zu bytes)", size);
	n = size / sizeof(struct sock_filter);
	if (n > BPF_MAXINSNS) {
		return err_set(err, errlen, -E2BIG,
			       "profile compiles to %zu BPF instructions (kernel limit %d)", n,
			       BPF_MAXINSNS);
	}
	insns = malloc(size);
	if (!insns)
		return -ENOMEM;
	while (done < size) {
		ssize_t k = pread(fd, (char *)insns + done, size - done, (off_t)done);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO;
		done += (size_t)k;
	}
	*ret = TAKE_PTR(insns);
	*ret_n = n;
	return 0;
}

/* One allocation: the reference program, then (nctx) the notifying one. */
static int export_filter(scmp_filter_ctx ctx, scmp_filter_ctx nctx, struct sbx_filter **ret,
			 char *err, size_t errlen)
{
	_cleanup_free_ struct sock_filter *ri = NULL, *ni = NULL;
	struct sbx_filter *f;
	size_t rn = 0, nn = 0;
	int r;

	r = export_prog(ctx, &ri, &rn, err, errlen);
	if (r < 0)
		return r;
	if (nctx) {
		r = export_prog(nctx, &ni, &nn, err, errlen);
		if (r < 0)
			return r;
	}
	f = calloc(1, sizeof(*f) + (rn + nn) * sizeof(struct sock_filter));
	if (!f)
		return -ENOMEM;
	memcpy(f->insns, ri, rn * sizeof(struct sock_filter));
	f->ref.len = (unsigned short)rn;
	f->ref.filter = f->insns;
	f->prog = f->ref;
	if (nctx) {
		memcpy(f->insns + rn, ni, nn * sizeof(struct sock_filter));
		f->prog.len = (unsigned short)nn;
		f->prog.filter = f->insns + rn;
		f->notify = true;
	}
	f->native_arch = seccomp_arch_native();
	*ret = f;
	return 0;
}

static void seccomp_releasep(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

/* ---- public ------------------------------------------------------------------------------ */

/*
 * OCI "flags": seccomp(2) filter flags. LOG and SPEC_ALLOW are passed to seccomp(2);
 * WAIT_KILLABLE_RECV only with the audit listener (the kernel takes it with NEW_LISTENER
 * only, and without a listener no call waits); TSYNC is accepted and has no effect (the
 * filter is installed by the single-threaded child before execve, so there is no other
 * thread to synchronise).
 */
static int parse_flags(const json_t *v, unsigned int *ret, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		unsigned int flag;
	} flag_names[] = {
	    {"SECCOMP_FILTER_FLAG_TSYNC", 0},
	    {"SECCOMP_FILTER_FLAG_LOG", SECCOMP_FILTER_FLAG_LOG},
	    {"SECCOMP_FILTER_FLAG_SPEC_ALLOW", SECCOMP_FILTER_FLAG_SPEC_ALLOW},
	    {"SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV", SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV},
	};
	char q[SBX_NAME_MAX + 4];
	int r;

	*ret = 0;
	if (!v)
		return 0;
	r = want_array(v, 16, "flags", err, errlen);
	if (r < 0)
		return r;
	for (size_t i = 0; i < json_array_size(v); i++) {
		const json_t *e = json_array_get(v, i);
		char p[32];
		bool found = false;

		snprintf(p, sizeof(p), "flags[%zu]", i);
		r = want_type(e, JSON_STRING, p, err, errlen);
		if (r < 0)
			return r;
		for (size_t k = 0; k < ARRAY_SIZE(flag_names); k++)
			if (strcmp(json_string_value(e), flag_names[k].name) == 0) {
				*ret |= flag_names[k].flag;
				found = true;
			}
		if (!found)
			return err_set(err, errlen, -EINVAL, "%s: unknown flag \"%s\"", p,
				       quote_user(json_string_value(e), q));
	}
	return 0;
}

static int add_arch_all(struct compile_state *st, uint32_t token, const char *path, char *err,
			size_t errlen)
{
	int r = add_arch(st->ctx, token, path, err, errlen);

	if (r < 0 || !st->nctx)
		return r;
	return add_arch(st->nctx, token, path, err, errlen);
}

int sbx_profile_compile(const char *json, size_t len, struct sbx_filter **ret, char *err,
			size_t errlen)
{
	return sbx_profile_compile_flags(json, len, 0, ret, err, errlen);
}

/* architectures: each named ABI added to the filters. */
static int parse_architectures(struct compile_state *st, const json_t *root, char *err,
			       size_t errlen)
{
	const json_t *v;
	int r;

	v = jget(root, "architectures");
	if (v) {
		r = want_array(v, SBX_MAX_ARCHES, "architectures", err, errlen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < json_array_size(v); i++) {
			char p[48];
			uint32_t tok;

			snprintf(p, sizeof(p), "architectures[%zu]", i);
			r = parse_arch(json_array_get(v, i), p, false, &tok, err, errlen);
			if (r < 0)
				return r;
			r = add_arch_all(st, tok, p, err, errlen);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

/* archMap (Docker): an entry for the native architecture adds its subArchitectures. */
static int parse_arch_map(struct compile_state *st, const json_t *root, char *err, size_t errlen)
{
	const json_t *v;
	int r;

	v = jget(root, "archMap");
	if (v) {
		static const char *const mkeys[] = {"architecture", "subArchitectures", NULL};

		r = want_array(v, SBX_MAX_ARCHES, "archMap", err, errlen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < json_array_size(v); i++) {
			const json_t *m = json_array_get(v, i), *a, *subs;
			char p[48], ps[96];
			uint32_t tok;

			snprintf(p, sizeof(p), "archMap[%zu]", i);
			r = want_type(m, JSON_OBJECT, p, err, errlen);
			if (r < 0)
				return r;
			r = check_keys(m, p, mkeys, err, errlen);
			if (r < 0)
				return r;
			a = jget(m, "architecture");
			if (!a)
				return err_set(err, errlen, -EINVAL, "%s.architecture: missing", p);
			snprintf(ps, sizeof(ps), "%s.architecture", p);
			r = parse_arch(a, ps, false, &tok, err, errlen);
			if (r < 0)
				return r;
			subs = jget(m, "subArchitectures");
			if (!subs)
				continue;
			snprintf(ps, sizeof(ps), "%s.subArchitectures", p);
			r = want_array(subs, SBX_MAX_ARCHES, ps, err, errlen);
			if (r < 0)
				return r;
			for (size_t k = 0; k < json_array_size(subs); k++) {
				char pk[128];
				uint32_t sub;

				snprintf(pk, sizeof(pk), "%s[%zu]", ps, k);
				r = parse_arch(json_array_get(subs, k), pk, false, &sub, err,
					       errlen);
				if (r < 0)
					return r;
				if (tok != seccomp_arch_native())
					continue;
				r = add_arch_all(st, sub, pk, err, errlen);
				if (r < 0)
					return r;
			}
		}
	}
	return 0;
}

/* An optional member that must be a string when present. */
static int want_optional_string(const json_t *root, const char *key, char *err, size_t errlen)
{
	const json_t *v = jget(root, key);

	return v ? want_type(v, JSON_STRING, key, err, errlen) : 0;
}

/* The second filter, of the audit of denied calls: what the profile denies goes to the
 * shim's listener instead (st->ndefault, st->nctx; *ret owns it). */
static int notify_filter_init(struct compile_state *st, scmp_filter_ctx *ret, char *err,
			      size_t errlen)
{
	scmp_filter_ctx nctx;
	int r;

	st->ndefault = notify_action(st->default_action);
	nctx = seccomp_init(st->ndefault);
	if (!nctx)
		return err_set(err, errlen, -EOPNOTSUPP,
			       "seccomp user notification is not supported here");
	*ret = nctx;
	r = seccomp_attr_set(nctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_NOTIFY);
	if (r < 0)
		return err_set(err, errlen, -EOPNOTSUPP,
			       "seccomp user notification is not supported here: %s", strerror(-r));
	st->nctx = nctx;
	return 0;
}

int sbx_profile_compile_flags(const char *json, size_t len, unsigned int flags,
			      struct sbx_filter **ret, char *err, size_t errlen)
{
	static const char *const keys[] = {"defaultAction",
					   "defaultErrnoRet",
					   "architectures",
					   "archMap",
					   "syscalls",
					   "comment",
					   "defaultErrno",
					   "flags",
					   "listenerPath",
					   "listenerMetadata",
					   NULL};
	_cleanup_(json_decrefp) json_t *root = NULL;
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL, nctx = NULL;
	struct compile_state st = {0};
	unsigned int seccomp_flags = 0;
	const json_t *v;
	json_error_t jerr;
	int r;

	if (err && errlen)
		err[0] = 0;
	if (!json || !ret || (flags & ~SBX_COMPILE_NOTIFY))
		return -EINVAL;
	if (len > SBX_PROFILE_MAX_BYTES) {
		return err_set(err, errlen, -E2BIG, "profile too large (%zu bytes, at most %d)",
			       len, SBX_PROFILE_MAX_BYTES);
	}
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return err_set(err, errlen, -EINVAL, "line %d column %d: %s", jerr.line,
			       jerr.column, jerr.text);
	r = want_type(root, JSON_OBJECT, "profile", err, errlen);
	if (r < 0)
		return r;
	r = check_keys(root, "", keys, err, errlen);
	if (r < 0)
		return r;

	r = want_optional_string(root, "comment", err, errlen);
	if (r < 0)
		return r;
	v = jget(root, "defaultAction");
	if (!v)
		return err_set(err, errlen, -EINVAL, "defaultAction: missing");
	r = parse_action(v, "defaultAction", jget(root, "defaultErrnoRet"), "defaultErrnoRet",
			 jget(root, "defaultErrno"), "defaultErrno", &st.default_action, err,
			 errlen);
	if (r < 0)
		return r;

	r = parse_flags(jget(root, "flags"), &seccomp_flags, err, errlen);
	if (r < 0)
		return r;
	/*
	 * listenerPath/listenerMetadata (OCI): where a runtime would send a seccomp agent the
	 * listener for SCMP_ACT_NOTIFY rules. Corral's shim holds the task's listener itself
	 * (audit of denied calls) and SCMP_ACT_NOTIFY stays refused, so a profile that would
	 * need the agent fails on its action; the members are type-checked and ignored.
	 */
	r = want_optional_string(root, "listenerPath", err, errlen);
	if (r >= 0)
		r = want_optional_string(root, "listenerMetadata", err, errlen);
	if (r < 0)
		return r;

	ctx = seccomp_init(st.default_action);
	if (!ctx)
		return -ENOMEM;
	st.ctx = ctx;
	/*
	 * Any ABI the profile does not name (i386 via int 0x80, x32 syscall numbers) kills the
	 * process: rules written for native syscall numbers say nothing about another ABI's.
	 */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0)
		return r;
	if (flags & SBX_COMPILE_NOTIFY) {
		r = notify_filter_init(&st, &nctx, err, errlen);
		if (r < 0)
			return r;
	}

	r = parse_architectures(&st, root, err, errlen);
	if (r >= 0)
		r = parse_arch_map(&st, root, err, errlen);
	if (r < 0)
		return r;

	v = jget(root, "syscalls");
	if (v) {
		r = want_array(v, SBX_MAX_SYSCALL_ENTRIES, "syscalls", err, errlen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < json_array_size(v); i++) {
			r = parse_syscall_entry(&st, json_array_get(v, i), i, err, errlen);
			if (r < 0)
				return r;
		}
	}

	r = export_filter(ctx, nctx, ret, err, errlen);
	if (r < 0)
		return r;
	(*ret)->flags = seccomp_flags;
	if (st.nskipped && err && errlen)
		snprintf(err, errlen,
			 "%zu allowed syscall name(s) unknown to libseccomp %u.%u.%u skipped "
			 "(denied by the default action): %s%s",
			 st.nskipped, seccomp_version()->major, seccomp_version()->minor,
			 seccomp_version()->micro, st.skipped, st.nskipped > 8 ? ", ..." : "");
	return 0;
}

const char *sbx_builtin_profile(const char *name)
{
	if (!name)
		return NULL;
	if (strcmp(name, "default") == 0)
		return sbx_profile_default_json;
	if (strcmp(name, "strict") == 0)
		return sbx_profile_strict_json;
	return NULL;
}

static bool profile_name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > SBX_NAME_MAX || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
			return false;
	return true;
}

int sbx_profile_load(const char *name_or_path, const char *dir, struct sbx_filter **ret, char *err,
		     size_t errlen)
{
	return sbx_profile_load_flags(name_or_path, dir, 0, ret, err, errlen);
}

int sbx_profile_load_flags(const char *name_or_path, const char *dir, unsigned int flags,
			   struct sbx_filter **ret, char *err, size_t errlen)
{
	_cleanup_free_ char *text = NULL, *path = NULL;
	char q[SBX_NAME_MAX + 4], sub[256];
	const char *builtin, *pfx;
	size_t len;
	int r;

	if (err && errlen)
		err[0] = 0;
	if (!name_or_path || !ret)
		return -EINVAL;
	if (strcmp(name_or_path, "unconfined") == 0) {
		*ret = NULL;
		return 0;
	}
	builtin = sbx_builtin_profile(name_or_path);
	if (builtin)
		return sbx_profile_compile_flags(builtin, strlen(builtin), flags, ret, err, errlen);

	if (strchr(name_or_path, '/')) {
		path = strdup(name_or_path);
		if (!path)
			return -ENOMEM;
	} else {
		if (!profile_name_valid(name_or_path))
			return err_set(err, errlen, -EINVAL,
				       "seccomp profile \"%s\": not a valid name",
				       quote_user(name_or_path, q));
		if (!dir) {
			return err_set(
			    err, errlen, -ENOENT,
			    "seccomp profile \"%s\": unknown (built-in: default, strict, "
			    "unconfined)",
			    name_or_path);
		}
		if (asprintf(&path, "%s/%s.json", dir, name_or_path) < 0)
			return -ENOMEM;
	}

	/* The caller names the profile in its message; the path is added only where it says
	 * more than the name (a name looked up in dir), so no message repeats it. */
	pfx = strcmp(path, name_or_path) == 0 ? "" : path;
	r = read_regular_file(path, SBX_PROFILE_MAX_BYTES, &text, &len);
	if (r < 0) {
		if (r == -EFBIG)
			err_set(err, errlen, -EINVAL, "%s%slarger than %d bytes", pfx,
				*pfx ? ": " : "", SBX_PROFILE_MAX_BYTES);
		else
			err_set(err, errlen, -EINVAL, "%s%s%s", pfx, *pfx ? ": " : "",
				regular_file_strerror(r));
		return r;
	}
	r = sbx_profile_compile_flags(text, len, flags, ret, sub, sizeof(sub));
	if (r < 0 || sub[0])
		err_set(err, errlen, -EINVAL, "%s%s%s", pfx, *pfx ? ": " : "", sub);
	return r;
}

int sbx_filter_apply(const struct sbx_filter *f)
{
	if (!f)
		return 0;
	/* Raw syscalls only: this runs in the forked child between fork and exec. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
		    f->flags & ~SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &f->ref) == 0)
		return 0;
	if (errno != ENOSYS || (f->flags & ~SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV))
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &f->ref, 0, 0) < 0)
		return -errno;
	return 0;
}

void sbx_filter_free(struct sbx_filter *f)
{
	free(f);
}

struct filter_wire {
	uint32_t flags, notify, native_arch, ref_len, prog_len;
};

size_t sbx_filter_pack(const struct sbx_filter *f, void *buf, size_t len)
{
	struct filter_wire w;
	size_t n = f->notify ? (size_t)f->ref.len + f->prog.len : f->ref.len;
	size_t need = sizeof(w) + n * sizeof(struct sock_filter);

	if (len < need)
		return need;
	w = (struct filter_wire){.flags = f->flags,
				 .notify = f->notify,
				 .native_arch = f->native_arch,
				 .ref_len = f->ref.len,
				 .prog_len = f->notify ? f->prog.len : 0};
	memcpy(buf, &w, sizeof(w));
	memcpy((char *)buf + sizeof(w), f->insns, n * sizeof(struct sock_filter));
	return need;
}

int sbx_filter_unpack(const void *buf, size_t len, struct sbx_filter **ret)
{
	struct filter_wire w;
	struct sbx_filter *f;
	size_t n;

	if (len < sizeof(w))
		return -EINVAL;
	memcpy(&w, buf, sizeof(w));
	if (w.ref_len == 0 || w.ref_len > 0xffff || w.prog_len > 0xffff || w.notify > 1 ||
	    (w.notify && w.prog_len == 0) || (!w.notify && w.prog_len != 0))
		return -EINVAL;
	n = (size_t)w.ref_len + w.prog_len;
	if (len != sizeof(w) + n * sizeof(struct sock_filter))
		return -EINVAL;
	f = calloc(1, sizeof(*f) + n * sizeof(struct sock_filter));
	if (!f)
		return -ENOMEM;
	memcpy(f->insns, (const char *)buf + sizeof(w), n * sizeof(struct sock_filter));
	f->flags = w.flags;
	f->notify = w.notify;
	f->native_arch = w.native_arch;
	f->ref.len = (unsigned short)w.ref_len;
	f->ref.filter = f->insns;
	f->prog = f->ref;
	if (f->notify) {
		f->prog.len = (unsigned short)w.prog_len;
		f->prog.filter = f->insns + w.ref_len;
	}
	*ret = f;
	return 0;
}

size_t sbx_filter_len(const struct sbx_filter *f)
{
	return f ? f->prog.len : 0;
}

bool sbx_filter_notifies(const struct sbx_filter *f)
{
	return f && f->notify;
}

/* ---- evaluation: the kernel's classic-BPF semantics for seccomp programs ----------------- */

/*
 * The instruction set seccomp accepts (kernel seccomp_check_filter): 32-bit loads from
 * struct seccomp_data, immediates, scratch memory, ALU, jumps, returns, TAX/TXA. Anything else
 * (never emitted by libseccomp) and running off the end kill, as an unknown action does.
 */
enum bpf_step { BPF_STEP_OK, BPF_STEP_RET0, BPF_STEP_INVALID };

/* One classic BPF ALU instruction on the accumulator a. */
static enum bpf_step bpf_alu(uint16_t code, uint32_t *a, uint32_t src)
{
	uint32_t A = *a;

	switch (BPF_OP(code)) {
	case BPF_ADD:
		A += src;
		break;
	case BPF_SUB:
		A -= src;
		break;
	case BPF_MUL:
		A *= src;
		break;
	case BPF_DIV:
		if (src == 0)
			return BPF_STEP_RET0;
		A /= src;
		break;
	case BPF_MOD:
		if (src == 0)
			return BPF_STEP_RET0;
		A %= src;
		break;
	case BPF_OR:
		A |= src;
		break;
	case BPF_AND:
		A &= src;
		break;
	case BPF_XOR:
		A ^= src;
		break;
	case BPF_LSH:
		A = src < 32 ? A << src : 0;
		break;
	case BPF_RSH:
		A = src < 32 ? A >> src : 0;
		break;
	case BPF_NEG:
		A = -A;
		break;
	default:
		return BPF_STEP_INVALID;
	}
	*a = A;
	return BPF_STEP_OK;
}

static uint32_t bpf_run(const struct sock_fprog *p, const struct seccomp_data *d)
{
	uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = {0};
	const unsigned char *data = (const unsigned char *)d;

	for (unsigned int pc = 0; pc < p->len; pc++) {
		const struct sock_filter *in = &p->filter[pc];
		uint32_t k = in->k, src;
		bool cond;

		switch (BPF_CLASS(in->code)) {
		case BPF_LD:
		case BPF_LDX: {
			uint32_t v;

			switch (BPF_MODE(in->code)) {
			case BPF_ABS:
				if (BPF_CLASS(in->code) != BPF_LD || BPF_SIZE(in->code) != BPF_W ||
				    k % 4 || k > sizeof(*d) - 4)
					return SECCOMP_RET_KILL_PROCESS;
				memcpy(&v, data + k, 4);
				break;
			case BPF_LEN:
				v = sizeof(*d);
				break;
			case BPF_IMM:
				v = k;
				break;
			case BPF_MEM:
				if (k >= BPF_MEMWORDS)
					return SECCOMP_RET_KILL_PROCESS;
				v = M[k];
				break;
			default:
				return SECCOMP_RET_KILL_PROCESS;
			}
			if (BPF_CLASS(in->code) == BPF_LD)
				A = v;
			else
				X = v;
			break;
		}
		case BPF_ST:
		case BPF_STX:
			if (k >= BPF_MEMWORDS)
				return SECCOMP_RET_KILL_PROCESS;
			M[k] = BPF_CLASS(in->code) == BPF_ST ? A : X;
			break;
		case BPF_ALU:
			src = BPF_SRC(in->code) == BPF_X ? X : k;
			switch (bpf_alu(in->code, &A, src)) {
			case BPF_STEP_OK:
				break;
			case BPF_STEP_RET0:
				return 0; /* classic BPF: division by zero returns 0 */
			default:
				return SECCOMP_RET_KILL_PROCESS;
			}
			break;
		case BPF_JMP:
			if (BPF_OP(in->code) == BPF_JA) {
				pc += k;
				break;
			}
			src = BPF_SRC(in->code) == BPF_X ? X : k;
			switch (BPF_OP(in->code)) {
			case BPF_JEQ:
				cond = A == src;
				break;
			case BPF_JGT:
				cond = A > src;
				break;
			case BPF_JGE:
				cond = A >= src;
				break;
			case BPF_JSET:
				cond = (A & src) != 0;
				break;
			default:
				return SECCOMP_RET_KILL_PROCESS;
			}
			pc += cond ? in->jt : in->jf;
			break;
		case BPF_RET:
			return BPF_RVAL(in->code) == BPF_A ? A : k;
		case BPF_MISC:
			if (BPF_MISCOP(in->code) == BPF_TAX)
				X = A;
			else
				A = X;
			break;
		default:
			return SECCOMP_RET_KILL_PROCESS;
		}
	}
	return SECCOMP_RET_KILL_PROCESS;
}

uint32_t sbx_filter_eval(const struct sbx_filter *f, const struct seccomp_data *d, bool installed)
{
	if (!f)
		return SECCOMP_RET_ALLOW;
	return bpf_run(installed ? &f->prog : &f->ref, d);
}

/* ---- listener handoff --------------------------------------------------------------------- */

union fd_cmsg {
	char buf[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
};

static bool runs_unanswered(const struct sbx_filter *f, int nr, uint64_t a0, uint64_t a1,
			    uint64_t a2)
{
	struct seccomp_data d = {.nr = nr, .arch = f->native_arch, .args = {a0, a1, a2}};
	uint32_t act = sbx_filter_eval(f, &d, true) & SECCOMP_RET_ACTION_FULL;

	return act == SECCOMP_RET_ALLOW || act == SECCOMP_RET_LOG;
}

bool sbx_filter_call_notified(const struct sbx_filter *f, int nr, uint64_t a0, uint64_t a1,
			      uint64_t a2)
{
	struct seccomp_data d = {.nr = nr, .arch = f ? f->native_arch : 0, .args = {a0, a1, a2}};

	if (!f || !f->notify)
		return false;
	return (sbx_filter_eval(f, &d, true) & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_USER_NOTIF;
}

int sbx_filter_apply_handoff(const struct sbx_filter *f, int sock, unsigned int flags)
{
	union fd_cmsg cbuf;
	char byte = 'L', ack = 0;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf.buf,
			     .msg_controllen = sizeof(cbuf.buf)};
	struct cmsghdr *cm;
	long fd, n;
	int lfd, e, r;

	if (!f)
		return 0;
	if (!f->notify) {
		r = sbx_filter_apply(f);
		return r < 0 ? r : 0;
	}
	memset(&cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	/*
	 * Until the supervisor holds the listener, a call the new filter notifies would wait for
	 * an answer nobody can give. The two calls of the handoff are checked with their real
	 * arguments; a profile that would notify them is installed without audit.
	 */
	if (!runs_unanswered(f, SYS_sendmsg, (uint64_t)sock, (uint64_t)(uintptr_t)&msg,
			     MSG_NOSIGNAL) ||
	    (!(flags & SBX_HANDOFF_NO_ACK) &&
	     !runs_unanswered(f, SYS_read, (uint64_t)sock, (uint64_t)(uintptr_t)&ack, 1))) {
		r = sbx_filter_apply(f);
		return r < 0 ? r : 0;
	}
	fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
		     f->flags | SECCOMP_FILTER_FLAG_NEW_LISTENER, &f->prog);
	if (fd < 0)
		return -errno;
	lfd = (int)fd;
	memcpy(CMSG_DATA(cm), &lfd, sizeof(int));
	do {
		n = syscall(SYS_sendmsg, sock, &msg, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	e = n == 1 ? 0 : n < 0 ? errno : EPROTO;
	if (e) {
		close(lfd);
		return -e;
	}
	if (flags & SBX_HANDOFF_NO_ACK)
		return 1; /* close-on-exec: execve closes it, with no call under the filter */
	close(lfd);	  /* the supervisor's copy (in flight or received) keeps it open */
	do {
		n = syscall(SYS_read, sock, &ack, 1);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == 1 ? 1 : -EPIPE;
}

int sbx_listener_receive(int sock, int *ret_fd, bool ack)
{
	union fd_cmsg cbuf;
	char byte = 0;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf.buf,
			     .msg_controllen = sizeof(cbuf.buf)};
	struct cmsghdr *cm;
	ssize_t n;
	int fd;

	memset(&cbuf, 0, sizeof(cbuf));
	do {
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EPIPE;
	cm = CMSG_FIRSTHDR(&msg);
	if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
	    cm->cmsg_len != CMSG_LEN(sizeof(int)) || (msg.msg_flags & MSG_CTRUNC))
		return -EPROTO;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	if (ack && send(sock, "A", 1, MSG_NOSIGNAL) != 1) {
		int e = errno;

		close(fd);
		return -e;
	}
	*ret_fd = fd;
	return 0;
}

/* ---- supervisor ---------------------------------------------------------------------------- */

struct sbx_notifier {
	int fd;
	const struct sbx_filter *f;
	struct seccomp_notif *req;
	struct seccomp_notif_resp *resp;
};

int sbx_notifier_new(int listener_fd, const struct sbx_filter *f, struct sbx_notifier **ret)
{
	struct sbx_notifier *n;
	int r;

	if (listener_fd < 0 || !f || !ret)
		return -EINVAL;
	/* Lets libseccomp probe the kernel's notify support and structure sizes. */
	(void)seccomp_api_get();
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	r = seccomp_notify_alloc(&n->req, &n->resp);
	if (r < 0) {
		free(n);
		return r;
	}
	n->fd = listener_fd;
	n->f = f;
	*ret = n;
	return 0;
}

void sbx_notifier_free(struct sbx_notifier *n)
{
	if (!n)
		return;
	seccomp_notify_free(n->req, n->resp);
	free(n);
}

/* libseccomp 2.5 turns every ioctl failure into -ECANCELED, errno keeps the cause. */
static int notify_err(int r)
{
	if (r == -ECANCELED && errno > 0)
		return -errno;
	return r;
}

int sbx_notifier_receive(struct sbx_notifier *n, struct sbx_notify_event *ret)
{
	int r;

	/* The kernel refuses a buffer that is not zeroed (libseccomp 2.5 leaves that to us). */
	memset(n->req, 0, sizeof(*n->req));
	errno = 0;
	r = seccomp_notify_receive(n->fd, n->req);
	if (r < 0)
		return notify_err(r);
	*ret = (struct sbx_notify_event){
	    .id = n->req->id,
	    .tid = (int32_t)n->req->pid,
	    .arch = n->req->data.arch,
	    .nr = n->req->data.nr,
	};
	memcpy(ret->args, n->req->data.args, sizeof(ret->args));
	ret->action = bpf_run(&n->f->ref, &n->req->data);
	return 0;
}

bool sbx_notifier_pending(struct sbx_notifier *n, const struct sbx_notify_event *ev)
{
	return seccomp_notify_id_valid(n->fd, ev->id) == 0;
}

int sbx_notifier_answer(struct sbx_notifier *n, const struct sbx_notify_event *ev, bool *ret_killed)
{
	struct seccomp_notif_resp *resp = n->resp;
	int r;

	if (ret_killed)
		*ret_killed = false;
	memset(resp, 0, sizeof(*resp));
	resp->id = ev->id;
	switch (ev->action & SECCOMP_RET_ACTION_FULL) {
	case SECCOMP_RET_ERRNO:
		resp->error = -(int32_t)(ev->action & SECCOMP_RET_DATA);
		break;
	case SECCOMP_RET_ALLOW:
	case SECCOMP_RET_LOG:
		resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
		break;
	case SECCOMP_RET_TRAP:
	case SECCOMP_RET_TRACE:
	case SECCOMP_RET_USER_NOTIF:
		resp->error = -ENOSYS;
		break;
	default:
		/*
		 * Kill (and unknown actions, which the kernel treats as kill-process). SIGKILL
		 * to any thread ends the whole thread group; the waiting thread never returns to
		 * user space. The id check right before narrows pid reuse to nothing: a thread
		 * waiting for an answer cannot exit except by a signal.
		 */
		if (!sbx_notifier_pending(n, ev))
			return -ENOENT;
		if (kill(ev->tid, SIGKILL) < 0)
			return -errno;
		if (ret_killed)
			*ret_killed = true;
		return 0;
	}
	errno = 0;
	r = seccomp_notify_respond(n->fd, resp);
	return r < 0 ? notify_err(r) : 0;
}

const char *sbx_action_name(uint32_t action)
{
	switch (action & SECCOMP_RET_ACTION_FULL) {
	case SECCOMP_RET_ERRNO:
		return "errno";
	case SECCOMP_RET_KILL_PROCESS:
		return "kill";
	case SECCOMP_RET_KILL_THREAD:
		return "kill_thread";
	case SECCOMP_RET_TRAP:
		return "trap";
	case SECCOMP_RET_TRACE:
		return "trace";
	case SECCOMP_RET_LOG:
		return "log";
	case SECCOMP_RET_ALLOW:
		return "allow";
	case SECCOMP_RET_USER_NOTIF:
		return "notify";
	}
	return "kill"; /* unknown actions kill the process */
}

static const char *arch_short_name(uint32_t token)
{
	switch (token) {
	case SCMP_ARCH_X86_64:
		return "x86_64";
	case SCMP_ARCH_X86:
		return "x86";
	case SCMP_ARCH_X32:
		return "x32";
	case SCMP_ARCH_AARCH64:
		return "aarch64";
	case SCMP_ARCH_ARM:
		return "arm";
	case SCMP_ARCH_PPC64LE:
		return "ppc64le";
	case SCMP_ARCH_S390X:
		return "s390x";
	case SCMP_ARCH_RISCV64:
		return "riscv64";
	}
	for (size_t i = 0; i < ARRAY_SIZE(arch_names); i++)
		if (arch_names[i].token == token)
			return arch_names[i].alias;
	return "unknown";
}

int sbx_syscall_name(uint32_t arch, int32_t nr, char *buf, size_t len, const char **ret_arch)
{
	uint32_t a = arch;
	char *name;

	/* x32 calls arrive with the x86_64 audit arch and __X32_SYSCALL_BIT in the number. */
	if (arch == SCMP_ARCH_X86_64 && nr >= 0 && (nr & 0x40000000))
		a = SCMP_ARCH_X32;
	if (ret_arch)
		*ret_arch = arch_short_name(a);
	name = seccomp_syscall_resolve_num_arch(a, nr);
	if (!name || !*name) {
		free(name);
		snprintf(buf, len, "nr_%d", (int)nr);
		return -ENOENT;
	}
	snprintf(buf, len, "%s", name);
	free(name);
	return 0;
}
