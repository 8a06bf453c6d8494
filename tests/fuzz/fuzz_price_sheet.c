/* SPDX-License-Identifier: MIT */
/*
 * Fuzz the price sheet parser (collector/prices.c: [prices], overrides, [node_class:]/[node:],
 * [shared:NAME], [carbon]): never crash or read past the input; on failure a message naming
 * what is wrong; on success every price finite and >= 0, the counts within their bounds, and
 * every [shared:] section complete.
 */
#include "collector/prices.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_set(const struct price_set *s)
{
	for (int u = 0; u < _PRICE_MAX; u++)
		if (!isfinite(s->p[u]) || s->p[u] < 0)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct price_sheet ps;
	char err[512] = "";
	char *text = malloc(size + 1);
	int r;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	r = price_sheet_parse(text, &ps, err, sizeof(err));
	free(text);
	if (r != 0) {
		if (r != -EINVAL || !err[0])
			abort();
		return 0;
	}
	if (!ps.currency[0] || ps.n_overrides > PRICE_OVERRIDES_MAX ||
	    ps.n_classes > PRICE_OVERRIDES_MAX || ps.n_nodes > PRICE_OVERRIDES_MAX ||
	    ps.n_shared > PRICE_SHARED_MAX || ps.n_zones > PRICE_CARBON_ZONES_MAX)
		abort();
	check_set(&ps.base);
	for (size_t i = 0; i < ps.n_overrides; i++)
		check_set(&ps.ov[i].set);
	for (size_t i = 0; i < ps.n_classes; i++)
		check_set(&ps.classes[i].set);
	for (size_t i = 0; i < ps.n_nodes; i++)
		check_set(&ps.nodes[i].set);
	for (size_t i = 0; i < ps.n_shared; i++)
		if (!ps.shared[i].amount_set || !ps.shared[i].match_set || !ps.shared[i].spread_set)
			abort();
	/* every zone has an intensity and patterns; a node's zone is one of them or none */
	for (size_t i = 0; i < ps.n_zones; i++) {
		double g;

		if (!ps.zones[i].nodes[0] || (ps.zones[i].kind != PRICE_CARBON_CONSTANT &&
					      ps.zones[i].kind != PRICE_CARBON_SERIES))
			abort();
		if (ps.zones[i].kind == PRICE_CARBON_CONSTANT &&
		    (price_sheet_carbon_zone(&ps, (int)i, "2026-12-01", &g) != 0 || !isfinite(g) ||
		     g < 0 || g > 100000))
			abort();
	}
	if (price_sheet_carbon_zone_of(&ps, "se-1") >= (int)ps.n_zones)
		abort();
	return 0;
}
