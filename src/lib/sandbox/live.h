/* Live output of a run (airlock_run_options.on_output): the caller's hook, armed on
 * the thread that runs the code, and the run loop's report of what its
 * stdout and stderr pipes delivered. */
#ifndef AIRLOCK_LIVE_H
#define AIRLOCK_LIVE_H

#include <stddef.h>

/* The run loop names the pipes of the run it is about to serve, so that
 * live_output can tell stdout from stderr. */
void live_streams(int out_fd, int err_fd);
/* Bytes just read from fd (one of the pipes named above) go to the armed
 * hook, if any. */
void live_output(int fd, const char *data, size_t len);

#endif
