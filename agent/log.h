/* SPDX-License-Identifier: MIT */
/* Agent logging: stderr with sd-daemon "<N>" priority prefixes, which journald parses. */
#pragma once

#include <syslog.h>
#include "common/macro.h"

void log_set_max_level(int level);
int log_level_from_string(const char *s);
_printf_(2, 3) void log_full(int level, const char *fmt, ...);

#define log_debug(...)	 log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)	 log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...)	 log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...)	 log_full(LOG_ERR, __VA_ARGS__)
