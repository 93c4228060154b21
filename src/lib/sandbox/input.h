/* A run's staged input for a late-input sandbox (one template, many
 * workspaces), and the detached tree of it that the run's copy attaches. */
#ifndef AIRLOCK_SANDBOX_INPUT_H
#define AIRLOCK_SANDBOX_INPUT_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "airlock.h"
#include "fsx/fsx.h"

typedef struct sbx_input sbx_input;

/* What cfg stages under /input: its workspace, then each mount, in a
 * malloc'd array (*ret NULL and *ret_n 0 for none); and the caps the
 * staging of cfg's trees has (its max_stage_* limits). The cache signs the
 * trees with the same caps. */
int sbx_stage_sources(const airlock_config *cfg, fsx_source **ret, size_t *ret_n);
fsx_limits sbx_stage_limits(const airlock_config *cfg);
/* The folder staging areas are made in: $TMPDIR when it is absolute, else
 * /tmp. */
const char *sbx_stage_parent(void);

/* Layers a version's staged tree may have (with the empty directory a
 * single layer needs, at most the 8 fds the mounter takes in one request):
 * a version made while the one
 * before is held adds a layer of its changes over that one's, and a
 * version that would pass this is staged whole again (one layer). */
#define SBX_INPUT_MAX_LAYERS 7

/* Stages cfg's workspace and mounts into a staging area of their own in
 * $TMPDIR (or /tmp), owned by owner:group (the guest ids of the sandbox
 * that will run them; (uid_t)-1 keeps the caller's), with the staging caps
 * of cfg's limits. With prev (a previous version of the same trees, staged
 * for the same ids, which the caller keeps alive through the call) and
 * dirs (the directories whose files changed since prev, fsx_watch_delta;
 * NULL when unknown) and files (files that changed alone in their
 * directories, fsx_watch_delta's files), a workspace without mounts becomes a new top layer
 * holding only the changed files (fsx_stage_delta: whiteouts for removed
 * ones) over prev's layers, which the new input holds from then on, so
 * prev stays exactly as it was for whoever holds it; without dirs, or when
 * the delta cannot make the version, it is staged whole (known, may be
 * NULL: the content hashes of the version's signature, fsx_stage_delta's),
 * and prev's
 * unchanged files are hard links instead of copies when prev is one layer
 * (why that is safe: sbx_sandbox_new_from's contract). An input with
 * nothing to stage is valid and gives an empty /input. The read-only
 * overlay over the staged layers that copies attach is made here, once (as
 * root in this process, else by m, the sandbox's mounter). */
typedef struct sbx_mounter sbx_mounter;
int sbx_input_new(const airlock_config *cfg, uid_t owner, gid_t group, const sbx_input *prev,
                  const char *const *dirs, size_t n_dirs, const char *const *files, size_t n_files,
                  const fsx_hashes *known, sbx_mounter *m, sbx_input **ret, airlock_error *err);
/* Contract: the next version of prev's workspace made where prev's stands,
 * for a caller that guarantees nothing uses prev or ever will (no run, no
 * session, no copy holding its overlay): with dirs, only those directories
 * of prev's top layer are brought up to the source (fsx_stage_delta);
 * else, or when that cannot be, a one-layer prev is updated whole in place
 * (fsx_staging_take: unchanged files kept, changed ones copied anew, the
 * rest removed) and a layered one staged whole anew. A top layer that
 * another version stands on is never written. prev is consumed, whatever
 * the outcome. Only for a workspace without mounts (sbx_input_updatable). */
int sbx_input_update(const airlock_config *cfg, sbx_input *prev, const char *const *dirs,
                     size_t n_dirs, const char *const *files, size_t n_files,
                     const fsx_hashes *known, sbx_mounter *m, sbx_input **ret, airlock_error *err);
bool sbx_input_updatable(const airlock_config *cfg, const sbx_input *prev);
/* The staging work that made in: the files a delta copied, or every file a
 * whole staging went through (copied, linked or kept); and its layers. */
uint64_t sbx_input_files_staged(const sbx_input *in);
size_t sbx_input_layers(const sbx_input *in);
/* Removes the staged tree; no run may use it any more. */
void sbx_input_free(sbx_input *in);

/* The overlay maker of an unprivileged host (input.c says why it exists). */
struct sbx_mounter {
        pid_t pid;
        int sock;
        pthread_mutex_t lock; /* one request at a time */
};

int sbx_mounter_start(sbx_mounter *m, airlock_error *err);
void sbx_mounter_stop(sbx_mounter *m);

/* Contract: *ret_tree becomes a detached mount for one copy to attach at
 * /input (a clone of in's read-only overlay), or -1 for an empty input.
 * As root it is cloned here; otherwise by m, which made the overlay in its
 * own namespace from the directories it reopened by path, each kept only
 * if it was the inode the host sent. The mount shows the staged files
 * only: the staging area is airlock's own 0700 directory, written before
 * the input is used and never after. */
int sbx_input_tree(sbx_input *in, sbx_mounter *m, int *ret_tree, airlock_error *err);
/* Lets the overlay of an idle input go (a mount and a fd held for nothing
 * while no run uses it); the next sbx_input_tree makes it again. */
void sbx_input_idle(sbx_input *in);

#endif
