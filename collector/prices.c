/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <ini.h>

#include "collector/prices.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/fileio.h"
#include "common/parse.h"

static const char *const unit_names[_PRICE_MAX] = {
    [PRICE_CPU_CORE_HOUR] = "cpu_core_hour", [PRICE_MEMORY_GIB_HOUR] = "memory_gib_hour",
    [PRICE_GPU_HOUR] = "gpu_hour",	     [PRICE_IO_READ_GIB] = "io_read_gib",
    [PRICE_IO_WRITE_GIB] = "io_write_gib",   [PRICE_NET_GIB] = "net_gib",
};

const char *price_unit_name(enum price_unit u)
{
	return (unsigned)u < _PRICE_MAX ? unit_names[u] : NULL;
}

struct parse_ctx {
	struct price_sheet *ps;
	bool base_set[_PRICE_MAX];
	bool currency_set;
	bool ov_set[PRICE_OVERRIDES_MAX][_PRICE_MAX];
	bool class_set[PRICE_OVERRIDES_MAX][_PRICE_MAX];
	bool node_set[PRICE_OVERRIDES_MAX][_PRICE_MAX];
	char err[256];
};

static int find_unit(const char *name)
{
	for (int i = 0; i < _PRICE_MAX; i++)
		if (strcmp(name, unit_names[i]) == 0)
			return i;
	return -1;
}

/* "label:KEY=VALUE" -> override slot index, creating it; -EINVAL with c->err set. */
static int override_slot(struct parse_ctx *c, const char *section)
{
	struct price_sheet *ps = c->ps;
	const char *kv = section + strlen("label:");
	const char *eq = strchr(kv, '=');
	size_t kl, vl;

	if (!eq || eq == kv || !eq[1])
		return err_set(c->err, sizeof(c->err), -EINVAL, "[%s]: expected [label:KEY=VALUE]",
			       section);
	kl = (size_t)(eq - kv);
	vl = strlen(eq + 1);
	if (kl >= PRICE_LABEL_MAX || vl >= PRICE_LABEL_MAX)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%.64s...]: label key/value too long", section);
	if (!ps->override_key[0]) {
		memcpy(ps->override_key, kv, kl);
		ps->override_key[kl] = 0;
	} else if (strlen(ps->override_key) != kl || strncmp(ps->override_key, kv, kl) != 0)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%s]: all overrides must use one label key (first was '%s')",
			       section, ps->override_key);
	for (size_t i = 0; i < ps->n_overrides; i++)
		if (strcmp(ps->ov[i].value, eq + 1) == 0)
			return (int)i;
	if (ps->n_overrides >= PRICE_OVERRIDES_MAX)
		return err_set(c->err, sizeof(c->err), -EINVAL, "[%s]: more than %d overrides",
			       section, PRICE_OVERRIDES_MAX);
	memcpy(ps->ov[ps->n_overrides].value, eq + 1, vl + 1);
	for (int u = 0; u < _PRICE_MAX; u++)
		ps->ov[ps->n_overrides].set.p[u] = -1; /* inherit, resolved after parsing */
	return (int)ps->n_overrides++;
}

/* "node_class:NAME" / "node:NAME" -> slot index in v[] (*n of them), creating it. */
static int named_slot(struct parse_ctx *c, const char *section, const char *name,
		      struct price_override *v, size_t *n)
{
	size_t l = strlen(name);

	if (l == 0 || l >= PRICE_LABEL_MAX)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%.64s]: expected a name of 1..%d bytes", section,
			       PRICE_LABEL_MAX - 1);
	for (size_t i = 0; i < *n; i++)
		if (strcmp(v[i].value, name) == 0)
			return (int)i;
	if (*n >= PRICE_OVERRIDES_MAX)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%.64s]: more than %d such sections", section, PRICE_OVERRIDES_MAX);
	memcpy(v[*n].value, name, l + 1);
	for (int u = 0; u < _PRICE_MAX; u++)
		v[*n].set.p[u] = -1;
	return (int)(*n)++;
}

/* [carbon] / [carbon:ZONE] gco2e_per_kwh (a constant) or series (a file): one of them; a zone
 * also nodes (its patterns). kind/g/path: the section's fields; sec: its name for messages. */
