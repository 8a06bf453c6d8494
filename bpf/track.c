/* SPDX-License-Identifier: MIT */
/* Task membership helpers shared by the BPF loaders. See track.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "bpf/track.h"
#include "common/macro.h"

void *track_find(void *table, size_t stride, uint32_t n, uint64_t key)
{
	for (uint32_t i = 0; i < n; i++) {
		struct track_slot *s = (struct track_slot *)((char *)table + (size_t)i * stride);

		if (s->used && s->key == key)
			return s;
	}
	return NULL;
}

/* splitmix64's finalizer: task keys are often sequential; this spreads them over the cells. */
static uint32_t index_hash(const struct track_index *ix, uint64_t key)
{
	key ^= key >> 30;
	key *= 0xbf58476d1ce4e5b9ULL;
	key ^= key >> 27;
	key *= 0x94d049bb133111ebULL;
	key ^= key >> 31;
	return (uint32_t)key & ix->mask;
}

static int64_t index_cell(const struct track_index *ix, uint64_t key)
{
	if (!ix->cells)
		return -1;
	for (uint32_t i = index_hash(ix, key);; i = (i + 1) & ix->mask) {
		const struct track_index_cell *c = &ix->cells[i];

		if (c->val == TRACK_INDEX_EMPTY)
			return -1;
		if (c->key == key)
			return i;
	}
}

static struct track_index_cell *index_cells(uint32_t cap)
{
	struct track_index_cell *cells = malloc((size_t)cap * sizeof(*cells));

	for (uint32_t i = 0; cells && i < cap; i++)
		cells[i] = (struct track_index_cell){.val = TRACK_INDEX_EMPTY};
	return cells;
}

int track_index_init(struct track_index *ix, uint32_t n)
{
	uint32_t cap = 16;

	if (n > (1u << 30))
		return -EINVAL;
	while (cap < 2 * (uint64_t)n)
		cap <<= 1;
	*ix = (struct track_index){.cells = index_cells(cap), .mask = cap - 1, .sized = true};
	return ix->cells ? 0 : -ENOMEM;
}

void track_index_free(struct track_index *ix)
{
	free(ix->cells);
	*ix = (struct track_index){0};
}

static void index_insert(struct track_index *ix, uint64_t key, uint64_t val)
{
	uint32_t i = index_hash(ix, key);

	while (ix->cells[i].val != TRACK_INDEX_EMPTY)
		i = (i + 1) & ix->mask;
	ix->cells[i] = (struct track_index_cell){.key = key, .val = val};
}

/* A growing index at half full: twice the cells (256 at first), every key moved over. */
static int index_grow(struct track_index *ix)
{
	uint32_t cap = ix->cells ? 2 * (ix->mask + 1) : 256;
	struct track_index old = *ix;

	if (ix->cells && ix->mask >= (1u << 30))
		return -ENOSPC;
	ix->cells = index_cells(cap);
	if (!ix->cells) {
		*ix = old;
		return -ENOMEM;
	}
	ix->mask = cap - 1;
	for (uint32_t i = 0; old.cells && i <= old.mask; i++)
		if (old.cells[i].val != TRACK_INDEX_EMPTY)
			index_insert(ix, old.cells[i].key, old.cells[i].val);
	free(old.cells);
	return 0;
}

int track_index_put(struct track_index *ix, uint64_t key, uint64_t val)
{
	int64_t at;

	if (val > INT64_MAX)
		return -EINVAL;
	at = index_cell(ix, key);
	if (at >= 0) {
		ix->cells[at].val = val;
		return 0;
	}
	if (!ix->sized && 2 * ((uint64_t)ix->n + 1) > (ix->cells ? ix->mask + 1ULL : 0)) {
		int r = index_grow(ix);

		if (r < 0)
			return r;
	}
	/* at least one free cell always stays, so every probe ends */
	if (!ix->cells || ix->n + 1 > ix->mask)
		return -ENOSPC;
	index_insert(ix, key, val);
	ix->n++;
	return 0;
}

/* Backward shift: each later cell of the run moves into the hole unless its home lies
 * cyclically in (hole, cell]; a lookup then never meets a gap before its key. */
static void index_del_at(struct track_index *ix, uint32_t hole)
{
	for (uint32_t j = (hole + 1) & ix->mask; ix->cells[j].val != TRACK_INDEX_EMPTY;
	     j = (j + 1) & ix->mask) {
		uint32_t home = index_hash(ix, ix->cells[j].key);

		if (((j - home) & ix->mask) >= ((j - hole) & ix->mask)) {
			ix->cells[hole] = ix->cells[j];
			hole = j;
		}
	}
	ix->cells[hole] = (struct track_index_cell){.val = TRACK_INDEX_EMPTY};
	ix->n--;
}

void track_index_del(struct track_index *ix, uint64_t key)
{
	int64_t at = index_cell(ix, key);

	if (at >= 0)
		index_del_at(ix, (uint32_t)at);
}

