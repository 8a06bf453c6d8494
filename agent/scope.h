/* SPDX-License-Identifier: MIT */
/* The tasks' systemd scope on cgroup v2 under systemd (agent/scope.c). */
#pragma once

#include <sys/types.h>

struct agent;

int scope_setup(struct agent *a, const char **ret_base);
int scope_adopt_shim(struct agent *a, pid_t pid);
