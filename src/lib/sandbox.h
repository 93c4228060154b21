/* Internals of the namespace sandbox shared by the host side (sandbox.c),
 * the template process (template.c) and the embedded interpreter
 * (guestpy.c). */
#ifndef AIRLOCK_SANDBOX_H
#define AIRLOCK_SANDBOX_H

#include <jansson.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "airlock.h"

/* The template is this very program, executed again with this argv[0], the
 * control socket on fd 3 and the staged /input on fd 4. Executing afresh
 * means nothing of the host process's memory (environment, heap, earlier
 * results) is ever visible to a guest. */
#define TEMPLATE_ARGV0    "airlock-template"
#define TEMPLATE_CTL_FD   3
#define TEMPLATE_INPUT_FD 4

/* Control messages on the template's SOCK_SEQPACKET socket. */
enum {
        CTL_USERNS = 'U', /* template -> host: user namespace made, write the id maps */
        CTL_GO = 'G',     /* host -> template: maps written */
        CTL_READY = 'R',  /* template -> host: interpreter initialised */
        CTL_ERROR = 'E',  /* template -> host: "E<errno> <feature>|<message>" */
        CTL_SPAWN = 'S',  /* host -> template: start a copy */
        CTL_COPY = 'C',   /* template -> host: a copy, with [channel, pidfd, stdout, stderr] */
};

/* First byte a copy sends on its channel: ready with the /output fd attached,
 * or an error followed by a message. */
enum {
        COPY_READY = 'R',
        COPY_ERROR = 'E',
};

/* Fixed fd numbers inside a copy. */
#define COPY_CHANNEL_FD 3

/* What the template needs to know, sent as JSON after exec. */
typedef struct template_params {
        airlock_limits limits;
        bool has_input;
        char **preloads;
        size_t n_preloads;
} template_params;

/* Runs the template; never returns. */
_Noreturn void template_main(void);

/* --- embedded interpreter (guestpy.c), used inside the template only --- */

/* Initialises CPython, installs the runtime, imports preloads and warms up.
 * On failure returns < 0 with a message in errbuf. */
int guest_init(const template_params *p, char *errbuf, size_t errlen);
void guest_before_fork(void);
void guest_after_fork_parent(void);
/* In a fresh copy: reinitialise the interpreter's per-process state and
 * reseed every secret. */
void guest_after_fork_child(int channel_fd);
/* Runs code (UTF-8) as __main__; returns the exit code and sets *ret_status
 * to "ok", "error" or "memory". */
int guest_run(const char *code, size_t len, const char **ret_status);

/* --- seccomp (seccomp.c) --- */

/* Builds the guest filter as a BPF program (malloc'd filter array). */
int seccomp_build_guest_filter(struct sock_fprog *ret, char *errbuf, size_t errlen);

#endif
