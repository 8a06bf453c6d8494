/* SPDX-License-Identifier: MIT */
/*
 * Node energy from RAPL through the powercap sysfs interface (agent/energy.c): the CPU
 * packages' and DRAM zones' energy counters, read once per node.sample interval, their
 * wrap-around (max_energy_range_uj) handled. The root is configurable ([energy]
 * powercap_root, default /sys/class/powercap) so that tests can point it at a stand-in tree.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ENERGY_ZONES_MAX 64

enum energy_kind { ENERGY_PACKAGE, ENERGY_DRAM, _ENERGY_KIND_MAX };

struct energy_zone {
	char dir[512]; /* <root>/intel-rapl:0[:1] */
	enum energy_kind kind;
	uint64_t max_range_uj; /* the counter wraps to 0 after this */
	uint64_t last_uj;
};

struct energy_meter {
	size_t n;
	struct energy_zone z[ENERGY_ZONES_MAX];
};

/*
 * The package zones (name "package-N") and DRAM zones (name "dram") under root: the entries
 * named intel-rapl:* (the powercap class lists subzones beside their parents), each read once
 * as a baseline. -ENOENT when root has none (no RAPL: the node reports no CPU energy).
 */
int energy_open(const char *root, struct energy_meter *ret);
/*
 * Joules per kind since the previous call (or energy_open): per zone, the counter's increase,
 * or, when it went down, (max_range - last) + now (one wrap; the interval must be shorter than
 * a wrap: at 250 W a 2^32 uJ range wraps every 17 s, the usual 2^38 every 18 min). A zone
 * that cannot be read adds nothing and keeps its last value: -EIO after the others are read.
 */
int energy_read(struct energy_meter *m, double ret_j[_ENERGY_KIND_MAX]);
/*
 * The same in whole microjoules (the counters' unit: shares of it are apportioned exactly).
 * advance false: a look at the energy since the last advancing read that leaves the baseline
 * where it is (a task ending within a period, agent/node_sample.c).
 */
int energy_read_uj(struct energy_meter *m, uint64_t ret_uj[_ENERGY_KIND_MAX], bool advance);
