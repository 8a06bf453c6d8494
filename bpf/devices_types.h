/* SPDX-License-Identifier: MIT */
/*
 * Types shared by bpf/devices.bpf.c and its loader isolation/devices.c. Not a wire format:
 * fixed-width __u32 only, one layout for both sides of the same build.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define DEVICES_NVIDIA_MAJOR 195
#define DEVICES_MINOR_ANY    0xFFFFFFFFu
#define DEVICES_ALLOWED_MAX  512

/* Map "allowed" key: a character device (major, minor) the task may use; minor
 * DEVICES_MINOR_ANY allows every minor of that major. */
struct devices_key {
	__u32 major;
	__u32 minor;
};