bool track_index_del_val(struct track_index *ix, uint64_t key, uint64_t val)
{
	int64_t at = index_cell(ix, key);

	if (at < 0 || ix->cells[at].val != val)
		return false;
	index_del_at(ix, (uint32_t)at);
	return true;
}

int64_t track_index_get(const struct track_index *ix, uint64_t key)
{
	int64_t at = index_cell(ix, key);

	return at < 0 ? -1 : (int64_t)ix->cells[at].val;
}

void *track_index_find(const struct track_index *ix, void *table, size_t stride, uint64_t key)
{
	int64_t slot = track_index_get(ix, key);
	struct track_slot *s;

	if (slot < 0)
		return NULL;
	s = (struct track_slot *)((char *)table + (size_t)slot * stride);
	return s->used && s->key == key ? s : NULL;
}

/* The cgroup id of a cgroup2 directory is its kernfs node id: the file handle's 8 bytes. */
int track_cgroup_id(int dirfd, uint64_t *ret)
{
	struct {
		struct file_handle fh;
		uint64_t id;
	} h = {.fh.handle_bytes = sizeof(uint64_t)};
	struct stat st;
	int mount_id;

	if (name_to_handle_at(dirfd, "", &h.fh, &mount_id, AT_EMPTY_PATH) == 0 &&
	    h.fh.handle_bytes == sizeof(uint64_t)) {
		memcpy(ret, h.fh.f_handle, sizeof(uint64_t));
		return 0;
	}
	if (fstat(dirfd, &st) < 0)
		return -errno;
	*ret = st.st_ino;
	return 0;
}

int track_add_proc(int map_fd, pid_t tgid, const void *value)
{
	uint32_t k = (uint32_t)tgid;

	if (bpf_map_update_elem(map_fd, &k, value, BPF_NOEXIST) < 0)
		return errno == EEXIST ? -EBUSY : errno == E2BIG ? -ENOSPC : -errno;
	return 0;
}

/* Keys are collected first and deleted after the walk: deleting during get_next_key restarts
 * the walk. */
int track_delete_by_task(int map_fd, size_t ksize, size_t vsize, uint64_t task_key, uint32_t max)
{
	_cleanup_free_ unsigned char *keys = NULL;
	unsigned char cur[32], next[32], val[256];
	size_t n = 0, cap = 0, deleted = 0;
	bool first = true;

	if (ksize > sizeof(cur) || vsize > sizeof(val) || vsize < sizeof(task_key))
		return -EINVAL;
	for (uint32_t i = 0; i <= max; i++) {
		if (bpf_map_get_next_key(map_fd, first ? NULL : cur, next) < 0)
			break;
		first = false;
		memcpy(cur, next, ksize);
		if (bpf_map_lookup_elem(map_fd, cur, val) < 0)
			continue;
		if (memcmp(val, &task_key, sizeof(task_key)))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			unsigned char *nk = realloc(keys, nc * ksize);

			if (!nk)
				return -ENOMEM;
			keys = nk;
			cap = nc;
		}
		memcpy(keys + n * ksize, cur, ksize);
		n++;
	}
	for (size_t i = 0; i < n; i++)
		if (bpf_map_delete_elem(map_fd, keys + i * ksize) == 0)
			deleted++;
	return deleted > INT32_MAX ? INT32_MAX : (int)deleted;
}

void track_probe_kernel(struct track_kernel *ret)
{
	static const char *const tps[] = {"btf_trace_sched_process_fork",
					  "btf_trace_sched_process_exit",
					  "btf_trace_sched_process_exec", "btf_trace_rss_stat"};
	static struct track_kernel k;
	static bool probed;
	struct btf *btf;

	if (!probed) {
		probed = true;
		btf = btf__load_vmlinux_btf();
		if (btf) {
			k.tp_btf = true;
			for (size_t i = 0; i < ARRAY_SIZE(tps); i++)
				if (btf__find_by_name_kind(btf, tps[i], BTF_KIND_TYPEDEF) < 0)
					k.tp_btf = false;
			k.task_kfuncs =
			    btf__find_by_name_kind(btf, "bpf_task_acquire", BTF_KIND_FUNC) >= 0 &&
			    btf__find_by_name_kind(btf, "bpf_task_release", BTF_KIND_FUNC) >= 0;
			btf__free(btf);
		}
	}
	*ret = k;
}

int track_map_read_all(int map_fd, uint32_t chunk, void *keys, void *vals,
		       void (*fn)(void *ctx, uint32_t n), void *ctx)
{
	uint64_t in = 0, out = 0;
	bool first = true;
	LIBBPF_OPTS(bpf_map_batch_opts, o);

	for (;;) {
		__u32 n = chunk;
		int r = bpf_map_lookup_batch(map_fd, first ? NULL : &in, &out, keys, vals, &n, &o);
		int e = r < 0 ? errno : 0;

		if (r < 0 && e != ENOENT)
			return -e;
		fn(ctx, n);
		if (e == ENOENT)
			return 0;
		in = out;
		first = false;
	}
}
