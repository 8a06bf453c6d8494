/* SPDX-License-Identifier: MIT */
/*
 * A pool of spare inodes for small state files that are written and removed at a high rate
 * (one set per task). Instead of creating a file for every write and unlinking it at the
 * end, the file is renamed in from <dir>/ (a spare), rewritten in place and renamed out
 * again when removed. Renames are cheap on every filesystem; inode creation is not on all
 * of them: ext4 without a journal skips inodes freed in the last 30-60 s on every
 * allocation (recently_deleted()), so at a steady task rate each create scans thousands of
 * inode table entries (measured here: 190 us fresh, 520 us after churn, per create).
 *
 * Writes stay atomic against a crash of the process: content goes to a temporary name,
 * then replaces the target with one rename (RENAME_EXCHANGE when the target exists, so the
 * replaced inode is recycled too). Spares hold stale bytes of former state files and are
 * never read; the pool directory lives inside the state directory (same filesystem, same
 * permissions). Without spares the functions create and unlink as usual.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fpool {
	int dirfd;     /* the pool directory, -1: no pool (plain create/unlink) */
	char **names;  /* spares known to be there, LIFO */
	size_t n, cap; /* entries, capacity of names */
	size_t max;    /* at most this many spares kept; more are unlinked */
	uint64_t seq;  /* next spare name */
	uint64_t reused, created, recycled, unlinked; /* counters (tests, metrics) */
};

/* Open (mkdir) the pool at dir and list its spares. max 0: no pool, plain file calls. */
int fpool_open(struct fpool *p, const char *dir, size_t max);
void fpool_close(struct fpool *p);
/* Write path atomically (tmp + rename, no fsync), from a spare when there is one. */
int fpool_replace(struct fpool *p, const char *path, const void *buf, size_t len, mode_t mode);
/* Remove path: its inode becomes a spare (or is unlinked when the pool is full). -ENOENT if
 * path does not exist. */
int fpool_remove(struct fpool *p, const char *path);
/*
 * Put a spare at path (which must not exist), for another process to fill in place with
 * fpool_fill() (the shim's exit file): 0 when a spare was placed, -ENOENT when none is left.
 */
int fpool_place(struct fpool *p, const char *path);
/*
 * Fill tmp (placed by fpool_place, or created here when absent) with buf and rename it to
 * path. Uses no pool state: safe in a forked child.
 */
int fpool_fill(const char *tmp, const char *path, const void *buf, size_t len, mode_t mode);
