/* SPDX-License-Identifier: MIT */
#pragma once

struct agent;

/* At start (agent/adopt.c), the ended tasks and the live ones (re-adopted) from their state files;
 * cgroups of ours no task owns are removed. */
int adopt_load(struct agent *a);
