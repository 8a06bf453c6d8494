/* SPDX-License-Identifier: MIT */
/* Facts about processes and the boot from /proc. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat). */
int proc_start_time(pid_t pid, uint64_t *ret);
/* /proc/sys/kernel/random/boot_id, 36 chars + NUL. */
int read_boot_id(char buf[37]);
