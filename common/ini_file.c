/* SPDX-License-Identifier: MIT */
#include "common/ini_file.h"
#include "common/error.h"
#include "common/fileio.h"

#include <errno.h>
#include <ini.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct seen_key {
	char *name; /* "section\nkey": neither may hold a newline */
	int line;
};

struct ini_file_ctx {
	const char *name;
	ini_file_set_fn set;
	void *user;
	const char *const *repeatable;
	/* the line source: a FILE or a string */
	FILE *f;
	const char *s;
	/* line accounting: inih asks for one line per call (longer lines come in pieces) */
	int line;
	bool at_line_start;
	/* the file line of each piece inih read (its own count goes by pieces) */
	int *piece_line;
	size_t npieces, piece_cap;
	struct seen_key *seen;
	size_t nseen, cap;
	char *err;
	size_t errlen;
	int r;
};

static void ctx_account(struct ini_file_ctx *ctx, const char *got)
{
	size_t n = strlen(got);

	if (ctx->at_line_start)
		ctx->line++;
	ctx->at_line_start = n > 0 && got[n - 1] == '\n';
	if (ctx->npieces == ctx->piece_cap) {
		size_t cap = ctx->piece_cap ? ctx->piece_cap * 2 : 64;
		int *v = realloc(ctx->piece_line, cap * sizeof(*v));

		if (!v)
			return; /* a syntax error's line is then the last one read */
		ctx->piece_line = v;
		ctx->piece_cap = cap;
	}
	ctx->piece_line[ctx->npieces++] = ctx->line;
}

static char *reader_file(char *str, int num, void *stream)
{
	struct ini_file_ctx *ctx = stream;
	char *got = fgets(str, num, ctx->f);

	if (got)
		ctx_account(ctx, got);
	return got;
}

static char *reader_string(char *str, int num, void *stream)
{
	struct ini_file_ctx *ctx = stream;
	const char *nl;
	size_t n;

	if (!*ctx->s || num < 2)
		return NULL;
	nl = strchr(ctx->s, '\n');
	n = nl ? (size_t)(nl - ctx->s) + 1 : strlen(ctx->s);
	if (n > (size_t)num - 1)
		n = (size_t)num - 1;
	memcpy(str, ctx->s, n);
	str[n] = 0;
	ctx->s += n;
	ctx_account(ctx, str);
	return str;
}

/* The line a key set before was on, or 0; remembers this one. -ENOMEM, -E2BIG. */
static int seen_check(struct ini_file_ctx *ctx, const char *section, const char *key, int *ret_line)
{
	size_t ls = strlen(section), lk = strlen(key);
	char *name;

	*ret_line = 0;
	for (size_t i = 0; i < ctx->nseen; i++) {
		const char *n = ctx->seen[i].name;

		if (strncmp(n, section, ls) == 0 && n[ls] == '\n' && strcmp(n + ls + 1, key) == 0) {
			*ret_line = ctx->seen[i].line;
			return 0;
		}
	}
	if (ctx->nseen >= INI_FILE_MAX_KEYS)
		return -E2BIG;
	if (ctx->nseen == ctx->cap) {
		size_t cap = ctx->cap ? ctx->cap * 2 : 32;
		struct seen_key *v = realloc(ctx->seen, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		ctx->seen = v;
		ctx->cap = cap;
	}
	name = malloc(ls + lk + 2);
	if (!name)
		return -ENOMEM;
	memcpy(name, section, ls);
	name[ls] = '\n';
	memcpy(name + ls + 1, key, lk + 1);
	ctx->seen[ctx->nseen++] = (struct seen_key){.name = name, .line = ctx->line};
	return 0;
}

static bool is_repeatable(const struct ini_file_ctx *ctx, const char *section, const char *key)
{
	size_t ls = strlen(section);

	for (const char *const *p = ctx->repeatable; p && *p; p++)
		if (strncmp(*p, section, ls) == 0 && (*p)[ls] == '.' &&
		    strcmp(*p + ls + 1, key) == 0)
			return true;
	return false;
}

static int handler(void *user, const char *section, const char *key, const char *value)
{
	struct ini_file_ctx *ctx = user;
	char sub[512];
	int first, r;

	if (ctx->r < 0)
		return 0;
	first = 0;
	r = is_repeatable(ctx, section, key) ? 0 : seen_check(ctx, section, key, &first);
	if (r == -E2BIG)
		err_set(sub, sizeof(sub), r, "more than %d keys", INI_FILE_MAX_KEYS);
	else if (r < 0)
		err_set(sub, sizeof(sub), r, "%s", strerror(-r));
	else if (first)
		r = err_set(sub, sizeof(sub), -EINVAL,
			    "[%s] %s: duplicate key (first set on line %d)", section, key, first);
	else
		r = ctx->set(ctx->user, section, key, value, sub, sizeof(sub));
	if (r < 0) {
		ctx->r = r;
		err_set(ctx->err, ctx->errlen, r, "%s:%d: %s", ctx->name, ctx->line, sub);
		return 0;
	}
	return 1;
}

static int run(struct ini_file_ctx *ctx, ini_reader reader)
{
	int r;

	ctx->at_line_start = true;
	r = ini_parse_stream(reader, ctx, handler, ctx);
	for (size_t i = 0; i < ctx->nseen; i++)
		free(ctx->seen[i].name);
	free(ctx->seen);
	if (r > 0) /* inih's count of pieces, as a line of the file */
		r = (size_t)r <= ctx->npieces ? ctx->piece_line[r - 1] : ctx->line;
	free(ctx->piece_line);
	if (ctx->r < 0)
		return ctx->r;
	if (r == -2)
		return err_set(ctx->err, ctx->errlen, -ENOMEM, "%s: out of memory", ctx->name);
	if (r != 0)
		return err_set(ctx->err, ctx->errlen, -EINVAL,
			       "%s:%d: syntax error (expected [section] or key = value)", ctx->name,
			       r);
	return 0;
}

int ini_file_load(const char *path, ini_file_set_fn set, void *user, const char *const *repeatable,
		  char *err, size_t errlen)
{
	struct ini_file_ctx ctx = {.name = path,
				   .set = set,
				   .user = user,
				   .repeatable = repeatable,
				   .err = err,
				   .errlen = errlen};
	int fd, r;

	fd = open_regular(path);
	if (fd < 0)
		return err_set(err, errlen, fd, "%s: %s", path, regular_file_strerror(fd));
	ctx.f = fdopen(fd, "re");
	if (!ctx.f) {
		r = -errno;
		close(fd);
		return err_set(err, errlen, r, "%s: %s", path, strerror(-r));
	}
	r = run(&ctx, reader_file);
	fclose(ctx.f);
	return r;
}

int ini_file_load_string(const char *name, const char *text, ini_file_set_fn set, void *user,
			 const char *const *repeatable, char *err, size_t errlen)
{
	struct ini_file_ctx ctx = {.name = name,
				   .set = set,
				   .user = user,
				   .repeatable = repeatable,
				   .s = text,
				   .err = err,
				   .errlen = errlen};

	return run(&ctx, reader_string);
}
