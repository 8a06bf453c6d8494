/* SPDX-License-Identifier: MIT */
/* The per-client rate limit of the refused requests' log (collector/refuse_log.h). */
#include "collector/refuse_log.h"

#include <stdio.h>
#include <string.h>

void refuse_log_init(struct refuse_log *l)
{
	memset(l, 0, sizeof(*l));
	pthread_mutex_init(&l->lock, NULL);
}

void refuse_log_fini(struct refuse_log *l)
{
	pthread_mutex_destroy(&l->lock);
}

static void say(struct refuse_log_missed *missed, size_t *n, const char *key, uint64_t count)
{
	if (!count || *n >= REFUSE_LOG_MISSED_MAX)
		return;
	snprintf(missed[*n].key, sizeof(missed[*n].key), "%s", key);
	missed[*n].count = count;
	(*n)++;
}

/* The client's entry: its own, else a free one, else the one seen least recently (whose
 * unlogged count is said now). */
static struct refuse_log_client *client_of(struct refuse_log *l, const char *key, uint64_t win,
					   struct refuse_log_missed *missed, size_t *n)
{
	struct refuse_log_client *c, *pick = NULL;

	for (size_t i = 0; i < REFUSE_LOG_CLIENTS; i++) {
		c = &l->clients[i];
		if (c->key[0] && strncmp(c->key, key, sizeof(c->key) - 1) == 0)
			return c;
		if (!pick || (pick->key[0] && (!c->key[0] || c->window < pick->window)))
			pick = c;
	}
	if (pick->key[0])
		say(missed, n, pick->key, pick->unlogged);
	memset(pick, 0, sizeof(*pick));
	snprintf(pick->key, sizeof(pick->key), "%s", key);
	pick->window = win;
	return pick;
}

bool refuse_log_allow(struct refuse_log *l, const char *key, uint64_t now_s,
		      struct refuse_log_missed *missed, size_t *n_missed)
{
	uint64_t win = now_s / REFUSE_LOG_WINDOW_S;
	struct refuse_log_client *c;
	bool ok = false;

	*n_missed = 0;
	if (!key || !*key)
		key = "?";
	pthread_mutex_lock(&l->lock);
	if (l->window != win) {
		say(missed, n_missed, "", l->held);
		l->held = 0;
		l->window = win;
		l->logged = 0;
	}
	c = client_of(l, key, win, missed, n_missed);
	if (c->window != win) {
		say(missed, n_missed, c->key, c->unlogged);
		c->unlogged = 0;
		c->window = win;
		c->logged = 0;
	}
	if (c->logged < REFUSE_LOG_PER_CLIENT && l->logged < REFUSE_LOG_ALL) {
		c->logged++;
		l->logged++;
		ok = true;
	} else if (c->logged < REFUSE_LOG_PER_CLIENT) {
		l->held++; /* the overall cap: said at the next window, for all clients */
	} else {
		c->unlogged++;
	}
	pthread_mutex_unlock(&l->lock);
	return ok;
}