static int set_carbon_key(struct parse_ctx *c, const char *sec, int *kind, double *g, char *path,
			  size_t pathlen, char *nodes, size_t nodeslen, const char *name,
			  const char *value)
{
	if (nodes && strcmp(name, "nodes") == 0) {
		bool any = false;

		if (nodes[0])
			return err_set(c->err, sizeof(c->err), -EINVAL, "[%s] nodes: set twice",
				       sec);
		for (const char *v = value; *v; v++)
			if (*v != ',' && *v != ' ' && *v != '\t')
				any = true;
		if (!any || strlen(value) >= nodeslen)
			return err_set(c->err, sizeof(c->err), -EINVAL,
				       "[%s] nodes: expected node name patterns, comma-separated, "
				       "1..%zu bytes",
				       sec, nodeslen - 1);
		memcpy(nodes, value, strlen(value) + 1);
		return 0;
	}
	if (strcmp(name, "gco2e_per_kwh") != 0 && strcmp(name, "series") != 0)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "unknown key [%s] %s (gco2e_per_kwh or series%s)", sec, name,
			       nodes ? ", and nodes" : "");
	if (*kind != PRICE_CARBON_NONE)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%s] %s: the intensity is set twice (gco2e_per_kwh or series, "
			       "once)",
			       sec, name);
	if (strcmp(name, "gco2e_per_kwh") == 0) {
		if (parse_double(value, g) < 0 || *g > 100000)
			return err_set(c->err, sizeof(c->err), -EINVAL,
				       "[%s] gco2e_per_kwh: expected a number 0..100000, got "
				       "'%.64s'",
				       sec, value);
		*kind = PRICE_CARBON_CONSTANT;
		return 0;
	}
	if (!value[0] || strlen(value) >= pathlen)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%s] series: expected a file name of 1..%zu bytes", sec,
			       pathlen - 1);
	memcpy(path, value, strlen(value) + 1);
	*kind = PRICE_CARBON_SERIES;
	return 0;
}

static int set_carbon(struct parse_ctx *c, const char *section, const char *name, const char *value)
{
	struct price_sheet *ps = c->ps;
	struct price_carbon_zone *z = NULL;
	const char *zname;
	int kind, r;

	if (strcmp(section, "carbon") == 0) {
		kind = ps->carbon;
		r = set_carbon_key(c, section, &kind, &ps->carbon_g_per_kwh, ps->carbon_series_path,
				   sizeof(ps->carbon_series_path), NULL, 0, name, value);
		ps->carbon = kind;
		return r;
	}
	zname = section + strlen("carbon:");
	for (size_t i = 0; i < ps->n_zones; i++)
		if (strcmp(ps->zones[i].name, zname) == 0)
			z = &ps->zones[i];
	if (!z) {
		if (!zname[0] || strlen(zname) >= sizeof(z->name))
			return err_set(c->err, sizeof(c->err), -EINVAL,
				       "[%.64s]: expected a zone name of 1..%zu bytes", section,
				       sizeof(z->name) - 1);
		if (ps->n_zones == PRICE_CARBON_ZONES_MAX)
			return err_set(c->err, sizeof(c->err), -EINVAL,
				       "[%.64s]: more than %d carbon zones", section,
				       PRICE_CARBON_ZONES_MAX);
		z = &ps->zones[ps->n_zones++];
		memcpy(z->name, zname, strlen(zname) + 1);
		z->kind = PRICE_CARBON_NONE;
	}
	return set_carbon_key(c, section, &z->kind, &z->g_per_kwh, z->series_path,
			      sizeof(z->series_path), z->nodes, sizeof(z->nodes), name, value);
}

