/* The staging area: a private directory, made fresh for each sandbox, whose
 * "input" subdirectory holds the staged workspace and mounts that the
 * sandbox shows at /input. Made and removed through a fd of the directory
 * it lives in, never by a path built and resolved again. */
#include "fsx/fsx.h"
#include "core/util.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#define STAGING_NAME     "airlock-stage-XXXXXX"
#define STAGING_ATTEMPTS 100
/* A tree that changes while it is staged (a file replaced between its
 * listing and its open: an editor saving by rename) fails the staging with
 * -ESTALE. It is staged again, this many times more, reusing what it can,
 * before the error is reported: otherwise the failed build drops the
 * previous copy and the next one copies everything. */
#define STAGING_RETRIES 2

static void staging_removep(fsx_staging *staging)
{
        fsx_staging_remove(staging);
}

/* Makes the directory STAGING_NAME, its X's random, in staging->parent_fd
 * (mkdtemp needs a path; this creates it beneath the fd), and records its
 * name once it exists. */
static int make_staging_dir(fsx_staging *staging, const char *parent, airlock_error *err)
{
        static const char alnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
        char name[] = STAGING_NAME;
        for (int attempt = 0; attempt < STAGING_ATTEMPTS; attempt++) {
                unsigned char rnd[6];
                if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                        return al_error(err, -EIO, NULL, "getrandom failed");
                for (int i = 0; i < 6; i++)
                        name[sizeof(name) - 7 + i] = alnum[rnd[i] % 36];
                if (mkdirat(staging->parent_fd, name, 0700) == 0) {
                        staging->name = strdup(name);
                        if (staging->name)
                                return 0;
                        unlinkat(staging->parent_fd, name, AT_REMOVEDIR);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
                if (errno != EEXIST)
                        return al_error(err, -errno, parent,
                                        "cannot create a staging directory: %m");
        }
        return al_error(err, -EEXIST, parent, "cannot create a staging directory: %s",
                        strerror(EEXIST));
}

/* A new staging directory under parent with an empty "input" folder owned
 * by the guest's user: the one place both kinds of staging area start. */
static int new_staging_input(const char *parent, uid_t owner, gid_t group, fsx_staging *ret_staging,
                             int *ret_fd, airlock_error *err)
{
        /* Whatever is made here is removed again on an error. */
        _cleanup_(staging_removep)
            fsx_staging staging = {.parent_fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
        if (staging.parent_fd < 0)
                return al_error(err, -errno, parent, "cannot open the staging area %s: %m", parent);
        int r = make_staging_dir(&staging, parent, err);
        if (r < 0)
                return r;
        const char *name = staging.name;
        _cleanup_close_ int stage_fd =
            openat(staging.parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (stage_fd < 0)
                return al_error(err, -errno, name, "cannot open the staging directory: %m");
        if (mkdirat(stage_fd, "input", 0755) < 0)
                return al_error(err, -errno, name, "cannot create the staging directory: %m");
        _cleanup_close_ int input_fd =
            openat(stage_fd, "input", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (input_fd < 0)
                return al_error(err, -errno, name, "cannot open the staging directory: %m");
        if (owner != (uid_t)-1 && fchown(input_fd, owner, group) < 0)
                return al_error(err, -errno, name, "cannot chown the staging directory: %m");
        *ret_staging = staging;
        staging = (fsx_staging){.parent_fd = -1};
        *ret_fd = TAKE_FD(input_fd);
        return 0;
}

int fsx_staging_create(const char *parent, const fsx_source *sources, size_t n_sources,
                       const fsx_limits *lim, uid_t owner, gid_t group, int prev_fd,
                       const fsx_manifest *prev, fsx_staging *ret_staging, int *ret_fd,
                       fsx_manifest **ret_manifest, airlock_error *err)
{
        if (ret_manifest)
                *ret_manifest = NULL;
        if (n_sources == 0) {
                *ret_staging = (fsx_staging){.parent_fd = -1};
                *ret_fd = -1;
                return 0;
        }
        _cleanup_(staging_removep) fsx_staging staging = {.parent_fd = -1};
        _cleanup_close_ int input_fd = -1;
        int r = new_staging_input(parent, owner, group, &staging, &input_fd, err);
        if (r < 0)
                return r;
        /* The previous staged copy is only read here (linkat takes a name
         * in it, never writes the inode); fsx_stage_reuse says when a link
         * may stand for a copy. */
        fsx_stage_stats stats;
        for (int attempt = 0;; attempt++) {
                r = fsx_stage_reuse(input_fd, sources, n_sources, lim, owner, group, prev_fd, prev,
                                    ret_manifest, &stats, err);
                if (r != -ESTALE || attempt == STAGING_RETRIES)
                        break;
                /* What was staged goes; the previous copy is untouched. */
                if (fsx_clear_dir(input_fd, NULL) < 0)
                        break;
                airlock_error_clear(err);
        }
        if (r < 0)
                return r;
        *ret_staging = staging;
        staging = (fsx_staging){.parent_fd = -1};
        *ret_fd = TAKE_FD(input_fd);
        return 0;
}

int fsx_staging_create_empty(const char *parent, uid_t owner, gid_t group, fsx_staging *ret_staging,
                             int *ret_fd, airlock_error *err)
{
        return new_staging_input(parent, owner, group, ret_staging, ret_fd, err);
}

int fsx_staging_take(fsx_staging *prev, const fsx_source *source, const fsx_limits *lim,
                     uid_t owner, gid_t group, const fsx_manifest *prev_manifest,
                     fsx_staging *ret_staging, int *ret_fd, fsx_manifest **ret_manifest,
                     fsx_stage_stats *ret_stats, airlock_error *err)
{
        if (ret_manifest)
                *ret_manifest = NULL;
        if (!prev || prev->parent_fd < 0 || !prev->name || !prev_manifest)
                return al_error(err, -EINVAL, NULL, "staging: nothing to take over");
        /* From here the area is ours: removed again on an error, never
         * left half updated for anyone. */
        _cleanup_(staging_removep) fsx_staging staging = *prev;
        *prev = (fsx_staging){.parent_fd = -1};
        _cleanup_close_ int stage_fd = openat(staging.parent_fd, staging.name,
                                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (stage_fd < 0)
                return al_error(err, -errno, staging.name, "cannot open the staging directory: %m");
        _cleanup_close_ int input_fd =
            openat(stage_fd, "input", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (input_fd < 0)
                return al_error(err, -errno, staging.name, "cannot open the staging directory: %m");
        fsx_stage_stats stats;
        int r;
        /* Updated again from where the failed attempt left it: prev_manifest
         * still vouches for every copy it records, because each is checked
         * to be the recorded inode before it is kept, and a replaced one is
         * a new inode. */
        for (int attempt = 0;; attempt++) {
                r = fsx_stage_update(input_fd, source, lim, owner, group, prev_manifest,
                                     ret_manifest, &stats, err);
                if (r != -ESTALE || attempt == STAGING_RETRIES)
                        break;
                airlock_error_clear(err);
        }
        if (r < 0)
                return r;
        if (ret_stats)
                *ret_stats = stats;
        *ret_staging = staging;
        staging = (fsx_staging){.parent_fd = -1};
        *ret_fd = TAKE_FD(input_fd);
        return 0;
}

void fsx_staging_remove(fsx_staging *staging)
{
        if (staging->parent_fd >= 0 && staging->name &&
            fsx_remove_at(staging->parent_fd, staging->name, NULL) < 0) {
                /* Out of fds (the walk needs some), staging had not begun:
                 * remove the two empty directories we made without opening
                 * anything. Both are ours, in a directory only we can enter. */
                char input[64];
                snprintf(input, sizeof(input), "%s/input", staging->name);
                unlinkat(staging->parent_fd, input, AT_REMOVEDIR);
                unlinkat(staging->parent_fd, staging->name, AT_REMOVEDIR);
        }
        if (staging->parent_fd >= 0)
                close(staging->parent_fd);
        staging->parent_fd = -1;
        free(staging->name);
        staging->name = NULL;
}
