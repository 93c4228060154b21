/* The host side of the namespace sandbox: the copies of the template a
 * sandbox keeps ready (sandbox.c), the run of code in one of them (run.c),
 * shared with sessions (session.c). */
#ifndef AIRLOCK_SANDBOX_H
#define AIRLOCK_SANDBOX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "airlock.h"
#include "core/util.h"
#include "core/wire.h"

/* --- the copies (sandbox.c) --- */

#include "sandbox/cgroup.h"

typedef struct copy {
        pid_t pid; /* pid 1 of the copy's PID namespace; the host is its parent */
        int pidfd;
        int chan;  /* the guest channel */
        int out_r; /* stdout and stderr of the run */
        int err_r;
        int oomfd; /* the OOM counter of the copy's own cgroup, or -1 */
        /* The files of that cgroup its usage is read from (cg_copy_usage):
         * its CPU time and its memory peak, or -1. */
        int cpufd;
        int peakfd;
        unsigned cg; /* the number of that cgroup (c<N>), 0 for none */
        /* With a writable /input, from COPY_READY: the upper dir of the
         * copy's /input overlay and its lower layer (fsx_capture_changes);
         * else -1. */
        int input_upper;
        int input_lower;
        /* It was not ready yet when the caller took it (sbx_copy_wait_ready). */
        bool late;
        /* A late-input copy's input: handed to it (sbx_copy_hand_input)
         * and not sent yet, with the detached tree to send (or -1); sent
         * and its answer not read yet (sbx_copy_input_taken). */
        int input_tree;
        bool input_handed;
        bool input_pending;
} copy;

/* airlock_sandbox_new, reusing the staged copy of prev (the sandbox of the
 * same configuration that this one replaces; may be NULL), which must stay
 * open until this returns. The contract is above its definition. */
int sbx_sandbox_new_from(const airlock_config *cfg, airlock_sandbox *prev, airlock_sandbox **ret,
                         airlock_error *err);

/* Contract: marks sb, which the caller guarantees will never run anything
 * again and which nothing else holds (a stale version in the cache, with no
 * run or session on it), as giving up its staged tree: the sandbox built
 * from it next (sbx_sandbox_new_from) takes the staging area over and
 * updates it in place (fsx_staging_take) instead of linking file by file,
 * when the configuration has a workspace and no mounts. sb is then closed
 * as usual, and removes nothing staged that it no longer owns. */
void sbx_sandbox_yield_staging(airlock_sandbox *sb);

/* A sandbox for many workspaces: cfg's workspace and mounts are not
 * staged with it; each run or session brings its own input (sbx_input,
 * sandbox/input.h), attached to its copy when the copy is handed out. */
int sbx_sandbox_new_late(const airlock_config *cfg, airlock_sandbox **ret, airlock_error *err);
/* The mounter of an unprivileged late-input sandbox (sandbox/input.h),
 * which makes its inputs' overlays; NULL otherwise. */
struct sbx_mounter *sbx_sandbox_mounter(airlock_sandbox *sb);
/* The host ids the sandbox's guests map to (the owner of its staged inputs
 * as root). */
void sbx_guest_ids(const airlock_sandbox *sb, uid_t *ret_uid, gid_t *ret_gid);
struct sbx_input;
/* airlock_sandbox_run for an outer layer (the cache) that has made the
 * call's watch w (al_watch, core/util.h) from opts itself and may have
 * fired it already: the run fires the same one, so the hook fires at most
 * once per public call. opts is checked (al_run_options_in). w may be
 * NULL: no watch. */
int sbx_run_watched(airlock_sandbox *sb, const char *code, size_t len,
                    const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                    airlock_error *err);
/* sbx_run_watched with in as the run's /input (a late-input sandbox;
 * NULL: an empty /input). */
int sbx_run_input(airlock_sandbox *sb, struct sbx_input *in, const char *code, size_t len,
                  const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                  airlock_error *err);
/* airlock_session_open likewise; the caller keeps in alive until the
 * session is closed (sbx_session_on_close). */
int sbx_session_open_input(airlock_sandbox *sb, struct sbx_input *in, airlock_session **ret,
                           airlock_error *err);
/* sbx_copy_wait_ready, then, in a late-input sandbox, hands the copy its
 * input and waits for its answer. */
int sbx_copy_prepare(airlock_sandbox *sb, copy *c, struct sbx_input *in, al_watch *w,
                     int *ret_outdir, airlock_error *err);

/* sbx_copy_wait_ready, then, in a late-input sandbox, gives the copy its
 * input without sending it: the input goes with the copy's first frame
 * (sbx_copy_send), in one message, and the caller then reads the copy's
 * answer (sbx_copy_input_taken) before it relies on the copy's /input (its
 * writable layers) or waits for anything else of the copy. */
int sbx_copy_hand_input(airlock_sandbox *sb, copy *c, struct sbx_input *in, al_watch *w,
                        int *ret_outdir, airlock_error *err);
