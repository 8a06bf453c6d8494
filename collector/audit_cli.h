/* SPDX-License-Identifier: MIT */
#pragma once

/* `corral-collector audit [verify] ...`; argv[0] is "audit". Returns the exit code. */
int coll_cmd_audit(int argc, char **argv);
