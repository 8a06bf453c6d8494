/* SPDX-License-Identifier: MIT */
/*
 * Price sheet of the showback/chargeback reports (INI, see docs/reports.md):
 *     [prices]
 *     currency = EUR
 *     cpu_core_hour = 0.031
 *     memory_gib_hour = 0.004
 *     gpu_hour = 1.20
 *     io_read_gib = 0.001
 *     io_write_gib = 0.002
 *     net_gib = 0.01
 *     [label:tier=spot]        ; optional overrides, all on ONE label key
 *     cpu_core_hour = 0.010
 *     [node_class:gpu-h100]    ; optional: the capacity prices of nodes of that class
 *     gpu_hour = 2.10          ; (node.sample price_class; see docs/reports.md "Idle")
 *     [node:n17]               ; optional: one node's own capacity prices (before its class)
 *     cpu_core_hour = 0.02
 *     [carbon]                 ; optional: the carbon intensity applied to the tasks' energy
 *     gco2e_per_kwh = 350      ; a constant, or
 *     series = grid.csv        ; hourly gCO2e/kWh (collector/carbon.h; relative to the sheet)
 *     [carbon:nordic]          ; optional zones: the intensity of the nodes named (fnmatch
 *     nodes = se-*, fi-*       ; patterns, comma-separated; the first zone in the sheet that
 *     gco2e_per_kwh = 30       ; matches a node wins; other nodes get [carbon], if any)
 * Every key of [prices] except currency is required; an override section sets any subset
 * (the rest inherit [prices]). Unknown keys/sections, duplicates, negative or non-numeric
 * prices are errors naming the key.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "collector/carbon.h"

enum price_unit {
	PRICE_CPU_CORE_HOUR,
	PRICE_MEMORY_GIB_HOUR,
	PRICE_GPU_HOUR,
	PRICE_IO_READ_GIB,
	PRICE_IO_WRITE_GIB,
	PRICE_NET_GIB,
	_PRICE_MAX,
};

#define PRICE_OVERRIDES_MAX 64
#define PRICE_LABEL_MAX	    128

struct price_set {
	double p[_PRICE_MAX]; /* currency per unit, >= 0 */
};

struct price_override {
	char value[PRICE_LABEL_MAX]; /* label value; the key is price_sheet.override_key */
	struct price_set set;
};

/* [shared:NAME]: a fixed amount per month spread over the report's groups (docs/reports.md
 * "Shared costs") */
#define PRICE_SHARED_MAX 32
struct price_shared {
	char name[64];
	long long cents; /* amount per month, whole cents (negative: a credit) */
	enum { PRICE_MATCH_ALL, PRICE_MATCH_LABEL, PRICE_MATCH_ACCOUNT } match;
	char match_key[PRICE_LABEL_MAX];
	char match_value[256];
	enum { PRICE_SPREAD_PROPORTIONAL, PRICE_SPREAD_EVEN, PRICE_SPREAD_TO } spread;
	char to_account[256];
	bool amount_set, match_set, spread_set;
};

/* [carbon:NAME]: the carbon intensity of the nodes whose names match one of its patterns */
#define PRICE_CARBON_ZONES_MAX 8
struct price_carbon_zone {
	char name[64];
	int kind; /* PRICE_CARBON_CONSTANT or PRICE_CARBON_SERIES */
	double g_per_kwh;
	char series_path[512];
	char nodes[1024]; /* fnmatch patterns, comma-separated (blanks around them ignored) */
	struct carbon_days days;
};

struct price_sheet {
	char name[64]; /* the file's name (price_sheet_load), for report headers; "" if parsed */
	char currency[16];
	struct price_set base;
	char override_key[PRICE_LABEL_MAX]; /* "" = no overrides */
	size_t n_overrides;
	struct price_override ov[PRICE_OVERRIDES_MAX];
	/* capacity prices: [node_class:NAME] and [node:NAME] (unset keys inherit [prices]; a
	 * node section's unset keys inherit [prices] too, not its class) */
	size_t n_classes, n_nodes;
	struct price_override classes[PRICE_OVERRIDES_MAX];
	struct price_override nodes[PRICE_OVERRIDES_MAX];
	/* [carbon]: none, a constant, or a series (its path; loaded by price_sheet_load) */
	enum { PRICE_CARBON_NONE, PRICE_CARBON_CONSTANT, PRICE_CARBON_SERIES } carbon;
	double carbon_g_per_kwh;
	char carbon_series_path[512];
	struct carbon_days carbon_days;
	size_t n_shared;
	struct price_shared shared[PRICE_SHARED_MAX];
	/* [carbon:ZONE] sections, in sheet order */
	size_t n_zones;
	struct price_carbon_zone zones[PRICE_CARBON_ZONES_MAX];
};
/* The carbon intensity of a UTC day "YYYY-MM-DD", gCO2e/kWh: 0, -ENOENT (no [carbon], or the
 * series has no hour of that day). The default ([carbon]) only: see price_sheet_carbon_zone. */
int price_sheet_carbon(const struct price_sheet *ps, const char *day, double *ret);
/* Whether the sheet sets any carbon intensity ([carbon] or a [carbon:ZONE]). */
bool price_sheet_has_carbon(const struct price_sheet *ps);
/* The zone of a node: the index of the first [carbon:ZONE] whose patterns match it, else -1
 * (the default [carbon]). */
int price_sheet_carbon_zone_of(const struct price_sheet *ps, const char *node);
/* The intensity of zone z (-1: the default) on a UTC day: 0, or -ENOENT (none set, or the
 * series has no hour of that day). */
int price_sheet_carbon_zone(const struct price_sheet *ps, int z, const char *day, double *ret);

const char *price_unit_name(enum price_unit u);
/* Parse INI text; -EINVAL with "line N: ..." in err. */
int price_sheet_parse(const char *text, struct price_sheet *ret, char *err, size_t errlen);
/* Read and parse a file (at most 1 MiB); -errno, message in err. */
int price_sheet_load(const char *path, struct price_sheet *ret, char *err, size_t errlen);
/* The price set for a label value of override_key (NULL/unknown value: base). */
const struct price_set *price_sheet_for(const struct price_sheet *ps, const char *value);
/* The capacity prices of a node: its [node:NAME] section, else its class's [node_class:NAME],
 * else [prices]. */
const struct price_set *price_sheet_for_node(const struct price_sheet *ps, const char *node,
					     const char *price_class);