/* One key of the sheet: 0, or -EINVAL with c->err set. */
/* [shared:NAME] amount, match, spread (every one required, once). */
static int set_shared(struct parse_ctx *c, const char *section, const char *name, const char *value)
{
	struct price_sheet *ps = c->ps;
	const char *sname = section + strlen("shared:");
	struct price_shared *sh = NULL;

	for (size_t i = 0; i < ps->n_shared; i++)
		if (strcmp(ps->shared[i].name, sname) == 0)
			sh = &ps->shared[i];
	if (!sh) {
		if (!sname[0] || strlen(sname) >= sizeof(sh->name))
			return err_set(c->err, sizeof(c->err), -EINVAL,
				       "[%.64s]: expected a name of 1..%zu bytes", section,
				       sizeof(sh->name) - 1);
		if (ps->n_shared == PRICE_SHARED_MAX)
			return err_set(c->err, sizeof(c->err), -EINVAL,
				       "[%.64s]: more than %d shared sections", section,
				       PRICE_SHARED_MAX);
		sh = &ps->shared[ps->n_shared++];
		memcpy(sh->name, sname, strlen(sname) + 1);
	}
	if (strcmp(name, "amount") == 0) {
		double v;

		if (sh->amount_set)
			return err_set(c->err, sizeof(c->err), -EINVAL, "[%s] amount: set twice",
				       section);
		if (parse_double(value[0] == '-' ? value + 1 : value, &v) < 0 || v > 1e13)
			return err_set(
			    c->err, sizeof(c->err), -EINVAL,
			    "[%s] amount: expected an amount per month, -1e13..1e13, got "
			    "'%.64s'",
			    section, value);
		sh->cents = llround(v * 100.0) * (value[0] == '-' ? -1 : 1);
		sh->amount_set = true;
		return 0;
	}
	if (strcmp(name, "match") == 0) {
		const char *eq;

		if (sh->match_set)
			return err_set(c->err, sizeof(c->err), -EINVAL, "[%s] match: set twice",
				       section);
		sh->match_set = true;
		if (strcmp(value, "all") == 0) {
			sh->match = PRICE_MATCH_ALL;
			return 0;
		}
		if (strncmp(value, "account:", 8) == 0 && value[8] &&
		    strlen(value + 8) < sizeof(sh->match_value)) {
			sh->match = PRICE_MATCH_ACCOUNT;
			memcpy(sh->match_value, value + 8, strlen(value + 8) + 1);
			return 0;
		}
		eq = strncmp(value, "label:", 6) == 0 ? strchr(value + 6, '=') : NULL;
		if (eq && eq > value + 6 && eq[1] &&
		    (size_t)(eq - value - 6) < sizeof(sh->match_key) &&
		    strlen(eq + 1) < sizeof(sh->match_value)) {
			sh->match = PRICE_MATCH_LABEL;
			memcpy(sh->match_key, value + 6, (size_t)(eq - value - 6));
			memcpy(sh->match_value, eq + 1, strlen(eq + 1) + 1);
			return 0;
		}
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%s] match: expected all, label:KEY=VALUE or account:NAME, got "
			       "'%.64s'",
			       section, value);
	}
	if (strcmp(name, "spread") == 0) {
		if (sh->spread_set)
			return err_set(c->err, sizeof(c->err), -EINVAL, "[%s] spread: set twice",
				       section);
		sh->spread_set = true;
		if (strcmp(value, "proportional") == 0) {
			sh->spread = PRICE_SPREAD_PROPORTIONAL;
			return 0;
		}
		if (strcmp(value, "even") == 0) {
			sh->spread = PRICE_SPREAD_EVEN;
			return 0;
		}
		if (strncmp(value, "to:", 3) == 0 && value[3] &&
		    strlen(value + 3) < sizeof(sh->to_account)) {
			sh->spread = PRICE_SPREAD_TO;
			memcpy(sh->to_account, value + 3, strlen(value + 3) + 1);
			return 0;
		}
		return err_set(
		    c->err, sizeof(c->err), -EINVAL,
		    "[%s] spread: expected proportional, even or to:ACCOUNT, got '%.64s'", section,
		    value);
	}
	return err_set(c->err, sizeof(c->err), -EINVAL,
		       "unknown key [%s] %s (amount, match or spread)", section, name);
}

