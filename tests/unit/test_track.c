/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of bpf/track.c (the loaders' shared membership helpers) and of the audit trail's
 * option to share the meter's membership map, where neither root nor BPF is needed.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bpf/audit.h"
#include "bpf/cuda.h"
#include "bpf/print.h"
#include "bpf/track.h"

struct row {
	struct track_slot s;
	int payload;
};

static void test_find_used_slot_only(void **state)
{
	struct row t[4] = {{{7, false}, 1}, {{7, true}, 2}, {{9, true}, 3}, {{0, false}, 4}};
	struct row *r;

	r = track_find(t, sizeof(t[0]), 4, 7);
	assert_non_null(r);
	assert_int_equal(r->payload, 2); /* the unused slot with the same key is skipped */
	r = track_find(t, sizeof(t[0]), 4, 9);
	assert_non_null(r);
	assert_int_equal(r->payload, 3);
	assert_null(track_find(t, sizeof(t[0]), 4, 8));
	assert_null(track_find(t, sizeof(t[0]), 2, 9)); /* beyond n: not looked at */
}

/* Any directory has an id (its 8-byte file handle, else its inode number); no fd: EBADF. */
/* The index against a plain table walked slot by slot, through puts, deletes and reuse in a
 * small index (16 cells for 8 slots: long runs, wrap-around, backward shifts). */
static void test_index_matches_a_linear_walk(void **state)
{
	enum { N = 8 };
	struct row t[N] = {};
	struct track_index ix;
	uint64_t seed = 42;

	assert_int_equal(track_index_init(&ix, N), 0);
	assert_int_equal(ix.mask, 15);
	for (int step = 0; step < 200000; step++) {
		uint64_t key;
		uint32_t slot;

		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		key = (seed >> 33) % 24; /* few keys: each is taken, freed and taken again often */
		slot = (uint32_t)(seed >> 20) % N;
		if (track_find(t, sizeof(t[0]), N, key)) {
			struct row *r = track_find(t, sizeof(t[0]), N, key);

			/* free it, as the loaders do: index first, then the slot */
			track_index_del(&ix, key);
			r->s = (struct track_slot){};
		} else if (!t[slot].s.used) {
			t[slot].s = (struct track_slot){.key = key, .used = true};
			t[slot].payload = step;
			assert_int_equal(track_index_put(&ix, key, slot), 0);
		}
		for (uint64_t k = 0; k < 24; k++)
			assert_ptr_equal(track_index_find(&ix, t, sizeof(t[0]), k),
					 track_find(t, sizeof(t[0]), N, k));
		uint32_t used = 0;

		for (int i = 0; i < N; i++)
			used += t[i].s.used;
		assert_int_equal(ix.n, used);
	}
	track_index_free(&ix);
	assert_null(ix.cells);
}

static void test_index_edges(void **state)
{
	struct row t[2] = {{{5, true}, 1}, {{6, false}, 2}};
	struct track_index ix;

	assert_int_equal(track_index_init(&ix, (1u << 30) + 1), -EINVAL);
	assert_int_equal(track_index_init(&ix, 2), 0);
	assert_int_equal(track_index_get(&ix, 5), -1);
	track_index_del(&ix, 5); /* not held: no error, nothing changes */
	assert_int_equal(ix.n, 0);
	assert_int_equal(track_index_put(&ix, 5, TRACK_INDEX_EMPTY), -EINVAL);
	assert_int_equal(track_index_put(&ix, 5, 0), 0);
	assert_int_equal(track_index_put(&ix, 5, 0), 0); /* the same key again: replaced */
	assert_int_equal(ix.n, 1);
	assert_int_equal(track_index_get(&ix, 5), 0);
	/* a delete by value: only while the key holds that value */
	assert_false(track_index_del_val(&ix, 5, 1));
	assert_false(track_index_del_val(&ix, 7, 0));
	assert_int_equal(ix.n, 1);
	assert_true(track_index_del_val(&ix, 5, 0));
	assert_int_equal(ix.n, 0);
	assert_int_equal(track_index_get(&ix, 5), -1);
	assert_int_equal(track_index_put(&ix, 5, 0), 0);
	/* key 0 is a key like any other */
	assert_int_equal(track_index_put(&ix, 0, 1), 0);
	assert_int_equal(track_index_get(&ix, 0), 1);
	/* the index points at a slot that is not used (or holds another key): not found */
	assert_int_equal(track_index_put(&ix, 6, 1), 0);
	assert_null(track_index_find(&ix, t, sizeof(t[0]), 6));
	assert_null(track_index_find(&ix, t, sizeof(t[0]), 0));
	assert_ptr_equal(track_index_find(&ix, t, sizeof(t[0]), 5), &t[0]);
	/* full: 16 cells hold at most 15 keys, so every probe meets a free cell */
	for (uint64_t k = 100; k < 112; k++)
		assert_int_equal(track_index_put(&ix, k, 0), 0);
	assert_int_equal(ix.n, 15);
	assert_int_equal(track_index_put(&ix, 200, 0), -ENOSPC);
	assert_int_equal(track_index_get(&ix, 200), -1);
	for (uint64_t k = 100; k < 112; k++) {
		track_index_del(&ix, k);
		assert_int_equal(track_index_get(&ix, k), -1);
	}
	assert_int_equal(track_index_get(&ix, 5), 0);
	assert_int_equal(track_index_get(&ix, 6), 1);
	track_index_free(&ix);
}

static void test_cgroup_id_of_a_directory(void **state)
{
	struct stat st;
	uint64_t id = 0;
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(track_cgroup_id(fd, &id), 0);
	assert_true(id != 0);
	close(fd);
	assert_int_equal(track_cgroup_id(-1, &id), -EBADF);
}

static void test_delete_by_task_rejects_big_entries(void **state)
{
	assert_int_equal(track_delete_by_task(-1, 64, 8, 1, 10), -EINVAL);
	assert_int_equal(track_delete_by_task(-1, 4, 4096, 1, 10), -EINVAL);
	assert_int_equal(track_delete_by_task(-1, 4, 4, 1, 10), -EINVAL); /* no room for a key */
}

/* Sharing a map that is not one (or no fd): refused before anything is loaded. */
static void test_audit_share_needs_a_member_map(void **state)
{
	struct audit_opts o = {.share_members = true, .members_fd = -1};
	struct audit *a = (struct audit *)0x1;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	assert_int_equal(audit_open(&o, &a), -EINVAL);
	assert_ptr_equal(a, (struct audit *)0x1);
	o.members_fd = fd;
	assert_int_equal(audit_open(&o, &a), -EINVAL);
	assert_ptr_equal(a, (struct audit *)0x1);
	close(fd);
}

static void test_cuda_share_needs_a_member_map(void **state)
{
	struct cuda_opts o = {.share_members = true, .members_fd = -1};
	struct cuda_meter *c = (struct cuda_meter *)0x1;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	assert_int_equal(cuda_open(&o, &c), -EINVAL);
	assert_ptr_equal(c, (struct cuda_meter *)0x1);
	o.members_fd = fd;
	assert_int_equal(cuda_open(&o, &c), -EINVAL);
	assert_ptr_equal(c, (struct cuda_meter *)0x1);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_find_used_slot_only),
	    cmocka_unit_test(test_index_matches_a_linear_walk),
	    cmocka_unit_test(test_index_edges),
	    cmocka_unit_test(test_cgroup_id_of_a_directory),
	    cmocka_unit_test(test_delete_by_task_rejects_big_entries),
	    cmocka_unit_test(test_audit_share_needs_a_member_map),
	    cmocka_unit_test(test_cuda_share_needs_a_member_map),
	};

	libbpf_set_print(bpf_print_env);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
