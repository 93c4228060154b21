/* A sealed in-memory copy of the running program, for starting templates
 * without naming the host's copy of it. */
#ifndef AIRLOCK_SELFEXE_H
#define AIRLOCK_SELFEXE_H

#include "airlock.h"

/* Returns a close-on-exec fd of a sealed memfd that holds a copy of this
 * program (/proc/self/exe), made on the first call and shared by every later
 * call of the process; or -errno with the error record filled. The caller
 * must not close it. Thread-safe. */
int selfexe_fd(airlock_error *err);

/* Explains a template that ended before it said a word, from its wait
 * status: when it exited with 127 (the dynamic loader's status, or a failed
 * execveat), fills the error record with what could not be loaded and the
 * way out, and returns -ELIBACC; otherwise returns 0 and leaves the record
 * to the caller. */
int selfexe_exit_error(int status, airlock_error *err);

#endif
