/* SPDX-License-Identifier: MIT */
/* The control API on the unix socket (agent/control.c). */
#pragma once

#include <stdint.h>

struct agent;

/* Also sets a->on_task_started and on_task_ended: the replies to launches and waiters. */
int control_listen(struct agent *a);
void control_close_all(struct agent *a);
/* Closes the connections marked dead and those past their timeouts. */
void control_tick(struct agent *a, uint64_t now_mono);
