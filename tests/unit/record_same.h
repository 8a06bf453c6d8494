/* SPDX-License-Identifier: MIT */
/* Whether two decoded records hold the same fields (the differential checks of the record
 * decoder's fast path against its tree decoder: test_record.c, fuzz_record_decode.c). */
#pragma once

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "accounting/record.h"

static inline bool record_str_same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static inline bool record_json_same(const json_t *a, const json_t *b)
{
	return (!a && !b) || (a && b && json_equal((json_t *)a, (json_t *)b));
}

static inline bool record_same(const struct acct_record *a, const struct acct_record *b)
{
	const struct acct_usage *ua = &a->usage, *ub = &b->usage;

	if (strcmp(a->record_id, b->record_id) != 0 || a->type != b->type ||
	    a->time_ns != b->time_ns || !record_str_same(a->node, b->node))
		return false;
	if (strcmp(a->task.id, b->task.id) != 0 || !record_str_same(a->task.job, b->task.job) ||
	    !record_str_same(a->task.user, b->task.user) || a->task.uid != b->task.uid ||
	    !record_str_same(a->task.account, b->task.account) ||
	    a->task.n_labels != b->task.n_labels)
		return false;
	for (size_t i = 0; i < a->task.n_labels; i++)
		if (strcmp(a->task.labels[i].key, b->task.labels[i].key) != 0 ||
		    strcmp(a->task.labels[i].value, b->task.labels[i].value) != 0)
			return false;
	if (a->request.cpus != b->request.cpus ||
	    a->request.memory_bytes != b->request.memory_bytes ||
	    a->request.pids != b->request.pids || a->request.gpus != b->request.gpus ||
	    a->request.time_limit_s != b->request.time_limit_s ||
	    a->request.cpu_time_limit_s != b->request.cpu_time_limit_s ||
	    a->request.gpu_memory_bytes != b->request.gpu_memory_bytes)
		return false;
	if (ua->wall_ns != ub->wall_ns || ua->cpu_user_ns != ub->cpu_user_ns ||
	    ua->cpu_system_ns != ub->cpu_system_ns ||
	    ua->memory_peak_bytes != ub->memory_peak_bytes ||
	    ua->memory_byte_seconds != ub->memory_byte_seconds ||
	    ua->io_read_bytes != ub->io_read_bytes || ua->io_write_bytes != ub->io_write_bytes ||
	    ua->net_rx_bytes != ub->net_rx_bytes || ua->net_tx_bytes != ub->net_tx_bytes ||
	    ua->gpu_seconds != ub->gpu_seconds ||
	    ua->gpu_memory_peak_bytes != ub->gpu_memory_peak_bytes ||
	    ua->gpu_util_avg != ub->gpu_util_avg || ua->energy.present != ub->energy.present)
		return false;
	for (int p = 0; p < _ACCT_ENERGY_MAX; p++)
		if (ua->energy.j[p] != ub->energy.j[p] || ua->energy.src[p] != ub->energy.src[p])
			return false;
	if (a->exit.status != b->exit.status || a->exit.code != b->exit.code ||
	    a->exit.signal != b->exit.signal ||
	    !record_str_same(a->exit.message, b->exit.message) ||
	    a->exit.oom_kills != b->exit.oom_kills || a->exit.by != b->exit.by)
		return false;
	if (memcmp(a->sources, b->sources, sizeof(a->sources)) != 0 ||
	    !record_json_same(a->extra, b->extra) || !record_json_same(a->event, b->event) ||
	    strcmp(a->prev_hash, b->prev_hash) != 0 || strcmp(a->hash, b->hash) != 0)
		return false;
	if (!a->ns && !b->ns)
		return true;
	/* node.sample (the fast path decodes none): the same encoding */
	if (!a->ns || !b->ns)
		return false;
	{
		char *ea = NULL, *eb = NULL;
		size_t na = 0, nb = 0;
		int ra = acct_record_encode(a, &ea, &na), rb = acct_record_encode(b, &eb, &nb);
		bool same = ra == rb && na == nb && (ra < 0 || memcmp(ea, eb, na) == 0);

		free(ea);
		free(eb);
		return same;
	}
}
