/* SPDX-License-Identifier: MIT */
/*
 * libbpf's messages, for the programs' mains (corrald, the test and benchmark helpers): the
 * library code in bpf/ never sets libbpf's print function. Usage, first thing in main:
 *	libbpf_set_print(bpf_print_env);
 * Silent unless CORRAL_BPF_DEBUG is set to something other than 0: then stderr (verifier logs).
 */
#pragma once

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/libbpf.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static inline int bpf_print_env(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	static int on = -1;

	(void)level;
	if (on < 0) {
		const char *e = getenv("CORRAL_BPF_DEBUG");

		on = e && *e && strcmp(e, "0");
	}
	return on ? vfprintf(stderr, fmt, ap) : 0;
}
#pragma GCC diagnostic pop