static int set_key(struct parse_ctx *c, const char *section, const char *name, const char *value)
{
	struct price_sheet *ps = c->ps;
	bool *set;
	double *dst;
	int u, slot;

	if (strcmp(section, "prices") == 0) {
		if (strcmp(name, "currency") == 0) {
			size_t l = strlen(value);

			if (c->currency_set)
				return err_set(c->err, sizeof(c->err), -EINVAL,
					       "[prices] currency: set twice");
			if (l == 0 || l >= sizeof(ps->currency))
				return err_set(c->err, sizeof(c->err), -EINVAL,
					       "[prices] currency: expected 1..%zu characters",
					       sizeof(ps->currency) - 1);
			for (size_t i = 0; i < l; i++)
				if (value[i] <= ' ' || value[i] > '~' || value[i] == '"' ||
				    value[i] == '<' || value[i] == '>' || value[i] == '&' ||
				    value[i] == '\\' || value[i] == ',')
					return err_set(c->err, sizeof(c->err), -EINVAL,
						       "[prices] currency: invalid character");
			memcpy(ps->currency, value, l + 1);
			c->currency_set = true;
			return 0;
		}
		u = find_unit(name);
		if (u < 0)
			return err_set(c->err, sizeof(c->err), -EINVAL, "unknown key [prices] %s",
				       name);
		set = &c->base_set[u];
		dst = &ps->base.p[u];
	} else if (strncmp(section, "label:", 6) == 0) {
		slot = override_slot(c, section);
		if (slot < 0)
			return slot;
		u = find_unit(name);
		if (u < 0)
			return err_set(c->err, sizeof(c->err), -EINVAL, "unknown key [%s] %s",
				       section, name);
		set = &c->ov_set[slot][u];
		dst = &ps->ov[slot].set.p[u];
	} else if (strncmp(section, "node_class:", 11) == 0 || strncmp(section, "node:", 5) == 0) {
		bool cls = section[4] == '_';

		slot = cls ? named_slot(c, section, section + 11, ps->classes, &ps->n_classes)
			   : named_slot(c, section, section + 5, ps->nodes, &ps->n_nodes);
		if (slot < 0)
			return slot;
		u = find_unit(name);
		if (u < 0)
			return err_set(c->err, sizeof(c->err), -EINVAL, "unknown key [%s] %s",
				       section, name);
		set = cls ? &c->class_set[slot][u] : &c->node_set[slot][u];
		dst = cls ? &ps->classes[slot].set.p[u] : &ps->nodes[slot].set.p[u];
	} else if (strcmp(section, "carbon") == 0 || strncmp(section, "carbon:", 7) == 0) {
		return set_carbon(c, section, name, value);
	} else if (strncmp(section, "shared:", 7) == 0) {
		return set_shared(c, section, name, value);
	} else {
		return err_set(c->err, sizeof(c->err), -EINVAL, "unknown section [%s] (key %s)",
			       section, name);
	}
	if (*set)
		return err_set(c->err, sizeof(c->err), -EINVAL, "[%s] %s: set twice", section,
			       name);
	if (parse_double(value, dst) < 0 || *dst > 1e9)
		return err_set(c->err, sizeof(c->err), -EINVAL,
			       "[%s] %s: expected a price >= 0 and <= 1e9, got '%.64s'", section,
			       name, value);
	*set = true;
	return 0;
}

static int ini_cb(void *user, const char *section, const char *name, const char *value)
{
	return set_key(user, section, name, value) == 0;
}

int price_sheet_parse(const char *text, struct price_sheet *ret, char *err, size_t errlen)
{
	struct parse_ctx c = {.ps = ret};
	int r;

	memset(ret, 0, sizeof(*ret));
	r = ini_parse_string(text, ini_cb, &c);
	if (r != 0)
		return err_set(err, errlen, -EINVAL, "line %d: %s", r,
			       c.err[0] ? c.err : "syntax error");
	for (int u = 0; u < _PRICE_MAX; u++)
		if (!c.base_set[u])
			return err_set(err, errlen, -EINVAL, "[prices] %s: missing", unit_names[u]);
	if (!c.currency_set)
		strcpy(ret->currency, "EUR");
	for (size_t i = 0; i < ret->n_shared; i++) {
		const struct price_shared *sh = &ret->shared[i];

		if (!sh->amount_set || !sh->match_set || !sh->spread_set)
			return err_set(err, errlen, -EINVAL, "[shared:%s] %s: missing", sh->name,
				       !sh->amount_set	? "amount"
				       : !sh->match_set ? "match"
							: "spread");
	}
	for (size_t i = 0; i < ret->n_zones; i++) {
		const struct price_carbon_zone *z = &ret->zones[i];

		if (z->kind == PRICE_CARBON_NONE || !z->nodes[0])
			return err_set(err, errlen, -EINVAL, "[carbon:%s] %s: missing", z->name,
				       !z->nodes[0] ? "nodes" : "gco2e_per_kwh or series");
	}
	for (size_t i = 0; i < ret->n_overrides; i++)
		for (int u = 0; u < _PRICE_MAX; u++)
			if (!c.ov_set[i][u])
				ret->ov[i].set.p[u] = ret->base.p[u];
	for (size_t i = 0; i < ret->n_classes; i++)
		for (int u = 0; u < _PRICE_MAX; u++)
			if (!c.class_set[i][u])
				ret->classes[i].set.p[u] = ret->base.p[u];
	for (size_t i = 0; i < ret->n_nodes; i++)
		for (int u = 0; u < _PRICE_MAX; u++)
			if (!c.node_set[i][u])
				ret->nodes[i].set.p[u] = ret->base.p[u];
	return 0;
}

