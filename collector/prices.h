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
 * Every key of [prices] except currency is required; an override section sets any subset
 * (the rest inherit [prices]). Unknown keys/sections, duplicates, negative or non-numeric
 * prices are errors naming the key.
 */
#pragma once

#include <stddef.h>

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

struct price_sheet {
	char name[64]; /* the file's name (price_sheet_load), for report headers; "" if parsed */
	char currency[16];
	struct price_set base;
	char override_key[PRICE_LABEL_MAX]; /* "" = no overrides */
	size_t n_overrides;
	struct price_override ov[PRICE_OVERRIDES_MAX];
};

const char *price_unit_name(enum price_unit u);
/* Parse INI text; -EINVAL with "line N: ..." in err. */
int price_sheet_parse(const char *text, struct price_sheet *ret, char *err, size_t errlen);
/* Read and parse a file (at most 1 MiB); -errno, message in err. */
int price_sheet_load(const char *path, struct price_sheet *ret, char *err, size_t errlen);
/* The price set for a label value of override_key (NULL/unknown value: base). */
const struct price_set *price_sheet_for(const struct price_sheet *ps, const char *value);
