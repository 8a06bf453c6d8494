/* SPDX-License-Identifier: MIT */
/* Whole-file reads and writes, atomic replace, mkdir -p. All return 0 or a negative errno. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Read a whole file (at most max bytes; -EFBIG beyond), NUL-terminated. */
int read_file(const char *path, size_t max, char **ret, size_t *ret_len);
int read_file_at(int dirfd, const char *name, size_t max, char **ret, size_t *ret_len);
/* The same from an open fd, from its offset to its end. */
int read_fd(int fd, size_t max, char **ret, size_t *ret_len);
/*
 * Files a configuration names (tokens, keys, certificates, price sheets, profiles, the
 * configuration itself): open_regular opens one for reading without waiting (a FIFO or a
 * device is never opened for real) and returns its fd, or -EBADFD when it is not a regular
 * file (symbolic links are followed); read_regular_file reads one as read_file does.
 * regular_file_strerror says "not a regular file" for -EBADFD, else strerror.
 */
int open_regular(const char *path);
int read_regular_file(const char *path, size_t max, char **ret, size_t *ret_len);
const char *regular_file_strerror(int r);
/*
 * A secret (a token, a private key) open on fd, checked as ssh checks a private key: -EPERM,
 * with err naming what, path and the mode or owner, when group or others have any access to
 * it or when neither the effective user nor root owns it; 0 when it may be used.
 */
int secret_fd_check(int fd, const char *what, const char *path, char *err, size_t errlen);
/* Read a file holding one unsigned integer (trailing newline or blanks allowed; -EFBIG past
 * 63 bytes), by name or from an open fd (one read, no allocation: cgroup control files). */
int read_u64_file_at(int dirfd, const char *name, uint64_t *ret);
int read_u64_fd(int fd, uint64_t *ret);
/* One read(2) of fd into buf, NUL-terminated: the bytes read, -EFBIG when they filled buf (the
 * file may be longer), -errno. For control files, which the kernel makes whole at the first read.
 */
ssize_t read_once(int fd, char *buf, size_t size);
/* Write a string to an existing file (cgroupfs style: one write). */
int write_file_at(int dirfd, const char *name, const char *s);
/* Write tmp + fsync + rename + fsync(dir). */
int write_file_atomic(const char *path, const void *buf, size_t len, mode_t mode);
/*
 * Write tmp + rename, no fsync: atomic against a crash of the process (readers see the old or
 * the new content), not against power loss. For state that is void after a reboot anyway.
 */
int write_file_replace(const char *path, const void *buf, size_t len, mode_t mode);
/* mkdir -p with mode. */
int mkdir_p(const char *path, mode_t mode);