/* A series file named in the sheet at path: relative to the sheet's directory. */
static int series_load(const char *path, const char *s, struct carbon_days *ret, char *err,
		       size_t errlen)
{
	const char *b = strrchr(path, '/');
	_cleanup_free_ char *full = NULL;

	if (s[0] != '/' && b && asprintf(&full, "%.*s/%s", (int)(b - path), path, s) < 0)
		return -ENOMEM;
	return carbon_series_load(full ?: s, ret, err, errlen);
}

int price_sheet_load(const char *path, struct price_sheet *ret, char *err, size_t errlen)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r;

	r = read_regular_file(path, 1 << 20, &buf, &len);
	if (r < 0)
		return err_set(err, errlen, r, "%s: %s", path, regular_file_strerror(r));
	if (strlen(buf) != len)
		return err_set(err, errlen, -EINVAL, "%s: contains a NUL byte", path);
	r = price_sheet_parse(buf, ret, err, errlen);
	if (r < 0 && strncmp(err, "line ", 5) == 0) {
		_cleanup_free_ char *msg = strdup(err + 5);

		/* "FILE:N: ..." */
		if (msg)
			snprintf(err, errlen, "%s:%s", path, msg);
	}
	if (r == 0) {
		const char *b = strrchr(path, '/');

		snprintf(ret->name, sizeof(ret->name), "%s", b ? b + 1 : path);
	}
	if (r == 0 && ret->carbon == PRICE_CARBON_SERIES)
		r = series_load(path, ret->carbon_series_path, &ret->carbon_days, err, errlen);
	for (size_t i = 0; r == 0 && i < ret->n_zones; i++)
		if (ret->zones[i].kind == PRICE_CARBON_SERIES)
			r = series_load(path, ret->zones[i].series_path, &ret->zones[i].days, err,
					errlen);
	return r;
}

int price_sheet_carbon(const struct price_sheet *ps, const char *day, double *ret)
{
	switch (ps->carbon) {
	case PRICE_CARBON_CONSTANT:
		*ret = ps->carbon_g_per_kwh;
		return 0;
	case PRICE_CARBON_SERIES:
		return carbon_days_get(&ps->carbon_days, day, ret);
	default:
		return -ENOENT;
	}
}

bool price_sheet_has_carbon(const struct price_sheet *ps)
{
	return ps->carbon != PRICE_CARBON_NONE || ps->n_zones > 0;
}

/* Whether node matches one of the comma-separated fnmatch patterns of list. */
static bool nodes_match(const char *list, const char *node)
{
	char pat[sizeof(((struct price_carbon_zone *)0)->nodes)];

	for (const char *p = list; *p;) {
		size_t l;

		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		l = strcspn(p, ",");
		if (l == 0)
			break;
		memcpy(pat, p, l);
		while (l > 0 && (pat[l - 1] == ' ' || pat[l - 1] == '\t'))
			l--;
		pat[l] = 0;
		if (l && fnmatch(pat, node, 0) == 0)
			return true;
		p += strcspn(p, ",");
	}
	return false;
}

int price_sheet_carbon_zone_of(const struct price_sheet *ps, const char *node)
{
	for (size_t i = 0; i < ps->n_zones; i++)
		if (nodes_match(ps->zones[i].nodes, node ?: ""))
			return (int)i;
	return -1;
}

int price_sheet_carbon_zone(const struct price_sheet *ps, int z, const char *day, double *ret)
{
	const struct price_carbon_zone *x;

	if (z < 0 || (size_t)z >= ps->n_zones)
		return price_sheet_carbon(ps, day, ret);
	x = &ps->zones[z];
	if (x->kind == PRICE_CARBON_CONSTANT) {
		*ret = x->g_per_kwh;
		return 0;
	}
	return carbon_days_get(&x->days, day, ret);
}

const struct price_set *price_sheet_for(const struct price_sheet *ps, const char *value)
{
	if (value && ps->override_key[0])
		for (size_t i = 0; i < ps->n_overrides; i++)
			if (strcmp(ps->ov[i].value, value) == 0)
				return &ps->ov[i].set;
	return &ps->base;
}

const struct price_set *price_sheet_for_node(const struct price_sheet *ps, const char *node,
					     const char *price_class)
{
	if (node)
		for (size_t i = 0; i < ps->n_nodes; i++)
			if (strcmp(ps->nodes[i].value, node) == 0)
				return &ps->nodes[i].set;
	if (price_class)
		for (size_t i = 0; i < ps->n_classes; i++)
			if (strcmp(ps->classes[i].value, price_class) == 0)
				return &ps->classes[i].set;
	return &ps->base;
}