/* Sends one frame body to copy c; the input handed to it first, in the
 * same message, when it has not been sent yet. 0 or -errno. */
int sbx_copy_send(copy *c, const char *body, size_t len);
/* The copy's answer to its input, when one was sent: 0, or the reason the
 * copy failed (it then ends without reading anything more); -ETIMEDOUT
 * when it did not answer in time, when it lives and may still read the
 * frame sent with its input. */
int sbx_copy_input_taken(copy *c, airlock_error *err);

int sbx_check_code(const char *code, size_t len, airlock_error *err);
/* Both fire w (may be NULL), the caller's watch, before they wait. */
int sbx_take_copy(airlock_sandbox *sb, al_watch *w, copy **ret, airlock_error *err);
int sbx_copy_wait_ready(copy *c, al_watch *w, int *ret_outdir, airlock_error *err);

void sbx_copy_close(airlock_sandbox *sb, copy *c, bool kill_it);
/* Kills a single run's copy c at once and leaves its close and reaping
 * to the sandbox's closer thread (the contract is above its definition). */
void sbx_copy_retire(airlock_sandbox *sb, copy *c);
/* Kills copy c and returns once it and every process it started are gone
 * (reaped), then closes it. */
void sbx_copy_end(airlock_sandbox *sb, copy *c);
void sbx_replenish(airlock_sandbox *sb);
/* Tells the template that a single run's copy has ended its run (the host
 * has its "end" frame), so that the copies asked for start now, not once
 * it has exited. */
void sbx_run_ended(airlock_sandbox *sb);
/* Reaps the copies of earlier runs that have exited, without waiting:
 * called once a run's code is on its way, while the copy runs it. Nothing
 * once the sandbox has a closer (sbx_copy_retire), which reaps them. */
void sbx_reap_dying(airlock_sandbox *sb);
/* Ends the ready copies over one that a burst of runs left, once no copy
 * was taken for a while (see want_ready in sandbox.c). */
void sbx_sandbox_trim(airlock_sandbox *sb);
const airlock_limits *sbx_limits(const airlock_sandbox *sb);
/* The sandbox's cgroups (for a copy's usage, cg_copy_usage). */
const cg_sandbox *sbx_cgroup(const airlock_sandbox *sb);
const airlock_config *sbx_config(const airlock_sandbox *sb);
/* The sandbox's upstream MCP servers (mcp/mcp.h), or NULL. */
struct mcp_hub *sbx_mcp(const airlock_sandbox *sb);
/* The packages the guest can import (describe.c): the one kept, after
 * keeping inv (taken) when none was; inv NULL only looks. */
const json_t *sbx_inventory(airlock_sandbox *sb, json_t *inv);
/* airlock_sandbox_describe_json with cfg's texts (its workspace, its mounts):
 * a late-input sandbox describes the workspace of the caller. NULL: sb's. */
char *sbx_describe_json_for(airlock_sandbox *sb, const airlock_config *cfg, airlock_error *err);

/* --- the run loop (run.c) --- */

/* Runs code once in copy c, which is spent afterwards (the caller closes it,
 * killing it), and collects the result, /output captured from outdir.
 * The run ends when the copy's PID namespace is gone, or when the guest
 * says that nothing else of the run is left. *ret_delivered (when not NULL)
 * is set, on failure too, to whether the code reached the copy: one that
 * died before ran nothing, and another copy may run the code. w, the
 * caller's watch (or NULL), is polled while the code runs until it fires,
 * and fired before a slow request (a tool call, an HTTP request). */
int sbx_run_single(airlock_sandbox *sb, copy *c, int outdir, const char *code, size_t len,
                   const airlock_run_options *opts, al_watch *w, bool *ret_delivered,
                   airlock_result **ret, airlock_error *err);
/* Runs one cell of a session in copy c, whose current interpreter is
 * watched through active_pidfd, and collects the result. The cell ends at
 * the guest's "end" frame or the interpreter's death; a deadline, a cancel
 * or a protocol error kills the interpreter only (never the copy), so that
 * the session can roll back. *ret_alive tells whether the copy survived
 * (the session's pid 1 and its snapshots). Untouched on failure, when the
 * session is over anyway. */
int sbx_run_cell(airlock_sandbox *sb, copy *c, int outdir, int active_pidfd, const char *code,
                 size_t len, const airlock_run_options *opts, al_watch *w, bool *ret_alive,
                 airlock_result **ret, airlock_error *err);

/* The memory charged to copy c's own cgroup (the processes of the copy and
 * the files they wrote to its tmpfs, not the template's pages they share),
 * in bytes; -ENOENT without per-copy cgroups. Cheap: one small file. */
int sbx_copy_memory(const airlock_sandbox *sb, const copy *c, uint64_t *ret);

/* --- sessions (session.c) --- */

/* Calls fn(arg) once the session is closed and every process of it gone:
 * for a caller that holds something the session runs in (a cache entry). */
void sbx_session_on_close(airlock_session *s, void (*fn)(void *), void *arg);

#endif
